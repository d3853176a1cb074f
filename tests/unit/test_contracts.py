"""Contract dataclasses: JSON round-trip, validation on construction, statuses."""

from __future__ import annotations

import dataclasses
import json

import pytest

from agentcompass.benchmarks.example_exact_match import ExampleExactMatchPlan
from agentcompass.runtime.models import (
    BenchmarkPlan,
    BenchmarkSpec,
    ContractError,
    EnvironmentSpec,
    ExecutionPlan,
    ExecutionSpec,
    HarnessPlan,
    HarnessSpec,
    MetricResult,
    MetricStats,
    MetricSummary,
    ModelPricing,
    ModelSpec,
    Spread,
    NetworkPolicy,
    OrchestratedRun,
    Orchestration,
    OrchestrationResult,
    OutputSpec,
    PreflightSpec,
    Quarantined,
    ScoredOn,
    PreparedTask,
    RequestOutcome,
    ResolvedRuntimeOptions,
    RunMetadata,
    RunRequest,
    RunResult,
    RunRuntimeSpec,
    ScanEvidence,
    ScanFinding,
    ScannerSpec,
    ScanRecord,
    TaskInput,
    TaskOutput,
    TaskSpec,
    TaskStatus,
)


# --- example instances ---------------------------------------------------------


def _model() -> ModelSpec:
    return ModelSpec(
        id="gpt-test",
        base_url="http://127.0.0.1:8000/v1",
        api_key="${OPENAI_API_KEY}",
        params={"temperature": 0.2, "max_tokens": 64, "stop": ["\n"]},
        key_wrapping=True,
    )


def _environment() -> EnvironmentSpec:
    return EnvironmentSpec(
        id="host_process",
        params={"workspace_root": None, "keep_workspace": False, "nested": {"a": [1, 2]}},
        baseline_network=NetworkPolicy(mode="public"),
        run_network=NetworkPolicy(mode="none"),
        evaluation_network=None,
        evaluation_environment_mode="fresh",
    )


def _execution() -> ExecutionSpec:
    return ExecutionSpec(
        task_concurrency=3,
        attempts=2,
        max_retries=1,
        task_timeout=12.5,
        enabled_recipes=["task_environment_hints"],
        analyzers=["results_table"],
        retain_environments="on_failure",
    )


def _request() -> RunRequest:
    return RunRequest(
        model=_model(),
        benchmark=BenchmarkSpec(id="example_exact_match", params={"limit": 2, "task_ids": ["a", "b"]}),
        harness=HarnessSpec(id="chat", params={"timeout": 5.0}),
        environment=_environment(),
        execution=_execution(),
        runtime=RunRuntimeSpec(reuse=False),
        output=OutputSpec(namespace="ns", run_id="run-1"),
        metadata=RunMetadata(request_name="req", config_paths=["/x/config.yaml"], recipe_dirs=["/r"]),
    )


def _plan(benchmark_plan: BenchmarkPlan | None = None) -> ExecutionPlan:
    env = _environment()
    return ExecutionPlan(
        task_id="HumanEval/0",
        attempt=2,
        benchmark_id="example_exact_match",
        task_environment=env,
        evaluation_environment=env.copy(),
        evaluation_environment_mode="fresh",
        baseline_network=NetworkPolicy(),
        run_network=NetworkPolicy(mode="none"),
        evaluation_network=NetworkPolicy(),
        benchmark_plan=benchmark_plan if benchmark_plan is not None else BenchmarkPlan(),
        harness_plan=HarnessPlan(harness_id="oracle", params={"k": [1, "two"]}),
        execution=_execution(),
        applied_recipes=["task_environment_hints", "other"],
    )


def _prepared() -> PreparedTask:
    return PreparedTask(
        task_id="t1",
        input=TaskInput(
            prompt="What?",
            system_prompt="Be brief.",
            media=[{"type": "image", "url": "file:///x.png"}],
            files=["a.txt"],
            workspace="/ws",
            tools=[{"name": "bash"}],
            messages=[{"role": "user", "content": "hi"}],
        ),
        output=TaskOutput(answer="Return one word.", files=["out.txt"]),
        category="geo",
        ground_truth=None,
        metadata={"dataset_revision": "v1"},
    )


def _result() -> RunResult:
    return RunResult(
        task_id="t1",
        attempt=2,
        status=TaskStatus.COMPLETED,
        answer="Paris",
        correct=True,
        score=1.0,
        ground_truth="Paris",
        artifacts=["trajectory.jsonl"],
        usage={"calls": 1.0, "prompt_tokens": 10.0},
        timings={"run": 0.25},
        retries_used=1,
        metadata={"k": {"nested": [1, None]}},
    )


SUMMARY = MetricSummary(
    overall=MetricStats(
        attempts=2, counts={"completed": 1, "run_error": 1}, errors={"run_error: boom": 1},
        accuracy=1.0, accuracy_ci95=[0.206543, 1.0], pass_at_k={"1": 0.5}, calls=3, prompt_tokens=30,
        completion_tokens=6, latency_seconds=Spread(mean=0.5, p50=0.5, p95=0.9),
        wall_seconds=Spread(mean=1, p50=1, p95=1.5), cost_usd=0.00012,
    ),
    by_category={"geo": MetricStats(
        attempts=1, counts={"completed": 1}, errors={}, accuracy=None, accuracy_ci95=None, pass_at_k={},
        calls=0, prompt_tokens=0, completion_tokens=0, latency_seconds=None, wall_seconds=None, cost_usd=None,
    )},
)

EXAMPLES = {
    # RunRequest and its eight sections
    "RunRequest": _request(),
    "RunRequest-minimal": RunRequest(
        model=ModelSpec(), benchmark=BenchmarkSpec(id="b"), harness=HarnessSpec(id="none")
    ),
    "ModelSpec": _model(),
    "ModelSpec-default": ModelSpec(),
    "BenchmarkSpec": BenchmarkSpec(id="example_exact_match", params={"case_sensitive": True}),
    "HarnessSpec": HarnessSpec(id="oracle", params={}),
    "EnvironmentSpec": _environment(),
    "EnvironmentSpec-default": EnvironmentSpec(),
    "ExecutionSpec": _execution(),
    "ExecutionSpec-default": ExecutionSpec(),
    "RunRuntimeSpec": RunRuntimeSpec(reuse=False),
    "OutputSpec": OutputSpec(namespace="my.ns", run_id="r_1"),
    "OutputSpec-default": OutputSpec(),
    "RunMetadata": RunMetadata(request_name="x", config_paths=["a", "b"], recipe_dirs=["c"]),
    # tasks and plans
    "TaskSpec": TaskSpec(
        task_id="HumanEval/0",
        question="q",
        category="c",
        ground_truth={"answer": [1, 2]},
        metadata={"environment": {"params": {"memory": "2g"}}},
        evaluation_environment_mode="task",
        baseline_network=NetworkPolicy(),
        run_network=NetworkPolicy(mode="none"),
        evaluation_network=None,
    ),
    "BenchmarkPlan": BenchmarkPlan(),
    "HarnessPlan": HarnessPlan(harness_id="chat", params={"timeout": 60.0}),
    "ExecutionPlan": _plan(),
    "ExecutionPlan-task-mode": dataclasses.replace(
        _plan(), evaluation_environment=None, evaluation_environment_mode="task", applied_recipes=[]
    ),
    "NetworkPolicy": NetworkPolicy(mode="none"),
    "PreparedTask": _prepared(),
    "TaskInput": TaskInput(prompt="p"),
    "TaskOutput": TaskOutput(answer=None, files=["x"]),
    # results
    "RunResult": _result(),
    "RunResult-error": RunResult(
        task_id="t", status=TaskStatus.RUN_ERROR, error="boom", error_stage="run"
    ),
    "RunResult-ambiguous-error": RunResult(task_id="t", status=TaskStatus.ERROR, error="x"),
    "RunResult-zero-score": RunResult(task_id="t", correct=False, score=0.0, answer=""),
    "MetricResult": MetricResult(
        benchmark_id="example_exact_match",
        metrics={"accuracy": 0.5, "mean_score": None},
        counts={"completed": 3, "run_error": 1},
        num_tasks=2,
        num_attempts=4,
        details={"per_category": {"geo": 1.0}},
    ),
    "MetricResult-summary": MetricResult(
        benchmark_id="example_exact_match", metrics={"accuracy": 0.5}, counts={"completed": 1, "run_error": 1},
        num_tasks=2, num_attempts=2, summary=SUMMARY,
    ),
    "MetricSummary": SUMMARY,
    "MetricStats": SUMMARY.overall,
    "Spread": SUMMARY.overall.latency_seconds,
    "ModelPricing": ModelPricing(input_per_million=2.5, output_per_million=10),
    # orchestration
    "ResolvedRuntimeOptions": ResolvedRuntimeOptions(
        results_dir="out",
        deadline_seconds=30.0,
        cleanup_grace_seconds=1.5,
        provider_limits={"docker": 2},
        environment_open_rate=0.5,
        progress=False,
        log_level="debug",
    ),
    "RequestOutcome": RequestOutcome(
        name="r", key="ns/r", state="stopped", counts={"completed": 1}, metrics={"accuracy": 1.0},
        results_dir="results/ns/r",
    ),
    "OrchestrationResult": OrchestrationResult(
        outcomes=[
            RequestOutcome(name="a", key="default/a", state="completed"),
            RequestOutcome(name="b", key="default/b", state="planned"),
        ]
    ),
    "PreflightSpec": PreflightSpec(mode="oracle", runs=3),
    "ScannerSpec": ScannerSpec(id="grader_access", params={"extra_paths": ["answers/"]}),
    "ScanEvidence": ScanEvidence(step=3, tool="bash", file="/tests/test.sh", quote="cat /tests/test.sh"),
    "ScanFinding": ScanFinding(id="network", version="1", flagged=False, category="network", confidence=0.0,
                               error="RuntimeError: no"),
    "ScanRecord": ScanRecord(task_id="t", attempt=2, flagged=True, scanners=[
        ScanFinding(id="grader_access", version="1", flagged=True, category="grader_access", confidence=0.8,
                    evidence=[ScanEvidence(step=3, tool="read_file", file="../solution/solve.sh", quote="…")])]),
    "Quarantined": Quarantined(task_id="../x", reason="preflight_failed", error=None),
    "ScoredOn": ScoredOn(tasks=3, scored=1, skipped=0, quarantined=[
        Quarantined(task_id="a", reason="preflight_failed", error="the reference script exited with status 1"),
        Quarantined(task_id="b", reason="preflight_flaky")]),
    "OrchestratedRun": OrchestratedRun(key="ns/run-1", index=0, name="req", request=_request()),
    "Orchestration": Orchestration(
        runs=[OrchestratedRun(key="ns/run-1", index=0, name="req", request=_request())],
        runtime=ResolvedRuntimeOptions(results_dir="elsewhere"),
    ),
}


def _json_round_trip(obj):
    return json.loads(json.dumps(obj.to_dict()))


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_contract_json_round_trip_equals_original(name):
    original = EXAMPLES[name]
    rebuilt = type(original).from_dict(_json_round_trip(original))
    assert type(rebuilt) is type(original)
    assert rebuilt == original
    # and the second trip is byte-identical
    assert json.dumps(rebuilt.to_dict(), sort_keys=True) == json.dumps(original.to_dict(), sort_keys=True)


def test_every_exported_contract_has_a_round_trip_example():
    from agentcompass.runtime import models

    contract_classes = {
        name
        for name in models.__all__
        if dataclasses.is_dataclass(getattr(models, name))
    }
    covered = {type(obj).__name__ for obj in EXAMPLES.values()}
    assert contract_classes - covered == set()


def test_execution_plan_round_trip_with_benchmark_plan_subclass():
    plan = _plan(ExampleExactMatchPlan(expected="Paris", case_sensitive=True, strip_whitespace=False))
    data = _json_round_trip(plan)
    assert data["benchmark_plan"] == {"expected": "Paris", "case_sensitive": True, "strip_whitespace": False, "prompt": ""}
    rebuilt = ExecutionPlan.from_dict(data, ExampleExactMatchPlan, HarnessPlan)
    assert isinstance(rebuilt.benchmark_plan, ExampleExactMatchPlan)
    assert rebuilt == plan


def test_execution_plan_from_dict_with_base_plan_class_rejects_subclass_fields():
    plan = _plan(ExampleExactMatchPlan(expected="Paris"))
    with pytest.raises(ContractError, match="expected"):
        ExecutionPlan.from_dict(_json_round_trip(plan))


def test_execution_plan_copy_is_deep():
    plan = _plan()
    clone = plan.copy()
    clone.task_environment.params["new"] = 1
    clone.applied_recipes.append("x")
    assert "new" not in plan.task_environment.params
    assert plan.applied_recipes == ["task_environment_hints", "other"]


def test_execution_plan_attempt_counts_from_one():
    with pytest.raises(ContractError, match="attempt"):
        dataclasses.replace(_plan(), attempt=0)


# --- validation on construction -----------------------------------------------


@pytest.mark.parametrize(
    "build",
    [
        pytest.param(lambda: ExecutionSpec(attempts="2"), id="ExecutionSpec(attempts='2')"),
        pytest.param(lambda: ExecutionSpec(attempts=0), id="ExecutionSpec(attempts=0)"),
        pytest.param(lambda: ExecutionSpec(attempts=True), id="ExecutionSpec(attempts=True)"),
        pytest.param(lambda: ExecutionSpec(attempts=2.0), id="ExecutionSpec(attempts=2.0)"),
        pytest.param(lambda: ExecutionSpec(task_concurrency=0), id="ExecutionSpec(task_concurrency=0)"),
        pytest.param(lambda: ExecutionSpec(max_retries=-1), id="ExecutionSpec(max_retries=-1)"),
        pytest.param(lambda: ExecutionSpec(task_timeout=0), id="ExecutionSpec(task_timeout=0)"),
        pytest.param(lambda: ExecutionSpec(task_timeout="5"), id="ExecutionSpec(task_timeout='5')"),
        pytest.param(lambda: ExecutionSpec(enabled_recipes="task_environment_hints"), id="ExecutionSpec(enabled_recipes='task_environment_hints')"),
        pytest.param(lambda: ExecutionSpec(enabled_recipes=[1]), id="ExecutionSpec(enabled_recipes=[1])"),
        pytest.param(lambda: ExecutionSpec(retain_environments="sometimes"), id="ExecutionSpec(retain_environments='sometimes')"),
        pytest.param(lambda: ModelSpec(api_key="sk-literal"), id="ModelSpec(api_key='sk-literal')"),
        pytest.param(lambda: ModelSpec(api_key="prefix-${OPENAI_API_KEY}"), id="ModelSpec(api_key='prefix-${OPENAI_API_KEY}')"),
        pytest.param(lambda: ModelSpec(id=""), id="ModelSpec(id='')"),
        pytest.param(lambda: ModelSpec(protocol="gemini"), id="ModelSpec(protocol='gemini')"),
        pytest.param(lambda: ModelSpec(protocol="anthropic", base_url="https://api.anthropic.com/v1/"),
                     id="ModelSpec(protocol='anthropic', base_url='.../v1/')"),
        pytest.param(lambda: ModelSpec(params=[]), id="ModelSpec(params=[])"),
        pytest.param(lambda: BenchmarkSpec(id=3), id="BenchmarkSpec(id=3)"),
        pytest.param(lambda: HarnessSpec(id="oracle", params="x"), id="HarnessSpec(id='oracle', params='x')"),
        pytest.param(lambda: EnvironmentSpec(run_network={"mode": "none"}), id="EnvironmentSpec(run_network={'mode': 'none'})"),
        pytest.param(lambda: EnvironmentSpec(evaluation_environment_mode="sometimes"), id="EnvironmentSpec(evaluation_environment_mode='sometimes')"),
        pytest.param(lambda: NetworkPolicy(mode="private"), id="NetworkPolicy(mode='private')"),
        pytest.param(lambda: OutputSpec(namespace="a/b"), id="OutputSpec(namespace='a/b')"),
        pytest.param(lambda: OutputSpec(namespace=".."), id="OutputSpec(namespace='..')"),
        pytest.param(lambda: OutputSpec(namespace=""), id="OutputSpec(namespace='')"),
        pytest.param(lambda: OutputSpec(run_id="-x"), id="OutputSpec(run_id='-x')"),
        pytest.param(lambda: OutputSpec(run_id="a b"), id="OutputSpec(run_id='a b')"),
        pytest.param(lambda: RunMetadata(config_paths="a"), id="RunMetadata(config_paths='a')"),
        pytest.param(lambda: RunRuntimeSpec(reuse="yes"), id="RunRuntimeSpec(reuse='yes')"),
        pytest.param(lambda: RunRequest(model={"id": "m"}, benchmark=BenchmarkSpec(id="b"), harness=HarnessSpec(id="h")), id="RunRequest(model={'id': 'm'}, benchmark=BenchmarkSpec(id='b'), harn..."),
        pytest.param(lambda: TaskSpec(task_id=""), id="TaskSpec(task_id='')"),
        pytest.param(lambda: TaskSpec(task_id="t", metadata={1: 2}), id="TaskSpec(task_id='t', metadata={1: 2})"),
        pytest.param(lambda: TaskInput(prompt=None), id="TaskInput(prompt=None)"),
        pytest.param(lambda: HarnessPlan(params=None), id="HarnessPlan(params=None)"),
        pytest.param(lambda: RunResult(task_id="t", status=TaskStatus.RUN_ERROR), id="RunResult(task_id='t', status=TaskStatus.RUN_ERROR)"),
        pytest.param(lambda: RunResult(task_id="t", status="eval_error", error=""), id="RunResult(task_id='t', status='eval_error', error='')"),
        pytest.param(lambda: RunResult(task_id="t", status=TaskStatus.ERROR), id="RunResult(task_id='t', status=TaskStatus.ERROR)"),
        pytest.param(lambda: RunResult(task_id="t", score="1"), id="RunResult(task_id='t', score='1')"),
        pytest.param(lambda: RunResult(task_id="t", status=5), id="RunResult(task_id='t', status=5)"),
        pytest.param(lambda: MetricResult(benchmark_id="b", metrics={}, counts={"completed": 2}, num_tasks=1, num_attempts=3), id="MetricResult(benchmark_id='b', metrics={}, counts={'completed': 2},..."),
        pytest.param(lambda: MetricResult(benchmark_id="b", metrics={}, counts={"finished": 1}, num_tasks=1, num_attempts=1), id="MetricResult(benchmark_id='b', metrics={}, counts={'finished': 1}, ..."),
        pytest.param(lambda: ModelPricing(input_per_million=-1, output_per_million=1), id="ModelPricing(input_per_million=-1, ...)"),
        pytest.param(lambda: ModelPricing(input_per_million=1, output_per_million=float("nan")), id="ModelPricing(output_per_million=nan)"),
        pytest.param(lambda: ModelSpec(id="m", pricing={"input_per_million": 1}), id="ModelSpec(pricing={'input_per_million': 1})"),
        pytest.param(lambda: MetricStats(attempts=2, counts={"completed": 1}, errors={}, accuracy=None, accuracy_ci95=None, pass_at_k={}, calls=0, prompt_tokens=0, completion_tokens=0, latency_seconds=None, wall_seconds=None, cost_usd=None), id="MetricStats(attempts=2, counts={'completed': 1}, ...)"),
        pytest.param(lambda: MetricStats(attempts=1, counts={"completed": 1}, errors={}, accuracy=None, accuracy_ci95=None, pass_at_k={}, calls=0, prompt_tokens=1.5, completion_tokens=0, latency_seconds=None, wall_seconds=None, cost_usd=None), id="MetricStats(prompt_tokens=1.5, ...)"),
        pytest.param(lambda: ResolvedRuntimeOptions(results_dir=""), id="ResolvedRuntimeOptions(results_dir='')"),
        pytest.param(lambda: ResolvedRuntimeOptions(log_level="trace"), id="ResolvedRuntimeOptions(log_level='trace')"),
        pytest.param(lambda: RequestOutcome(name="r", key="k", state="running"), id="RequestOutcome(name='r', key='k', state='running')"),
        pytest.param(lambda: OrchestrationResult(outcomes=[{"name": "r"}]), id="OrchestrationResult(outcomes=[{'name': 'r'}])"),
    ],
)
def test_invalid_contract_values_raise_contract_error_on_construction(build):
    with pytest.raises(ContractError):
        build()


def test_contract_error_names_the_class_and_field():
    with pytest.raises(ContractError, match=r"ExecutionSpec\.attempts"):
        ExecutionSpec(attempts="2")


def test_model_api_key_as_env_reference_is_accepted():
    model = ModelSpec(api_key="${OPENAI_API_KEY}")
    assert model.api_key == "${OPENAI_API_KEY}"
    assert model.api_key_env == "OPENAI_API_KEY"


def test_model_without_api_key_has_no_api_key_env():
    assert ModelSpec().api_key_env is None
    assert ModelSpec().is_none
    assert not ModelSpec(id="gpt").is_none


def test_literal_api_key_error_does_not_echo_the_key():
    with pytest.raises(ContractError) as info:
        ModelSpec(api_key="sk-verysecretvalue")
    assert "sk-verysecretvalue" not in str(info.value)


def test_output_spec_accepts_path_safe_names():
    spec = OutputSpec(namespace="a.b_c-1", run_id="R2")
    assert (spec.namespace, spec.run_id) == ("a.b_c-1", "R2")


def test_run_request_run_id_defaults_to_request_name():
    req = RunRequest(
        model=ModelSpec(), benchmark=BenchmarkSpec(id="b"), harness=HarnessSpec(id="h"),
        metadata=RunMetadata(request_name="my-req"),
    )
    assert req.run_id == "my-req"
    assert req.namespace == "default"
    req.output.run_id = "explicit"
    assert req.run_id == "explicit"


def test_metric_result_counts_summing_to_num_attempts_is_accepted():
    m = MetricResult(benchmark_id="b", metrics={"accuracy": None}, counts={"completed": 1, "skipped": 1},
                     num_tasks=2, num_attempts=2)
    assert m.num_attempts == 2


# --- statuses -------------------------------------------------------------------


def test_task_status_error_serializes_as_run_error_or_eval_error():
    assert TaskStatus.ERROR.value == "run_error_or_eval_error"
    result = RunResult(task_id="t", status=TaskStatus.ERROR, error="x")
    data = result.to_dict()
    assert data["status"] == "run_error_or_eval_error"
    assert json.loads(json.dumps(data))["status"] == "run_error_or_eval_error"


def test_run_result_status_string_becomes_task_status():
    result = RunResult(task_id="t", status="run_error_or_eval_error", error="x")
    assert result.status is TaskStatus.ERROR
    assert result.status.is_error


@pytest.mark.parametrize(
    "status, is_error",
    [
        (TaskStatus.COMPLETED, False),
        (TaskStatus.SKIPPED, False),
        (TaskStatus.RUN_ERROR, True),
        (TaskStatus.EVAL_ERROR, True),
        (TaskStatus.ERROR, True),
    ],
)
def test_task_status_is_error(status, is_error):
    assert status.is_error is is_error


def test_zero_score_completed_result_is_not_an_error():
    result = RunResult(task_id="t", status="completed", score=0.0, correct=False)
    assert result.status is TaskStatus.COMPLETED
    assert not result.status.is_error
    assert result.error is None
    assert RunResult.from_dict(result.to_dict()).score == 0.0


# --- from_dict -------------------------------------------------------------------


def test_from_dict_unknown_key_raises_contract_error_naming_the_key():
    data = _request().to_dict()
    data["bogus_field"] = 1
    with pytest.raises(ContractError, match="bogus_field"):
        RunRequest.from_dict(data)


def test_from_dict_unknown_nested_key_names_the_key_and_where():
    data = _request().to_dict()
    data["model"]["temprature"] = 0.1
    with pytest.raises(ContractError) as info:
        RunRequest.from_dict(data)
    assert "temprature" in str(info.value)
    assert "model" in str(info.value)


def test_from_dict_wrong_type_raises_contract_error_naming_the_field():
    data = ExecutionSpec().to_dict()
    data["attempts"] = "3"
    with pytest.raises(ContractError, match="attempts"):
        ExecutionSpec.from_dict(data)


def test_from_dict_unknown_status_raises_contract_error():
    data = _result().to_dict()
    data["status"] = "exploded"
    with pytest.raises(ContractError, match="status"):
        RunResult.from_dict(data)


def test_from_dict_missing_required_field_raises_contract_error():
    with pytest.raises(ContractError):
        BenchmarkSpec.from_dict({"params": {}})


def test_from_dict_rejects_non_mapping():
    with pytest.raises(ContractError):
        ModelSpec.from_dict(["id", "x"])


def test_from_dict_applies_construction_validation():
    with pytest.raises(ContractError):
        ModelSpec.from_dict({"api_key": "sk-literal"})
    with pytest.raises(ContractError):
        ExecutionSpec.from_dict({"attempts": 0})


def test_to_dict_rejects_values_that_are_not_json():
    result = RunResult(task_id="t", answer={1, 2})
    with pytest.raises(ContractError):
        result.to_dict()


# --- known bugs ------------------------------------------------------------------


def test_run_result_unknown_status_string_raises_contract_error():
    with pytest.raises(ContractError, match="status"):
        RunResult(task_id="t", status="exploded")


def test_metric_result_negative_counts_are_rejected():
    with pytest.raises(ContractError):
        MetricResult(benchmark_id="b", metrics={}, counts={"completed": 3, "run_error": -1},
                     num_tasks=1, num_attempts=2)


def test_run_result_attempt_counts_from_one():
    with pytest.raises(ContractError, match="attempt"):
        RunResult(task_id="t", attempt=0)


def test_int_in_float_field_serializes_identically_after_round_trip():
    result = RunResult(task_id="t", usage={"calls": 1})
    rebuilt = RunResult.from_dict(json.loads(json.dumps(result.to_dict())))
    assert json.dumps(rebuilt.to_dict(), sort_keys=True) == json.dumps(result.to_dict(), sort_keys=True)


@pytest.mark.parametrize("url", ["ftp://x", "localhost:8000", "not a url", ""])
def test_model_spec_base_url_must_be_an_http_url(url):
    with pytest.raises(ContractError, match="ModelSpec.base_url must be an http:// or https:// URL"):
        ModelSpec(id="m", base_url=url)
    assert ModelSpec(id="m", base_url="http://127.0.0.1:8000/v1").base_url == "http://127.0.0.1:8000/v1"
