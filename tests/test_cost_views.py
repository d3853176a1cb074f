"""Cost where decisions are made: what a run, an attempt and a solved task cost, computed once
(agentcompass.results.stats) and read the same in metrics.json, `runs`, `export`, the report and `compare`.

Real runs (the CLI, Snakemake, the chat harness) against a scripted endpoint on 127.0.0.1 whose every
reply reports the same usage, so that each figure is known before the run: two requests at different
prices (and scores), and one that declares no prices.
"""

from __future__ import annotations

import json
import re
import shutil
from io import StringIO
from pathlib import Path

import pandas as pd
import pytest

from agentcompass import compare, results
from agentcompass.testing.endpoint import ScriptedEndpoint, completion
from conftest import agentcompass

PROMPT, COMPLETION = 100, 20  # every reply's usage
TASKS = 5  # example_exact_match's tasks, one attempt each
# request -> its prices, its temperature and the tasks it solves (the scripted model below)
CHEAP = {"input_per_million": 2.0, "output_per_million": 10.0}
DEAR = {"input_per_million": 5.0, "output_per_million": 25.0}
REQUESTS = {"cheap": (CHEAP, 0, 4), "dear": (DEAR, 1, 3), "unpriced": (None, 0, 4)}
FIGURES = ("cost_usd", "cost_per_attempt_usd", "cost_per_solved_usd")


def scripted_model(body) -> tuple[int, dict]:
    """Wrong on Hamlet; hotter, wrong on Japan too. Every reply: PROMPT + COMPLETION tokens."""
    question, hot = body["messages"][-1]["content"], body.get("temperature", 0) > 0.5
    answers = {"France": "Paris", "Japan": "Kyoto" if hot else "Tokyo", "planet": "Jupiter", "water": "H2O",
               "Hamlet": "Marlowe"}
    reply = completion(next((a for k, a in answers.items() if k in question), "?"))
    reply["usage"] = {"prompt_tokens": PROMPT, "completion_tokens": COMPLETION, "total_tokens": PROMPT + COMPLETION}
    return 200, reply


def expected(name: str) -> dict[str, float | None]:
    """The figures of a request, from the endpoint's usage and its prices alone."""
    pricing, _, solved = REQUESTS[name]
    if pricing is None:
        return dict.fromkeys(FIGURES)
    call = (PROMPT * pricing["input_per_million"] + COMPLETION * pricing["output_per_million"]) / 1e6
    return {"cost_usd": TASKS * call, "cost_per_attempt_usd": call, "cost_per_solved_usd": TASKS * call / solved}


@pytest.fixture(scope="module")
def priced_runs(tmp_path_factory) -> Path:
    """The three requests of REQUESTS, run once by one `agentcompass run`."""
    workdir = tmp_path_factory.mktemp("cost-views")
    with ScriptedEndpoint(scripted_model) as endpoint:
        requests = {}
        for name, (pricing, temperature, _) in REQUESTS.items():
            model = {"id": "scripted", "base_url": endpoint.base_url, "params": {"temperature": temperature}}
            requests[name] = {"benchmark": "example_exact_match", "harness": "chat",
                              "model": {**model, **({"pricing": pricing} if pricing else {})}}
        config = workdir / "eval.yaml"
        config.write_text(json.dumps({"requests": requests}))
        done = agentcompass(workdir, "run", "--config", str(config))
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    return workdir


def run_dir(workdir: Path, name: str) -> Path:
    return workdir / "results/default" / name


def overall(workdir: Path, name: str) -> dict:
    return json.loads((run_dir(workdir, name) / "metrics.json").read_text())["summary"]["overall"]


def test_metrics_json_holds_what_a_run_an_attempt_and_a_solved_task_cost(priced_runs: Path):
    for name in REQUESTS:
        stats = overall(priced_runs, name)
        for figure, value in expected(name).items():
            assert stats[figure] == (None if value is None else pytest.approx(value, abs=1e-9)), (name, figure)
    # per category too: geography (France, Japan) is solved twice at cheap prices, once at dear ones
    geography = json.loads((run_dir(priced_runs, "dear") / "metrics.json").read_text())["summary"]["by_category"][
        "geography"]
    assert geography["cost_per_solved_usd"] == pytest.approx(expected("dear")["cost_per_attempt_usd"] * 2)


def test_the_same_figures_read_the_same_in_runs_export_and_the_report(priced_runs: Path):
    listed = {run["run_id"]: run for run in json.loads(agentcompass(priced_runs, "runs", "--json").stdout)}
    table = agentcompass(priced_runs, "runs")
    assert table.returncode == 0, table.stderr
    assert "cost/solved" in table.stdout.splitlines()[0]
    exported = agentcompass(priced_runs, "export", "results")
    assert exported.returncode == 0, exported.stderr
    frame = pd.read_csv(StringIO(exported.stdout))
    for name in REQUESTS:
        stats = overall(priced_runs, name)
        # runs --json: the numbers of metrics.json, to the last digit
        assert {f: listed[name][f] for f in FIGURES} == {f: stats[f] for f in FIGURES}, name
        # the runs table: cost and cost per solved task side by side, written as results.dollars writes them
        [line] = [line for line in table.stdout.splitlines() if f" {name} " in line]
        assert re.search(re.escape(results.dollars(stats["cost_usd"])) + r"\s+"
                         + re.escape(results.dollars(stats["cost_per_solved_usd"])) + r"\s", line), line
        # export: each attempt's cost; they add up to the run's, and their mean is its cost per attempt
        attempts = frame[frame.run_id == name]
        if stats["cost_usd"] is None:
            assert attempts.cost_usd.isna().all()
        else:
            assert attempts.cost_usd.sum() == pytest.approx(stats["cost_usd"], rel=1e-9)
            assert attempts.cost_usd.mean() == pytest.approx(stats["cost_per_attempt_usd"], rel=1e-9)
        # the report the run built: the cost card and the cost section
        report = run_dir(priced_runs, name) / "report"
        index = (report / "index.html").read_text()
        if stats["cost_usd"] is None:
            assert "the Model declares no prices (model.pricing)" in index
            assert "<th>cost per solved task</th><td>\u2013</td>" in index
        else:
            per_attempt, per_solved = (results.dollars(stats[f]) for f in FIGURES[1:])
            assert f'<div class="value">{results.dollars(stats["cost_usd"])}</div>' in index
            assert f"{per_attempt} per attempt; {per_solved} per solved task" in index
            assert f"<th>cost per attempt</th><td>{per_attempt}</td>" in index
            assert f"<th>cost per solved task</th><td>{per_solved}</td>" in index
        # the attempts table: each attempt's cost as export has it, shown as every view writes dollars
        data = (report / "data" / "attempts.js").read_text()
        rows = json.loads(data[data.index("=") + 1:].rstrip().rstrip(";"))
        column = rows["columns"].index("cost_usd")
        by_task = dict(zip(attempts.task_id, attempts.cost_usd))
        for row in rows["rows"]:
            shown = row[rows["columns"].index("cost")]
            if stats["cost_usd"] is None:
                assert row[column] is None and shown == ""
            else:
                assert row[column] == pytest.approx(by_task[row[0]], rel=1e-12) and shown == results.dollars(row[column])


def test_compare_shows_the_cost_delta_beside_the_score_delta(priced_runs: Path, tmp_path: Path):
    cheap, dear = (overall(priced_runs, name) for name in ("cheap", "dear"))
    done = agentcompass(priced_runs, "compare", "results/default/cheap", "results/default/dear", "--json")
    assert done.returncode == 0, done.stderr
    [c] = json.loads(done.stdout)["comparisons"]
    cost = {m["name"]: m for m in c["cost"]}
    for figure in FIGURES:
        # each side as metrics.json has it; B - A is the difference in price alone (same tokens), over its solved
        assert (cost[figure]["a"], cost[figure]["b"]) == (cheap[figure], dear[figure]), figure
        assert cost[figure]["delta"] == pytest.approx(expected("dear")[figure] - expected("cheap")[figure], rel=1e-6)
    assert cost["cost_usd"]["delta"] == pytest.approx(TASKS * (PROMPT * 3 + COMPLETION * 15) / 1e6)

    page = tmp_path / "compare.html"
    text = agentcompass(priced_runs, "compare", "results/default/cheap", "results/default/dear", "--html", str(page))
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    # the cost rows follow accuracy's in the one table of deltas
    names = [line.split()[0] for line in lines if line.startswith("  ") and line.split()]
    assert names[:7] == ["metric", "accuracy", "mean_score", "errors", *FIGURES]
    html = page.read_text()
    for figure in FIGURES:
        m = cost[figure]
        shown = [results.dollars(m["a"]), results.dollars(m["b"]), results.dollars(m["delta"], signed=True)]
        [line] = [line for line in lines if line.startswith(f"  {figure} ")]
        assert line.split()[1:4] == shown, line
        assert all(f'<td class="num{cls}">{value}</td>' in html for value, cls in zip(shown, ("", "", " down")))
    assert re.search(r"\n  accuracy +0\.800 +0\.600 +-0\.200 ", text.stdout), text.stdout

    # a side that declares no prices: no figure, and the table says so
    unpriced = agentcompass(priced_runs, "compare", "results/default/cheap", "results/default/unpriced")
    assert unpriced.returncode == 0, unpriced.stderr
    [line] = [line for line in unpriced.stdout.splitlines() if line.startswith("  cost_usd ")]
    assert line.split()[1:4] == [results.dollars(cheap["cost_usd"]), "n/a", "n/a"]
    assert "no prices declared in B (model.pricing)" in line


def test_a_metrics_json_of_an_older_version_reads_the_same(priced_runs: Path, tmp_path: Path):
    """metrics.json written before the cost figures (its summary without them) still reads: runs, the report and
    compare show the same figures, from its own cost_usd, attempts, accuracy and counted."""
    for name in ("cheap", "dear"):
        copy = tmp_path / "results/default" / name
        shutil.copytree(run_dir(priced_runs, name), copy)
        metrics_file = copy / "metrics.json"
        metrics = json.loads(metrics_file.read_text())
        for stats in (metrics["summary"]["overall"], *metrics["summary"]["by_category"].values()):
            del stats["cost_per_attempt_usd"], stats["cost_per_solved_usd"]
        metrics_file.write_text(json.dumps(metrics))  # written last: still the summary of the files on disk
    listed = {run["run_id"]: run for run in json.loads(agentcompass(tmp_path, "runs", "--json").stdout)}
    done = agentcompass(tmp_path, "compare", "results/default/cheap", "results/default/dear", "--json")
    [c] = json.loads(done.stdout)["comparisons"]
    cost = {m["name"]: m for m in c["cost"]}
    for name, side in (("cheap", "a"), ("dear", "b")):
        stats = overall(priced_runs, name)
        assert {f: listed[name][f] for f in FIGURES} == {f: stats[f] for f in FIGURES}
        assert {f: cost[f][side] for f in FIGURES} == {f: stats[f] for f in FIGURES}
        built = agentcompass(tmp_path, "report", f"results/default/{name}")
        assert built.returncode == 0, built.stderr
        index = (tmp_path / "results/default" / name / "report/index.html").read_text()
        assert f"<th>cost per solved task</th><td>{results.dollars(stats['cost_per_solved_usd'])}</td>" in index


def test_dollars_are_written_one_way():
    assert [results.dollars(v) for v in (None, 0, 0.0123, 0.012, 0.001435, 0.000057, 0.5, 1234.567)] == [
        "-", "$0.0000", "$0.0123", "$0.0120", "$0.001435", "$0.000057", "$0.5000", "$1,234.57"]
    assert results.dollars(-0.0006, signed=True) == "-$0.0006" and results.dollars(0.003, signed=True) == "+$0.0030"
    assert results.dollars(None, "n/a") == "n/a"
    # what a run costs over what it ran and solved: none without prices or without a correct attempt
    assert results.cost_figures(0.01, 4, 2) == {"cost_per_attempt_usd": 0.0025, "cost_per_solved_usd": 0.005}
    assert results.cost_figures(0.01, 4, 0) == {"cost_per_attempt_usd": 0.0025, "cost_per_solved_usd": None}
    assert results.cost_figures(None, 4, 2) == {"cost_per_attempt_usd": None, "cost_per_solved_usd": None}
    # a quarantined attempt ran nothing: it is in no figure of what an attempt cost
    rows = [{**dict.fromkeys(results.COLUMNS), "task_id": f"t{i}", "status": "completed", "correct": i < 2,
             "prompt_tokens": 1000, "completion_tokens": 0} for i in range(3)]
    rows.append({**dict.fromkeys(results.COLUMNS), "task_id": "q", "status": "skipped",
                 "error_stage": results.QUARANTINE_STAGE, "error": "quarantined (preflight_failed): no"})
    stats = results.stats(rows, {"input_per_million": 1.0, "output_per_million": 1.0})
    assert (stats["attempts"], stats["cost_usd"], stats["cost_per_attempt_usd"], stats["cost_per_solved_usd"]) == (
        4, 0.003, 0.001, 0.0015)
    assert compare.COST.keys() == set(FIGURES)
