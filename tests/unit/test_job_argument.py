"""A body's one argument (``pipeline.jobs``): made from its scope's row, and its one writer, ``job.write``."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from agentcompass._util.jsonio import canonical_json, publishing
from agentcompass import stages
from agentcompass.pipeline.files import FileSchemaError
from agentcompass.pipeline.jobs import AttemptJob, RequestJob, ShardJob, TaskJob
from agentcompass.runtime.models import BenchmarkSpec, HarnessSpec, ModelSpec, RunRequest
from agentcompass.stages import ATTEMPT, SCOPE_ROWS, Output, Stage, resolve


def request() -> RunRequest:
    return RunRequest(model=ModelSpec(), benchmark=BenchmarkSpec("example_exact_match"), harness=HarnessSpec("chat"))


def test_every_scope_names_a_job_class_made_from_its_wildcards():
    services = SimpleNamespace(targets=SimpleNamespace(bulk_files=lambda req: ("run/tasks.json", "run/plans.json")))
    wildcards = {"task": "t1", "attempt": "2", "shard": "3"}
    made = {}
    for row in SCOPE_ROWS:
        job_class = resolve(row.job)
        assert issubclass(job_class, RequestJob), row.name
        job = job_class.of_rule(request(), "run", {}, {"out": "run/x/out.json"}, services, "s",
                                {name: wildcards[name] for name in row.wildcards}, threads=4, log=["run/x/s.log"])
        made[row.name] = job
        assert (job.run, job.stage, job.services, job.outputs) == ("run", "s", services, {"out": "run/x/out.json"})
    attempt = made[ATTEMPT]
    assert (attempt.segment, attempt.attempt, attempt.folder) == ("t1", 2, "run/x")
    assert (attempt.tasks_file, attempt.plans_file) == ("run/tasks.json", "run/plans.json")
    task = made[stages.TASK]
    assert isinstance(task, TaskJob) and (task.segment, task.plans_file) == ("t1", "run/plans.json")
    shard = made[stages.SHARD]
    assert isinstance(shard, ShardJob) and (shard.index, shard.threads, shard.log) == (3, 4, "run/x/s.log")


def test_without_snakemake_a_job_has_no_services_and_the_default_runtime():
    job = RequestJob(request(), "run", {}, {}, None, "request")
    assert job.services is None and job.runtime.shard_size > 0


@pytest.fixture
def usage_stage(monkeypatch):
    """A stage whose file has no contract, as the guide's usage stage."""
    s = Stage("usage", ATTEMPT, "usage.json", outputs=(Output("usage", "usage.json"),))
    monkeypatch.setitem(stages.BY_NAME, s.name, s)
    return s


def test_write_of_a_file_without_a_contract_is_canonical_atomic_json_recorded_as_built(tmp_path, usage_stage):
    out = tmp_path / "usage.json"
    job = AttemptJob(request(), str(tmp_path), {}, {"usage": str(out)}, None, usage_stage.name)
    recorded: list[Path] = []
    with publishing(recorded.append):
        job.write("usage", {"b": 1, "a": [1, 2]})
    assert out.read_text() == canonical_json({"a": [1, 2], "b": 1})
    assert [Path(p) for p in recorded] == [out]
    assert not [p for p in tmp_path.iterdir() if p != out]  # no temporary file left


def test_write_of_a_contracts_file_is_checked_against_its_schema(tmp_path):
    out = tmp_path / "tasks.json"
    job = RequestJob(request(), str(tmp_path), {}, {"tasks": str(out)}, None, "tasks")
    with pytest.raises(FileSchemaError):
        job.write("tasks", {"not": "a tasks file"})
    assert not out.exists()
    job.write("tasks", {"request_name": "r", "benchmark_id": "b", "tasks": []})
    assert json.loads(out.read_text())["request_name"] == "r"
