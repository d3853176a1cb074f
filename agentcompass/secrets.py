"""Secrets by reference: a ``${VAR}`` stays that text in every file and is resolved only in the job that uses it.

A run config may write ``${VAR}`` anywhere inside a string value (``'${API_KEY}'``,
``'Bearer ${TOKEN}'``, ``'https://${HOST}/v1'``). The config loader checks that
each variable is set and keeps the reference; a component resolves the value
with ``resolve_secret`` at the moment it uses it, and ``scrub`` turns a
resolved value that turns up in text (a log, a traceback) back into its
reference before anything is written.
"""

from __future__ import annotations

import os
import re
from typing import Any, Iterable, TypeVar

# The one form of a reference: ${NAME}, NAME a shell variable name. A lone '$VAR' is plain text.
REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
# A value shorter than this is too common to scrub from text (it would rewrite ordinary words).
_SCRUB_MIN = 4

T = TypeVar("T")


class MissingSecretError(RuntimeError):
    """A ``${VAR}`` whose variable is not set in the job's environment."""


def references(value: Any) -> list[str]:
    """The variable names of every ``${VAR}`` in ``value`` (strings, and lists and mappings of them), in order."""
    if isinstance(value, str):
        return REFERENCE.findall(value)
    if isinstance(value, dict):
        return [name for item in value.values() for name in references(item)]
    if isinstance(value, (list, tuple)):
        return [name for item in value for name in references(item)]
    return []


def resolve_secret(value: T) -> T:
    """``value`` with every ``${VAR}`` replaced by the variable's value from this job's environment.

    Strings are resolved, lists and mappings item by item, anything else (None,
    numbers) is returned as it is. Call it where the value is used, never
    earlier, and never write what it returns.
    """
    if isinstance(value, str):
        return REFERENCE.sub(_lookup, value)  # type: ignore[return-value]
    if isinstance(value, dict):
        return {k: resolve_secret(v) for k, v in value.items()}  # type: ignore[return-value]
    if isinstance(value, list):
        return [resolve_secret(v) for v in value]  # type: ignore[return-value]
    return value


def _lookup(match: re.Match) -> str:
    name = match.group(1)
    try:
        return os.environ[name]
    except KeyError:
        raise MissingSecretError(
            f"environment variable {name} is not set in this job (the config refers to it as '${{{name}}}'); "
            f"export {name}=... where the job runs"
        ) from None


def scrub(text: str, references_in: Iterable[Any]) -> str:
    """Replace every resolved value of the ``${VAR}`` references in ``references_in`` by its reference."""
    names = {name for value in references_in for name in references(value)}
    values = [(os.environ.get(name) or "", name) for name in names]
    # longest first: a value that contains another is replaced whole
    for value, name in sorted(values, key=lambda pair: -len(pair[0])):
        if len(value) >= _SCRUB_MIN:
            text = text.replace(value, f"${{{name}}}")
    return text
