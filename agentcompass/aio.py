"""Running a stage's coroutine from synchronous code."""

from __future__ import annotations

import asyncio
import concurrent.futures
from typing import Any, Coroutine


def run_coroutine(coro: Coroutine) -> Any:
    """``asyncio.run`` that also works where an event loop already runs in this thread.

    Snakemake executes ``run:`` jobs inside an event loop of its worker thread, so
    the stage's own loop gets a thread of its own there.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result()
