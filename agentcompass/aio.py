"""Running a stage's coroutine from synchronous code."""

from __future__ import annotations

import asyncio
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
