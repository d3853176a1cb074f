"""Registries of components, filled by decorators in registration order.

This module imports no component: ``agentcompass.plugins.load_components`` loads the built-in
ones and the installed plug-ins' into these registries.
"""

from __future__ import annotations

from typing import Callable, Generic, Iterator, TypeVar

from agentcompass.errors import AgentCompassError

T = TypeVar("T", bound=type)


class UnknownComponentError(AgentCompassError, KeyError):
    """An id that no registered component has."""

    def __str__(self) -> str:  # KeyError quotes its message; this one is a sentence
        return self.args[0]


class Registry(Generic[T]):
    """An ordered id -> class map. Iteration follows insertion order."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._items: dict[str, T] = {}
        self._origins: dict[str, str] = {}  # id -> the distribution of a plug-in's component

    def register(self, id: str | None = None) -> Callable[[T], T]:
        """Class decorator: ``@BENCHMARKS.register()`` uses the class's ``id``."""

        def decorate(cls: T) -> T:
            key = id or getattr(cls, "id", None)
            if not key:
                raise ValueError(f"{cls.__name__} needs an 'id' to be registered as a {self.kind}")
            existing = self._items.get(key)
            if existing is not None and existing is not cls:
                raise ValueError(f"{self.kind} id {key!r} is registered twice")
            setattr(cls, "id", key)
            self._items[key] = cls
            return cls

        return decorate

    def get(self, key: str) -> T:
        try:
            return self._items[key]
        except KeyError:
            known = ", ".join(self._items) or "none"
            raise UnknownComponentError(
                f"unknown {self.kind} {key!r}; known: {known} "
                f"(see 'agentcompass list {self.kind}')"
            ) from None

    def origin(self, key: str) -> str:
        """The package a component comes from: "built-in" or a plug-in's distribution name."""
        return self._origins.get(key, "built-in")

    def set_origin(self, key: str, distribution: str) -> None:
        self._origins[key] = distribution

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def items(self):
        return self._items.items()

    def copy(self, kind: str | None = None) -> "Registry[T]":
        new: Registry[T] = Registry(kind or self.kind)
        new._items = dict(self._items)
        new._origins = dict(self._origins)
        return new


BENCHMARKS: Registry = Registry("benchmark")
HARNESSES: Registry = Registry("harness")
ENVIRONMENTS: Registry = Registry("environment")
RECIPES: Registry = Registry("recipe")
ANALYZERS: Registry = Registry("analyzer")
SCANNERS: Registry = Registry("scanner")

REGISTRIES = {
    "benchmark": BENCHMARKS,
    "harness": HARNESSES,
    "environment": ENVIRONMENTS,
    "recipe": RECIPES,
    "analyzer": ANALYZERS,
    "scanner": SCANNERS,
}

