"""The failure class of an attempt: decided from types, never from message text, and counted."""

from __future__ import annotations

import pytest

from agentcompass import results
from agentcompass.cli.status import failure_classes
from agentcompass.errors import ConfigError, InfrastructureError, ModelCallError
from agentcompass.harnesses.common import run_error
from agentcompass.runtime.base import (
    EnvironmentUnavailableError,
    ImageBuildError,
    SandboxConnectionError,
    SandboxDiedError,
    SandboxEndedFromInsideError,
)
from agentcompass.runtime.failures import classified, classify, failed
from agentcompass.runtime.models import (
    FailureClass,
    MetricResult,
    MetricStats,
    PreparedTask,
    RunResult,
    TaskInput,
    TaskStatus,
)
from agentcompass.runtime.models.codec import ContractError, from_dict

C = FailureClass


@pytest.mark.parametrize("exc, stage, cls", [
    (InfrastructureError("x"), "run", C.INFRASTRUCTURE),
    (EnvironmentUnavailableError("x"), "run", C.INFRASTRUCTURE),
    (ImageBuildError("x"), "run", C.INFRASTRUCTURE),
    (SandboxDiedError("x"), "run", C.INFRASTRUCTURE),
    (SandboxConnectionError("x"), "evaluate", C.INFRASTRUCTURE),  # the evaluation's sandbox: still infrastructure
    (SandboxEndedFromInsideError("x"), "run", C.HARNESS),  # what ran in it ended it
    (ModelCallError("x"), "run", C.ENDPOINT),
    (ModelCallError("judge"), "evaluate", C.ENDPOINT),
    (ValueError("x"), "run", C.HARNESS),
    (KeyError("x"), "run", C.HARNESS),
    (ValueError("x"), "evaluate", C.VERIFIER),
])
def test_each_error_type_has_its_class(exc, stage, cls):
    assert classify(exc, stage) is cls


@pytest.mark.parametrize("message", ["timeout", "timed out after 30 s", "HTTP 503 from the endpoint",
                                     "the sandbox died", "step limit reached", "verifier crashed"])
def test_message_text_never_changes_the_class(message):
    assert classify(InfrastructureError(message), "run") is C.INFRASTRUCTURE
    assert classify(ModelCallError(message), "run") is C.ENDPOINT
    assert classify(RuntimeError(message), "run") is C.HARNESS
    assert classify(RuntimeError(message), "evaluate") is C.VERIFIER


def test_an_endpoint_failure_records_the_http_status_of_its_last_reply():
    exc = ModelCallError("model call failed after 3 tries; last error: HTTP 503")
    exc.status = 503
    result = failed(RunResult(task_id="t", status=TaskStatus.RUN_ERROR, error="e"), exc, "run")
    assert result.failure_class is C.ENDPOINT and result.metadata["failure"] == {"class": "endpoint", "http_status": 503}
    prepared = PreparedTask(task_id="t", input=TaskInput(prompt="p"))
    caught = run_error(prepared, 1, exc, None, steps=2)
    assert caught.failure_class is C.ENDPOINT and caught.metadata == {
        "steps": 2, "failure": {"class": "endpoint", "http_status": 503}}
    assert failed(RunResult(task_id="t", status=TaskStatus.RUN_ERROR, error="e"), ModelCallError("no url"),
                  "run").metadata["failure"] == {"class": "endpoint"}


def test_a_failed_result_gets_exactly_one_class_and_a_completed_one_none():
    def result(status, **kw):
        return RunResult(task_id="t", status=status, error=None if status is TaskStatus.COMPLETED else "e", **kw)

    assert classified(result(TaskStatus.RUN_ERROR, error_stage="run"), "run").failure_class is C.HARNESS
    assert classified(result(TaskStatus.EVAL_ERROR, error_stage="evaluate"), "evaluate").failure_class is C.VERIFIER
    assert classified(result(TaskStatus.ERROR), "run").failure_class is C.HARNESS
    assert classified(result(TaskStatus.RUN_ERROR, error_stage="load"), "run").failure_class is C.TASK
    assert classified(result(TaskStatus.SKIPPED), "run").failure_class is C.TASK
    # a class the result names is kept
    assert classified(result(TaskStatus.RUN_ERROR, failure_class=C.LIMIT), "run").failure_class is C.LIMIT
    # a wrong answer is not a failure, even if something named a class
    wrong = result(TaskStatus.COMPLETED, correct=False, score=0.0, failure_class=C.HARNESS)
    assert classified(wrong, "evaluate").failure_class is None


def test_result_json_of_older_versions_loads_without_a_class_and_a_bad_one_is_refused():
    old = from_dict(RunResult, {"task_id": "t", "status": "run_error", "error": "boom"}, "result.json")
    assert old.failure_class is None
    assert from_dict(RunResult, {"task_id": "t", "status": "run_error", "error": "boom", "failure_class": "limit"},
                     "result.json").failure_class is C.LIMIT
    with pytest.raises(ContractError, match="failure_class must be one of"):
        from_dict(RunResult, {"task_id": "t", "status": "run_error", "error": "b", "failure_class": "oops"}, "r.json")


def row(status: str, failure_class: str | None = None, **kw) -> dict:
    base = {column: None for column in results.COLUMNS}
    return {**base, "task_id": "t", "attempt": 1, "status": status, "failure_class": failure_class,
            "error": None if status == "completed" else "e", **kw}


def test_the_summary_counts_attempts_by_class_in_the_taxonomys_order():
    table = [row("completed", correct=False), row("run_error", "limit"), row("run_error", "endpoint"),
             row("eval_error", "verifier"), row("run_error", "endpoint"),
             row("skipped", "task"),  # quarantined by preflight: counted like any other class
             row("run_error")]  # a result.json of an older version: no class to count
    stats = results.stats(table)
    assert stats["failures"] == {"endpoint": 2, "limit": 1, "verifier": 1, "task": 1}
    assert list(stats["failures"]) == ["endpoint", "limit", "verifier", "task"]
    assert MetricStats.from_dict(stats).failures == stats["failures"]


def test_metrics_json_of_older_versions_loads_and_bad_counts_are_refused():
    stats = results.stats([row("run_error", "harness")])
    old = {k: v for k, v in stats.items() if k != "failures"}
    assert MetricStats.from_dict(old).failures == {}
    metric = {"benchmark_id": "b", "metrics": {}, "counts": {"run_error": 1}, "num_tasks": 1, "num_attempts": 1,
              "summary": {"overall": old}}
    assert MetricResult.from_dict(metric).summary.overall.failures == {}
    with pytest.raises(ContractError, match="unknown classes"):
        MetricStats.from_dict({**stats, "failures": {"network": 1}})
    with pytest.raises(ContractError, match="more attempts than did not complete"):
        MetricStats.from_dict({**stats, "failures": {"harness": 2}})


def test_retry_only_reads_classes_and_names_the_valid_ones_for_an_unknown_one():
    assert failure_classes(None) is None
    assert failure_classes("infrastructure, endpoint") == {C.INFRASTRUCTURE, C.ENDPOINT}
    for bad in ("network", "endpoint,Endpoint", ",", "run_error"):
        with pytest.raises(ConfigError) as caught:
            failure_classes(bad)
        assert "infrastructure, endpoint, harness, limit, verifier, task" in str(caught.value)
