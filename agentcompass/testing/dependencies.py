"""Skip a test whose component's optional package is not installed, with the pip command as the reason."""

from __future__ import annotations

import pytest

from agentcompass.runtime.dependencies import DependencySpec, missing_dependencies


def _reason(missing: tuple[DependencySpec, ...]) -> str:
    return "needs " + " and ".join(f"extra {spec.extra!r} ({spec.pip})" for spec in missing)


def needs(*specs: DependencySpec) -> pytest.MarkDecorator:
    """A mark: ``@needs(bfcl.DEPENDENCY)`` skips the test when a module of the specs cannot be imported."""
    missing = missing_dependencies(specs)
    return pytest.mark.skipif(bool(missing), reason=_reason(missing))


def require(*specs: DependencySpec) -> None:
    """Inside a fixture or test: skip it now when a module of the specs cannot be imported."""
    missing = missing_dependencies(specs)
    if missing:
        pytest.skip(_reason(missing))
