"""Imported once by the fork server of inner runs (``agentcompass.pipeline.forkserver``):
what every Snakemake run of this workflow imports before it reads the Snakefile, and
the components the Snakefile loads. Each inner run forked from it starts with them in memory.

Nothing here may start a thread: a fork keeps only the thread that forks.
"""

from __future__ import annotations

import snakemake  # noqa: F401  (it appends a path relative to the working folder to sys.path: dropped here)

from agentcompass._util.importpath import safe_import_path

safe_import_path()

import snakemake.cli  # noqa: E402, F401
from snakemake.common import parse_uri  # noqa: E402
from snakemake_interface_executor_plugins.registry import ExecutorPluginRegistry  # noqa: E402
from snakemake_interface_logger_plugins.registry import LoggerPluginRegistry  # noqa: E402
from snakemake_interface_report_plugins.registry import ReportPluginRegistry  # noqa: E402
from snakemake_interface_scheduler_plugins.registry import SchedulerPluginRegistry  # noqa: E402
from snakemake_interface_storage_plugins.registry import StoragePluginRegistry  # noqa: E402

import agentcompass.pipeline.workflow  # noqa: E402, F401
from agentcompass.plugins import load_builtin_components  # noqa: E402

# the plug-in registries are singletons that import every installed plug-in when first made
for registry in (ExecutorPluginRegistry, StoragePluginRegistry, ReportPluginRegistry, LoggerPluginRegistry,
                 SchedulerPluginRegistry):
    registry()
parse_uri(__file__)  # Snakemake opens the Snakefile through smart_open, which it imports on first use
load_builtin_components()
