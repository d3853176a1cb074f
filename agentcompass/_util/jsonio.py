"""The one JSON writer: canonical (sorted keys, UTF-8, trailing newline) and atomic; and the one
appender of JSON-lines logs (``append_line``)."""

from __future__ import annotations

import contextlib
import contextvars
import json
import os
import re
import threading
from pathlib import Path
from typing import Any, BinaryIO, Callable, Iterator

# Called with a file's path just before it appears (its rename): a job records
# what it built the file from first, so a kill between the two loses nothing.
_before_publish: contextvars.ContextVar[Callable[[Path], None] | None] = contextvars.ContextVar(
    "agentcompass_before_publish", default=None)


@contextlib.contextmanager
def publishing(hook: Callable[[Path], None]) -> Iterator[None]:
    """Call ``hook(path)`` before each file written atomically in this context appears."""
    token = _before_publish.set(hook)
    try:
        yield
    finally:
        _before_publish.reset(token)


_SURROGATE = re.compile("[\ud800-\udfff]")


def not_unicode(value: Any, path: tuple = ()) -> tuple | None:
    """The key path of the first text in ``value`` (a key or a value, at any depth) that no UTF-8 file
    can hold: one with a lone surrogate, such as a JSON ``"\\ud800"`` escape or a command-line byte that
    is not UTF-8 (Python keeps it as ``\\udcff``). None when every text is valid Unicode."""
    if isinstance(value, str):
        return path if _SURROGATE.search(value) else None
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(key, str) and _SURROGATE.search(key):
                return (*path, key)
            found = not_unicode(item, (*path, key))
            if found is not None:
                return found
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            found = not_unicode(item, (*path, index))
            if found is not None:
                return found
    return None


def without_surrogates(value: Any) -> Any:
    """``value`` with each lone surrogate of its texts (keys too) replaced by U+FFFD: what a record
    keeps of data that is not valid Unicode."""
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value)
    if isinstance(value, dict):
        return {without_surrogates(k): without_surrogates(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [without_surrogates(v) for v in value]
    return value


def canonical_json(payload: Any) -> str:
    return json.dumps(payload, sort_keys=True, ensure_ascii=False, indent=2, allow_nan=False) + "\n"


def write_text_atomic(path: str | Path, text: str) -> Path:
    """Write via a temporary file in the same directory and rename: readers never see half a file."""
    return write_bytes_atomic(path, text.encode("utf-8"))


def write_bytes_atomic(path: str | Path, data: bytes) -> Path:
    """``write_text_atomic`` of bytes."""
    path, tmp = Path(path), _temporary(path)
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)
        _publish(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


@contextlib.contextmanager
def atomic_file(path: str | Path) -> Iterator[BinaryIO]:
    """``write_bytes_atomic`` in parts: a binary file to write, which appears as ``path`` when the
    block ends, and not at all when it raises (for a file too large to hold in memory at once)."""
    path, tmp = Path(path), _temporary(path)
    try:
        with open(tmp, "wb") as handle:
            yield handle
        _publish(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _temporary(path: str | Path) -> Path:
    """Where a write of ``path`` goes first: beside it, so that the rename is atomic."""
    path = Path(path)
    if not path.parent.is_dir():  # a stat is much cheaper than a failing mkdir on some disks
        path.parent.mkdir(parents=True, exist_ok=True)
    # unique to this process and thread, so no random name (mkstemp) is needed
    return path.parent / f".{path.name}.{os.getpid()}-{threading.get_ident()}.tmp"


def _publish(tmp: Path, path: Path) -> None:
    hook = _before_publish.get()
    if hook is not None:
        hook(path)
    os.replace(tmp, path)


def append_line(path: str | Path, payload: Any) -> None:
    """Append ``payload`` to a JSON-lines log as one line, in one ``write`` with ``O_APPEND``.

    Several processes may append to the same log: the kernel places each such
    write at the end of the file whole, so lines never interleave (on a local
    filesystem). No fsync: a log line is worth less than the time it would cost.
    """
    data = (json.dumps(payload, sort_keys=True, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
            + "\n").encode("utf-8")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
    try:
        view = memoryview(data)
        while view:  # one write unless the disk is full
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)


def write_json(path: str | Path, payload: Any) -> Path:
    return write_text_atomic(path, canonical_json(payload))


def read_json(path: str | Path) -> Any:
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def interrupted_writes(*paths: str | Path) -> list[Path]:
    """Temporary files of writes of ``paths`` that a killed process left behind (never a result).

    One listing of each folder (every job looks before it writes: a glob per path
    cost more than the job's own writes).
    """
    by_folder: dict[Path, list[str]] = {}
    for path in map(Path, paths):
        by_folder.setdefault(path.parent, []).append(f".{path.name}.")
    found = []
    for folder, prefixes in by_folder.items():
        try:
            names = os.listdir(folder)
        except (FileNotFoundError, NotADirectoryError):
            continue
        found += [folder / name for name in names
                  if name.endswith(".tmp") and name.startswith(tuple(prefixes))]
    return found
