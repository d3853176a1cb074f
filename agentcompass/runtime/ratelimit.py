"""How many model calls go to one endpoint at once: an adaptive limit shared by every process of a run.

Each endpoint has an allowed number of calls in flight (a float, ``CEILING`` at first), kept in a folder of
its own, ``<folder>/<slug>/`` (the slug is ``endpoint_resource`` of the endpoint without
credentials or query: no secret is ever part of a name):

    state   the allowed number and when it was last lowered, read and written under ``flock``
    slots/  one file per slot; a call holds one under ``flock(LOCK_EX)`` while it is sent, so a process that
            dies frees its slots by itself
    log     one line ``time allowed in_flight event`` (event: ``lowered``, ``rejected``, ``raised``) for each
            rejection and each change of the whole-number allowed value (the call that made it counted in flight);
            cut to its newer half past ``LOG_LIMIT``

A call takes a slot whose number is below the allowed number (at least one: the limit never stops a
call, only delays it; a wait for a slot is bounded). A 429 or a 503 (``REJECTED``) lowers the allowed number
to ``DECREASE`` times the calls then in flight (or the allowed number, if fewer), at most once per
``DECREASE_WINDOW`` (a burst of rejections of calls already in flight lowers it once), never below 1;
each answered call raises it by ``1 / allowed`` (one per round of calls) back toward ``CEILING``.

A run sets the folder when it begins (``configure``: the working directory's
``.snakemake/agentcompass/rate``): every process of the run on the machine shares the limit, and on a
cluster every node whose shared filesystem honours ``flock`` across nodes. Unconfigured (a unit test,
the SDK outside a run), the limit lives in a temporary folder of this process.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import fcntl
import hashlib
import os
import random
import re
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import AsyncIterator, Iterator

from agentcompass.callcache import endpoint_of

# The statuses that mean "too many calls": a rate-limit wait, not a fault.
REJECTED = frozenset({429, 503})
# The most calls in flight at one endpoint the limit allows, and where it starts: above what a run sends at
# once (Snakemake's --cores and the endpoint's model_endpoint_ resource bound that), so that without rate
# limits it never holds a call back
CEILING = 1024.0
# A rejection lowers the allowed number to this times the calls in flight, at most once per window (seconds).
DECREASE = 0.5
DECREASE_WINDOW = 1.0
# Each answered call raises the allowed number by this over the allowed number (one per round of calls).
INCREASE = 1.0
# The log's size past which it is cut to its newer half.
LOG_LIMIT = 256 << 10
# A call waiting for a slot looks again after this many seconds, jittered.
POLL = 0.05
# The shortest wait after a rejection (a Retry-After of 0 or a backoff of 0 would hammer the endpoint).
MIN_WAIT = 0.25
# How long a call waits for a free slot before it goes anyway (a limit never fails a call).
SLOT_WAIT_MAX = 900.0
# What a model call waits on rate limits (429, 503) before they count as faults, unless its config says.
PATIENCE = 900.0
# The folder every run keeps its limits in, under its working directory.
RUN_FOLDER = Path(".snakemake") / "agentcompass" / "rate"


@dataclass(frozen=True)
class Line:
    """One line of an endpoint's log."""

    time: float
    allowed: float
    in_flight: int
    event: str


def _locked(path: Path, exclusive: bool = True) -> int:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
    return fd


class EndpointLimit:
    """The allowed calls in flight at one endpoint, shared by every process that uses ``folder``."""

    def __init__(self, folder: str | Path, ceiling: float = CEILING) -> None:
        self.folder = Path(folder)
        self.ceiling = float(ceiling)
        self.slots = self.folder / "slots"
        self.slots.mkdir(parents=True, exist_ok=True)
        self.state = self.folder / "state"
        self.log = self.folder / "log"
        self._rng = random.Random()

    # -- the state: "allowed lowered_at" -------------------------------------------------

    def _read(self, fd: int) -> tuple[float, float]:
        try:
            allowed, lowered = (float(part) for part in os.pread(fd, 128, 0).split())
        except ValueError:  # new, or cut short by a crash: the ceiling
            return self.ceiling, 0.0
        return min(max(allowed, 1.0), self.ceiling), lowered

    @staticmethod
    def _write(fd: int, allowed: float, lowered: float) -> None:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{allowed!r} {lowered!r}\n".encode(), 0)

    def allowed(self) -> float:
        """The allowed number of calls in flight now."""
        fd = _locked(self.state, exclusive=False)
        try:
            return self._read(fd)[0]
        finally:
            os.close(fd)

    def in_flight(self) -> int:
        """The slots held now, by any process."""
        held = 0
        for slot in self.slots.iterdir():
            try:
                fd = os.open(slot, os.O_RDONLY)
            except OSError:
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                held += 1
            finally:
                os.close(fd)
        return held

    # -- what happened to a call --------------------------------------------------------

    def rejected(self) -> float:
        """A call was refused as too many (429, 503), its slot given back: lower the allowed number (once per
        window) to ``DECREASE`` times the calls in flight, that one included; the new number."""
        fd = _locked(self.state)
        try:
            allowed, lowered = self._read(fd)
            now = time.time()
            flying = self.in_flight() + 1
            event = "rejected"
            if now - lowered >= DECREASE_WINDOW:
                allowed, lowered, event = max(1.0, min(allowed, flying) * DECREASE), now, "lowered"
                self._write(fd, allowed, lowered)
            self._log(Line(now, allowed, flying, event))
            return allowed
        finally:
            os.close(fd)

    def answered(self) -> float:
        """A call was answered, its slot given back: raise the allowed number toward the ceiling; the new one.
        The log counts that call in flight, as a rejection's does."""
        fd = _locked(self.state)
        try:
            allowed, lowered = self._read(fd)
            if allowed >= self.ceiling:
                return allowed
            raised = min(self.ceiling, allowed + INCREASE / allowed)
            self._write(fd, raised, lowered)
            if int(raised) != int(allowed):
                self._log(Line(time.time(), raised, self.in_flight() + 1, "raised"))
            return raised
        finally:
            os.close(fd)

    def _log(self, line: Line) -> None:
        """Append ``line`` (the state's lock held); past ``LOG_LIMIT``, keep the newer half."""
        with self.log.open("a", encoding="utf-8") as log:
            log.write(f"{line.time:.3f} {line.allowed:.2f} {line.in_flight} {line.event}\n")
            size = log.tell()
        if size > LOG_LIMIT:
            text = self.log.read_text(encoding="utf-8")
            kept = text[len(text) // 2:].partition("\n")[2]
            tmp = self.log.with_suffix(".tmp")
            tmp.write_text(kept, encoding="utf-8")
            os.replace(tmp, self.log)

    def lines(self) -> list[Line]:
        """The log, oldest first."""
        if not self.log.exists():
            return []
        out = []
        for raw in self.log.read_text(encoding="utf-8").splitlines():
            parts = raw.split()
            if len(parts) == 4:
                out.append(Line(float(parts[0]), float(parts[1]), int(parts[2]), parts[3]))
        return out

    # -- slots ----------------------------------------------------------------------------

    def _try_slot(self) -> int | None:
        """A free slot below the allowed number, locked (its descriptor); None when all are held."""
        count = max(1, int(self.allowed()))
        for number in self._rng.sample(range(count), count):
            fd = os.open(self.slots / str(number), os.O_RDWR | os.O_CREAT, 0o666)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            return fd
        return None

    def _pause(self) -> float:
        return POLL * (0.5 + self._rng.random())

    @contextlib.contextmanager
    def slot(self, timeout: float = SLOT_WAIT_MAX) -> Iterator[None]:
        """Hold a slot while the block runs (threads); after ``timeout`` seconds without one, go anyway."""
        deadline = time.monotonic() + timeout
        fd = self._try_slot()
        while fd is None and time.monotonic() < deadline:
            time.sleep(self._pause())
            fd = self._try_slot()
        try:
            yield
        finally:
            if fd is not None:
                os.close(fd)

    @contextlib.asynccontextmanager
    async def slot_async(self, timeout: float = SLOT_WAIT_MAX) -> AsyncIterator[None]:
        """``slot`` for a coroutine: it waits with ``asyncio.sleep``."""
        deadline = time.monotonic() + timeout
        fd = self._try_slot()
        while fd is None and time.monotonic() < deadline:
            await asyncio.sleep(self._pause())
            fd = self._try_slot()
        try:
            yield
        finally:
            if fd is not None:
                os.close(fd)


def wait_seconds(waits: int, retry_after: float | None, retry_after_max: float, backoff: float,
                 backoff_max: float, rng: random.Random) -> float:
    """Seconds before the next try after rejection number ``waits``: the Retry-After asked (capped), else
    backoff with equal jitter; at least ``MIN_WAIT`` (jittered)."""
    if retry_after is not None:
        wait = min(retry_after, retry_after_max)
    else:
        ceiling = min(backoff * 2 ** (waits - 1), backoff_max)
        wait = ceiling / 2 + rng.uniform(0, ceiling / 2)
    return max(wait, MIN_WAIT * (1 + rng.random()))


_lock = threading.Lock()
_folder: Path | None = None
_limits: dict[Path, EndpointLimit] = {}


def configure(workdir: str | Path = ".") -> None:
    """Share this process's limits with every process of the run (set when a run begins)."""
    global _folder
    with _lock:
        _folder = (Path(workdir) / RUN_FOLDER).absolute()


def _private_folder() -> Path:
    folder = Path(tempfile.mkdtemp(prefix="agentcompass-rate-"))
    atexit.register(shutil.rmtree, folder, True)
    return folder


def folder() -> Path:
    """Where this process keeps its limits: the run's folder, else a temporary one of its own."""
    global _folder
    with _lock:
        if _folder is None:
            _folder = _private_folder()
        return _folder


def endpoint_resource(base_url: str) -> str:
    """The Snakemake resource that counts the model calls in flight at one endpoint.

    ``http://127.0.0.1:8000/v1`` gives ``model_endpoint_127_0_0_1_8000_v1``: the
    base URL without its scheme, lowercased, each run of other characters an
    underscore; a very long one is cut and suffixed with a hash of the URL.
    """
    slug = re.sub(r"[^a-z0-9]+", "_", re.sub(r"^[a-z][a-z0-9+.-]*://", "", base_url.strip().lower())).strip("_")
    if len(slug) > 60:
        slug = f"{slug[:50]}_{hashlib.sha256(base_url.encode()).hexdigest()[:8]}"
    return f"model_endpoint_{slug or 'none'}"


def slug_of(base_url: str) -> str:
    """The name of an endpoint's folder: its resource name, from the URL without credentials or query."""
    return endpoint_resource(endpoint_of(base_url))


def limit_of(base_url: str) -> EndpointLimit:
    """The limit of the endpoint at ``base_url`` (resolved: the URL calls go to)."""
    path = folder() / slug_of(base_url)
    with _lock:
        limit = _limits.get(path)
        if limit is None:
            limit = _limits[path] = EndpointLimit(path)
        return limit
