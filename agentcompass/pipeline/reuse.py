"""What each stage depends on: the views of a request and a plan that become rule params.

The reuse rule: a file is reused when it exists and every input file and
parameter it was computed from is unchanged. Snakemake applies it; this module
decides, stage by stage, what "computed from" means, so that a new temperature
reruns the harness but not preparation, and a new scoring setting reruns
evaluation but never calls the model.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any

from agentcompass.runtime.base import BaseBenchmark
from agentcompass.runtime.models import ExecutionPlan, RunRequest, TaskSpec

# A BenchmarkPlan field without a stage is read by prepare, evaluate and (harness-free) run.
_PLAN_STAGES = {"prepare": ("prepare", None), "run": ("run", None), "evaluate": ("evaluate", None)}


def digest(value: Any) -> str:
    """A short, stable fingerprint of a JSON value."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def field_stage(field: dataclasses.Field) -> str | None:
    return field.metadata.get("stage")


def benchmark_params_for(benchmark: BaseBenchmark, params: dict[str, Any], stages: tuple[str, ...]) -> dict[str, Any]:
    """The Benchmark params whose declared stage is one of ``stages`` (unmarked ones count as 'tasks')."""
    declared = {f.name: (field_stage(f) or "tasks") for f in dataclasses.fields(benchmark.config_class)}
    return {k: v for k, v in params.items() if declared.get(k, "tasks") in stages}


def _benchmark_plan_view(plan: ExecutionPlan, stage: str) -> dict[str, Any]:
    wanted = _PLAN_STAGES[stage]
    bplan = plan.benchmark_plan
    return {
        f.name: getattr(bplan, f.name)
        for f in dataclasses.fields(bplan)
        if field_stage(f) in wanted
    }


def _policy(policy) -> str | None:
    return policy.mode if policy else None


def plan_view(plan: ExecutionPlan, stage: str) -> dict[str, Any]:
    """The part of an attempt's plan that ``stage`` ('prepare', 'run', 'evaluate') reads."""
    view: dict[str, Any] = {
        "task_id": plan.task_id,
        "attempt": plan.attempt,
        "task_environment": {"id": plan.task_environment.id, "params": plan.task_environment.params},
    }
    if stage == "prepare":
        view["baseline_network"] = _policy(plan.baseline_network)
        view["benchmark_plan"] = _benchmark_plan_view(plan, "prepare")
    elif stage == "run":
        view["run_network"] = _policy(plan.run_network)
        view["evaluation_environment_mode"] = plan.evaluation_environment_mode
        view["harness_plan"] = plan.harness_plan.to_dict()
        view["execution"] = {"max_retries": plan.execution.max_retries, "task_timeout": plan.execution.task_timeout}
        if plan.harness_plan.harness_id == "none":  # a harness-free Benchmark's run_task reads its own plan
            view["benchmark_plan"] = _benchmark_plan_view(plan, "run")
    elif stage == "evaluate":
        view["evaluation_network"] = _policy(plan.evaluation_network)
        view["evaluation_environment_mode"] = plan.evaluation_environment_mode
        view["evaluation_environment"] = plan.evaluation_environment.to_dict() if plan.evaluation_environment else None
        view["benchmark_plan"] = _benchmark_plan_view(plan, "evaluate")
    else:
        raise ValueError(f"no plan view for stage {stage!r}")
    return view


def task_fingerprint(task: TaskSpec) -> str:
    data = task.to_dict()
    if data["load_error"] is None:
        # a task that loaded digests as it did before TaskSpec had load_error: its results stay current
        del data["load_error"]
    return digest(data)


def model_view(req: RunRequest) -> dict[str, Any]:
    """The Model as the run stage reads it: its prices are read by the metrics stage alone."""
    data = req.model.to_dict()
    data.pop("pricing")
    if not data["headers"]:
        data.pop("headers")  # a Model without headers keeps the identity it had before they existed
    return data


def request_record(req: RunRequest) -> dict[str, Any]:
    """The request as recorded in request.json's params: how fast is never a reason to rerun."""
    data = req.to_dict()
    data["execution"].pop("task_concurrency", None)
    return data
