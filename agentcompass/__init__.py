"""agentcompass: a declarative, Make-like build system for agent evaluations.

The public API is these modules; everything else may change in any release:

- ``agentcompass.sdk``: run evaluations from Python (what ``agentcompass run`` does);
- ``agentcompass.results``: read what runs wrote (runs, attempts, tables, outcomes);
- ``agentcompass.runtime``: the contracts, the component interfaces, the registries, the config loader;
- ``agentcompass.errors``: the error types, all deriving from ``AgentCompassError``;
- ``agentcompass.stages`` and ``agentcompass.layout``: the stages of an evaluation and where their files go;
- ``agentcompass.compare``, ``agentcompass.plan_diff``, ``agentcompass.status``: what ``compare``,
  ``diff`` and ``status`` compute, as objects;
- ``agentcompass.secrets`` (``resolve_secret``) and ``agentcompass.testing`` (a model endpoint for tests).

``agentcompass.cli`` holds the commands, ``agentcompass.pipeline`` the workflow behind the Snakefile, and
``agentcompass._util`` the private utilities.
"""

from pathlib import Path

from agentcompass._util.importpath import pip_deployments_inert

__version__ = "0.1.0"

# Snakemake, imported after this, adds a folder of the working folder to the import path: it finds nothing here
pip_deployments_inert()

PUBLIC_MODULES = ("sdk", "results", "runtime", "errors", "stages", "layout", "compare", "plan_diff", "status",
                  "secrets", "testing")

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
