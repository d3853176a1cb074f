"""The preflight stage's config check, its fingerprint and its files' paths (without Snakemake)."""

from __future__ import annotations


import pytest

from agentcompass import layout
from agentcompass.benchmarks.example_exact_match import ExampleExactMatchBenchmark
from agentcompass.pipeline import reading, reuse
from agentcompass.pipeline.fingerprints import AttemptView, component_versions, run_param
from agentcompass.pipeline.preflight import preflight_param
from agentcompass.results import left_out, scored_on
from agentcompass.plugins import load_components
from agentcompass.runtime.base import BaseBenchmark
from agentcompass.runtime.config import ConfigError, load_run_config
from agentcompass.runtime.orchestration import resolve_orchestration
from agentcompass.runtime.planner import Planner
from agentcompass.runtime.recipes import build_run_recipe_registry
from agentcompass.runtime.registry import BENCHMARKS
from agentcompass.stages import stage

load_components()


class NoReference(ExampleExactMatchBenchmark):
    """example_exact_match without a reference solution, as a Benchmark that never wrote one."""

    id = "test_no_reference"
    reference_solution = BaseBenchmark.reference_solution  # type: ignore[assignment]


@pytest.fixture
def no_reference():
    """NoReference registered for one test, then removed (other tests list the registry)."""
    BENCHMARKS.register()(NoReference)
    yield NoReference.id
    BENCHMARKS._items.pop(NoReference.id)


def request(benchmark="example_exact_match", harness="chat", model="m", **execution):
    config = load_run_config([], {"requests": {"r": {
        "benchmark": benchmark, "harness": harness,
        "model": {"id": model, "base_url": "http://127.0.0.1:9/v1"} if model != "none" else {"id": "none"},
        "execution": execution}}}, include_user=False, include_project=False)
    return resolve_orchestration(config).runs[0].request


@pytest.mark.parametrize("preflight", ["oracle", {"mode": "oracle", "runs": 3}])
def test_preflight_of_a_benchmark_without_a_reference_solution_is_a_config_error(no_reference, preflight):
    with pytest.raises(ConfigError, match=rf"execution.preflight.*{no_reference}.*has none"):
        request(no_reference, preflight=preflight)
    assert request(no_reference).execution.preflight is None  # off: nothing to check


def test_the_shorthand_and_the_table_are_the_same_setting():
    assert request(preflight="oracle").execution.preflight == request(preflight={"mode": "oracle"}).execution.preflight
    with pytest.raises(ConfigError, match="preflight"):
        request(preflight={"mode": "oracle", "runs": 0})
    with pytest.raises(ConfigError, match="preflight"):
        request(preflight="by-hand")


def fingerprint(req, task_id="capital-france"):
    benchmark = reading.benchmark_for(req)
    harness = reading.harness_for(req)
    task = next(t for t in benchmark.load_tasks(req) if t.task_id == task_id)
    planner = Planner(benchmark, harness, build_run_recipe_registry(req), reading.environment_for(req.environment.id))
    plan = planner.plan(req, task, 1)
    view = AttemptView(req, task, plan, component_versions(req), benchmark, harness, reuse.task_fingerprint(task))
    return preflight_param(view, stage("preflight"))


def test_the_fingerprint_never_holds_the_model_or_the_harness():
    base = fingerprint(request(preflight="oracle"))
    assert fingerprint(request(model="another", preflight="oracle")) == base
    assert fingerprint(request(harness="oracle", model="none", preflight="oracle")) == base
    assert fingerprint(request(preflight="oracle", attempts=4, max_retries=2)) == base
    # what the preflight reads does change it: its own settings, the task, the evaluation's network
    assert fingerprint(request(preflight={"mode": "oracle", "runs": 2})) != base
    assert fingerprint(request(preflight="oracle"), "capital-japan") != base
    assert fingerprint(request(preflight="oracle", task_timeout=5)) != base


def test_the_harness_s_tools_change_the_run_s_fingerprint_and_never_the_preflight_s():
    req = request(preflight="oracle")
    benchmark, harness = reading.benchmark_for(req), reading.harness_for(req)
    task = benchmark.load_tasks(req)[0]
    plan = Planner(benchmark, harness, build_run_recipe_registry(req)).plan(req, task, 1)

    def params(tools):
        plan.task_environment.tools = tools
        view = AttemptView(req, task, plan, component_versions(req), benchmark, harness, reuse.task_fingerprint(task))
        return preflight_param(view, stage("preflight")), run_param(view, stage("run"))

    (preflight, run), (preflight_with, run_with) = params([]), params(["codex@0.169.0"])
    assert preflight_with == preflight and run_with != run
    assert params(["codex@0.170.0"])[1] != run_with


def test_a_hostile_task_id_names_one_file_inside_the_preflight_folder():
    run = "results/ns/r"
    for task_id in ("../../../etc/passwd", "..", "a/b", "x" * 400, "/abs", "{task}", "\x00nul"):
        path = layout.task_file(run, layout.task_segment(task_id), "preflight")
        folder, _, name = path.rpartition("/")
        assert folder == f"{run}/preflight", path
        assert name.endswith(".json") and name not in (".json", "..json") and len(name.encode()) <= 255, path


def test_metrics_leave_out_the_quarantined_tasks_and_name_them():
    def result(task, status="completed", **extra):
        return {"task_id": task, "attempt": 1, "status": status, "correct": status == "completed", **extra}

    quarantined = {"status": "skipped", "error_stage": "preflight",
                   "metadata": {"quarantine": {"reason": "preflight_flaky", "error": "runs disagree"}}}
    every = [result("a"), result("b", **quarantined), result("c", "skipped")]
    where = scored_on(every)
    assert [r["task_id"] for r in every if left_out(r) is None] == ["a", "c"]
    assert (where["tasks"], where["scored"], where["skipped"]) == (3, 2, 1)
    assert where["quarantined"] == [{"task_id": "b", "reason": "preflight_flaky", "error": "runs disagree"}]
