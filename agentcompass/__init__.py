"""agentcompass: a declarative, Make-like build system for agent evaluations."""

from pathlib import Path

__version__ = "0.1.0"

# The workflow (Snakefile, rules/, schemas/, configs/, profiles/) lives beside the package.
PROJECT_ROOT = Path(__file__).resolve().parent.parent
