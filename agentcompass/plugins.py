"""Loading components: the built-in ones, and those that installed packages add through entry points.

``load_components`` fills the registries of ``agentcompass.runtime.registry``: first the
built-in component packages (``agentcompass.benchmarks``, ``harnesses``, ``environments``,
``recipes``, ``analyzers``, ``scanners``), whose decorators register them, then the plug-ins. The runtime
imports no component itself: whatever resolves a config (the command, the SDK, the
workflow) calls ``load_components`` first.

A distribution declares, in its ``pyproject.toml``, an entry point in one of ``GROUPS``
(``agentcompass.benchmarks``, ...) whose value names a module or a class. Loading it
imports that object; a module registers its components with the registry decorators,
and a named class that is not registered yet is registered here. Every process that
resolves components (the command, each Snakemake job) loads them the same way, once.
"""

from __future__ import annotations

from importlib.metadata import EntryPoint, entry_points

from agentcompass.errors import PluginError
from agentcompass.runtime.base import BaseAnalyzer, BaseBenchmark, BaseEnvironment, BaseHarness, BaseRecipe, BaseScanner
from agentcompass.runtime.registry import REGISTRIES

GROUPS: dict[str, str] = {
    "benchmark": "agentcompass.benchmarks",
    "harness": "agentcompass.harnesses",
    "environment": "agentcompass.environments",
    "recipe": "agentcompass.recipes",
    "analyzer": "agentcompass.analyzers",
    "scanner": "agentcompass.scanners",
}
BASES: dict[str, type] = {
    "benchmark": BaseBenchmark,
    "harness": BaseHarness,
    "environment": BaseEnvironment,
    "recipe": BaseRecipe,
    "analyzer": BaseAnalyzer,
    "scanner": BaseScanner,
}

_loaded = False


def load_builtin_components() -> None:
    """Import the built-in component packages so their decorators register them."""
    import agentcompass.analyzers  # noqa: F401
    import agentcompass.benchmarks  # noqa: F401
    import agentcompass.environments  # noqa: F401
    import agentcompass.harnesses  # noqa: F401
    import agentcompass.recipes  # noqa: F401
    import agentcompass.scanners  # noqa: F401


def load_components() -> None:
    """The built-in components, then the installed plug-ins' (each loaded once per process)."""
    load_builtin_components()
    load_plugins()


def load_plugins() -> None:
    """Load every entry point of ``GROUPS`` once; a broken one raises ``PluginError``."""
    global _loaded
    if _loaded:
        return
    for kind, group in GROUPS.items():
        for entry in sorted(entry_points(group=group), key=lambda e: (_distribution(e), e.name)):
            _load(kind, entry)
    _loaded = True


def _distribution(entry: EntryPoint) -> str:
    return entry.dist.name if entry.dist is not None else "(unknown package)"


def _load(kind: str, entry: EntryPoint) -> None:
    registry = REGISTRIES[kind]
    package = _distribution(entry)
    before = {k: set(r) for k, r in REGISTRIES.items()}
    try:
        target = entry.load()
        if isinstance(target, type):
            if not issubclass(target, BASES[kind]):
                raise TypeError(f"{target.__qualname__} is not a {BASES[kind].__name__} subclass")
            if target not in dict(registry.items()).values():
                registry.register()(target)
    except Exception as exc:  # any failure of third-party code is reported the same way
        raise PluginError(
            f"plug-in package {package!r}: entry point {entry.name!r} = {entry.value!r} in group {entry.group!r} "
            f"cannot be loaded: {type(exc).__name__}: {exc}. "
            f"Fix: repair or upgrade {package}, or remove it with 'pip uninstall {package}'"
        ) from None
    for k, r in REGISTRIES.items():
        for cid in r:
            if cid not in before[k]:
                r.set_origin(cid, package)
