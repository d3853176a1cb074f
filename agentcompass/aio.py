"""Running a stage's coroutine from synchronous code, and ending the children it started."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
from typing import Any, Coroutine

_local = threading.local()


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


async def _contained(coro: Coroutine) -> Any:
    """Await ``coro``, then cancel what it left running, as ``asyncio.run`` does at its end."""
    try:
        return await coro
    finally:
        current = asyncio.current_task()
        leftovers = [task for task in asyncio.all_tasks() if task is not current]
        for task in leftovers:
            task.cancel()
        await asyncio.gather(*leftovers, return_exceptions=True)


def run_coroutine(coro: Coroutine) -> Any:
    """``asyncio.run`` that also works where an event loop already runs in this thread."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    stage_loop = getattr(_local, "stage_loop", None)
    if stage_loop is None:
        stage_loop = _local.stage_loop = _StageLoop()
    return stage_loop.run(coro)


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
