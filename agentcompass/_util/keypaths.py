"""Key paths of JSON values: where two of them differ, written as a reader would (``model.params.temperature``)."""

from __future__ import annotations

import copy
import json
from typing import Any


class _Absent:
    def __repr__(self) -> str:
        return "(absent)"


# the value at a key path one side does not have
ABSENT = _Absent()
KeyPath = tuple[str, ...]


def same(a: Any, b: Any) -> bool:
    """Equal as JSON text, as Snakemake compares params: 0 and 0.0 differ, and so do 1 and true."""
    # Python's == first (in C, and false for most differences); the text only for what it calls equal
    return a == b and json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def changes(a: Any, b: Any, prefix: KeyPath = ()) -> list[tuple[KeyPath, Any, Any]]:
    """Every key path where ``a`` and ``b`` differ, with both values (``ABSENT`` where one has none).

    Mappings are walked key by key; anything else (a list too) is one value.
    """
    if isinstance(a, dict) and isinstance(b, dict):
        if same(a, b):
            return []
        out = []
        for key in sorted(set(a) | set(b), key=str):
            out += changes(a.get(key, ABSENT), b.get(key, ABSENT), (*prefix, str(key)))
        return out
    if a is ABSENT or b is ABSENT:
        return [] if a is b else [(prefix, a, b)]
    return [] if same(a, b) else [(prefix, a, b)]


def text(path: KeyPath) -> str:
    """``model.params.temperature``; a key that is not a plain name is quoted: ``params["a.b"]``."""
    out = ""
    for key in path:
        plain = key.replace("_", "a").replace("-", "a").isalnum()
        out += (f".{key}" if out else key) if plain else f"[{json.dumps(key)}]"
    return out


def value_text(value: Any, width: int | None = 60) -> str:
    """A value as JSON on one line, cut to ``width`` characters (None: whole)."""
    shown = "(absent)" if value is ABSENT else json.dumps(value, sort_keys=True, ensure_ascii=False)
    return shown if width is None or len(shown) <= width else shown[: width - 3] + "..."


def values_json(a: Any, b: Any) -> dict:
    """``{"a": ..., "b": ...}`` without the key of a side that does not have the value."""
    return {side: value for side, value in (("a", a), ("b", b)) if value is not ABSENT}


def get(data: Any, path: KeyPath) -> Any:
    for key in path:
        if not isinstance(data, dict) or key not in data:
            return ABSENT
        data = data[key]
    return data


def with_value(data: Any, path: KeyPath, value: Any) -> Any:
    """A copy of ``data`` with ``path`` set to ``value`` (removed for ``ABSENT``)."""
    data = copy.deepcopy(data)
    node = data
    for key in path[:-1]:
        if not isinstance(node.get(key), dict):
            node[key] = {}
        node = node[key]
    if value is ABSENT:
        node.pop(path[-1], None)
    else:
        node[path[-1]] = copy.deepcopy(value)
    return data
