"""``agentcompass compare``: paired statistics checked against hand-computed values, on crafted cases and real runs."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from agentcompass import compare
from agentcompass.compare import mcnemar_exact, paired_bootstrap
from agentcompass.testing.endpoint import completion
from agentcompass.testing.endpoint import ScriptedEndpoint
from conftest import agentcompass

# --- McNemar's exact test ----------------------------------------------------------------------


@pytest.mark.parametrize("a_only, b_only, p", [
    (0, 0, 1.0),                 # nothing flipped: no evidence either way
    (1, 6, 2 * (1 + 7) / 2**7),  # 0.125
    (6, 1, 0.125),               # two-sided: the same either way round
    (0, 5, 2 / 2**5),            # 0.0625: five of five one way is not yet below 0.05
    (0, 6, 2 / 2**6),            # 0.03125
    (2, 10, 2 * (1 + 12 + 66) / 2**12),
    (3, 3, 1.0),                 # 2 * P(X <= 3 | n=6) = 2 * 42/64 > 1: capped
])
def test_mcnemar_exact_matches_the_binomial_tail_by_hand(a_only, b_only, p):
    assert mcnemar_exact(a_only, b_only) == p


def test_mcnemar_exact_stays_exact_for_many_flips():
    # P(X <= 0 | n=2000) = 2^-2000: far below a float's range, and still not negative or NaN
    assert mcnemar_exact(0, 2000) == 0.0
    assert mcnemar_exact(1000, 1000) == 1.0


# --- the paired bootstrap ------------------------------------------------------------------------


def test_bootstrap_of_identical_runs_is_zero_with_p_1():
    found = paired_bootstrap(["t1", "t2", "t3"], {"x": [0.0, 0.0, 0.0]}, resamples=500)
    assert found.ci95["x"] == (0.0, 0.0) and found.p_value["x"] == 1.0


def test_bootstrap_of_a_constant_difference_has_no_width_and_the_smallest_p():
    found = paired_bootstrap(["t1", "t2", "t3"], {"x": [0.5, 0.5, 0.5]}, resamples=999)
    assert found.ci95["x"] == (0.5, 0.5)
    assert found.p_value["x"] == 1 / 1000  # no resample is as far from the mean as 0 is


def test_bootstrap_resamples_tasks_not_attempts():
    """Task X (two attempts, +1 each) and task Y (one attempt, 0): a resample of tasks is XX (mean 1), XY or YX
    (2/3) or YY (0), each XX and YY with probability 1/4. The p-value counts resamples at least 2/3 from the
    observed 2/3: YY alone, so p is about 1/4 (an attempt-level bootstrap would give about 1/27)."""
    found = paired_bootstrap(["X", "X", "Y"], {"x": [1.0, 1.0, 0.0]}, resamples=20_000, seed=7)
    assert found.ci95["x"] == (0.0, 1.0)
    assert found.p_value["x"] == pytest.approx(0.25, abs=0.015)


def test_bootstrap_interval_matches_the_normal_approximation_on_a_large_sample():
    # 400 tasks, deltas +1 on 120, -1 on 40, 0 on 240: mean 0.2, sd sqrt(0.4 - 0.04) = 0.6
    deltas = [1.0] * 120 + [-1.0] * 40 + [0.0] * 240
    found = paired_bootstrap([f"t{i}" for i in range(400)], {"x": deltas}, resamples=5000)
    half = 1.96 * 0.6 / 400 ** 0.5  # 0.0588
    low, high = found.ci95["x"]
    assert low == pytest.approx(0.2 - half, abs=0.01) and high == pytest.approx(0.2 + half, abs=0.01)
    assert found.p_value["x"] < 0.001


def test_bootstrap_is_reproducible_by_its_seed():
    # scores, not pass/fail: the resampled means fall between grid points, so two seeds part
    args = ([f"t{i}" for i in range(30)], {"x": [(i * 0.137) % 1 - 0.4 for i in range(30)]})
    assert paired_bootstrap(*args, resamples=300, seed=3) == paired_bootstrap(*args, resamples=300, seed=3)
    assert paired_bootstrap(*args, resamples=300, seed=3).ci95 != paired_bootstrap(*args, resamples=300, seed=4).ci95


# --- real runs ---------------------------------------------------------------------------------------


def scripted_model(body) -> tuple[int, dict]:
    """Right on four of five at temperature 0; hotter, it knows Hamlet, misses Japan and fails on water."""
    question, hot = body["messages"][-1]["content"], body.get("temperature", 0) > 0.5
    if hot and "water" in question:
        return 500, {"error": {"message": "scripted failure"}}
    answers = {"France": "Paris", "Japan": "Kyoto" if hot else "Tokyo", "planet": "Jupiter", "water": "H2O",
               "Hamlet": "Shakespeare" if hot else "Marlowe"}
    reply = completion(next((a for k, a in answers.items() if k in question), "?"))
    reply["usage"] = {"prompt_tokens": 10, "completion_tokens": 5 if hot else 2, "total_tokens": 0}
    return 200, reply


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    """Two runs of the guide's example (docs/reports.md), at temperature 0 and 0.7 (one value with markup, to be escaped)."""
    workdir = tmp_path_factory.mktemp("compare")
    with ScriptedEndpoint(scripted_model) as endpoint:
        for run_id, params in (("cold", ["-m", "temperature=0"]),
                               ("hot", ["-m", "temperature=0.7", "-m", "user=<script>alert('x')</script>&"])):
            done = agentcompass(workdir, "run", "example_exact_match", "chat", "scripted", "--base-url",
                                endpoint.base_url, "--run-id", run_id, "-H", "max_model_retries=0", *params)
            assert done.returncode in (0, 1), done.stderr[-3000:]
    return workdir


def compared(workdir: Path, *args: str) -> dict:
    done = agentcompass(workdir, "compare", *args, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_two_runs_compare_pair_by_pair(runs: Path):
    found = compared(runs, "results/default/cold", "results/default/hot")
    [c] = found["comparisons"]
    assert found["baseline"]["run_id"] == "cold" and c["b"]["run_id"] == "hot"
    assert (c["paired"], c["only_a"], c["only_b"]) == (5, [], [])
    metrics = {m["name"]: m for m in c["metrics"]}
    # cold passes France, Japan, planet, water; hot passes France, planet, Hamlet (water is a run_error: a fail)
    accuracy = metrics["accuracy"]
    assert (accuracy["a"], accuracy["b"]) == (0.8, 0.6) and accuracy["delta"] == pytest.approx(-0.2)
    assert c["flipped"] == {"a_only": [{"task_id": "capital-japan", "attempt": 1},
                                       {"task_id": "water-formula", "attempt": 1}],
                            "b_only": [{"task_id": "author-hamlet", "attempt": 1}]}
    assert accuracy["test"] == "McNemar exact" and accuracy["p_value"] == 1.0  # 2 * P(X <= 1 | n=3) = 1
    low, high = accuracy["ci95"]
    assert -1 <= low <= -0.2 <= high <= 1
    assert metrics["mean_score"]["delta"] == pytest.approx(-0.2) and metrics["mean_score"]["test"] == "paired bootstrap"
    assert (metrics["errors"]["a"], metrics["errors"]["b"], metrics["errors"]["delta"]) == (0, 1, 1)
    usage = {u["name"]: u for u in c["usage"]}
    # the failed call is counted by the harness, its tokens are not: 4 replies of 5 completion tokens
    assert (usage["prompt_tokens"]["a"], usage["completion_tokens"]["a"]) == (50, 10)
    assert (usage["completion_tokens"]["b"], usage["completion_tokens"]["delta"]) == (20, 10)
    # no model.pricing declared: no cost, and the table says why
    cost = {m["name"]: m for m in c["cost"]}
    assert [cost[name]["a"] for name in compare.COST] == [None, None, None] and "cost_usd" not in usage
    assert "no prices declared in A and B (model.pricing)" in cost["cost_per_solved_usd"]["detail"]
    config = {item["path"]: item for item in c["config"]}
    assert config["model.params.temperature"] == {"path": "model.params.temperature", "a": 0, "b": 0.7}
    assert config["model.params.user"] == {"path": "model.params.user", "b": "<script>alert('x')</script>&"}
    assert config["output.run_id"]["b"] == "hot"
    # seeded: the same runs print the same numbers
    assert compared(runs, "results/default/cold", "results/default/hot") == found


def test_the_table_and_the_page(runs: Path, tmp_path: Path):
    page = tmp_path / "out" / "compare.html"
    done = agentcompass(runs, "compare", "results/default/cold", "results/default/hot", "--html", str(page))
    assert done.returncode == 0, done.stderr
    text = done.stdout
    assert "paired: 5 attempt(s) finished in both" in text
    assert re.search(r"\n  accuracy +0\.800 +0\.600 +-0\.200 ", text), text
    assert "McNemar exact p=1.000 (2 passed in A only, 1 in B only)" in text
    assert "passed in A only (2): capital-japan, water-formula" in text
    assert "passed in B only (1): author-hamlet" in text
    assert "model.params.temperature: 0 -> 0.7" in text
    html = page.read_text()
    assert str(page) in done.stderr
    assert "<script" not in html and "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;&amp;" in html
    # nothing to fetch: no script, stylesheet, image or font from anywhere
    assert not any(marker in html for marker in ("src=", "<link", "url(", "@import"))
    assert html.count('<circle class="delta"') == 2  # accuracy and mean score, each with its interval
    assert "capital-japan" in html and "author-hamlet" in html


def test_unpaired_attempts_are_left_out_and_named(runs: Path, tmp_path: Path):
    partial = tmp_path / "results/default/partial"
    shutil.copytree(runs / "results/default/hot", partial)
    (partial / "attempts/capital-france/1/result.json").unlink()
    found = compared(runs, "results/default/cold", str(partial))
    [c] = found["comparisons"]
    assert c["paired"] == 4
    assert c["only_a"] == [{"task_id": "capital-france", "attempt": 1, "status": "completed",
                            "why": "not finished in B"}]
    assert c["b"]["finished"] == 4 and c["b"]["attempts"] == 5
    # three runs: each later one against the first
    found = compared(runs, "results/default/cold", "results/default/hot", str(partial))
    assert [(c["b"]["path"], c["paired"]) for c in found["comparisons"]] == [
        ("results/default/hot", 5), (str(partial), 4)]


def test_bad_input_exits_2_with_what_where_and_fix(runs: Path, tmp_path: Path):
    elsewhere = tmp_path / "results/default/elsewhere"
    shutil.copytree(runs / "results/default/cold", elsewhere)
    tasks = json.loads((elsewhere / "tasks.json").read_text())
    for task in tasks["tasks"]:
        task["task_id"] += "-other"
    (elsewhere / "tasks.json").write_text(json.dumps(tasks))
    cases = {
        ("results/default/cold",): "compare needs two runs or more",
        ("results/default/cold", "results/default/nope"): "results/default/nope does not exist",
        ("results/default/cold", "results"): "results is not a run's folder: it holds no request.json",
        ("results/default/cold", str(elsewhere)): "have no finished attempt in common",
        ("results/default/cold", "results/default/hot", "--resamples", "0"): "--resamples 0",
    }
    for args, message in cases.items():
        done = agentcompass(runs, "compare", *args)
        assert done.returncode == 2, (args, done.stdout, done.stderr)
        assert message in done.stderr and "Fix:" in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_the_functions_work_without_the_command_line(runs: Path):
    [c] = compare.compare([runs / "results/default/cold", runs / "results/default/hot"], resamples=200, seed=1)
    assert c.paired == 5 and c.method["resamples"] == 200
    assert "B: " in compare.render([c]) and compare.render_html([c]).startswith("<!DOCTYPE html>")
