"""Reuse you can predict: each change reruns exactly the files that depend on it.

Each reuse test runs twice: with a job per attempt file, and with the request
built as shards of two attempts (runtime.shard_size), where the outer run
reruns the shards holding a change and each shard's inner Snakemake reruns
exactly the files that depend on it.
"""

from __future__ import annotations

import functools
import gc
import json
import threading
from pathlib import Path
from typing import Callable

import pytest

from agentcompass.runtime.model_client import endpoint_resource
from agentcompass.testing.endpoint import ScriptedEndpoint, completion
from conftest import agentcompass, copy_run, jobs_run, jobs_run_with_shards, shard_logs, shared_run, snakemake

ANSWERS = {"France": "Paris", "Japan": "Tokyo", "planet": "Jupiter", "water": "H2O", "Hamlet": "Marlowe"}
N = 5


class Model:
    """A scripted model: right for four questions, wrong for Hamlet, and 500 where told to fail."""

    def __init__(self) -> None:
        self.fail_on: set[str] = set()

    def __call__(self, body) -> tuple[int, dict]:
        question = body["messages"][-1]["content"]
        for needle, answer in ANSWERS.items():
            if needle in question:
                if needle in self.fail_on:
                    return 500, {"error": {"message": "scripted failure"}}
                return 200, completion(answer.lower() if "lower" in question else answer)
        return 200, completion("?")


@pytest.fixture(params=[0, 2], ids=["attempt-jobs", "shards-of-2"])
def shard_size(request) -> int:
    return request.param


def with_shards(counts: dict[str, int], shard_size: int, attempts: list[int]) -> dict[str, int]:
    """The jobs expected of a run: ``counts``, plus one shard job per shard holding one of ``attempts``
    (positions in the request's attempt order) when the request is sharded."""
    if not shard_size:
        return counts
    return {**counts, "shard": len({position // shard_size for position in attempts})}


@pytest.fixture
def model():
    script = Model()
    with ScriptedEndpoint(script) as endpoint:
        endpoint.script = script
        yield endpoint


def write_config(workdir: Path, endpoint, *, temperature=0.0, case_sensitive=False, prompt="{question}", attempts=1,
                 reuse=True, shard_size=0, pricing=None, analyzers=()) -> Path:
    path = workdir / "eval.yaml"
    model = {"id": "scripted", "base_url": endpoint.base_url, "params": {"temperature": temperature}}
    path.write_text(json.dumps({
        "runtime": {"shard_size": shard_size},
        "requests": {
            "chat-run": {
                "benchmark": "example_exact_match",
                "harness": "chat",
                "model": {**model, "pricing": pricing} if pricing else model,
                "execution": {"attempts": attempts, "analyzers": list(analyzers)},
                "runtime": {"reuse": reuse},
            }
        },
        "benchmarks": {"example_exact_match": {"case_sensitive": case_sensitive, "prompt_template": prompt}},
        "harnesses": {"chat": {"max_model_retries": 1, "retry_backoff": 0}},  # a scripted 500 fails fast
    }))
    return path


def run(workdir: Path, config: Path) -> dict[str, int]:
    logs = shard_logs(workdir)
    done = snakemake(workdir, "--configfile", str(config))
    assert done.returncode == 0, done.stderr[-3000:]
    return jobs_run_with_shards(workdir, done.stderr, logs)


ALL = list(range(N))


def build_chat_run(shard_size: int, folder: Path) -> None:
    with ScriptedEndpoint(Model()) as endpoint:
        assert run(folder, write_config(folder, endpoint, shard_size=shard_size))["run"] == N


@pytest.fixture(scope="session")
def built_chat_runs(tmp_path_factory) -> Callable[[int], Path]:
    """The request of ``write_config``'s defaults, built by ``Model`` once a session for each shard size."""
    return lambda shard_size: shared_run(tmp_path_factory, f"reuse-chat-run-shards-{shard_size}",
                                         functools.partial(build_chat_run, shard_size))


@pytest.fixture
def chat_run(built_chat_runs, workdir: Path, model, shard_size) -> Path:
    """``run(workdir, write_config(workdir, model, shard_size=shard_size))`` done: the session's build of it,
    copied into ``workdir`` and made to name this test's endpoint, as a build against it would."""
    built = built_chat_runs(shard_size)
    old = json.loads((built / "eval.yaml").read_text())["requests"]["chat-run"]["model"]["base_url"]
    return copy_run(built, workdir, {old: model.base_url, endpoint_resource(old): endpoint_resource(model.base_url)})


def results(workdir: Path) -> dict[str, dict]:
    base = workdir / "results/default/chat-run/attempts"
    return {p.parent.parent.name: json.loads(p.read_text()) for p in base.glob("*/1/result.json")}


def test_changing_nothing_reruns_nothing(workdir: Path, model, shard_size):
    config = write_config(workdir, model, shard_size=shard_size)
    assert run(workdir, config)["run"] == N
    calls = len(model.requests)
    assert run(workdir, config) == {}
    assert len(model.requests) == calls


def test_temperature_reruns_the_harness_and_scoring_but_not_preparation(chat_run: Path, model, shard_size):
    workdir = chat_run  # built with temperature 0.0
    prepared_before = {p: p.stat().st_mtime_ns for p in (workdir / "results").rglob("prepared.json")}
    model.requests.clear()
    ran = run(workdir, write_config(workdir, model, temperature=0.7, shard_size=shard_size))
    # per attempt: exactly output.json and result.json; per request: metrics.json and the request record
    assert ran == with_shards({"run": N, "evaluate": N, "metrics": 1, "report": 1, "request": 1}, shard_size, ALL)
    assert len(model.requests) == N and {r.body["temperature"] for r in model.requests} == {0.7}
    assert {p: p.stat().st_mtime_ns for p in (workdir / "results").rglob("prepared.json")} == prepared_before


def test_scoring_parameter_regrades_without_calling_the_model(chat_run: Path, model, shard_size):
    workdir = chat_run  # built with case_sensitive False
    model.requests.clear()
    ran = run(workdir, write_config(workdir, model, case_sensitive=True, shard_size=shard_size))
    # the plan holds the scoring setting, so the bulk plans (and run_info.json with them) are rewritten too
    assert ran == with_shards({"evaluate": N, "metrics": 1, "report": 1, "plans": 1, "request": 1}, shard_size, ALL)
    assert model.requests == []
    plan = json.loads((workdir / "results/default/chat-run/attempts/capital-france/1/plan.json").read_text())
    assert plan["benchmark_plan"]["case_sensitive"] is True


def test_prices_and_analyzers_rerun_metrics_only(chat_run: Path, model, shard_size):
    workdir = chat_run
    metrics_file = workdir / "results/default/chat-run/metrics.json"
    assert json.loads(metrics_file.read_text())["summary"]["overall"]["cost_usd"] is None
    results_before = {p: p.stat().st_mtime_ns for p in (workdir / "results").rglob("result.json")}
    model.requests.clear()
    pricing = {"input_per_million": 3.0, "output_per_million": 15.0}
    ran = run(workdir, write_config(workdir, model, pricing=pricing, shard_size=shard_size))
    # metrics.json, the report built from it and the request record; no shard, no attempt file, no model call
    assert ran == {"metrics": 1, "report": 1, "request": 1}
    assert model.requests == []
    assert {p: p.stat().st_mtime_ns for p in (workdir / "results").rglob("result.json")} == results_before
    # the scripted endpoint reports 10 prompt and 2 completion tokens a call
    cost = json.loads(metrics_file.read_text())["summary"]["overall"]["cost_usd"]
    assert cost == pytest.approx(N * (10 * 3.0 + 2 * 15.0) / 1e6)
    assert run(workdir, write_config(workdir, model, pricing=pricing, shard_size=shard_size)) == {}
    # an analyzer likewise: it runs with metrics.json
    ran = run(workdir, write_config(workdir, model, pricing=pricing, analyzers=["results_table"], shard_size=shard_size))
    assert ran == {"metrics": 1, "report": 1, "request": 1} and model.requests == []
    assert (workdir / "results/default/chat-run/reports/results_table/results.csv").exists()


def test_prompt_parameter_reruns_preparation_onward_and_status_says_so_first(chat_run: Path, model, shard_size):
    workdir = chat_run
    config = write_config(workdir, model, prompt="Answer in lower case. {question}", shard_size=shard_size)
    status = agentcompass(workdir, "status", "--config", str(config))
    assert status.returncode == 0, status.stderr
    assert f"prepared.json x{N}: params changed: plan" in status.stdout
    assert f"output.json x{N}: upstream file reruns" in status.stdout
    assert "tasks.json" not in status.stdout
    model.requests.clear()
    ran = run(workdir, config)
    assert ran == with_shards({"prepare": N, "run": N, "evaluate": N, "metrics": 1, "report": 1, "plans": 1, "request": 1}, shard_size, ALL)
    assert len(model.requests) == N
    assert all(r.body["messages"][-1]["content"].startswith("Answer in lower case.") for r in model.requests)
    after = agentcompass(workdir, "status", "--config", str(config))
    assert "up to date: nothing would rerun" in after.stdout


def test_more_attempts_and_tasks_run_only_the_new_ones(chat_run: Path, model, shard_size):
    workdir = chat_run  # built with 1 attempt
    model.requests.clear()
    ran = run(workdir, write_config(workdir, model, attempts=3, shard_size=shard_size))
    assert ran["run"] == 2 * N and ran["prepare"] == 2 * N and ran["evaluate"] == 2 * N
    assert len(model.requests) == 2 * N
    metrics = json.loads((workdir / "results/default/chat-run/metrics.json").read_text())
    assert metrics["num_attempts"] == 3 * N


def test_reuse_off_recomputes_the_request(workdir: Path, model, shard_size):
    run(workdir, write_config(workdir, model, reuse=False, shard_size=shard_size))
    model.requests.clear()
    ran = run(workdir, write_config(workdir, model, reuse=False, shard_size=shard_size))
    assert ran["tasks"] == 1 and ran["prepare"] == N and ran["run"] == N and ran["evaluate"] == N
    assert len(model.requests) == N


def test_retry_reruns_exactly_the_failed_attempts(workdir: Path, model, shard_size):
    model.script.fail_on = {"France", "water"}
    config = write_config(workdir, model, shard_size=shard_size)
    run(workdir, config)
    first = results(workdir)
    assert {t for t, r in first.items() if r["status"] == "run_error"} == {"capital-france", "water-formula"}
    assert first["author-hamlet"]["status"] == "completed" and first["author-hamlet"]["score"] == 0.0
    model.script.fail_on = set()
    model.requests.clear()
    logs = shard_logs(workdir)
    done = agentcompass(workdir, "retry", "--config", str(config))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "retrying 2 failed attempt(s)" in done.stdout
    order = [t["task_id"] for t in json.loads((workdir / "results/default/chat-run/tasks.json").read_text())["tasks"]]
    failed = [order.index("capital-france"), order.index("water-formula")]
    assert jobs_run_with_shards(workdir, done.stderr, logs) == with_shards({"run": 2, "evaluate": 2, "metrics": 1, "report": 1}, shard_size, failed)
    asked = sorted(r.body["messages"][-1]["content"].split("?")[0] for r in model.requests)
    assert len(asked) == 2 and any("France" in q for q in asked) and any("water" in q for q in asked)
    second = results(workdir)
    assert all(r["status"] == "completed" for r in second.values())
    # nothing else moved, and the valid zero was never retried
    assert second["author-hamlet"] == first["author-hamlet"]
    again = agentcompass(workdir, "retry", "--config", str(config))
    assert "nothing to retry" in again.stdout


def test_two_requests_with_three_attempts_run_in_one_invocation_and_dry_run_prints_both(workdir: Path):
    config = workdir / "two.yaml"
    config.write_text(
        "defaults:\n  harness: oracle\n  model: {id: none}\n  execution: {attempts: 3}\n"
        "requests:\n"
        "  first: {benchmark: {id: example_exact_match, params: {limit: 2}}}\n"
        "  second: {benchmark: example_exact_match, harness: {id: fixed_answer, params: {answer: Paris}}}\n"
    )
    dry = agentcompass(workdir, "run", "--config", str(config), "--dry-run")
    assert dry.returncode == 0, dry.stderr
    printed = json.loads(dry.stdout)
    assert [p["name"] for p in printed] == ["first", "second"]
    assert printed[0]["request"]["execution"]["attempts"] == 3
    assert printed[1]["request"]["harness"] == {"id": "fixed_answer", "params": {"answer": "Paris"}}
    assert not (workdir / "results").exists()
    done = agentcompass(workdir, "run", "--config", str(config))
    assert done.returncode == 0, done.stderr[-3000:]
    first = json.loads((workdir / "results/default/first/metrics.json").read_text())
    second = json.loads((workdir / "results/default/second/metrics.json").read_text())
    assert (first["num_tasks"], first["num_attempts"], first["metrics"]["accuracy"]) == (2, 6, 1.0)
    assert (second["num_tasks"], second["num_attempts"]) == (5, 15)
    assert second["metrics"]["accuracy"] == pytest.approx(0.2)
    assert done.stdout.index("first:") < done.stdout.index("second:")


def test_request_options_without_a_request_are_refused(workdir: Path):
    done = agentcompass(workdir, "status", "-m", "temperature=1")
    assert done.returncode != 0 and "--model-param" in done.stderr and "Fix:" in done.stderr


def test_sdk_runs_the_same_workflow_and_returns_outcomes(workdir: Path, monkeypatch):
    from agentcompass.runtime import BenchmarkSpec, HarnessSpec, ModelSpec, RunMetadata, RunRequest
    from agentcompass.sdk import run_evaluation, run_evaluation_request

    monkeypatch.setenv("AGENTCOMPASS_USER_CONFIG", "")
    ours = threading.Timer(600, lambda: None)  # the calling process's own timer: not the workflow's to stop
    ours.start()
    try:
        result = run_evaluation("example_exact_match", "oracle", "none", workdir=workdir, snakemake_args=["--quiet"])
        assert ours.is_alive()
    finally:
        ours.cancel()
    [outcome] = result.outcomes
    assert outcome.state == "completed" and outcome.metrics["accuracy"] == 1.0 and outcome.counts == {"completed": 5}
    # the run ended as for a quick exit (no rate-limiter timers left, the heap frozen), and this
    # process, which goes on, got its heap back
    assert not [t for t in threading.enumerate() if isinstance(t, threading.Timer) and t.is_alive() and t is not ours]
    assert gc.get_freeze_count() == 0
    req = RunRequest(
        model=ModelSpec(id="none"),
        benchmark=BenchmarkSpec(id="example_exact_match", params={"limit": 2}),
        harness=HarnessSpec(id="fixed_answer", params={"answer": "Paris"}),
        metadata=RunMetadata(request_name="from-sdk"),
    )
    result = run_evaluation_request(req, workdir=workdir, snakemake_args=["--quiet"])
    assert [(o.name, o.state, o.counts) for o in result.outcomes] == [("from-sdk", "completed", {"completed": 2})]
    assert result.outcomes[0].metrics["accuracy"] == 0.5
    assert (workdir / "results/default/from-sdk/request.json").exists()


def test_a_stage_version_bump_changes_that_stage_params_only():
    from agentcompass.benchmarks.example_exact_match import ExampleExactMatchBenchmark
    from agentcompass.harnesses.oracle import OracleHarness
    from agentcompass.pipeline.fingerprints import request_params
    from agentcompass.runtime.config import load_run_config
    from agentcompass.runtime.orchestration import resolve_orchestration
    from agentcompass.plugins import load_components
    from agentcompass.stages import stage

    load_components()
    config = load_run_config([], {"requests": {"r": {"benchmark": "example_exact_match", "harness": "oracle", "model": {"id": "none"}}}},
                             include_user=False, include_project=False)
    req = resolve_orchestration(config).runs[0].request

    def params():
        return request_params(stage("tasks"), req), request_params(stage("metrics"), req)

    before = params()
    original = ExampleExactMatchBenchmark.version
    try:
        ExampleExactMatchBenchmark.version = "2"
        after = params()
    finally:
        ExampleExactMatchBenchmark.version = original
    assert before[0] != after[0] and before[1] != after[1]
    original = OracleHarness.version
    try:
        OracleHarness.version = "2"
        assert params() == before
    finally:
        OracleHarness.version = original


CHECKPOINT_UPDATE = "Updating checkpoint dependencies"


def test_a_current_task_list_is_read_at_parse_time(workdir: Path, model):
    """Once tasks.json and plans.json are current, the DAG is static.

    Snakemake then re-evaluates no checkpoint (the larger part of a no-op rerun);
    a change or a flag that rebuilds them goes through the checkpoints again.
    """
    config = write_config(workdir, model)
    first = snakemake(workdir, "--configfile", str(config))
    assert first.returncode == 0 and CHECKPOINT_UPDATE in first.stderr
    again = snakemake(workdir, "--configfile", str(config))
    assert again.returncode == 0 and jobs_run(again.stderr) == {}
    assert CHECKPOINT_UPDATE not in again.stderr

    forced = snakemake(workdir, "--configfile", str(config), "--forcerun", "plans")
    assert CHECKPOINT_UPDATE in forced.stderr and jobs_run(forced.stderr)["plans"] == 1

    changed = snakemake(workdir, "--configfile", str(write_config(workdir, model, prompt="Q: {question}")))
    assert changed.returncode == 0 and CHECKPOINT_UPDATE in changed.stderr
    assert jobs_run(changed.stderr)["prepare"] == N
    settled = snakemake(workdir, "--configfile", str(write_config(workdir, model, prompt="Q: {question}")))
    assert jobs_run(settled.stderr) == {} and CHECKPOINT_UPDATE not in settled.stderr
