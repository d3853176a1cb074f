"""run_coroutine: a stage's coroutine run from a thread whose own event loop is busy (Snakemake's worker)."""

from __future__ import annotations

import asyncio
import threading

import pytest

from agentcompass._util.aio import run_coroutine


def in_running_loop(fn):
    """Call ``fn`` synchronously from inside a running event loop, as a Snakemake run: job is called."""

    async def main():
        return fn()

    return asyncio.run(main())


def test_runs_the_coroutine_and_returns_its_value_outside_and_inside_a_running_loop():
    async def answer():
        await asyncio.sleep(0)
        return 42

    assert run_coroutine(answer()) == 42
    assert in_running_loop(lambda: run_coroutine(answer())) == 42


def test_exceptions_reach_the_caller():
    async def fails():
        raise ValueError("stage failed")

    with pytest.raises(ValueError, match="stage failed"):
        in_running_loop(lambda: run_coroutine(fails()))


def test_a_thread_reuses_its_stage_loop_and_tasks_left_running_are_cancelled():
    seen = []
    cancelled = threading.Event()

    async def leaves_a_task():
        async def forever():
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                cancelled.set()
                raise

        asyncio.get_running_loop().create_task(forever())
        await asyncio.sleep(0)
        seen.append((threading.get_ident(), id(asyncio.get_running_loop())))

    def twice():
        run_coroutine(leaves_a_task())
        assert cancelled.wait(5)
        run_coroutine(leaves_a_task())

    in_running_loop(twice)
    assert len(seen) == 2 and seen[0] == seen[1]  # the same loop thread served both calls
    assert seen[0][0] != threading.get_ident()


def test_outside_a_running_loop_a_thread_keeps_one_loop_and_each_call_its_own_context():
    import contextvars

    seen = contextvars.ContextVar("seen", default="unset")
    left: list[asyncio.Task] = []

    async def first():
        seen.set("first")
        left.append(asyncio.ensure_future(asyncio.sleep(3600)))  # left running: cancelled at the end
        return asyncio.get_running_loop()

    async def second():
        return asyncio.get_running_loop(), seen.get()

    def calls():
        loop = run_coroutine(first())
        again, value = run_coroutine(second())
        return loop, again, value

    results: list = []
    worker = threading.Thread(target=lambda: results.append(calls()))
    worker.start()
    worker.join()
    loop, again, value = results[0]
    assert loop is again  # one loop for both calls
    assert value == "unset"  # what the first call set, the second never sees
    assert left[0].cancelled()
    assert seen.get() == "unset"  # nor does the caller
