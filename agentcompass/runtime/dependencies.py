"""Optional packages a component needs, declared on its class and checked before any job runs."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class DependencySpec:
    """An optional package: the agentcompass extra that brings it, the modules it provides, how to install it."""

    extra: str
    imports: tuple[str, ...]
    pip: str

    def missing(self) -> tuple[str, ...]:
        """The modules of ``imports`` this Python cannot import (found without importing them)."""
        return tuple(name for name in self.imports if not _importable(name))


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package that is missing or broken
        return False


def missing_dependencies(specs: tuple[DependencySpec, ...]) -> tuple[DependencySpec, ...]:
    """The declared dependencies of which some module cannot be imported here."""
    return tuple(spec for spec in specs if spec.missing())
