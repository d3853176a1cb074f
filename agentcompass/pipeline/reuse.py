"""The views of a request, a task and a plan that the stages' fingerprints are made of.

The reuse rule: a file is reused when it exists and every input file and
parameter it was computed from is unchanged. Snakemake applies it; each
stage's fingerprint (``fingerprints``) says what "computed from" means for
it, from these views, so that a new temperature reruns the harness but not
preparation, and a new scoring setting reruns evaluation but never calls the
model.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any

from agentcompass.runtime.base import BaseBenchmark
from agentcompass.runtime.models import RunRequest, TaskSpec
from agentcompass.stages import PARAM_STAGES

# an unmarked Benchmark parameter is read from the first stage that reads parameters on: a change reruns all
FIRST_READER = PARAM_STAGES[0]

def digest(value: Any) -> str:
    """A short, stable fingerprint of a JSON value."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def field_stage(field: dataclasses.Field) -> str | None:
    return field.metadata.get("stage")


def benchmark_params_for(benchmark: BaseBenchmark, params: dict[str, Any], stages: tuple[str, ...]) -> dict[str, Any]:
    """The Benchmark params whose declared stage is one of ``stages`` (unmarked ones count as 'tasks')."""
    declared = {f.name: (field_stage(f) or FIRST_READER) for f in dataclasses.fields(benchmark.config_class)}
    return {k: v for k, v in params.items() if declared.get(k, FIRST_READER) in stages}


def task_fingerprint(task: TaskSpec) -> str:
    data = task.to_dict()
    if data["load_error"] is None:
        # a task that loaded digests as it did before TaskSpec had load_error: its results stay current
        del data["load_error"]
    return digest(data)


def model_view(req: RunRequest) -> dict[str, Any]:
    """The Model as the run stage reads it: its prices are read by the metrics stage alone, unless a limit
    of the attempt's cost (execution.limits.cost_usd) reads them too."""
    data = req.model.to_dict()
    limits = req.execution.limits
    if limits is None or limits.cost_usd is None:
        data.pop("pricing")
    if not data["headers"]:
        data.pop("headers")  # a Model without headers keeps the identity it had before they existed
    return data


def request_record(req: RunRequest) -> dict[str, Any]:
    """The request as recorded in request.json's params: how fast is never a reason to rerun."""
    data = req.to_dict()
    data["execution"].pop("task_concurrency", None)
    data["execution"].pop("cache", None)  # what is paid, never what a file holds
    data["execution"].pop("budget", None)  # the same
    if data["execution"].get("preflight", 1) is None:
        del data["execution"]["preflight"]  # a request without preflight keeps the identity it had before it existed
    return data
