"""``agentcompass diff``: the stage that reads each differing field, and the files that rerun, as Snakemake does."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from agentcompass import plan_diff
from agentcompass.testing.endpoint import ScriptedEndpoint, completion
from conftest import agentcompass, jobs_run, snakemake

ANSWERS = {"France": "Paris", "Japan": "Tokyo", "planet": "Jupiter", "water": "h2o", "Hamlet": "Marlowe"}


def reply(body) -> tuple[int, dict]:
    question = body["messages"][-1]["content"]
    return 200, completion(next((a for k, a in ANSWERS.items() if k in question), "?"))


def write_config(workdir: Path, base_url: str, run_id: str, *, temperature=0.0, case_sensitive=False,
                 prompt="{question}", attempts=1, limit=None, reuse=True) -> Path:
    benchmark = {"case_sensitive": case_sensitive, "prompt_template": prompt, **({"limit": limit} if limit else {})}
    path = workdir / "eval.yaml"  # one path: request.json records it, and a new path is a change of its own
    path.write_text(json.dumps({
        "requests": {"chat-run": {
            "benchmark": "example_exact_match", "harness": "chat",
            "model": {"id": "scripted", "base_url": base_url, "params": {"temperature": temperature}},
            "execution": {"attempts": attempts},
            "output": {"run_id": run_id},
            "runtime": {"reuse": reuse},
        }},
        "benchmarks": {"example_exact_match": benchmark},
    }))
    return path


def build(workdir: Path, config: Path) -> dict[str, int]:
    done = snakemake(workdir, "--configfile", str(config))
    assert done.returncode == 0, done.stderr[-3000:]
    return jobs_run(done.stderr)


def predicted(workdir: Path, a: str, b: str) -> dict:
    return plan_diff.diff(workdir / "results/default" / a, workdir / "results/default" / b).to_json()


def test_diff_predicts_the_jobs_the_next_run_runs(workdir: Path):
    """Each step: B's settings built in a folder of their own, diff A against it, then B's settings built in
    A's folder: the jobs that run are the ones diff named, stage by stage."""
    selection = {"temperature": 0.7, "case_sensitive": True, "prompt": "Q: {question}", "limit": 3, "attempts": 2}
    steps = [
        ("temperature", {"temperature": 0.7},
         {"request": 1, "run": 5, "evaluate": 5, "metrics": 1, "report": 1}),
        ("a scoring parameter", {"temperature": 0.7, "case_sensitive": True},
         {"request": 1, "plans": 1, "evaluate": 5, "metrics": 1, "report": 1}),
        ("a prompt template", {"temperature": 0.7, "case_sensitive": True, "prompt": "Q: {question}"},
         {"request": 1, "plans": 1, "prepare": 5, "run": 5, "evaluate": 5, "metrics": 1, "report": 1}),
        # 3 tasks of 2 attempts: attempt 2 of each is new, 2 tasks of A are no longer asked for
        ("the task selection and attempts", selection,
         {"request": 1, "tasks": 1, "plans": 1, "prepare": 3, "run": 3, "evaluate": 3, "metrics": 1,
          "report": 1}),
        ("reuse off", {**selection, "reuse": False},
         {"request": 1, "tasks": 1, "plans": 1, "prepare": 6, "run": 6, "evaluate": 6, "metrics": 1,
          "report": 1}),
    ]
    found = {}
    with ScriptedEndpoint(reply) as endpoint:
        build(workdir, write_config(workdir, endpoint.base_url, "a"))
        for n, (what, settings, expected) in enumerate(steps):
            build(workdir, write_config(workdir, endpoint.base_url, f"b{n}", **settings))
            found[what] = predicted(workdir, "a", f"b{n}")
            assert found[what]["reruns"] == expected, what
            ran = build(workdir, write_config(workdir, endpoint.base_url, "a", **settings))
            assert ran == expected, what
            # once built, nothing is left to do; with reuse off, all but the request's record, every time
            stays = {} if settings.get("reuse", True) else {k: v for k, v in expected.items() if k != "request"}
            assert predicted(workdir, "a", f"b{n}")["reruns"] == stays, what
    # the selection step, in words: who reads what, and the unpaired attempts
    found = found["the task selection and attempts"]
    assert found["attempts"] == {"both": 3, "a": 2, "b": 3}
    fields = {(f["source"], f["path"]): f["stages"] for group in found["by_stage"] for f in group["fields"]}
    assert fields[("request", "benchmark.params.limit")] == ["request", "tasks", "plans"]
    assert fields[("request", "execution.attempts")] == ["request", "plans"]
    assert fields[("plan", "execution.attempts")] == []  # the plans count attempts; no attempt's stage reads it


def test_the_text_names_each_field_under_its_stage_and_each_rerun_with_its_reason(workdir: Path):
    with ScriptedEndpoint(reply) as endpoint:
        build(workdir, write_config(workdir, endpoint.base_url, "a"))
        build(workdir, write_config(workdir, endpoint.base_url, "b", temperature=0.7, case_sensitive=True))
    done = agentcompass(workdir, "diff", "results/default/a", "results/default/b")
    assert done.returncode == 0, done.stderr
    text = done.stdout
    assert "5 attempt(s) in both, 0 only in A, 0 only in B" in text
    # each field under the first stage that reads it, with its values
    run_group = text.index("read by run (output.json)")
    evaluate_group = text.index("read by evaluate (result.json)")
    assert run_group < text.index("model.params.temperature: 0.0 -> 0.7  [request.json]") < evaluate_group
    assert evaluate_group < text.index("benchmark_plan.case_sensitive: false -> true  [plan, 5 attempt(s)]")
    assert "benchmark.params.case_sensitive: false -> true  [request.json]" in text
    assert "output.json x5: its stage reads model.params.temperature, which changed" in text
    assert "result.json x5: its stage reads benchmark_plan.case_sensitive, which changed" in text
    assert "metrics.json x1: built from result.json, which is rebuilt" in text
    assert "reused: tasks.json, prepared.json x5" in text
    assert "capital-france #1" not in text
    verbose = agentcompass(workdir, "diff", "results/default/a", "results/default/b", "-v").stdout
    assert "capital-france #1: output.json, result.json" in verbose
    assert "plan benchmark_plan.case_sensitive: false -> true  [read by evaluate]" in verbose
    # two attempts: their run's request and their own plan
    attempts = agentcompass(workdir, "diff", "results/default/a/attempts/capital-france/1",
                            "results/default/b/attempts/capital-france/1", "--json")
    found = json.loads(attempts.stdout)
    assert found["kind"] == "attempt" and found["reruns"] == {"run": 1, "evaluate": 1}


@pytest.fixture
def oracle_plan(default_run: Path) -> dict:
    """A real plan.json, of the oracle on example_exact_match (the default evaluation, built once a session)."""
    [plan] = default_run.glob("results/default/*/attempts/capital-france/1/plan.json")
    return json.loads(plan.read_text())


def plan_files(tmp_path: Path, plan: dict, path: tuple[str, ...], value) -> tuple[Path, Path]:
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(plan))
    changed = json.loads(json.dumps(plan))
    node = changed
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    b.write_text(json.dumps(changed))
    return a, b


@pytest.mark.parametrize("path, value, stages", [
    # marked plan_field(stage="evaluate"); the oracle's answer is the reference, so its run reads it too
    (("benchmark_plan", "expected"), "Lyon", ["run", "evaluate"]),
    (("benchmark_plan", "case_sensitive"), True, ["evaluate"]),
    (("benchmark_plan", "prompt"), "Q?", ["prepare"]),
    (("harness_plan", "params", "x"), 1, ["run"]),
    (("task_environment", "params", "x"), 1, ["prepare", "run", "evaluate"]),
    (("run_network", "mode"), "none", ["run"]),
    (("execution", "task_timeout"), 5.0, ["run"]),
    # how the attempt is kept or counted, not what it computes: no stage reads these
    (("execution", "retain_environments"), "always", []),
    (("applied_recipes",), ["x"], []),
])
def test_each_plan_field_is_read_by_the_stages_whose_params_it_moves(tmp_path: Path, oracle_plan, path, value, stages):
    a, b = plan_files(tmp_path, oracle_plan, path, value)
    found = plan_diff.diff(a, b)
    [attempt] = found.attempts
    [change] = attempt.changes
    assert (change.source, change.path, change.stages, change.assumed) == ("plan", path, tuple(stages), False)
    expected_files = set(stages)
    for stage in ("run", "evaluate"):  # each attempt file is built from the one before it
        if plan_diff.BUILT_FROM[stage] in expected_files:
            expected_files.add(stage)
    assert set(attempt.reruns) == expected_files
    assert found.notes and "neither the Model nor the task" in found.notes[0]


def test_identical_plans_rerun_nothing(tmp_path: Path, oracle_plan):
    a, b = plan_files(tmp_path, oracle_plan, ("attempt",), 1)
    found = plan_diff.diff(a, b)
    assert found.counts() == {} and found.field_groups() == []
    assert "no field differs." in plan_diff.render(found)


def test_bad_paths_exit_2_with_what_where_and_fix(workdir: Path, oracle_plan):
    plan = workdir / "plan.json"
    plan.write_text(json.dumps(oracle_plan))
    (workdir / "notes.json").write_text("[1, 2]")
    (workdir / "broken.json").write_text("{")
    (workdir / "empty").mkdir()
    cases = {
        ("missing.json", "plan.json"): "missing.json does not exist",
        ("notes.json", "plan.json"): "notes.json is not a plan",
        ("broken.json", "plan.json"): "broken.json: cannot read a plan",
        ("empty", "plan.json"): "empty is not a run, an attempt or a plan",
        ("plan.json", "empty"): "empty is not a run, an attempt or a plan",
    }
    for (a, b), message in cases.items():
        done = agentcompass(workdir, "diff", a, b)
        assert done.returncode == 2, (a, b, done.stderr)
        assert message in done.stderr and "Fix:" in done.stderr and "Traceback" not in done.stderr, done.stderr
    run = workdir / "results/default/r"
    run.mkdir(parents=True)
    (run / "request.json").write_text(json.dumps({"model": {"id": "none"}}))
    done = agentcompass(workdir, "diff", str(run), str(run))
    assert done.returncode == 2 and "has no tasks.json yet" in done.stderr and "Fix:" in done.stderr
    shutil.copy(plan, run / "plan.json")
    done = agentcompass(workdir, "diff", str(run), "plan.json")
    assert done.returncode == 2 and "diff compares two of a kind" in done.stderr
