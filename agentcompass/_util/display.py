"""Data the project does not control, made safe to print and to open in a spreadsheet.

Task ids, categories, error messages, model names and answers come from task
data, the model and the agent. Printed raw, an escape sequence among them
(ESC, CSI, an OSC 8 link, another C0 or C1 control, a bidi override) would
steer the reader's terminal; a CSV cell starting with ``=`` would run as a
formula in a spreadsheet. Every command that prints data passes it through
``terminal_text`` (or ``visible`` for one field), every CSV the project writes
through ``csv_text``; JSON stays exact data (``terminal_json``).
"""

from __future__ import annotations

import re
from typing import Any

# C0 controls, DEL, C1 controls, lone surrogates, line and paragraph separators, and the
# bidirectional marks, embeddings, overrides and isolates
_OTHERS = "\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069\ud800-\udfff"
_UNSAFE_FIELD = re.compile(f"[\x00-\x1f{_OTHERS}]")
# in a whole text: its own line breaks and tabs stay
_UNSAFE_TEXT = re.compile(f"[\x00-\x08\x0b-\x1f{_OTHERS}]")
# the characters a JSON text keeps raw that a terminal would act on (JSON escapes C0 itself)
_UNSAFE_JSON = re.compile(f"[{_OTHERS}]")


_SHORT = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(match: re.Match) -> str:
    char = match.group()
    if char in _SHORT:
        return _SHORT[char]
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def visible(value: Any) -> str:
    """One field (a task id, a category, a message) as text for a terminal: every control
    character, line break included, shown as an escape (``\\x1b``, ``\\u202e``)."""
    return _UNSAFE_FIELD.sub(_escape, value if isinstance(value, str) else str(value))


def terminal_text(text: str) -> str:
    """A whole text for a terminal: ``visible``, except that its line breaks and tabs stay."""
    return _UNSAFE_TEXT.sub(_escape, text)


def terminal_json(text: str) -> str:
    """A JSON text, still exactly the same data, that a terminal shows without acting on it:
    the characters JSON keeps raw and a terminal would obey are written as ``\\uXXXX`` escapes."""
    return _UNSAFE_JSON.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


# what a spreadsheet reads as the start of a formula (OWASP, CSV injection)
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
_PLAIN_NUMBER = re.compile(r"^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?$")


def csv_cell(value: Any) -> Any:
    """One CSV cell: a text starting with ``= + - @``, a tab or a CR gets a leading ``'`` (a
    spreadsheet then shows it as text, never as a formula), unless the whole text is a plain
    number such as ``-1.5``; controls other than line breaks and tabs are shown as escapes.
    Anything that is not text (a number, a boolean, an empty cell) is returned as it is."""
    if not isinstance(value, str):
        return value
    if value.startswith(_FORMULA_START) and not _PLAIN_NUMBER.match(value):
        value = "'" + value
    return terminal_text(value)


def csv_text(frame: Any, **to_csv: Any) -> str:
    """A pandas DataFrame (or Series) as CSV text, each text cell through ``csv_cell``."""
    import pandas as pd

    if isinstance(frame, pd.Series):
        frame = frame.to_frame()
        to_csv.setdefault("index", True)
    def texts(values) -> bool:  # a numeric column stays numbers: -1.0 is written as -1.0
        return not (pd.api.types.is_numeric_dtype(values.dtype) or pd.api.types.is_bool_dtype(values.dtype))

    frame = frame.copy()
    for column in frame.columns:
        if texts(frame[column]):
            frame[column] = frame[column].astype(object).map(csv_cell)
    if texts(frame.index):
        frame.index = frame.index.astype(object).map(csv_cell)
    return frame.to_csv(**to_csv)
