"""The bodies of the request's stages (scope ``request``): request.json, tasks.json, and plans.json
with run_info.json."""

from __future__ import annotations

import dataclasses
import os
import platform
from pathlib import Path
from typing import Iterator

import snakemake

import agentcompass
from agentcompass import layout
from agentcompass._util.display import visible
from agentcompass._util.jsonio import not_unicode
from agentcompass.layout import task_segment
from agentcompass.runtime.models import ExecutionPlan, RunRequest, TaskSpec
from agentcompass.runtime.models.codec import from_dict
from agentcompass.runtime.planner import Planner
from agentcompass.runtime.recipes import build_run_recipe_registry
from agentcompass.stages import stage

from .. import engine, forkserver, plan_index, reading
from ..files import ComponentVersion, RunInfo, TasksFile
from ..jobs import RequestJob
from ..reading import benchmark_for, environment_for, harness_for


def write_request(job: RequestJob) -> None:
    """request.json: the request as it is run."""
    # the cache mode is what is paid, never what a file holds (a rerun with another mode rebuilds nothing)
    job.write("request", dataclasses.replace(job.request, execution=dataclasses.replace(job.request.execution,
                                                                                          cache=None)))


def write_tasks(job: RequestJob) -> None:
    """tasks.json; the shards' fork server starts while the plans are made, if the request is sharded."""
    req = job.request
    tasks = task_list(req)
    job.write("tasks", TasksFile(req.metadata.request_name, req.benchmark.id, tasks))
    services = job.services
    if services is not None and services.targets.shards_for(len(tasks) * req.execution.attempts):
        workflow = services.snakemake
        if workflow is not None and engine.is_main_process(workflow) and not engine.on_cluster(workflow):
            forkserver.start()  # the shards' inner runs fork from it: it imports while the plans are made


def write_plans(job: RequestJob) -> None:
    """plans.json and run_info.json, from the plans in hand: one job, so run_info.json never lags its plans."""
    req = job.request
    shard_size = job.services.runtime.shard_size if job.services is not None else 0
    # plans.json is streamed, one plan at a time, as job.write would write it (``plan_index.write_plans``)
    view = plan_list(req, job.inputs["tasks"], job.outputs["plans"], shard_size=shard_size)
    job.write("run_info", run_info(req, view))
    # every attempt's folder: a shard's generation compares their times with its record
    for segment in reading.task_segments(job.inputs["tasks"]):
        for attempt in range(1, req.execution.attempts + 1):
            os.makedirs(layout.attempt_folder(job.run, segment, attempt), exist_ok=True)


def task_list(req: RunRequest) -> list[TaskSpec]:
    """The request's selected TaskSpecs, as tasks.json holds them: each id a path segment of its own,
    each text valid Unicode."""
    benchmark = benchmark_for(req)
    tasks = benchmark.select_tasks(benchmark.load_tasks(req), req)
    seen: dict[str, str] = {}
    for task in tasks:
        segment = task_segment(task.task_id)
        if segment in seen:
            raise ValueError(
                f"benchmark {req.benchmark.id!r}: task ids {seen[segment]!r} and {task.task_id!r} "
                "are duplicates (or map to the same path); task ids must be unique"
            )
        seen[segment] = task.task_id
        bad = not_unicode(task.to_dict())
        if bad is not None:  # every file is UTF-8: such a task could be written nowhere
            raise ValueError(
                f"benchmark {req.benchmark.id!r}: task {visible(task.task_id)!r}: its field "
                f"{visible('.'.join(map(str, bad)))!r} holds text that is not valid Unicode (a lone surrogate, "
                "e.g. from a \\ud800 escape or a byte that is not UTF-8); correct the task data"
            )
    return tasks


def plan_list(req: RunRequest, tasks_path: str | Path, out: str | Path, *, shard_size: int = 0) -> dict[str, dict]:
    """Write the plans of every semantic attempt of every task to ``out``, each made by its own
    ``Planner.plan`` and written as it is made, and the plans' index beside it (``plan_index``: with
    each slice's digest, for slices of ``shard_size``). Returns what run_info.json keeps of them."""
    harness = harness_for(req)
    planner = Planner(
        benchmark_for(req), harness, build_run_recipe_registry(req), environment_for(req.environment.id)
    )
    raw = reading.raw_tasks(tasks_path)
    view: dict[str, dict] = {}

    def plans() -> Iterator[ExecutionPlan]:
        for data in raw.values():  # decoded one at a time: a request's tasks are never all held as TaskSpecs
            task = from_dict(TaskSpec, data, "tasks.json task")
            for attempt in range(1, req.execution.attempts + 1):
                plan = planner.plan(req, task, attempt)
                view.setdefault(plan.task_id, {"attempts": {}})["attempts"][str(plan.attempt)] = plan.audit_view()
                yield plan

    plan_index.write_plans(out, stage(layout.PLAN_LIST).kind("plans"), req.metadata.request_name, plans(),
                           tasks_path=tasks_path, raw_tasks=raw, shard_size=shard_size)
    return view


def run_info(req: RunRequest, view: dict[str, dict]) -> RunInfo:
    """run_info.json: provenance, and ``view``, each plan's audit view by task id and attempt."""
    harness = harness_for(req)
    environment = environment_for(req.environment.id)
    benchmark = benchmark_for(req)
    info = RunInfo(
        request_name=req.metadata.request_name,
        namespace=req.namespace,
        run_id=req.run_id,
        benchmark=ComponentVersion(benchmark.id, benchmark.version),
        harness=ComponentVersion(req.harness.id, harness.version if harness else "none"),
        environment=ComponentVersion(environment.id, environment.version),
        model_id=req.model.id,
        versions={
            "agentcompass": agentcompass.__version__,
            "snakemake": snakemake.__version__,
            "python": platform.python_version(),
        },
        config_paths=list(req.metadata.config_paths),
        num_tasks=len(view),
        num_attempts=sum(len(task["attempts"]) for task in view.values()),
        resolved_execution_plans=view,
    )
    return info
