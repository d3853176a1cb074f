"""The forecast before any call (agentcompass.forecast): ``agentcompass status`` and ``run --dry-run`` say how
many attempts would run and what they would spend, estimated from finished attempts; a scripted endpoint on
127.0.0.1 answers every call with a known usage that varies by task."""

from __future__ import annotations

import json
import math
import subprocess
from pathlib import Path

import pytest
import yaml

from agentcompass import forecast
from agentcompass.testing.endpoint import ScriptedEndpoint, completion
from conftest import agentcompass

PRICING = {"input_per_million": 3.0, "output_per_million": 15.0}
# how far the forecast of a second request may land from what it then spends
TOLERANCE = 0.20


def usage_of(body) -> dict:
    """The usage a call reports: about 1,000 prompt and 200 completion tokens, varying with the task's prompt."""
    prompt = str(body["messages"][-1]["content"])
    tokens = {"prompt_tokens": 900 + 20 * (len(prompt) % 10), "completion_tokens": 180 + 10 * (len(prompt) % 5)}
    return {**tokens, "total_tokens": sum(tokens.values())}


def reply(body) -> dict:
    return {**completion("Paris"), "usage": usage_of(body)}


def request(endpoint: ScriptedEndpoint, limit: int, model: str = "scripted") -> dict:
    return {"benchmark": {"id": "example_exact_match", "params": {"limit": limit}}, "harness": "chat",
            "environment": "host_process",
            "model": {"id": model, "base_url": endpoint.base_url, "pricing": PRICING}}


def config(workdir: Path, name: str, body: dict) -> Path:
    path = workdir / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"runtime": {"progress": False}, "requests": {name: body}}))
    return path


def command(workdir: Path, *args: str) -> subprocess.CompletedProcess:
    done = agentcompass(workdir, *args)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    return done


def dry_run(workdir: Path, path: Path) -> tuple[dict, str]:
    """The forecast of ``run --dry-run`` (its JSON) and its lines (on stderr)."""
    done = command(workdir, "run", "-c", str(path), "--dry-run")
    [entry] = json.loads(done.stdout)
    return entry["forecast"], done.stderr


def spent(workdir: Path, name: str) -> dict:
    return json.loads((workdir / "results/default" / name / "metrics.json").read_text())["summary"]["overall"]


def within(expected: float, actual: float) -> bool:
    return abs(expected - actual) <= TOLERANCE * actual


def test_a_second_request_of_the_same_kind_is_forecast_from_the_first_within_20_percent(workdir: Path):
    with ScriptedEndpoint(reply) as endpoint:
        command(workdir, "run", "-c", str(config(workdir, "first", request(endpoint, 3))))
        assert len(endpoint.requests) == 3
        second = config(workdir, "second", request(endpoint, 5))

        told, lines = dry_run(workdir, second)
        shown = command(workdir, "status", "-c", str(second)).stdout
        assert len(endpoint.requests) == 3  # neither called the model
        assert not (workdir / "results/default/second").exists()
        assert (told["attempts"], told["source"], told["basis"], told["runs"]) == \
            (5, forecast.SAME_KIND, 3, ["default/first"])
        head = "forecast: 5 attempt(s) would run; estimated from 3 finished attempt(s) of 1 run(s) of the " \
               "same benchmark, harness and model (default/first)"
        assert f"second: {head}" in lines and head in shown, lines + shown
        assert "at model.pricing" in shown and "95% range" in shown

        command(workdir, "run", "-c", str(second))
        assert len(endpoint.requests) == 8
        # another model's request learns nothing from these runs
        other, words = dry_run(workdir, config(workdir, "other", request(endpoint, 5, model="another-model")))
        assert (other["attempts"], other["source"]) == (5, None) and forecast.NOTHING in words
    paid = spent(workdir, "second")
    tokens = paid["prompt_tokens"] + paid["completion_tokens"]
    assert within(told["prompt_tokens"]["expected"], paid["prompt_tokens"]), (told, paid)
    assert within(told["completion_tokens"]["expected"], paid["completion_tokens"]), (told, paid)
    assert within(told["total_tokens"]["expected"], tokens), (told, paid)
    assert within(told["cost_usd"]["expected"], paid["cost_usd"]), (told, paid)
    for key in ("prompt_tokens", "completion_tokens", "total_tokens", "cost_usd"):
        assert 0 <= told[key]["low"] <= told[key]["expected"] <= told[key]["high"], told

    # part of it again: three attempts lose their files; the request's own two finished ones are the estimate,
    # though the first run has three
    run = workdir / "results/default/second/attempts"
    gone = sorted(run.glob("*/1/result.json"))[:3]
    per_attempt = []
    for result in gone:
        usage = json.loads(result.read_text())["usage"]
        per_attempt.append(usage["prompt_tokens"] + usage["completion_tokens"])
        for name in ("output.json", "result.json"):
            (result.parent / name).unlink()
    told, lines = dry_run(workdir, second)
    assert (told["attempts"], told["source"], told["basis"], told["runs"]) == (3, forecast.OWN, 2, [])
    assert "forecast: 3 attempt(s) would run; estimated from 2 finished attempt(s) of this request" in lines
    assert within(told["total_tokens"]["expected"], sum(per_attempt)), (told, per_attempt)
    shown = command(workdir, "status", "-c", str(second)).stdout
    assert "estimated from 2 finished attempt(s) of this request" in shown


def test_with_nothing_to_estimate_from_the_forecast_says_so_and_calls_nothing(workdir: Path):
    with ScriptedEndpoint(reply) as endpoint:
        path = config(workdir, "alone", request(endpoint, 2))
        told, lines = dry_run(workdir, path)
        shown = command(workdir, "status", "-c", str(path)).stdout
        assert endpoint.requests == []
    assert (told["attempts"], told["source"], told["total_tokens"]) == (2, None, None)
    assert f"alone: forecast: 2 attempt(s) would run; {forecast.NOTHING}" in lines
    assert f"forecast: 2 attempt(s) would run; {forecast.NOTHING}" in shown


def test_the_range_is_the_prediction_interval_of_a_sum():
    values = [10.0, 12.0, 14.0]
    r = forecast.interval(values, 4)
    half = forecast.results.Z95 * 2.0 * math.sqrt(4 + 16 / 3)
    assert (r.expected, r.low, r.high) == pytest.approx((48.0, 48.0 - half, 48.0 + half))
    assert forecast.interval([5.0, 500.0], 1).low == 0.0  # floored at nothing spent
    assert forecast.interval([7.0], 3) == forecast.Range(21.0)  # one value: no spread, no range
    assert forecast._spread(list(range(10)), 4) == [0, 2, 5, 7]


def test_the_lines_say_what_is_counted_and_what_is_missing():
    one = forecast.Forecast("r", 4, failed=1, source=forecast.OWN, basis=1, prompt_tokens=forecast.Range(400.0),
                            completion_tokens=forecast.Range(80.0), total_tokens=forecast.Range(480.0))
    assert one.lines() == [
        "forecast: 4 attempt(s) would run; 1 failed attempt(s) not counted (`agentcompass retry` reruns them); "
        "estimated from 1 finished attempt(s) of this request",
        "  tokens in 400 (no range from one attempt), out 80 (no range from one attempt), "
        "total 480 (no range from one attempt)",
        "  cost: no prices declared (model.pricing): tokens only"]
    priced = forecast.Forecast("r", 2, source=forecast.SAME_KIND, basis=9, runs=["ns/a", "ns/b", "ns/c", "ns/d"],
                               prompt_tokens=forecast.Range(2000.0, 1500.0, 2500.0),
                               completion_tokens=forecast.Range(400.0, 300.0, 500.0),
                               total_tokens=forecast.Range(2400.0, 1800.0, 3000.0),
                               cost_usd=forecast.Range(1234.5, 0.5, 2468.0))
    head, _, cost = priced.lines()
    assert head.endswith("estimated from 9 finished attempt(s) of 4 run(s) of the same benchmark, harness and model "
                         "(ns/a, ns/b, ns/c and 1 more)")
    assert cost.startswith("  cost $1,234.50 (95% range $0.5000 to $2,468.00) at model.pricing")
    assert forecast.Forecast("r", 0, failed=2).lines() == [
        "forecast: no attempt would run: nothing to spend; 2 failed attempt(s) not counted "
        "(`agentcompass retry` reruns them)"]
    assert forecast.Forecast("r", None, problem="no tasks").lines() == [
        "forecast: cannot count the attempts that would run: no tasks"]
