"""One live line per request while a run goes: the attempts this invocation builds, done/total, errors, ETA.

The line reads the request's events (``events.jsonl``, agentcompass.pipeline.events)
of this invocation only: total is what it builds (``attempts_planned``; the
whole slice of a shard until the shard's inner run has counted), done is its
``attempt_finished`` events. Attempts that are reused count in neither, so a
rerun after a change shows 0/N before anything ran, N being what the change
reruns.

Shown only on a terminal. There, Snakemake's per-job chatter is held back
(warnings and errors still print above the lines); anywhere else, nothing
changes and the log reads as plain Snakemake output.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentcompass.results import cached_note, dollars

from . import engine
from .events import EVENTS_FILE, Follower

REFRESH_SECONDS = 0.5
_ERRORS = frozenset({"run_error", "eval_error", "run_error_or_eval_error"})


@dataclass
class RequestProgress:
    """One request's count, from its events of one invocation."""

    name: str
    events: Follower
    invocation: str | None = None  # None: whichever invocation starts the request next
    planned: dict[Any, int] = field(default_factory=dict)  # shard (None: the request) -> attempts
    finished: set[tuple[Any, Any]] = field(default_factory=set)  # (task id, attempt) as the events give them
    errors: int = 0
    over: bool = False

    @classmethod
    def of(cls, name: str, run_dir: Path, offset: int | None = None, invocation: str | None = None):

        return cls(name, Follower(Path(run_dir) / EVENTS_FILE, offset), invocation)

    def refresh(self) -> None:
        for event in self.events.read():
            self.apply(event)

    def apply(self, event: dict) -> None:
        if self.invocation is None and event["event"] == "request_started":
            self.invocation = event.get("invocation")
        if self.invocation is None or event.get("invocation") != self.invocation:
            return
        kind = event["event"]
        if kind == "attempts_planned":
            self.planned[event.get("shard")] = int(event.get("attempts", 0))
        elif kind == "attempt_finished":
            key = (event.get("task_id"), event.get("attempt"))
            if key not in self.finished:
                self.finished.add(key)
                self.errors += event.get("status") in _ERRORS
        elif kind == "request_finished":
            self.over = True

    @property
    def total(self) -> int | None:
        if not self.planned:
            return 0 if self.over else None
        # an estimate for a whole shard never undercounts what finished
        return max(sum(self.planned.values()), len(self.finished))

    def line(self, elapsed: float) -> str:
        total, done = self.total, len(self.finished)
        if total is None:
            return f"{self.name}: planning"
        if total == 0:
            return f"{self.name}: nothing to build (every attempt is up to date)"
        eta = ""
        if 0 < done < total and elapsed > 0:
            remaining = (total - done) * elapsed / done
            eta = f", ETA {int(remaining // 60)}m{int(remaining % 60):02d}s"
        return f"{self.name}: {done}/{total} attempts ({100 * done / total:.0f}%), {self.errors} errors{eta}"


class _Passthrough(logging.Filter):
    """On a terminal, only warnings and errors reach Snakemake's own output."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.WARNING


class LiveProgress:
    def __init__(self, requests: list[RequestProgress], stream=None) -> None:
        self.requests = requests
        self.stream = stream or sys.stderr
        self.started = time.monotonic()
        self._drawn = 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, name="agentcompass-progress", daemon=True)

    def render(self) -> str:
        elapsed = time.monotonic() - self.started
        for request in self.requests:
            request.refresh()
        return "\n".join(r.line(elapsed) for r in self.requests)

    def draw(self) -> None:
        with self._lock:
            text = self.render()
            # move up over the lines drawn last time, then clear and redraw them
            prefix = f"\x1b[{self._drawn}F" if self._drawn else ""
            self.stream.write(prefix + "\x1b[J" + text + "\n")
            self.stream.flush()
            self._drawn = text.count("\n") + 1

    def _loop(self) -> None:
        while not self._stop.wait(REFRESH_SECONDS):
            self.draw()

    def start(self) -> None:
        self.draw()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        self.draw()


_active: LiveProgress | None = None


def start(evaluation, stream=None) -> LiveProgress | None:
    """Begin live progress for a Snakemake run if stderr is a terminal (and progress is on)."""
    global _active
    stream = stream or sys.stderr
    if _active is not None or not evaluation.orchestration.runtime.progress:
        return None
    if not (hasattr(stream, "isatty") and stream.isatty()) or os.environ.get("TERM") == "dumb":
        return None
    events = evaluation.events
    requests = []
    for run in evaluation.orchestration.runs:
        req = run.request
        requests.append(RequestProgress.of(run.name, Path(events.path(req)).parent,
                                           events.offsets.get((req.namespace, req.run_id), 0), events.invocation))

    for handler in engine.console_handlers():
        handler.addFilter(_Passthrough())
    _active = LiveProgress(requests, stream)
    _active.start()
    return _active


def stop() -> None:
    global _active
    if _active is not None:
        _active.stop()
        _active = None


# -- the summary after a run ------------------------------------------------------------------------


def _count(value) -> str:
    return f"{value:,}"


def usage_summary(stats: Any) -> str:
    """Model calls, tokens and cost of a request, from its metrics.json ``summary.overall``:
    e.g. ``12 model calls, 1,234 tokens (1,000 in, 234 out), $0.0123``. A field that is
    missing (or not a number) is left out; nothing at all gives ''."""
    if not isinstance(stats, dict):
        return ""

    def number(key):
        value = stats.get(key)
        return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None

    parts = []
    calls, prompt, completion, cost = (number(k) for k in ("calls", "prompt_tokens", "completion_tokens", "cost_usd"))
    if calls:
        parts.append(f"{_count(calls)} model call{'s' if calls != 1 else ''}")
    if prompt or completion:
        split = ", ".join(f"{_count(n)} {word}" for n, word in ((prompt, "in"), (completion, "out")) if n is not None)
        parts.append(f"{_count((prompt or 0) + (completion or 0))} tokens ({split})")
    if cost is not None:
        parts.append(dollars(cost))
    cached = cached_note(stats)
    if cached:
        parts.append(cached)
    return ", ".join(parts)
