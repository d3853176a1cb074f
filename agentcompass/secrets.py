"""Secrets by reference: a ``${VAR}`` stays that text in every file and is resolved only in the job that uses it.

A run config may write ``${VAR}`` anywhere inside a string value (``'${API_KEY}'``,
``'Bearer ${TOKEN}'``, ``'https://${HOST}/v1'``). The config loader checks that
each variable is set and keeps the reference; a component resolves the value
with ``resolve_secret`` at the moment it uses it, and a ``Scrubber`` turns a
resolved value that turns up in what is written back into its reference
before anything is written.

Scrubbing works on values, never on serialized JSON: ``Scrubber.value`` walks
a payload (strings, mapping keys, lists) before it is serialized, so a value
of any characters (``null``, ``true``, quotes, backslashes, newlines) is
replaced where it stands and the file stays valid JSON; ``Scrubber.json_lines``
does the same line by line for a JSON-lines log, and ``Scrubber.text`` for free
text (a log, a traceback), where a value is also replaced in its JSON-escaped
and Python-repr forms (a JSON body or a repr inside the text).

Which values: those of the references handed in (the request, the plan) and
of every reference this process resolved (``resolve_secret`` remembers the
names), so a value resolved by a component (a task folder's ``[verifier] env``,
a build arg) is scrubbed from what the job writes afterwards. A string that is
exactly a value is replaced whatever the value's length; a value of at least
``_SCRUB_MIN`` characters is also replaced inside longer strings. A shorter one
(a key such as ``ab``) is not searched for inside text: it would rewrite
ordinary words, and a value that short is no secret anyway.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any, Iterable, TypeVar

from agentcompass.errors import MissingSecretError

# The one form of a reference: ${NAME}, NAME a shell variable name. A lone '$VAR' is plain text.
REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
# A value shorter than this is too common to scrub from text (it would rewrite ordinary words).
_SCRUB_MIN = 4

T = TypeVar("T")

# the names this process resolved: their values are scrubbed from everything it writes
_RESOLVED: set[str] = set()


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
        value = os.environ[name]
    except KeyError:
        raise MissingSecretError(
            f"environment variable {name} is not set in this job (the config refers to it as '${{{name}}}'); "
            f"export {name}=... where the job runs"
        ) from None
    _RESOLVED.add(name)
    return value


def resolved_values() -> dict[str, str]:
    """The value of every reference this process resolved, by name (one unset since is left out)."""
    return {name: os.environ[name] for name in sorted(_RESOLVED) if os.environ.get(name)}


def check_header_value(value: str, where: str) -> None:
    """Raise ValueError, naming ``where`` (a reference, never the value), when ``value`` cannot be an HTTP
    header's value: only printable ASCII and tabs travel in one, never a line break."""
    if not all(c == "\t" or " " <= c <= "~" for c in value):
        raise ValueError(
            f"{where} resolves to a value an HTTP header cannot carry (it holds a line break, a control character "
            "or a character outside ASCII); check the variable's value")


def _forms(value: str) -> set[str]:
    """How ``value`` can appear inside text: as it is, JSON-escaped (UTF-8 or ASCII) and in a Python repr."""
    return {value, json.dumps(value, ensure_ascii=False)[1:-1], json.dumps(value)[1:-1], repr(value)[1:-1]}


class Scrubber:
    """Turns the resolved values of ``${VAR}`` references back into their references, in values and text.

    ``references_in`` holds references (strings, or mappings and lists of them,
    such as ``request.to_dict()``); the names this process resolved are added
    (``resolved=False`` leaves them out). ``literals`` maps other strings to
    what stands for them (a per-attempt token and its placeholder). False when
    there is nothing to scrub.
    """

    def __init__(self, references_in: Iterable[Any] = (), *, resolved: bool = True,
                 literals: dict[str, str] | None = None) -> None:
        names = {name for value in references_in for name in references(value)}
        if resolved:
            names |= _RESOLVED
        pairs = [(os.environ.get(name) or "", f"${{{name}}}") for name in sorted(names)]
        pairs += [(value, stand_in) for value, stand_in in (literals or {}).items()]
        pairs = [(value, stand_in) for value, stand_in in pairs if value]
        self._whole = {value: stand_in for value, stand_in in pairs}
        within: dict[str, str] = {}
        for value, stand_in in pairs:
            if len(value) >= _SCRUB_MIN:
                for form in _forms(value):
                    within.setdefault(form, stand_in)
        # one pass, longest first: a value that holds another is replaced whole, and no stand-in is scrubbed again
        self._within = within
        self._pattern = re.compile("|".join(re.escape(f) for f in sorted(within, key=len, reverse=True))) if within else None

    def __bool__(self) -> bool:
        return bool(self._whole)

    def text(self, text: str) -> str:
        """``text`` with every value (and its escaped forms) replaced by its reference."""
        if text in self._whole:
            return self._whole[text]
        if self._pattern is None:
            return text
        return self._pattern.sub(lambda m: self._within[m.group(0)], text)

    def value(self, value: T) -> T:
        """A copy of ``value`` with every string in it (mapping keys too) scrubbed; other values as they are."""
        if not self:
            return value
        return self._walk(value)

    def _walk(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {self._walk(k) if isinstance(k, str) else k: self._walk(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [self._walk(v) for v in value]
        return value

    def json_lines(self, text: str) -> str:
        """A JSON-lines log scrubbed line by line as values; a line that is not JSON is scrubbed as text."""
        if not self:
            return text
        out = []
        for line in text.splitlines(keepends=True):
            body = line.rstrip("\r\n")
            try:
                parsed = json.loads(body)
            except ValueError:
                out.append(self.text(line))
                continue
            scrubbed = self._walk(parsed)
            if scrubbed == parsed:
                out.append(line)  # untouched lines stay byte for byte
            else:
                out.append(_json_line(scrubbed) + line[len(body):])
        return "".join(out)


def _json_line(value: Any) -> str:
    compact = json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    try:
        compact.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate escape the line held: kept escaped
        compact = json.dumps(value, sort_keys=True, separators=(",", ":"))
    return compact


def scrub(text: str, references_in: Iterable[Any]) -> str:
    """Free ``text`` with every resolved value of the references in ``references_in`` (and of those this
    process resolved) replaced by its reference."""
    return Scrubber(references_in).text(text)


def scrub_value(value: T, references_in: Iterable[Any]) -> T:
    """``value`` (a payload about to be serialized) with every resolved value replaced by its reference."""
    return Scrubber(references_in).value(value)
