"""The adaptive limit on model calls in flight per endpoint (``agentcompass.runtime.ratelimit``)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from agentcompass.runtime import ratelimit
from agentcompass.runtime.ratelimit import EndpointLimit

HOLDER = """
import sys, time
from agentcompass.runtime.ratelimit import EndpointLimit
limit = EndpointLimit(sys.argv[1], ceiling=1)
with limit.slot(timeout=0):
    print("held", flush=True)
    time.sleep(60)
"""


@pytest.fixture(autouse=True)
def no_window(monkeypatch):
    monkeypatch.setattr(ratelimit, "DECREASE_WINDOW", 0.0)


def hold(limit: EndpointLimit, count: int) -> list:
    """``count`` slots held (their context managers, entered)."""
    held = [limit.slot(timeout=0) for _ in range(count)]
    for slot in held:
        slot.__enter__()
    return held


def test_a_rejection_halves_the_calls_in_flight_and_never_goes_below_one(tmp_path: Path):
    limit = EndpointLimit(tmp_path, ceiling=16)
    assert limit.allowed() == 16
    held = hold(limit, 5)
    assert limit.in_flight() == 5
    assert limit.rejected() == 3.0  # half of the 6 in flight (the rejected one too), not of the ceiling
    for slot in held[2:]:
        slot.__exit__(None, None, None)
    assert limit.in_flight() == 2
    assert limit.rejected() == 1.5 and limit.rejected() == 1.0 and limit.rejected() == 1.0
    for slot in held[:2]:
        slot.__exit__(None, None, None)
    assert limit.in_flight() == 0
    assert [(line.allowed, line.in_flight, line.event) for line in limit.lines()] == [
        (3.0, 6, "lowered"), (1.5, 3, "lowered"), (1.0, 3, "lowered"), (1.0, 3, "lowered")]


def test_a_burst_of_rejections_within_the_window_lowers_it_once(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(ratelimit, "DECREASE_WINDOW", 30.0)
    limit = EndpointLimit(tmp_path, ceiling=8)
    held = hold(limit, 7)
    assert [limit.rejected() for _ in range(5)] == [4.0] * 5
    assert [line.event for line in limit.lines()] == ["lowered"] + ["rejected"] * 4
    for slot in held:
        slot.__exit__(None, None, None)


def test_answers_raise_it_back_to_its_ceiling_and_the_log_keeps_whole_steps(tmp_path: Path):
    limit = EndpointLimit(tmp_path, ceiling=4)
    limit.rejected()
    assert limit.allowed() == 1.0
    values = [limit.answered() for _ in range(12)]
    assert values[0] == 2.0 and values == sorted(values) and values[-1] == 4.0
    raised = [line for line in limit.lines() if line.event == "raised"]
    assert [int(line.allowed) for line in raised] == [2, 3, 4]


def test_a_slot_is_taken_only_below_the_allowed_number(tmp_path: Path):
    limit = EndpointLimit(tmp_path, ceiling=2)
    held = hold(limit, 2)
    started = time.monotonic()
    with limit.slot(timeout=0.3):  # none free: it waits its timeout, then goes anyway
        assert time.monotonic() - started >= 0.3
    held[0].__exit__(None, None, None)
    freed = threading.Timer(0.3, held[1].__exit__, (None, None, None))
    limit.rejected()  # allowed 1: only slot 0 may be taken, and slot 1 is still held
    freed.start()

    async def take() -> float:
        async with limit.slot_async(timeout=10):
            return time.monotonic()

    started = time.monotonic()
    assert asyncio.run(take()) - started < 5
    freed.join()


def test_a_killed_process_frees_its_slot_and_processes_share_one_limit(tmp_path: Path):
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        limit = EndpointLimit(tmp_path, ceiling=1)
        assert limit.in_flight() == 1
        assert limit._try_slot() is None, "the other process holds the one slot"
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(timeout=10)
        assert limit.in_flight() == 0
        fd = limit._try_slot()
        assert fd is not None
        os.close(fd)
    finally:
        holder.kill()
        holder.wait()
    # a rejection seen by one process lowers the number every other one reads
    mine, theirs = EndpointLimit(tmp_path / "e"), EndpointLimit(tmp_path / "e")
    subprocess.run([sys.executable, "-c", "import sys\nfrom agentcompass.runtime.ratelimit import EndpointLimit\n"
                    "EndpointLimit(sys.argv[1]).rejected()", str(tmp_path / "e")], check=True, timeout=60)
    assert mine.allowed() == theirs.allowed() == 1.0


def test_unconfigured_limits_live_in_a_folder_of_the_process_and_a_run_shares_its_own(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(ratelimit, "_folder", None)
    private = ratelimit.limit_of("http://user:secret@127.0.0.1:8000/v1?key=k")
    assert private.folder.parent != tmp_path / ratelimit.RUN_FOLDER
    assert "secret" not in str(private.folder) and "key" not in private.folder.name
    assert private.folder.name == "model_endpoint_127_0_0_1_8000_v1"
    ratelimit.configure(tmp_path)
    shared = ratelimit.limit_of("http://127.0.0.1:8000/v1")
    assert shared.folder == (tmp_path / ratelimit.RUN_FOLDER / private.folder.name).absolute()
    monkeypatch.setattr(ratelimit, "_folder", None)
