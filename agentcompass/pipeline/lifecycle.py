"""Stopping a run on purpose: Ctrl-C, SIGTERM, the deadline, or the end of the run that started a shard.

A stop is graceful: no new job starts, the stage coroutines running in this
process are cancelled (their sessions close, each within
``runtime.cleanup_grace_seconds``), the shards' inner runs get SIGTERM and
stop the same way, and a cluster driver cancels its cluster jobs. A
cancelled attempt writes nothing, so the next run of the same command builds
it. A second Ctrl-C or SIGTERM stops at once.

The deadline (``runtime.deadline_seconds``) counts from the start of the
invocation; it reaches inner runs and cluster jobs as an absolute time in
``AGENTCOMPASS_DEADLINE``, so a shard stops with the run that started it.
"""

from __future__ import annotations

import _thread
import logging
import os
import signal
import subprocess
import threading
import time
from typing import Any

from agentcompass._util import aio
from agentcompass._util.logs import LOG

from . import engine

DEADLINE_ENV = "AGENTCOMPASS_DEADLINE"
PARENT_ENV = "AGENTCOMPASS_PARENT_PID"
_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def deadline_from(started: float, seconds: float | None, *, inherited: bool) -> float | None:
    """The absolute deadline: an outer run's own, or (``inherited``) the one its outer run handed down."""
    if inherited:
        value = os.environ.get(DEADLINE_ENV)
        try:
            return float(value) if value else None
        except ValueError:
            return None
    return None if seconds is None else started + float(seconds)


class _Children:
    """Child processes that stop with this run (the shards' inner Snakemake runs)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._procs: set[subprocess.Popen] = set()

    def add(self, proc: subprocess.Popen) -> None:
        with self._lock:
            self._procs.add(proc)
        if aio.stopping():
            self.terminate(proc)

    def discard(self, proc: subprocess.Popen) -> None:
        with self._lock:
            self._procs.discard(proc)

    def terminate(self, proc: subprocess.Popen | None = None) -> None:
        with self._lock:
            procs = [proc] if proc is not None else list(self._procs)
        for p in procs:
            if p.poll() is None:
                try:
                    p.terminate()
                except ProcessLookupError:
                    pass

    def kill(self) -> None:
        with self._lock:
            procs = list(self._procs)
        for p in procs:
            if p.poll() is None:
                try:
                    p.kill()
                except ProcessLookupError:
                    pass


CHILDREN = _Children()


# the rule of each job that failed in this process's last run (noted at its end, ``note_failures``)
_FAILED_JOBS: list[str] = []


def note_failures(rules: list[str]) -> None:
    """The jobs that failed in the run now ending (``engine.failed_jobs``); an empty list forgets the last run's
    (and its budget's stop)."""
    _FAILED_JOBS[:] = rules
    if not rules:
        _BUDGET_SPENT.clear()


# why this process stopped starting attempts: a budget was spent (``budget_spent``)
_BUDGET_SPENT: list[str] = []


def budget_spent(workflow, reason: str) -> None:
    """A budget is spent (``agentcompass.spend``): this process starts no new attempt, and those in flight
    finish, their evaluation too. Only the first call acts. Each attempt not started is a job turned away
    (``aio.Stopped``), at once: the scheduler goes on past them (to the evaluation of the attempts in flight),
    and the console stops reporting them. A cluster's own scheduler stops submitting at the first."""
    if _BUDGET_SPENT:
        return
    _BUDGET_SPENT.append(reason)
    LOG.warning(f"stopping because {reason}: no new attempt starts, those in flight finish")
    _quiet_console()
    if workflow is not None and not engine.on_cluster(workflow):
        engine.keep_going(workflow)


def end_reason(ok: bool) -> str | None:
    """Why the run in this process ended before its end, as its requests' outcomes say it; None when it ended well.

    The stop's own reason (a signal, the deadline); else the jobs that failed; else Snakemake's
    own error (a job's input it cannot make, a lock, its arguments), when no job failed.
    """
    reason = aio.stopping()
    if reason is not None or ok:
        return reason
    if _BUDGET_SPENT:
        return _BUDGET_SPENT[0]
    if _FAILED_JOBS:
        rules = ", ".join(dict.fromkeys(_FAILED_JOBS))
        n = len(_FAILED_JOBS)
        return f"{n} job{'s' if n > 1 else ''} failed ({rules}); Snakemake's output above names {'them' if n > 1 else 'it'}"
    return "Snakemake stopped on an error of its own, and no job failed; its output above says which"


def _quiet_console() -> None:
    """Cancelled jobs are expected now: Snakemake's console stops reporting them (its log keeps all)."""
    for handler in engine.console_handlers():
        handler.addFilter(lambda record: record.levelno >= logging.CRITICAL)


class Lifecycle:
    """This process's stop: one per Snakemake invocation of the workflow."""

    def __init__(self, workflow, deadline: float | None, grace: float, *, inner: bool) -> None:
        self.workflow = workflow
        self.deadline = deadline
        self.grace = grace
        self.inner = inner
        self._previous: dict[int, Any] = {}
        self._timers: list[threading.Timer] = []
        self._watch: threading.Thread | None = None
        self._done = threading.Event()
        self._first: int | None = None

    # -- starting and ending ---------------------------------------------------------------

    def start(self) -> None:
        """Arm the signals (from the main thread), the deadline and, for an inner run, the parent watch."""
        if threading.current_thread() is threading.main_thread():
            for signum in _SIGNALS:
                try:
                    self._previous[signum] = signal.signal(signum, self._on_signal)
                except (ValueError, OSError):
                    pass
            if self.workflow is not None:
                engine.wake_for_signals(self.workflow)
        if self.deadline is not None:
            remaining = self.deadline - time.time()
            if remaining <= 0:
                self.stop(self._deadline_reason())
            else:
                self._timer(remaining, lambda: self.stop(self._deadline_reason()))
        parent = os.environ.get(PARENT_ENV) if self.inner else None
        if parent:
            self._watch = threading.Thread(target=self._watch_parent, args=(int(parent),),
                                           name="agentcompass-parent-watch", daemon=True)
            self._watch.start()

    def finish(self) -> None:
        """The run is over: put the signal handlers back, drop the timers."""
        self._done.set()
        for timer in self._timers:
            timer.cancel()
        if threading.current_thread() is threading.main_thread():
            for signum, handler in self._previous.items():
                try:
                    signal.signal(signum, handler)
                except (ValueError, OSError, TypeError):
                    pass
        self._previous.clear()

    # -- stopping -------------------------------------------------------------------------------

    def _deadline_reason(self) -> str:
        return "its deadline (runtime.deadline_seconds) was reached"

    def _on_signal(self, signum, frame) -> None:
        if aio.stopping() is None:
            self._first = signum
            self.stop(f"it received {signal.Signals(signum).name}")
            return
        if signum != self._first:
            # a Ctrl-C reaches a shard's inner run twice: from the terminal and from its outer run
            return
        # the same signal again: stop at once
        CHILDREN.kill()
        raise KeyboardInterrupt

    def stop(self, reason: str) -> None:
        """Stop gracefully (from any thread); only the first call acts."""
        if aio.stopping() is not None:
            return
        running = aio.cancel_running(reason)
        LOG.warning(f"stopping because {reason}: no new attempt starts, {running} running stage(s) are "
                    f"cancelled; run the same command again to continue.")
        self._quiet_console()
        CHILDREN.terminate()
        # inner runs get the grace to close their sessions, then they are killed
        self._timer(self.grace + 5, CHILDREN.kill)
        if self.workflow is None:
            return
        if engine.on_cluster(self.workflow):
            # Snakemake cancels its cluster jobs (scancel) when interrupted
            if threading.current_thread() is threading.main_thread():
                raise KeyboardInterrupt
            _thread.interrupt_main()
        else:
            engine.stop_scheduling(self.workflow)

    def _quiet_console(self) -> None:
        _quiet_console()

    def _timer(self, seconds: float, action) -> None:
        timer = threading.Timer(seconds, action)
        timer.daemon = True
        timer.start()
        self._timers.append(timer)

    def _watch_parent(self, parent: int) -> None:
        while not self._done.wait(0.5):
            if os.getppid() != parent:
                self.stop("the run that started this shard has ended")
                return
