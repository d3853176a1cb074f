"""agentcompass's own console messages, at ``runtime.log_level`` (Snakemake's follow the same level)."""

from __future__ import annotations

import logging
import sys

LOG = logging.getLogger("agentcompass")


def configure(level: str) -> None:
    """Messages from ``level`` up ('debug', 'info', 'warning', 'error') reach stderr."""
    LOG.setLevel(getattr(logging, level.upper()))
    LOG.propagate = False
    if not any(getattr(h, "name", None) == "agentcompass-console" for h in LOG.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.name = "agentcompass-console"
        handler.setFormatter(logging.Formatter("agentcompass: %(message)s"))
        LOG.addHandler(handler)
