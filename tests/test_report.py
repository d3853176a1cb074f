"""The report as a file of the workflow: built after metrics.json, reused and rebuilt by the same
rule, rebuilt by `agentcompass report`, and held by `snakemake --report` (the browser's view of
it is tests/browser/)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from agentcompass import report, results
from conftest import agentcompass, jobs_run, snakemake

RUN = Path("results/default/example-oracle")
CHARTS = ["categories.svg", "scores.svg", "errors.svg", "tokens.svg"]


@pytest.fixture
def evaluated(default_run: Path) -> Path:
    """README's command 1: the default evaluation, built in a fresh directory once a session (conftest.default_run)."""
    return default_run


@pytest.fixture
def copy(default_run_copy: Path) -> Path:
    """The evaluated directory, copied for a test that changes it."""
    return default_run_copy


def attempts_data(report_dir: Path) -> dict:
    text = (report_dir / "data" / "attempts.js").read_text()
    return json.loads(text[text.index("=") + 1:].rstrip().rstrip(";"))


@pytest.mark.smoke  # the report of a real run
def test_the_default_evaluation_writes_its_report(evaluated: Path):
    folder = evaluated / RUN / "report"
    index = (folder / "index.html").read_text()
    assert "example-oracle" in index and "5 of 5" in index
    for name in CHARTS:
        svg = (folder / name).read_text()
        assert svg.startswith("<svg") and svg in index  # drawn inline, and a file of its own
    table = attempts_data(folder)
    assert sorted(row[0] for row in table["rows"]) == sorted(
        ["capital-france", "capital-japan", "largest-planet", "water-formula", "author-hamlet"])
    pages = sorted(p.name for p in (folder / "data" / "attempts").iterdir())
    assert pages == ["author-hamlet.1.js", "capital-france.1.js", "capital-japan.1.js", "largest-planet.1.js",
                     "water-formula.1.js"]
    # nothing the page loads is off this machine: no http(s) address in any of its files
    for path in folder.rglob("*"):
        if path.is_file():
            assert not re.search(r"(src|href)=[\"']?(https?:)?//", path.read_text()), path


def test_the_report_is_reused_and_rebuilt_by_the_reuse_rule(copy: Path):
    index = copy / RUN / "report" / "index.html"
    stamp = index.stat().st_mtime_ns
    assert jobs_run(snakemake(copy).stderr) == {}
    assert index.stat().st_mtime_ns == stamp
    # a chart deleted: the report alone is built again
    (copy / RUN / "report" / "errors.svg").unlink()
    assert jobs_run(snakemake(copy).stderr) == {"report": 1}
    # a result changed: its evaluation, the metrics, then the report
    (copy / RUN / "attempts" / "capital-japan" / "1" / "result.json").unlink()
    assert jobs_run(snakemake(copy).stderr) == {"evaluate": 1, "metrics": 1, "report": 1}
    assert jobs_run(snakemake(copy).stderr) == {}


def test_status_names_the_report_when_it_would_rerun(copy: Path):
    (copy / RUN / "report" / "index.html").unlink()
    done = agentcompass(copy, "status")
    assert done.returncode == 0, done.stderr
    assert "report/index.html x1: missing" in done.stdout


def test_agentcompass_report_rebuilds_and_prints_the_path(copy: Path):
    shutil.rmtree(copy / RUN / "report")
    done = agentcompass(copy, "report", str(RUN))
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"{RUN / 'report' / 'index.html'}\n"
    assert all((copy / RUN / "report" / name).exists() for name in CHARTS)
    # no argument: every run under results/
    again = agentcompass(copy, "report")
    assert again.returncode == 0 and again.stdout == done.stdout
    # the run's files are what counts: the workflow sees nothing to do
    assert jobs_run(snakemake(copy).stderr) == {}


def test_agentcompass_report_of_a_run_that_has_not_finished(copy: Path):
    (copy / RUN / "attempts" / "water-formula" / "1" / "result.json").unlink()
    (copy / RUN / "attempts" / "water-formula" / "1" / "output.json").unlink()
    done = agentcompass(copy, "report", str(RUN))
    assert done.returncode == 0, done.stderr
    index = (copy / RUN / "report" / "index.html").read_text()
    assert "4 of 5" in index and "metrics.json does not count the attempts on disk" in index
    rows = {row[0]: row for row in attempts_data(copy / RUN / "report")["rows"]}
    assert rows["water-formula"][3] == "missing"
    # prepared.json is still there: the attempt still has its page
    assert rows["water-formula"][-1] == "water-formula/1"


def test_agentcompass_report_waits_for_a_run_building_the_folder(copy: Path):
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from agentcompass.pipeline import locks; "
         "locks.acquire(sys.argv[1]); print('held', flush=True); time.sleep(60)", str(copy / RUN)],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        busy = agentcompass(copy, "report", str(RUN))
    finally:
        holder.kill()
        holder.wait()
    assert busy.returncode == 4 and f"pid {holder.pid}" in busy.stderr and "Traceback" not in busy.stderr
    assert agentcompass(copy, "report", str(RUN)).returncode == 0


def test_agentcompass_report_says_what_is_wrong(copy: Path):
    nowhere = agentcompass(copy, "report", "results/default/nope")
    assert nowhere.returncode == 2
    assert "results/default/nope does not exist" in nowhere.stderr and "Traceback" not in nowhere.stderr
    (copy / "empty").mkdir()
    empty = agentcompass(copy, "report", "empty")
    assert empty.returncode == 2 and "no run found in empty" in empty.stderr
    (copy / RUN / "tasks.json").write_text("{not json")
    broken = agentcompass(copy, "report", str(RUN))
    assert broken.returncode == 1 and "cannot be read" in broken.stderr and "Traceback" not in broken.stderr


def test_snakemake_report_holds_the_charts(copy: Path):
    done = snakemake(copy, "--report", "report.html")
    assert done.returncode == 0, done.stderr[-3000:]
    for name in CHARTS:
        assert f"Adding {name}" in done.stderr
    assert (copy / "report.html").stat().st_size > 0
    assert jobs_run(snakemake(copy).stderr) == {}


def test_the_figures_come_from_the_summary_of_metrics_json(copy: Path):
    stats = {"attempts": 5, "counts": {"completed": 5}, "errors": {}, "accuracy": 0.8, "accuracy_ci95": [0.376, 0.964],
             "pass_at_k": {"1": 0.8, "3": 0.9}, "calls": 7, "prompt_tokens": 1200, "completion_tokens": 345,
             "latency_seconds": {"mean": 1.5, "p50": 1.25, "p95": 3.0},
             "wall_seconds": {"mean": 2.0, "p50": 1.75, "p95": 4.0}, "cost_usd": 0.0123, "counted": 5}
    metrics_file = copy / RUN / "metrics.json"
    metrics = json.loads(metrics_file.read_text())
    metrics["summary"] = {"overall": stats, "by_category": {"geography": {**stats, "accuracy": 0.25}}}
    metrics_file.write_text(json.dumps(metrics))
    index = report.build(copy / RUN).read_text()
    for shown in ("0.800", "95% interval 0.376\u20130.964 (Wilson)", "pass@3", "0.900", "1,545", "$0.0123",
                  "1.25 s", "mean 1.50 s, p95 3.00 s", "1.75 s", "0.250 (n=5)"):
        assert shown in index, shown
    # a summary that counts other attempts than those on disk is not shown
    metrics["counts"] = {"completed": 4, "run_error": 1}
    metrics_file.write_text(json.dumps(metrics))
    index = report.build(copy / RUN).read_text()
    assert "pass@3" not in index and "metrics.json does not count the attempts on disk" in index


def test_what_a_run_says_is_written_as_text(copy: Path):
    """Task categories, errors and answers come from benchmarks and models: none is markup."""
    run = copy / RUN
    tasks = json.loads((run / "tasks.json").read_text())
    tasks["tasks"][0]["category"] = "<script>window.bad=1</script>"
    (run / "tasks.json").write_text(json.dumps(tasks))
    result_file = run / "attempts" / "capital-japan" / "1" / "result.json"
    result = json.loads(result_file.read_text())
    result.update(status="eval_error", error="<img src=x onerror=alert(1)> broke", correct=None, score=None)
    result_file.write_text(json.dumps(result))
    index = report.build(run).read_text()
    assert "<script>window.bad" not in index and "&lt;script&gt;window.bad=1&lt;/script&gt;" in index
    assert "<img src=x" not in index and "&lt;img src=x onerror=alert(N)&gt; broke" in index
    for name in CHARTS:
        assert "<script>" not in (run / "report" / name).read_text()


def test_results_attempt_reads_everything_of_an_attempt_folder(tmp_path: Path):
    folder = tmp_path / "attempts" / "t" / "1"
    (folder / "workspace").mkdir(parents=True)
    (folder / "workspace" / "big.bin").write_bytes(b"\0" * 100)
    (folder / "verifier").mkdir()
    (folder / "verifier" / "reward.txt").write_text("1\n")
    (folder / "result.json").write_text(json.dumps({"task_id": "t", "status": "completed"}))
    (folder / "trajectory.jsonl").write_text('{"type": "model_call"}\nnot json\n\n')
    (folder / "run.log").write_text("x" * 50 + "the end\n")
    (folder / "core").write_bytes(b"\0\1\2")
    (folder / ".result.json.1-2.tmp").write_text("half")
    record = results.attempt(folder, text_limit=20)
    assert record["result"] == {"task_id": "t", "status": "completed"} and record["prepared"] is None
    assert record["trajectory"] == [{"type": "model_call"}, {"unparsed": "not json"}]
    assert record["logs"] == {"run.log": "[the first 38 of 58 bytes are left out]\n" + "x" * 12 + "the end\n"}
    assert record["files"] == {"core": "[a binary file of 3 bytes]", "verifier/reward.txt": "1\n"}
    assert results.error_kind("run_error", "HTTP 503 after 2.5 s\ntraceback") == "run_error: HTTP N after N s"


def test_the_index_page_charts_failures_by_class(copy: Path):
    def failures_section(index: str) -> str:
        section = index[index.index('<section id="failures">'):]
        return section[:section.index("</section>")]

    index = (copy / RUN / "report" / "index.html").read_text()
    assert 'id="chart-failures"' in failures_section(index) and "no failures" in failures_section(index)
    metrics_file = copy / RUN / "metrics.json"
    metrics = json.loads(metrics_file.read_text())
    metrics["summary"]["overall"]["failures"] = {"endpoint": 2, "limit": 1}
    metrics_file.write_text(json.dumps(metrics))
    shown = failures_section(report.build(copy / RUN).read_text())
    assert 'id="chart-failures"' in shown and "no failures" not in shown
    # the classes in the taxonomy's order, each a bar of the chart and a row of the table
    assert shown.index("<td>endpoint</td>") < shown.index("<td>limit</td>")
    assert re.search(r"<svg[^>]*>.*endpoint.*limit.*</svg>", shown, re.S)
