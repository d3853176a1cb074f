"""agentcompass: a declarative, Make-like build system for agent evaluations."""

from pathlib import Path

__version__ = "0.1.0"

_PACKAGE = Path(__file__).resolve().parent


def _workflow_root() -> Path:
    """The folder of the workflow's files (Snakefile, rules/, schemas/, configs/, profiles/,
    examples/): the clone's top folder when the package runs from a clone (editable install),
    else the copy the built package carries in ``agentcompass/workflow/`` (setup.py)."""
    clone = _PACKAGE.parent
    if (clone / "Snakefile").is_file() and (clone / "rules").is_dir():
        return clone
    return _PACKAGE / "workflow"


PROJECT_ROOT = _workflow_root()
