"""One live line per request while a run goes: attempts done/total, errors, ETA.

Shown only on a terminal. There, Snakemake's per-job chatter is held back
(warnings and errors still print above the lines); anywhere else, nothing
changes and the log reads as plain Snakemake output.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from agentcompass.paths import task_segment

REFRESH_SECONDS = 0.5


@dataclass
class RequestProgress:
    name: str
    path: Path
    attempts_per_task: int
    total: int | None = None
    done: int = 0
    errors: int = 0
    done_at_start: int | None = None
    _results: list[Path] = field(default_factory=list)
    _status: dict[Path, tuple[int, str]] = field(default_factory=dict)

    def refresh(self) -> None:
        if self.total is None:
            tasks_file = self.path / "tasks.json"
            if not tasks_file.exists():
                return
            try:
                tasks = json.loads(tasks_file.read_text())["tasks"]
            except (OSError, ValueError, KeyError):
                return
            self._results = [
                self.path / "attempts" / task_segment(t["task_id"]) / str(a) / "result.json"
                for t in tasks
                for a in range(1, self.attempts_per_task + 1)
            ]
            self.total = len(self._results)
        done = errors = 0
        for path in self._results:
            try:
                mtime = path.stat().st_mtime_ns
            except FileNotFoundError:
                continue
            cached = self._status.get(path)
            if cached is None or cached[0] != mtime:
                try:
                    status = json.loads(path.read_text())["status"]
                except (OSError, ValueError, KeyError):
                    continue
                cached = self._status[path] = (mtime, status)
            done += 1
            errors += cached[1] in ("run_error", "eval_error", "run_error_or_eval_error")
        self.done, self.errors = done, errors
        if self.done_at_start is None:
            self.done_at_start = done

    def line(self, elapsed: float) -> str:
        if self.total is None:
            return f"{self.name}: loading tasks"
        eta = ""
        fresh = self.done - (self.done_at_start or 0)
        if 0 < fresh and self.done < self.total and elapsed > 0:
            remaining = (self.total - self.done) * elapsed / fresh
            eta = f", ETA {int(remaining // 60)}m{int(remaining % 60):02d}s"
        percent = 100 * self.done / self.total if self.total else 100
        return f"{self.name}: {self.done}/{self.total} attempts ({percent:.0f}%), {self.errors} errors{eta}"


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
        text = self.render()
        with self._lock:
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
    requests = [
        RequestProgress(run.name, Path(evaluation.results_dir) / run.request.namespace / run.request.run_id,
                        run.request.execution.attempts)
        for run in evaluation.orchestration.runs
    ]
    from agentcompass.pipeline import engine

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
