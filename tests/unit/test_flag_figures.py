"""The one count of flags (``results.flag_counts``, ``results.flag_figures``): on hand-made rows, and through the
metrics stage's body for every built-in Benchmark, whose figures over the unflagged attempts must be those of
the same run without the flagged ones."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentcompass import layout, results
from agentcompass._util.jsonio import write_json
from agentcompass.layout import task_segment
from agentcompass.pipeline import preflight
from agentcompass.pipeline.bodies import summary
from agentcompass.pipeline.files import TasksFile
from agentcompass.pipeline.jobs import RequestJob
from agentcompass.plugins import load_builtin_components
from agentcompass.runtime.models import (
    BenchmarkSpec,
    ExecutionSpec,
    HarnessSpec,
    MetricResult,
    ModelSpec,
    RunRequest,
    RunResult,
    ScannerSpec,
    ScanFinding,
    ScanRecord,
    TaskSpec,
)
from agentcompass.runtime.models.codec import from_dict
from agentcompass.runtime.models.result import FlagFigures
from agentcompass.runtime.registry import BENCHMARKS

load_builtin_components()


def finding(scanner: str, flagged: bool, category: str | None = None, error: str | None = None) -> ScanFinding:
    return ScanFinding(id=scanner, version="1", flagged=flagged, category=category or scanner,
                       confidence=0.9 if flagged else 0.0, error=error)


def scan(task_id: str, attempt: int, *findings: ScanFinding) -> dict:
    """A scan.json, as the scan stage writes it."""
    return ScanRecord(task_id=task_id, attempt=attempt, flagged=any(f.flagged for f in findings),
                      scanners=list(findings)).to_dict()


def row(task_id: str, attempt: int = 1, scan_record: dict | None = None, status: str = "completed",
        correct: bool | None = True, category: str = "c", **more) -> dict:
    """A row of ``results.rows`` with its flag columns from ``scan_record`` (``results.flag_columns``)."""
    base = {column: None for column in results.COLUMNS}
    base.update(task_id=task_id, attempt=attempt, status=status, correct=correct, score=float(bool(correct)),
                category=category, retries_used=0, **more)
    base.update(results.flag_columns(scan_record))
    base["left_out"] = results.left_out(base)
    return base


# a: flagged by gave_up; b: by gave_up and a second scanner of the same category, and by network;
# c: clean, though network could not read it; q: quarantined (ran nothing, counts nowhere); m: not finished;
# u: finished and not scanned (yet)
SCANS = {
    ("a", 1): scan("a", 1, finding("gave_up", True), finding("quits", False, "gave_up"), finding("network", False)),
    ("b", 1): scan("b", 1, finding("gave_up", True), finding("quits", True, "gave_up"), finding("network", True)),
    ("c", 1): scan("c", 1, finding("gave_up", False), finding("quits", False, "gave_up"),
                   finding("network", False, error="trajectory.jsonl: unreadable")),
    ("q", 1): scan("q", 1, finding("gave_up", True), finding("quits", False, "gave_up"), finding("network", False)),
}
TABLE = [
    row("a", 1, SCANS[("a", 1)], correct=False),
    row("b", 1, SCANS[("b", 1)], correct=False, category="d"),
    row("c", 1, SCANS[("c", 1)]),
    row("q", 1, SCANS[("q", 1)], status="skipped", correct=None, error_stage=results.QUARANTINE_STAGE),
    row("m", 1, None, status=results.MISSING, correct=None),
    row("u", 1, None),
]


def test_flag_counts_count_the_rows_flag_columns_and_the_scanners_categories_and_errors():
    counts = results.flag_counts(TABLE, SCANS)
    assert counts == {
        "scanned": 3, "flagged": 2,  # q ran nothing, m has not finished, u has no scan.json
        "scanners": {"gave_up": {"category": "gave_up", "flagged": 2, "errors": 0},
                     "quits": {"category": "gave_up", "flagged": 1, "errors": 0},
                     "network": {"category": "network", "flagged": 1, "errors": 1}},
        "categories": {"gave_up": 2, "network": 1},  # b once under gave_up, though two of its scanners flagged it
    }
    # counted from the columns: a row whose flags column names a scanner counts it, whatever scans say
    edited = [{**r, "flags": "gave_up"} if r["task_id"] == "c" else r for r in TABLE]
    assert results.flag_counts(edited, SCANS)["scanners"]["gave_up"]["flagged"] == 3


def test_flag_figures_put_the_unflagged_figures_beside_the_counts_and_change_no_row():
    seen: list[list[str]] = []

    def aggregate(rows: list[dict]) -> dict:
        seen.append([r["task_id"] for r in rows])
        return {"accuracy": sum(r["correct"] is True for r in rows) / len(rows)}

    before = json.dumps(TABLE)
    figures = results.flag_figures(TABLE, SCANS, None, aggregate)
    assert json.dumps(TABLE) == before
    assert seen == [["c"]]  # no scanner flagged it, and it was scanned (u was not: it is not known to be clean)
    assert figures["unflagged"]["metrics"] == {"accuracy": 1.0}
    overall = figures["unflagged"]["summary"]["overall"]
    assert (overall["attempts"], overall["accuracy"]) == (1, 1.0)
    assert list(figures["unflagged"]["summary"]["by_category"]) == ["c"]
    # every attempt's summary is another function's, and still counts the flagged ones
    assert results.summary(TABLE)["overall"]["accuracy"] == pytest.approx(2 / 4)
    # the contract takes it as the metrics stage writes it
    assert from_dict(FlagFigures, figures, "flags").flagged == 2


def test_a_metric_result_without_flags_is_written_as_before():
    plain = MetricResult(benchmark_id="b", metrics={}, counts={}, num_tasks=0, num_attempts=0)
    assert "flags" not in plain.to_dict()
    assert MetricResult.from_dict(plain.to_dict()).flags is None


def test_the_last_line_names_each_scanner_and_its_errors_printably():
    flags = {"flagged": 2, "scanners": {"gave_up": {"flagged": 2, "errors": 0},
                                        "net\x1b[31m": {"flagged": 0, "errors": 3}}}
    assert results.flags_line(flags) == r"2 flagged (gave_up 2, net\x1b[31m 0); scanner errors: net\x1b[31m 3"
    assert results.flags_line(None) == ""


# --- through the metrics stage's body --------------------------------------------------------------------

# per task: (correct, flagged by gave_up) of each of its 2 attempts; t4 is quarantined by preflight
ATTEMPTS = {"t1": [(True, False), (True, True)], "t2": [(False, True), (True, False)],
            "t3": [(True, False), (False, False)], "t4": [("quarantined", False), ("quarantined", False)]}


def result_of(task_id: str, attempt: int, correct) -> RunResult:
    if correct == "quarantined":
        return preflight.quarantined_result(task_id, attempt, {"reason": "preflight_failed", "error": "no image"})
    score = float(correct)
    return RunResult(task_id=task_id, attempt=attempt, answer="a", correct=correct, score=score,
                     usage={"calls": 1, "prompt_tokens": 10, "completion_tokens": 2},
                     metadata={"verifier": {"rewards": {"reward": score}}, "sample_accuracy": score})


def build(root: Path, benchmark: str, attempts: dict, scanned: bool) -> tuple[Path, dict]:
    """A run folder of ``attempts`` (with their scan.json when ``scanned``) and the metrics.json the stage writes."""
    req = RunRequest(model=ModelSpec(), benchmark=BenchmarkSpec(benchmark), harness=HarnessSpec("fixed_answer"),
                     execution=ExecutionSpec(attempts=2), scanners=[ScannerSpec("gave_up")] if scanned else None)
    req.metadata.request_name = benchmark
    write_json(layout.tasks_file(root), TasksFile(benchmark, benchmark, [
        TaskSpec(task_id=t, category="even" if int(t[1]) % 2 == 0 else "odd") for t in ATTEMPTS]).to_dict())
    write_json(layout.request_file(root), req.to_dict())
    paths = []
    for task_id, each in attempts.items():
        for n, (correct, flagged) in enumerate(each, 1):
            folder = layout.attempt_folder(root, task_segment(task_id), n)
            write_json(layout.result_file(folder), result_of(task_id, n, correct).to_dict())
            if scanned:
                write_json(Path(folder) / results.SCAN_FILE, scan(task_id, n, finding("gave_up", flagged)))
            paths.append(Path(layout.result_file(folder)))
    summary.write_metrics(RequestJob(req, str(root), outputs={"metrics": str(layout.metrics_file(root))},
                                     stage="metrics"), paths)
    return root, json.loads(Path(layout.metrics_file(root)).read_text())


@pytest.mark.parametrize("benchmark", sorted(BENCHMARKS))
def test_the_unflagged_figures_are_those_of_the_run_without_the_flagged_attempts(benchmark, tmp_path):
    run, metrics = build(tmp_path / "scanned", benchmark, ATTEMPTS, scanned=True)
    kept = {t: [a for a in each if not a[1]] for t, each in ATTEMPTS.items()}
    _, alone = build(tmp_path / "alone", benchmark, {t: each for t, each in kept.items() if each}, scanned=False)
    _, unscanned = build(tmp_path / "unscanned", benchmark, ATTEMPTS, scanned=False)
    flags = metrics["flags"]
    assert (flags["scanned"], flags["flagged"]) == (6, 2) and flags["categories"] == {"gave_up": 2}
    assert flags["unflagged"]["metrics"] == alone["metrics"], benchmark
    assert flags["unflagged"]["summary"] == alone["summary"]
    # the figures over every attempt are those of the run without scanners, and it has no flags
    assert "flags" not in unscanned
    assert {k: v for k, v in metrics.items() if k != "flags"} == unscanned
    # runs: from metrics.json, and counted from the files once it is gone
    assert results.overview(results.open_run(run))["flagged"] == 2
    Path(layout.metrics_file(run)).unlink()
    assert results.overview(results.open_run(run))["flagged_by"] == {"gave_up": 2}
    assert results.overview(results.open_run(tmp_path / "unscanned"))["flagged"] is None
