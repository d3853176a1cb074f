"""Running a stage's coroutine from synchronous code, cancelling them all at a stop, and ending the children they started."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import os
import signal
import threading
from typing import Any, Coroutine

from agentcompass.errors import DeadlineError

_local = threading.local()


class Stopped(BaseException):
    """The run is stopping (Ctrl-C, SIGTERM, its deadline): this stage was cancelled, nothing was written.

    A BaseException, like KeyboardInterrupt: a stage's ``except Exception`` turns an
    agent's failure into a status, and a cancelled attempt must not become one.
    It is run again by the next run.
    """


class _Running:
    """The stage coroutines running in this process, to cancel them all when the run stops."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tasks: dict[asyncio.Task, asyncio.AbstractEventLoop] = {}
        self.reason: str | None = None

    def add(self, task: asyncio.Task, loop: asyncio.AbstractEventLoop) -> None:
        with self._lock:
            self._tasks[task] = loop
        if self.reason is not None:  # the stop came first: start cancelled
            loop.call_soon_threadsafe(task.cancel)

    def discard(self, task: asyncio.Task) -> None:
        with self._lock:
            self._tasks.pop(task, None)

    def cancel_all(self, reason: str) -> int:
        with self._lock:
            if self.reason is None:
                self.reason = reason
            tasks = list(self._tasks.items())
        for task, loop in tasks:
            try:
                loop.call_soon_threadsafe(task.cancel)
            except RuntimeError:  # its loop is closed: the task is over
                pass
        return len(tasks)


RUNNING = _Running()


def cancel_running(reason: str) -> int:
    """Cancel every stage coroutine running in this process, and those started after; how many ran."""
    return RUNNING.cancel_all(reason)


def reset() -> None:
    """A new run in this process: forget the last one's stop."""
    RUNNING.reason = None


def stopping() -> str | None:
    """Why the run is stopping, or None."""
    return RUNNING.reason


class _StageLoop:
    """An event loop in a thread of its own, serving the one thread that created it.

    Snakemake runs ``run:`` jobs inside an event loop of its worker thread, so a
    stage's coroutine needs another thread's loop. Each worker keeps one such
    loop for all its jobs: starting a thread and a loop for every stage call
    cost about 3 ms an attempt.
    """

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="agentcompass-stage-loop", daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine) -> Any:
        return asyncio.run_coroutine_threadsafe(_contained(coro), self.loop).result()


class _ThreadLoop:
    """The event loop of a thread that runs stages where no loop runs, closed with the thread."""

    def __init__(self) -> None:
        self.runner = asyncio.Runner()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.runner.close()


async def _contained(coro: Coroutine) -> Any:
    """Await ``coro`` as a cancellable stage, then cancel what it left running, as ``asyncio.run`` does."""
    current = asyncio.current_task()
    assert current is not None  # run as a task by run_coroutine_threadsafe
    RUNNING.add(current, asyncio.get_running_loop())
    try:
        return await coro
    except asyncio.CancelledError:
        if RUNNING.reason is not None:
            raise Stopped(RUNNING.reason) from None
        raise
    finally:
        RUNNING.discard(current)
        leftovers = [task for task in asyncio.all_tasks() if task is not current]
        for task in leftovers:
            task.cancel()
        await asyncio.gather(*leftovers, return_exceptions=True)


def run_coroutine(coro: Coroutine) -> Any:
    """``asyncio.run`` that also works where an event loop already runs in this thread, on one
    loop per thread for all its calls.

    Raises ``Stopped`` when the run stops while the coroutine runs (or before it starts).
    """
    if RUNNING.reason is not None:
        coro.close()
        raise Stopped(RUNNING.reason)
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        # this thread's own loop, kept for its next stage: a loop made and closed per call
        # (``asyncio.run``) cost a third of a stage's own time
        loop = getattr(_local, "loop", None)
        if loop is None:
            loop = _local.loop = _ThreadLoop()
        # in a copy of the caller's context, as asyncio.run: what one stage sets, the next never sees
        return loop.runner.run(_contained(coro), context=contextvars.copy_context())
    stage_loop = getattr(_local, "stage_loop", None)
    if stage_loop is None:
        stage_loop = _local.stage_loop = _StageLoop()
    return stage_loop.run(coro)


@contextlib.asynccontextmanager
async def deadline(seconds: float, what: str):
    """The body within ``seconds``: past them it is cancelled and ``DeadlineError(what, seconds)`` raised
    (a ``TimeoutError`` of the body's own leaves as it is)."""
    scope = asyncio.timeout(seconds)
    try:
        async with scope:
            yield
    except TimeoutError:
        if scope.expired():
            raise DeadlineError(what, seconds) from None
        raise


def child_running(proc: asyncio.subprocess.Process) -> bool:
    """Whether a child that asyncio started still runs, found without reaping it."""
    if proc.returncode is not None:
        return False
    try:
        # WNOWAIT: only a look; the child stays for asyncio's child watcher to reap
        return os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None
    except ChildProcessError:
        return False  # the watcher has reaped it: its status is on its way to ``proc``


def kill_child(proc: asyncio.subprocess.Process) -> None:
    """SIGKILL a child that asyncio started, leaving its exit status to asyncio.

    Not ``proc.kill()``: that first polls the child with ``waitpid``, and a child
    that has exited but that asyncio's child watcher has not collected yet is
    reaped by the poll; the watcher, finding no child, then logs "Unknown child
    process pid N" and reports 255 as its exit status.
    """
    if child_running(proc):
        try:
            os.kill(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
