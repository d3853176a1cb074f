"""The packaged benchmarks end to end: humaneval, bfcl and the harness-free majority_vote, through real Snakemake."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from agentcompass.benchmarks import bfcl
from agentcompass.testing.dependencies import needs
from agentcompass.benchmarks.humaneval import load_problems
from agentcompass.benchmarks.majority_vote import generate_question
from agentcompass.testing.endpoint import ScriptedEndpoint, completion
from conftest import agentcompass, clean_env, jobs_run

PROBE = Path(__file__).parent / "drivers" / "sandbox_listing_workflow.py"


def read(path: Path) -> dict:
    return json.loads(path.read_text())


def attempts(run: Path, name: str) -> list[Path]:
    return sorted(run.glob(f"attempts/*/*/{name}"))


# --- humaneval --------------------------------------------------------------------


def test_humaneval_oracle_passes_all_164_problems(workdir: Path):
    done = agentcompass(workdir, "run", "humaneval", "oracle", "none", "--cores", "8")
    assert done.returncode == 0, done.stderr[-3000:]
    run = workdir / "results/default/humaneval-oracle-none"
    metrics = read(run / "metrics.json")
    assert metrics["counts"] == {"completed": 164}
    assert metrics["metrics"]["pass@1"] == 1.0
    tasks = read(run / "tasks.json")["tasks"]
    assert {t["metadata"]["dataset_version"] for t in tasks} == {"1.0.3"}
    plan = read(run / "attempts/HumanEval%2F0/1/plan.json")
    assert plan["evaluation_network"] == {"mode": "none"}


def test_humaneval_empty_answers_score_zero_and_are_no_errors(workdir: Path):
    done = agentcompass(workdir, "run", "humaneval", "fixed_answer", "none", "-H", "answer=", "-b", "limit=2",
                        "-b", "k_values=[1,2,10]", "--attempts", "2", "--cores", "8")
    assert done.returncode == 0, done.stderr[-3000:]
    run = workdir / "results/default/humaneval-fixed_answer-none"
    metrics = read(run / "metrics.json")
    assert metrics["counts"] == {"completed": 4}
    # pass@10 needs 10 attempts per task: left out
    assert metrics["metrics"] == {"accuracy": 0.0, "mean_score": 0.0, "pass@1": 0.0, "pass@2": 0.0}
    result = read(run / "attempts/HumanEval%2F0/2/result.json")
    assert result["metadata"]["humaneval"]["returncode"] != 0 and "AssertionError" in result["metadata"]["humaneval"]["stderr"]


def test_humaneval_an_answer_that_ends_the_interpreter_scores_zero(workdir: Path):
    done = agentcompass(workdir, "run", "humaneval", "fixed_answer", "none", "-H", "answer=import sys; sys.exit(0)",
                        "-b", "limit=1", "--cores", "2")
    assert done.returncode == 0, done.stderr[-3000:]
    run = workdir / "results/default/humaneval-fixed_answer-none"
    metrics = read(run / "metrics.json")
    assert metrics["counts"] == {"completed": 1}
    assert metrics["metrics"]["accuracy"] == metrics["metrics"]["pass@1"] == 0.0
    evidence = read(run / "attempts/HumanEval%2F0/1/result.json")["metadata"]["humaneval"]
    # the program ended with status 0 before check() ran: no token, no pass
    assert evidence["token_seen"] is False and "the program failed: SystemExit: 0" in evidence["stderr"]


def test_humaneval_tests_and_solutions_never_reach_the_harness(workdir: Path):
    config = workdir / "probe.yaml"
    config.write_text(json.dumps({"requests": {"probe": {
        "benchmark": {"id": "humaneval", "params": {"limit": 1}},
        "harness": "test_sandbox_listing",
        "model": {"id": "none"},
    }}}))
    done = subprocess.run([sys.executable, str(PROBE), str(workdir), str(config)], cwd=workdir, env=clean_env(),
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    run = workdir / "results/default/probe"
    problems = {p["task_id"]: p for p in load_problems()[:1]}
    assert len(attempts(run, "prepared.json")) == 1
    for prepared_path in attempts(run, "prepared.json"):
        prepared = read(prepared_path)
        problem = problems[prepared["task_id"]]
        seen = {"prepared.json": prepared_path.read_text(),
                "run-phase sandbox": read(prepared_path.parent / "output.json")["answer"]}
        assert seen["run-phase sandbox"].startswith("/")  # the probe ran and listed its working directory
        assert prepared["ground_truth"] is None
        assert prepared["input"]["prompt"] == problem["prompt"]
        for where, text in seen.items():
            assert problem["test"].strip() not in text and "def check(candidate)" not in text, where
            assert problem["canonical_solution"].strip() not in text, where
        assert not (prepared_path.parent / "workspace").exists()


# --- bfcl ---------------------------------------------------------------------------


def first_ids(per_category: int) -> list[str]:
    root = bfcl.data_dir()
    return [t.task_id for c in bfcl.SUPPORTED for t in bfcl.load_category(c, root)[:per_category]]


@needs(bfcl.DEPENDENCY)
def test_bfcl_oracle_scores_full_marks_in_every_supported_category(workdir: Path):
    ids = first_ids(1)
    done = agentcompass(workdir, "run", "bfcl", "oracle", "none", "-b", f"task_ids={json.dumps(ids)}", "--cores", "8")
    assert done.returncode == 0, done.stderr[-3000:]
    run = workdir / "results/default/bfcl-oracle-none"
    metrics = read(run / "metrics.json")
    assert metrics["counts"] == {"completed": len(ids)}
    assert metrics["metrics"]["accuracy"] == 1.0
    assert {k: v for k, v in metrics["metrics"].items() if k.startswith("accuracy/")} == {
        f"accuracy/{c}": 1.0 for c in bfcl.SUPPORTED
    }
    output = read(run / "attempts/parallel_0/1/output.json")
    assert output["answer"] == [{"name": "spotify_play", "arguments": {"artist": "Taylor Swift", "duration": 20}},
                                {"name": "spotify_play", "arguments": {"artist": "Maroon 5", "duration": 15}}]


@needs(bfcl.DEPENDENCY)
def test_bfcl_prepared_tasks_hold_the_question_and_tools_but_no_ground_truth(workdir: Path):
    ids = first_ids(1)
    done = agentcompass(workdir, "run", "bfcl", "fixed_answer", "none", "-b", f"task_ids={json.dumps(ids)}", "--cores", "8")
    assert done.returncode == 0, done.stderr[-3000:]
    run = workdir / "results/default/bfcl-fixed_answer-none"
    tasks = {t["task_id"]: t for t in read(run / "tasks.json")["tasks"]}
    for path in attempts(run, "prepared.json"):
        prepared = read(path)
        task = tasks[prepared["task_id"]]
        assert prepared["ground_truth"] is None
        assert prepared["metadata"] == {"dataset_version": "2026.3.23"}
        assert prepared["input"]["prompt"] == task["question"]
        assert prepared["input"]["tools"] == bfcl.to_openai_tools(task["metadata"]["functions"])
        if task["ground_truth"] is not None:
            assert json.dumps(task["ground_truth"], sort_keys=True)[1:-1] not in json.dumps(prepared, sort_keys=True)
    # an empty answer calls no function: right only where none should be called
    metrics = read(run / "metrics.json")["metrics"]
    assert metrics["accuracy/irrelevance"] == metrics["accuracy/live_irrelevance"] == 1.0
    assert metrics["accuracy/simple_python"] == metrics["accuracy/parallel"] == 0.0


@needs(bfcl.DEPENDENCY)
def test_bfcl_a_wrong_function_name_or_value_scores_zero(workdir: Path):
    right = [{"name": "calculate_triangle_area", "arguments": {"base": 10, "height": 5}}]
    answers = {
        "right": right,
        "wrong-value": [{"name": "calculate_triangle_area", "arguments": {"base": 10, "height": 6}}],
        "wrong-name": [{"name": "calculate_rectangle_area", "arguments": {"base": 10, "height": 5}}],
    }
    config = workdir / "bfcl.yaml"
    config.write_text(json.dumps({"requests": {name: {
        "benchmark": {"id": "bfcl", "params": {"task_ids": ["simple_python_0"]}},
        "harness": {"id": "fixed_answer", "params": {"answer": json.dumps(answer)}},
        "model": {"id": "none"},
    } for name, answer in answers.items()}}))
    done = agentcompass(workdir, "run", "--config", str(config))
    assert done.returncode == 0, done.stderr[-3000:]
    outcome = {}
    for name in answers:
        result = read(workdir / f"results/default/{name}/attempts/simple_python_0/1/result.json")
        assert result["status"] == "completed"
        outcome[name] = (result["score"], result["metadata"]["bfcl"].get("error_type"))
    assert outcome == {
        "right": (1.0, None),
        "wrong-value": (0.0, "value_error:others"),
        "wrong-name": (0.0, "simple_function_checker:wrong_func_name"),
    }


# --- majority_vote (harness: none) ----------------------------------------------


class ArithmeticModel:
    """Five replies per question: three right and two alike wrong ones when the answer is even, else the reverse."""

    def __init__(self) -> None:
        self.calls: dict[str, int] = {}

    def __call__(self, body) -> tuple[int, dict]:
        question = body["messages"][-1]["content"].split("\n")[0]
        count = self.calls[question] = self.calls.get(question, 0) + 1
        answer = next(a for q, a in map(generate_question, range(100)) if q == question)
        right = count <= 3 if answer % 2 == 0 else count > 3
        return 200, completion(f"Let me compute.\n{answer if right else answer + 1}")


def test_majority_vote_samples_the_model_and_submits_the_most_frequent_answer(workdir: Path):
    model = ArithmeticModel()
    env = clean_env(VOTE_KEY="sk-vote-secret-123")
    tasks = 3  # the first three: two odd answers and an even one
    with ScriptedEndpoint(model) as endpoint:
        done = agentcompass(workdir, "run", "majority_vote", "none", "scripted", "--base-url", endpoint.base_url,
                            "--api-key-env", "VOTE_KEY", "-b", f"num_tasks={tasks}", env=env)
        assert done.returncode == 0, done.stderr[-3000:]
        assert len(endpoint.requests) == tasks * 5
        assert {r.headers["Authorization"] for r in endpoint.requests} == {"Bearer sk-vote-secret-123"}
    run = workdir / "results/default/majority_vote-none-scripted"
    answers = [generate_question(i)[1] for i in range(tasks)]
    metrics = read(run / "metrics.json")
    even = sum(a % 2 == 0 for a in answers)
    assert 0 < even < tasks  # the script has questions the vote gets right and questions it gets wrong
    assert metrics["metrics"]["accuracy"] == even / tasks
    assert metrics["metrics"]["sample_accuracy"] == pytest.approx((3 * even + 2 * (tasks - even)) / (tasks * 5))
    result = read(run / "attempts/arith-0/1/result.json")
    assert sorted(result["metadata"]["samples"]) == sorted([answers[0]] * (3 if answers[0] % 2 == 0 else 2)
                                                           + [answers[0] + 1] * (2 if answers[0] % 2 == 0 else 3))
    assert result["usage"]["calls"] == 5
    for path in run.rglob("*"):
        if path.is_file():
            assert "sk-vote-secret-123" not in path.read_text(errors="replace"), path


def test_majority_vote_new_sample_count_reruns_the_runs_but_not_preparation(workdir: Path):
    model = ArithmeticModel()
    with ScriptedEndpoint(model) as endpoint:
        args = ("run", "majority_vote", "none", "scripted", "--base-url", endpoint.base_url, "-b", "num_tasks=1")
        assert agentcompass(workdir, *args).returncode == 0
        model.calls.clear()
        again = agentcompass(workdir, *args, "-b", "samples=3")
        assert again.returncode == 0, again.stderr[-3000:]
        ran = jobs_run(again.stderr)
        assert (ran.get("run"), ran.get("evaluate"), ran.get("prepare"), ran.get("tasks")) == (1, 1, None, None), ran
        assert len(endpoint.requests) == 1 * 5 + 1 * 3
    result = read(workdir / "results/default/majority_vote-none-scripted/attempts/arith-0/1/result.json")
    assert len(result["metadata"]["samples"]) == 3
