"""How fast sessions open, and how long they may take to close when a run stops.

``runtime.environment_open_rate`` caps the sessions opened per second across
the whole invocation: its shards and cluster jobs included. Each opener
reserves the next free slot in a file of the working directory's
``.snakemake/agentcompass/`` under ``flock`` (every process of the run sees
the same file, on one host or on a cluster's shared filesystem), then waits
for its slot. ``runtime.cleanup_grace_seconds`` bounds a session's close once
the run is stopping (``lifecycle``).
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import time
from pathlib import Path


class OpenRate:
    """At most ``rate`` session opens per second, shared by every process that uses ``path``."""

    def __init__(self, rate: float, path: str | Path) -> None:
        self.interval = 1.0 / float(rate)
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def reserve(self) -> float:
        """The time of this opener's slot (now or later); the next slot moves one interval on."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            raw = os.pread(fd, 64, 0).strip()
            try:
                free = float(raw) if raw else 0.0
            except ValueError:
                free = 0.0
            slot = max(time.time(), free)
            data = repr(slot + self.interval).encode()
            os.ftruncate(fd, 0)
            os.pwrite(fd, data, 0)
            return slot
        finally:
            os.close(fd)  # also releases the lock

    async def turn(self) -> None:
        wait = self.reserve() - time.time()
        if wait > 0:
            await asyncio.sleep(wait)


_open_rate: OpenRate | None = None
_close_grace: float | None = None


def configure(open_rate: float | None, workdir: str | Path = ".", close_grace: float | None = None) -> None:
    """This process's pace (set when a run begins; unset: no limit)."""
    global _open_rate, _close_grace
    _open_rate = None if not open_rate else OpenRate(open_rate, Path(workdir) / ".snakemake" / "agentcompass" / "open-rate")
    _close_grace = close_grace


async def before_open() -> None:
    """Wait for this session's turn to open, when the run caps the rate."""
    if _open_rate is not None:
        await _open_rate.turn()


def close_grace() -> float | None:
    """Seconds a session may take to close while the run stops."""
    return _close_grace
