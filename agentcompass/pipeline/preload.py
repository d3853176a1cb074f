"""Imported once by the fork server of inner runs (``agentcompass.pipeline.forkserver``):
what every Snakemake run of this workflow imports before it reads the Snakefile, and
the components the Snakefile loads. Each inner run forked from it starts with them in memory.

Nothing here may start a thread: a fork keeps only the thread that forks.
"""

from __future__ import annotations

import snakemake.cli  # noqa: F401
from snakemake.common import parse_uri
from snakemake_interface_executor_plugins.registry import ExecutorPluginRegistry
from snakemake_interface_logger_plugins.registry import LoggerPluginRegistry
from snakemake_interface_report_plugins.registry import ReportPluginRegistry
from snakemake_interface_scheduler_plugins.registry import SchedulerPluginRegistry
from snakemake_interface_storage_plugins.registry import StoragePluginRegistry

import agentcompass.pipeline.workflow  # noqa: F401
from agentcompass.plugins import load_builtin_components

# the plug-in registries are singletons that import every installed plug-in when first made
for registry in (ExecutorPluginRegistry, StoragePluginRegistry, ReportPluginRegistry, LoggerPluginRegistry,
                 SchedulerPluginRegistry):
    registry()
parse_uri(__file__)  # Snakemake opens the Snakefile through smart_open, which it imports on first use
load_builtin_components()
