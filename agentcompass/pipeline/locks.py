"""One run at a time per results folder, with a lock the kernel drops when its holder dies.

Every invocation that builds files takes ``results/<ns>/<run_id>/.lock`` for
each request it builds, before any job starts, and a shard's inner run takes
``shards/<k>/.lock`` for its slice. The lock is ``flock(2)`` on that file:
released by the kernel when the process ends, however it ends, so a run killed
with SIGKILL leaves nothing a later run must clear by hand. The file also
names its holder (host, pid, since when, command) for the message a second
run prints. Within one process the locks are re-entrant: the CLI takes them
before it starts Snakemake in the same process, which takes them again.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from agentcompass.errors import RunHeldError

LOCK_FILE = ".lock"
# how long a run that found a lock taken waits for its holder to write who it is (it does so right after taking it)
_HOLDER_WRITE_WAIT = 1.0


@dataclass(frozen=True)
class Holder:
    host: str
    pid: int
    since: float
    command: str

    @classmethod
    def me(cls) -> "Holder":
        return cls(socket.gethostname(), os.getpid(), time.time(), " ".join(sys.argv) or sys.executable)

    @classmethod
    def read(cls, path: Path) -> "Holder | None":
        try:
            data = json.loads(path.read_text() or "null")
            return cls(str(data["host"]), int(data["pid"]), float(data["since"]), str(data.get("command", "")))
        except (OSError, ValueError, TypeError, KeyError):
            return None

    def alive(self) -> bool:
        """Whether the holder still runs (knowable on this host only: elsewhere, assume it does)."""
        if self.host != socket.gethostname():
            return True
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True


class _Lock:
    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self.fd = fd
        self.count = 1


_held: dict[str, _Lock] = {}
_guard = threading.Lock()


def acquire(folder: str | Path, *, wait: bool = False) -> Path:
    """Take the lock of ``folder`` for this process; raise ``RunHeldError`` when another live run holds it.

    With ``wait``, block until the holder ends instead.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / LOCK_FILE
    key = os.path.realpath(path)
    with _guard:
        held = _held.get(key)
        if held is not None:
            held.count += 1
            return path
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            _lock(fd, path, folder, wait)
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        me = Holder.me()
        os.pwrite(fd, json.dumps(me.__dict__).encode() + b"\n", 0)
        _held[key] = _Lock(path, fd)
    return path


def _lock(fd: int, path: Path, folder: Path, wait: bool) -> None:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
    except OSError as exc:
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            raise RunHeldError(folder, _holder_of_taken_lock(path)) from None
        if exc.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS):
            raise
        # a filesystem without flock: the holder's pid decides, on this host
        holder = Holder.read(path)
        if holder is not None and holder.pid != os.getpid() and holder.alive():
            raise RunHeldError(folder, holder) from None


def _holder_of_taken_lock(path: Path) -> Holder | None:
    """Who holds the lock just found taken: a holder writes itself in right after it takes the lock,
    so an empty file is read again for a moment before the holder counts as unknown."""
    deadline = time.monotonic() + _HOLDER_WRITE_WAIT
    while (holder := Holder.read(path)) is None and time.monotonic() < deadline:
        time.sleep(0.01)
    return holder


def release(folder: str | Path, *, entirely: bool = False) -> None:
    """Give back one hold of ``folder``'s lock (``entirely``: every hold this process has)."""
    path = Path(folder) / LOCK_FILE
    key = os.path.realpath(path)
    with _guard:
        held = _held.get(key)
        if held is None:
            return
        held.count = 0 if entirely else held.count - 1
        if held.count:
            return
        del _held[key]
        try:
            os.ftruncate(held.fd, 0)
            fcntl.flock(held.fd, fcntl.LOCK_UN)
        except OSError:
            pass
        os.close(held.fd)


def acquire_all(folders) -> list[Path]:
    """Take every folder's lock, or none: on ``RunHeldError`` the ones already taken are released."""
    taken: list[Path] = []
    try:
        for folder in folders:
            acquire(folder)
            taken.append(Path(folder))
    except BaseException:
        for folder in taken:
            release(folder)
        raise
    return taken
