"""Results a person can read: metrics.json's summary, `agentcompass runs` and `export`, results.load.

One real run (the CLI, Snakemake, the chat harness against a scripted endpoint
on 127.0.0.1) is checked number by number against what the endpoint did.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from agentcompass import results
from agentcompass.testing.endpoint import Reply, ScriptedEndpoint, completion
from conftest import agentcompass, clean_env

ANSWERS = {"France": "Paris", "Japan": "Tokyo", "planet": "Jupiter", "water": "H2O", "Hamlet": "Shakespeare"}
PRICING = {"input_per_million": 2.5, "output_per_million": 10.0}
DELAY = 0.05  # seconds each reply waits: the latency every attempt must show at least


class Model:
    """Right the first time each question is asked, wrong the second; always 500 for water.

    Every reply's usage is different (its prompt tokens are the question's
    length, its completion tokens the call's number), and recorded in ``sent``.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.asked: dict[str, int] = {}
        self.sent: list[dict] = []

    def __call__(self, body):
        question = body["messages"][-1]["content"]
        needle = next(n for n in ANSWERS if n in question)
        if needle == "water":
            return Reply(500, {"error": {"message": "scripted failure"}}, delay=DELAY)
        with self.lock:
            self.asked[needle] = self.asked.get(needle, 0) + 1
            usage = {"prompt_tokens": len(question), "completion_tokens": len(self.sent) + 1}
            self.sent.append(usage)
        answer = ANSWERS[needle] if self.asked[needle] == 1 else "no idea"
        return Reply(200, {**completion(answer), "usage": {**usage, "total_tokens": sum(usage.values())}}, delay=DELAY)


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """One run of 5 tasks x 2 attempts with prices and the results_table analyzer on, and its endpoint."""
    workdir = tmp_path_factory.mktemp("results") / "work"
    workdir.mkdir()
    model = Model()
    with ScriptedEndpoint(model) as endpoint:
        config = workdir / "eval.yaml"
        config.write_text(json.dumps({
            "requests": {"priced": {
                "benchmark": "example_exact_match", "harness": "chat",
                "model": {"id": "scripted", "base_url": endpoint.base_url, "pricing": PRICING},
                "execution": {"attempts": 2, "analyzers": ["results_table"]},
            }},
            "harnesses": {"chat": {"max_model_retries": 1, "retry_backoff": 0}},
        }))
        done = agentcompass(workdir, "run", "--config", str(config))
    assert done.returncode == 1, done.stdout + done.stderr[-3000:]  # water's two attempts failed
    return workdir, model, endpoint


def run_dir(workdir: Path) -> Path:
    return workdir / "results/default/priced"


def test_the_summary_counts_what_the_endpoint_did(finished):
    workdir, model, endpoint = finished
    metrics = json.loads((run_dir(workdir) / "metrics.json").read_text())
    summary = metrics["summary"]
    overall = summary["overall"]
    prompt = sum(u["prompt_tokens"] for u in model.sent)
    completion_tokens = sum(u["completion_tokens"] for u in model.sent)
    assert overall["attempts"] == 10
    assert overall["counts"] == {"completed": 8, "run_error": 2}
    # each water attempt: a first call and one retry, both 500
    assert overall["errors"] == {
        'run_error: model call failed after N tries; last error: HTTP N: {"error": {"message": "scripted failure"}}': 2}
    assert overall["calls"] == len(endpoint.requests) == 8 + 4
    assert (overall["prompt_tokens"], overall["completion_tokens"]) == (prompt, completion_tokens)
    assert isinstance(overall["prompt_tokens"], int) and isinstance(overall["completion_tokens"], int)
    assert overall["cost_usd"] == pytest.approx((prompt * 2.5 + completion_tokens * 10.0) / 1e6, rel=1e-12)
    # 4 right of the 10 attempts: an endpoint error is wrong, as in the Benchmark's own accuracy (only an
    # infrastructure failure or a quarantined task is left out)
    assert overall["accuracy"] == metrics["metrics"]["accuracy"] == 0.4 and overall["counted"] == 10
    assert overall["accuracy_ci95"] == pytest.approx([0.16818, 0.687326], abs=1e-6)
    # per task: 1 right of 2, water 0 of 2 (an error is a failed sample)
    assert overall["pass_at_k"] == {"1": pytest.approx(0.4), "2": pytest.approx(0.8)}
    for spread in (overall["latency_seconds"], overall["wall_seconds"]):
        assert spread["mean"] >= DELAY and DELAY <= spread["p50"] <= spread["p95"]

    science = summary["by_category"]["science"]
    assert set(summary["by_category"]) == {"geography", "science", "literature"}
    assert (science["attempts"], science["counts"], science["accuracy"]) == (4, {"completed": 2, "run_error": 2}, 0.25)
    assert science["pass_at_k"] == {"1": pytest.approx(0.25), "2": pytest.approx(0.5)}
    assert science["accuracy_ci95"] == pytest.approx([0.045587, 0.699358], abs=1e-6)
    assert summary["by_category"]["literature"]["pass_at_k"] == {"1": 0.5, "2": 1.0}
    assert sum(c["calls"] for c in summary["by_category"].values()) == overall["calls"]
    assert sum(c["cost_usd"] for c in summary["by_category"].values()) == pytest.approx(overall["cost_usd"])


def test_latency_and_wall_time_are_those_of_the_attempts(finished):
    workdir, _, _ = finished
    overall = json.loads((run_dir(workdir) / "metrics.json").read_text())["summary"]["overall"]
    frame = results.load(run_dir(workdir))
    # every attempt waited on the model, and less than its run took
    assert (frame.latency_seconds >= DELAY).all() and (frame.latency_seconds <= frame.run_seconds).all()
    wall = frame.run_seconds + frame.evaluate_seconds.fillna(0)
    for column, values in (("latency_seconds", frame.latency_seconds), ("wall_seconds", wall)):
        assert overall[column] == pytest.approx({
            "mean": values.mean(), "p50": np.percentile(values, 50), "p95": np.percentile(values, 95)}, abs=1e-6)


def test_summary_statistics_on_known_cases():
    # Wilson 95%: 4 of 5 is [0.3755, 0.9638]; 0 of 10 and 10 of 10 reach the bounds exactly
    assert results.wilson_interval(4, 5) == pytest.approx([0.375535, 0.963776], abs=1e-6)
    assert results.wilson_interval(0, 10) == [0.0, pytest.approx(0.277533, abs=1e-6)]
    assert results.wilson_interval(10, 10)[1] == 1.0
    assert results.wilson_interval(0, 0) is None
    assert results.pass_at_k(5, 1, 1) == pytest.approx(0.2)
    assert results.pass_at_k(5, 1, 2) == pytest.approx(1 - math.comb(4, 2) / math.comb(5, 2))
    assert results.spread([4.0, 1.0, 3.0, 2.0]) == {"mean": 2.5, "p50": 2.5, "p95": 3.85}
    assert results.error_kind("run_error", "HTTP 429 after 3.5 s\ntraceback...") == "run_error: HTTP N after N s"
    assert results.error_kind("eval_error", None) == "eval_error: no message"
    # a digest is one id, not digits among letters: the replay misses of two calls are one kind
    assert results.error_kind("run_error", "call 2 (request 3fa2b1c9d0e4, occurrence 0)") == \
        results.error_kind("run_error", "call 3 (request 9e0d41c2ab07, occurrence 1)") == \
        "run_error: call N (request H, occurrence N)"


def test_no_prices_no_cost_and_a_run_without_a_model_has_no_latency(workdir: Path):
    done = agentcompass(workdir, "run", "example_exact_match", "oracle", "none", "--attempts", "3")
    assert done.returncode == 0, done.stderr[-3000:]
    overall = json.loads((workdir / "results/default/example_exact_match-oracle-none/metrics.json").read_text())[
        "summary"]["overall"]
    assert overall["cost_usd"] is None and overall["latency_seconds"] is None and overall["calls"] == 0
    assert overall["accuracy"] == 1.0 and overall["accuracy_ci95"] == [pytest.approx(0.796117, abs=1e-6), 1.0]
    assert overall["pass_at_k"] == {"1": 1.0, "2": 1.0, "3": 1.0}
    assert overall["wall_seconds"]["mean"] > 0


def test_the_analyzer_writes_the_rows_of_results_load(finished):
    workdir, _, _ = finished
    reports = run_dir(workdir) / "reports/results_table"
    table = pd.read_csv(reports / "results.csv")
    assert list(table.columns) == results.COLUMNS and len(table) == 10
    assert table.prompt_tokens.sum() == results.load(run_dir(workdir)).prompt_tokens.sum()
    by_status = pd.read_csv(reports / "by_status.csv")
    assert dict(zip(by_status.status, by_status.attempts)) == {"completed": 8, "run_error": 2}


def test_runs_lists_each_run_with_its_progress_and_cost(finished):
    workdir, _, _ = finished
    listed = agentcompass(workdir, "runs", "--json")
    assert listed.returncode == 0, listed.stderr
    [run] = json.loads(listed.stdout)
    summary = json.loads((run_dir(workdir) / "metrics.json").read_text())["summary"]["overall"]
    assert {k: run[k] for k in ("namespace", "run_id", "benchmark", "harness", "model", "attempts_done",
                                "attempts_total", "errors", "failures", "accuracy")} == {
        "namespace": "default", "run_id": "priced", "benchmark": "example_exact_match", "harness": "chat",
        "model": "scripted", "attempts_done": 10, "attempts_total": 10, "errors": 2, "failures": {"endpoint": 2},
        "accuracy": 0.4}
    assert run["cost_usd"] == pytest.approx(summary["cost_usd"])
    newest = max(p.stat().st_mtime for p in run_dir(workdir).rglob("*") if p.is_file())
    assert abs(pd.Timestamp(run["last_change"]).timestamp() - newest) < 1

    text = agentcompass(workdir, "runs")
    assert text.returncode == 0, text.stderr
    header, line = text.stdout.splitlines()
    assert header.split()[:3] == ["namespace", "run", "id"]
    assert line.split()[:11] == ["default", "priced", "example_exact_match", "chat", "scripted", "10/10", "2",
                                 "endpoint=2", "0.400", "5/5", "tasks"]  # scored on: every task, none left out
    cost = line.split()[11]
    assert cost.startswith("$") and float(cost[1:]) == pytest.approx(summary["cost_usd"], rel=1e-3)


def test_runs_shows_a_run_in_progress_and_when_it_last_changed(tmp_path: Path, finished):
    workdir, _, _ = finished
    copy = tmp_path / "results/default/priced"
    shutil.copytree(run_dir(workdir), copy)
    (copy / "attempts/capital-france/2/result.json").unlink()
    later = time.time() + 3600
    os.utime(copy / "tasks.json", (later, later))
    listed = agentcompass(tmp_path, "runs", "results", "--json")
    [run] = json.loads(listed.stdout)
    assert (run["run_id"], run["attempts_done"], run["attempts_total"], run["errors"]) == ("priced", 9, 10, 2)
    assert pd.Timestamp(run["last_change"]).timestamp() == pytest.approx(int(later))
    missing = agentcompass(tmp_path, "runs", "nowhere")
    assert missing.returncode == 2 and "nowhere does not exist" in missing.stderr and "Fix:" in missing.stderr


def test_runs_lists_a_finished_run_from_its_summary(tmp_path: Path, finished):
    """A run whose metrics.json was written after every result.json is listed from metrics.json's summary:
    no result.json is read. One written after it has the figures computed from the results again."""
    workdir, _, _ = finished
    [expected] = json.loads(agentcompass(workdir, "runs", "--json").stdout)
    copy = tmp_path / "results/default/priced"
    shutil.copytree(run_dir(workdir), copy)  # the files' times too
    result = copy / "attempts/capital-france/2/result.json"
    stamp = result.stat()
    result.unlink()
    result.mkdir()  # a folder in its place: reading it as a file fails
    os.utime(result, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))
    listed = agentcompass(tmp_path, "runs", "results", "--json")
    assert listed.returncode == 0, listed.stderr
    [run] = json.loads(listed.stdout)
    assert {k: v for k, v in run.items() if k != "path"} == {k: v for k, v in expected.items() if k != "path"}
    os.utime(result)  # now: after metrics.json
    again = agentcompass(tmp_path, "runs", "results", "--json")
    assert again.returncode == 2 and "result.json is not a file agentcompass wrote" in again.stderr, again.stderr


def test_export_writes_what_results_load_returns(finished, tmp_path: Path):
    workdir, _, _ = finished
    expected = results.load(run_dir(workdir))

    csv = agentcompass(workdir, "export", str(run_dir(workdir)))
    assert csv.returncode == 0, csv.stderr
    from io import StringIO
    back = pd.read_csv(StringIO(csv.stdout))
    assert list(back.columns) == results.COLUMNS
    assert back.prompt_tokens.sum() == expected.prompt_tokens.sum()
    assert back.cost_usd.sum() == pytest.approx(expected.cost_usd.sum())

    jsonl = agentcompass(workdir, "export", "results", "--format", "jsonl", "-o", str(tmp_path / "all.jsonl"))
    assert jsonl.returncode == 0 and "10 attempts of 1 run(s)" in jsonl.stdout, jsonl.stderr
    records = [json.loads(line) for line in (tmp_path / "all.jsonl").read_text().splitlines()]
    assert len(records) == 10 and list(records[0]) == results.COLUMNS
    assert sorted((r["task_id"], r["attempt"], r["status"]) for r in records) == sorted(
        zip(expected.task_id, expected.attempt, expected.status))
    assert sum(r["calls"] for r in records) == 12

    parquet = agentcompass(workdir, "export", str(run_dir(workdir)), "-f", "parquet", "-o", str(tmp_path / "r.parquet"))
    assert parquet.returncode == 0, parquet.stderr
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "r.parquet")[["task_id", "attempt", "score", "cost_usd"]],
                                  expected[["task_id", "attempt", "score", "cost_usd"]])


def test_export_to_parquet_without_pyarrow_says_how_to_install_it(finished, tmp_path: Path):
    workdir, _, _ = finished
    blocked = tmp_path / "no-pyarrow/pyarrow"
    blocked.mkdir(parents=True)
    (blocked / "__init__.py").write_text("raise ImportError('pyarrow is not installed here')\n")
    env = clean_env(PYTHONPATH=str(blocked.parent))
    out = tmp_path / "r.parquet"
    done = agentcompass(workdir, "export", str(run_dir(workdir)), "-f", "parquet", "-o", str(out), env=env)
    assert done.returncode == 2 and not out.exists()
    assert "pip install pyarrow" in done.stderr and "Traceback" not in done.stderr
