"""The request's files as the stages read them: tasks.json and plans.json, decoded once each
object a job uses (cached by path, modification time and size), and the request's components.
A plan is read from plans.json at its place alone, through the file's index (``plan_index``)."""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

from agentcompass._util.jsonio import read_json
from agentcompass.layout import task_segment
from agentcompass.runtime.base import BaseBenchmark, BaseHarness
from agentcompass.runtime.models import ExecutionPlan, HarnessPlan, RunRequest, RunResult, TaskSpec
from agentcompass.runtime.models.codec import from_dict
from agentcompass.runtime.registry import BENCHMARKS, ENVIRONMENTS, HARNESSES

from . import plan_index

# --- components ---------------------------------------------------------------


def benchmark_for(req: RunRequest) -> BaseBenchmark:
    return BENCHMARKS.get(req.benchmark.id)()


def harness_for(req: RunRequest) -> BaseHarness | None:
    return None if req.harness.is_none else HARNESSES.get(req.harness.id)()


def environment_for(env_id: str):
    return ENVIRONMENTS.get(env_id)()


# --- reading files (cached by path and modification) -------------------------------


def file_stamp(path: str | Path) -> tuple[str, int, int]:
    """Path, modification time and size: a file version, for caches."""
    st = os.stat(path)
    return str(path), st.st_mtime_ns, st.st_size


@functools.lru_cache(maxsize=64)
def _raw_tasks(stamp: tuple) -> dict[str, dict]:
    """tasks.json's task objects by path segment, in order, not yet decoded."""
    return {task_segment(t["task_id"]): t for t in read_json(stamp[0])["tasks"]}


@functools.lru_cache(maxsize=64)
def _tasks_cached(stamp: tuple) -> list[TaskSpec]:
    return [from_dict(TaskSpec, t, "tasks.json task") for t in _raw_tasks(stamp).values()]


def read_tasks(path: str | Path) -> list[TaskSpec]:
    return _tasks_cached(file_stamp(path))


def task_segments(path: str | Path) -> list[str]:
    """The path segment of every task, in order, without decoding the tasks."""
    return list(_raw_tasks(file_stamp(path)))


# Decoding is the expensive part of reading a large file: a job (or the slice of
# a shard) decodes the objects it uses, once each.
_decoded: dict[tuple, Any] = {}


def _decode_once(key: tuple, decode):
    value = _decoded.get(key)
    if value is None:
        if len(_decoded) > 200_000:
            _decoded.clear()
        value = _decoded[key] = decode()
    return value


def task_by_segment(path: str | Path, segment: str) -> TaskSpec:
    stamp = file_stamp(path)
    raw = _raw_tasks(stamp).get(segment)
    if raw is None:
        raise KeyError(f"no task with path segment {segment!r} in {path}")
    return _decode_once(("task", stamp, segment), lambda: from_dict(TaskSpec, raw, "tasks.json task"))


def raw_tasks(path: str | Path) -> dict[str, dict]:
    return _raw_tasks(file_stamp(path))


def plan_keys(plans_path: str | Path) -> list[tuple[str, int]]:
    """(task segment, attempt) of every plan, in plans.json's order (from its index: no plan is parsed)."""
    return plan_index.load(plans_path).keys


def plan_for(req: RunRequest, plans_path: str | Path, segment: str, attempt: int) -> ExecutionPlan:
    return plans_for(req, plans_path, [(segment, attempt)])[(segment, attempt)]


def plans_for(req: RunRequest, plans_path: str | Path, keys) -> dict[tuple[str, int], ExecutionPlan]:
    """The plans of ``keys`` (each a (task segment, attempt)), decoded once each: plans.json is read
    at their places only (``plan_index``), so a shard's slice costs what the slice holds."""
    stamp = file_stamp(plans_path)
    bcls, hcls = plan_classes(req)
    plans = {key: _decoded.get(("plan", stamp, bcls, hcls, *key)) for key in keys}
    missing = [key for key, plan in plans.items() if plan is None]
    if missing:
        raw = plan_index.read_plans(plans_path, missing)
        for key in missing:
            plans[key] = _decode_once(("plan", stamp, bcls, hcls, *key),
                                      functools.partial(ExecutionPlan.from_dict, raw[key], bcls, hcls))
    return plans  # type: ignore[return-value]


def plan_classes(req: RunRequest) -> tuple[type, type]:
    harness = harness_for(req)
    return benchmark_for(req).plan_class, (harness.plan_class if harness else HarnessPlan)


def read_result(path: str | Path) -> RunResult:
    return from_dict(RunResult, read_json(path), str(path))
