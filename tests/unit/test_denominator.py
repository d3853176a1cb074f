"""One denominator: every built-in Benchmark's figures leave out what the failure classes leave out.

For each Benchmark ``agentcompass list benchmark`` shows, the metrics stage
(``bodies.summary.write_metrics``) is given result.json files made as the run stage makes
them: 5 tasks of 2 attempts, one attempt an infrastructure failure (the
``ImageMissingError`` of a missing SWE-bench image), one a harness error, one
task quarantined by preflight. Every figure a user quotes (the Benchmark's own
metrics, the summary's accuracy and pass@k, ``scored_on`` and the line the run,
the report and ``runs`` print from it, ``compare``'s pairs) is over the same
7 attempts of 4 tasks, and equals what the same run without the infrastructure
failure and the quarantined task gives.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentcompass import compare, layout, report, results
from agentcompass._util.jsonio import write_json
from agentcompass.cli.results import _scored
from agentcompass.layout import task_segment
from agentcompass.pipeline import preflight
from agentcompass.pipeline.bodies import summary
from agentcompass.pipeline.jobs import RequestJob
from agentcompass.pipeline.files import TasksFile
from agentcompass.plugins import load_builtin_components
from agentcompass.runtime import failures
from agentcompass.runtime.base import ImageMissingError, error_result
from agentcompass.runtime.models import (
    BenchmarkSpec,
    ExecutionSpec,
    HarnessSpec,
    ModelSpec,
    RunRequest,
    RunResult,
    TaskSpec,
)
from agentcompass.runtime.registry import BENCHMARKS

load_builtin_components()
# what each attempt ends as: True/False a completed verdict, "harness" an error of the agent (wrong),
# "infrastructure" the machine's failure (left out); task "t5" is quarantined by preflight
OUTCOMES = {"t1": [True, True], "t2": [True, False], "t3": [True, "infrastructure"], "t4": [False, "harness"],
            "t5": ["quarantined", "quarantined"]}
COUNTED = {"t1": [True, True], "t2": [True, False], "t3": [True], "t4": [False, "harness"]}  # what every figure is over
ACCURACY = 4 / 7  # 4 right of the 7 attempts counted
PASS_AT_1 = (1 + 0.5 + 1 + 0) / 4  # per task, averaged over the 4 tasks scored
LINE = "on 4 of 5 tasks (7 of 10 attempts); 1 infrastructure; 1 quarantined: t5 (preflight_failed)"


def result_of(task_id: str, attempt: int, outcome) -> RunResult:
    """An attempt's result.json, as the run and evaluate stages make it."""
    if outcome == "infrastructure":
        exc = ImageMissingError("image swebench/sweb.eval.x86_64.demo_1776_calc-3 is not on the engine")
        return failures.failed(error_result(task_id, attempt, "run", exc), exc, "run")
    if outcome == "harness":
        return failures.classified(error_result(task_id, attempt, "run", ValueError("the agent gave up")), "run")
    if outcome == "quarantined":
        return preflight.quarantined_result(task_id, attempt, {"reason": "preflight_failed", "error": "no image"})
    score = float(outcome)
    # what the Benchmarks' own aggregates read besides the verdict: task_dir's rewards, majority_vote's samples
    return RunResult(task_id=task_id, attempt=attempt, answer="a", correct=outcome, score=score,
                     usage={"calls": 1, "prompt_tokens": 10, "completion_tokens": 2},
                     metadata={"verifier": {"rewards": {"reward": score}}, "sample_accuracy": score})


def build(root: Path, benchmark: str, outcomes: dict) -> tuple[RunRequest, Path, dict]:
    """A run folder of ``outcomes`` (attempts absent from a task's list have no result.json) and its metrics.json."""
    req = RunRequest(model=ModelSpec(), benchmark=BenchmarkSpec(benchmark), harness=HarnessSpec("fixed_answer"),
                     execution=ExecutionSpec(attempts=2))
    req.metadata.request_name = benchmark
    run = root / benchmark
    # bfcl names a task's category in its id (category_of_id): live_simple_3 is in live_simple
    write_json(layout.tasks_file(run), TasksFile(benchmark, benchmark, [
        TaskSpec(task_id=t, category="even" if int(t[1]) % 2 == 0 else "odd") for t in OUTCOMES]).to_dict())
    write_json(layout.request_file(run), req.to_dict())
    paths = []
    for task_id, attempts in outcomes.items():
        for n, outcome in enumerate(attempts, 1):
            path = Path(layout.result_file(layout.attempt_folder(run, task_segment(task_id), n)))
            write_json(path, result_of(task_id, n, outcome).to_dict())
            paths.append(path)
    summary.write_metrics(RequestJob(req, str(run), outputs={"metrics": str(layout.metrics_file(run))}, stage="metrics"),
                          paths)
    return req, run, json.loads(Path(layout.metrics_file(run)).read_text())


@pytest.mark.parametrize("benchmark", sorted(BENCHMARKS))
def test_every_figure_of_every_benchmark_leaves_out_infrastructure_and_quarantine(benchmark, tmp_path):
    _, run, metrics = build(tmp_path / "with", benchmark, OUTCOMES)
    _, _, alone = build(tmp_path / "without", benchmark, COUNTED)
    # the Benchmark's own figures are those of the same run without what was left out, whatever they are
    assert metrics["metrics"] == alone["metrics"], benchmark
    assert metrics["metrics"]["accuracy"] == pytest.approx(ACCURACY)
    assert metrics["metrics"]["mean_score"] == pytest.approx(ACCURACY)
    # pass@1 per task; a task_dir reward over the attempts whose verifier wrote one (not the harness error)
    expected = {"pass@1": PASS_AT_1, "sample_accuracy": ACCURACY, "rewards/reward": 4 / 6}
    for key in expected.keys() & metrics["metrics"].keys():
        assert metrics["metrics"][key] == pytest.approx(expected[key]), key
    # the summary counts the same attempts: its accuracy is the Benchmark's, its pass@1 the same per-task mean
    overall = metrics["summary"]["overall"]
    assert overall["accuracy"] == pytest.approx(metrics["metrics"]["accuracy"])
    assert overall["counted"] == 7 and overall["pass_at_k"] == {"1": pytest.approx(PASS_AT_1)}
    by_category = metrics["summary"]["by_category"]
    assert by_category["odd"]["accuracy"] == pytest.approx(3 / 3) and by_category["odd"]["counted"] == 3
    assert by_category["even"]["accuracy"] == pytest.approx(1 / 4) and by_category["even"]["counted"] == 4
    # every failed attempt is still counted as one, and its usage: the infrastructure failure is the run's
    assert overall["attempts"] == 8 and overall["failures"] == {"infrastructure": 1, "harness": 1}
    assert metrics["counts"] == {"completed": 6, "run_error": 2} and metrics["num_attempts"] == 8
    # and the figures say what they are over
    assert metrics["scored_on"] == {"tasks": 5, "scored": 4, "attempts": 10, "counted": 7, "infrastructure": 1,
                                    "skipped": 0, "quarantined": [{"task_id": "t5", "reason": "preflight_failed",
                                                                   "error": "no image"}]}
    assert results.denominator_line(metrics["scored_on"]) == LINE
    # agentcompass runs: from metrics.json, and from the result files before it is written
    line = _scored(results.overview(results.open_run(run))["scored_on"])
    assert line == "4/5 tasks (7/10 attempts; 1 infrastructure; 1 quarantined)"
    Path(layout.metrics_file(run)).unlink()
    computed = results.overview(results.open_run(run))
    assert computed["accuracy"] == pytest.approx(ACCURACY) and _scored(computed["scored_on"]) == line
    assert results.scored_on(results.rows(results.open_run(run)))["quarantined"] == metrics["scored_on"]["quarantined"]


def test_the_report_and_compare_count_the_attempts_metrics_count(tmp_path):
    _, run, metrics = build(tmp_path / "with", "example_exact_match", OUTCOMES)
    _, other, _ = build(tmp_path / "healed", "example_exact_match", {**OUTCOMES, "t3": [True, True]})
    page = report.build(run).read_text()
    assert f"scored {LINE}." in page and f"{ACCURACY:.3f}" in page
    Path(layout.metrics_file(run)).unlink()  # a run not finished: the page computes the same figures
    page = report.build(run).read_text()
    assert f"scored {LINE}." in page and f"{ACCURACY:.3f}" in page
    # compare pairs only attempts counted in both (t3's second attempt and t5's are left out, and said so),
    # against a run whose t3 did not meet the infrastructure failure
    [pair] = compare.compare([run, other], resamples=10)
    assert pair.paired == 7 and (pair.infrastructure, pair.quarantined) == (1, 2)
    accuracy = next(m for m in pair.metrics if m.name == "accuracy")
    assert accuracy.a == pytest.approx(metrics["metrics"]["accuracy"]) and accuracy.b == pytest.approx(ACCURACY)
    assert "left out: 1 infrastructure (in A or B), 2 quarantined by preflight (in A or B)" in compare.render([pair])
    # export: each attempt says whether it counts
    frame = results.load(run)
    assert sorted(frame.left_out.fillna("-")) == ["-"] * 7 + ["infrastructure", "quarantined", "quarantined"]
