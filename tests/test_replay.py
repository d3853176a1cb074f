"""``agentcompass replay``: a finished run rebuilt from its call cache alone, with the endpoint gone; an entry
deleted by hand is that attempt's miss; a tool whose output changed is a divergence at the call it reached."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from agentcompass import callcache
from agentcompass.testing.endpoint import ScriptedEndpoint, tool_call_reply
from conftest import agentcompass

TASKS = 2


def agent(body) -> dict:
    """A scripted tool_agent: one bash command, then it submits what the command printed. At temperature 0.5 the
    command prints the time in nanoseconds: an output no rerun gives again."""
    messages = body["messages"]
    if not any(m["role"] == "tool" for m in messages):
        command = "date +%s%N" if body.get("temperature") == 0.5 else "echo Paris"
        return tool_call_reply("bash", {"command": command}, call_id="c1")
    output = [m for m in messages if m["role"] == "tool"][-1]["content"]
    return tool_call_reply("submit", {"answer": output.strip().splitlines()[-1]}, call_id="c2")


def run(workdir: Path, name: str, base_url: str, temperature: float) -> Path:
    config = workdir / f"{name}.yaml"
    config.write_text(yaml.safe_dump({"requests": {name: {
        "benchmark": {"id": "example_exact_match", "params": {"limit": TASKS}},
        "harness": "tool_agent",
        "model": {"id": "scripted", "base_url": base_url, "params": {"temperature": temperature}},
        "execution": {"cache": "on"},
    }}}))
    done = agentcompass(workdir, "run", "--config", str(config))
    assert done.returncode in (0, 1), done.stderr[-3000:]
    return workdir / "results/default" / name


def first_call_key(attempt: Path) -> str:
    for line in (attempt / "trajectory.jsonl").read_text().splitlines():
        record = json.loads(line)
        if record.get("type") == "model_call":
            return record["cache"]["key"]
    raise AssertionError(f"no model call in {attempt}")


def test_replay_reproduces_a_run_without_its_endpoint_and_names_misses_and_divergences(workdir: Path):
    with ScriptedEndpoint(agent) as endpoint:
        same = run(workdir, "same", endpoint.base_url, 0)
        changing = run(workdir, "changing", endpoint.base_url, 0.5)
        paid = len(endpoint.requests)
    assert paid == 4 * TASKS  # two calls per attempt, two runs
    # the endpoint is gone: whatever the replays do, no call reaches anything

    done = agentcompass(workdir, "replay", str(same))
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert f"{TASKS} attempts: {TASKS} reproduced, 0 diverged, 0 missing entries" in done.stdout
    summary = json.loads((workdir / "results/default/same-replay/replay.json").read_text())
    assert summary["reproduced"] == TASKS and summary["reproduced_all"] is True
    for task in ("capital-france", "capital-japan"):
        replayed = json.loads((workdir / "results/default/same-replay/attempts" / task / "1/result.json").read_text())
        original = json.loads((same / "attempts" / task / "1/result.json").read_text())
        assert (replayed["answer"], replayed["score"]) == (original["answer"], original["score"])
        assert replayed["usage"]["calls"] == 0 and replayed["usage"]["cached_calls"] == 2

    # an entry deleted by hand: that attempt misses, the other still reproduces, and the exit status says so
    key = first_call_key(same / "attempts/capital-japan/1")
    callcache.CallStore(workdir / "results" / callcache.CACHE_FOLDER).path(key).unlink()
    done = agentcompass(workdir, "replay", str(same))
    assert done.returncode == 1, done.stdout + done.stderr[-3000:]
    assert "1 reproduced, 0 diverged, 1 missing entries" in done.stdout
    assert "missing: capital-japan #1: model call 1 of the run stage: the original made this call, and the cache " \
           "holds no reply for it" in done.stdout
    replayed = json.loads((workdir / "results/default/same-replay/attempts/capital-japan/1/result.json").read_text())
    assert replayed["status"] == "run_error" and replayed["metadata"]["cache_miss"]["key"] == key

    # the tool's output changed since the original: the second call is not the original's
    done = agentcompass(workdir, "replay", str(changing))
    assert done.returncode == 1, done.stdout + done.stderr[-3000:]
    assert f"0 reproduced, {TASKS} diverged, 0 missing entries" in done.stdout
    summary = json.loads((workdir / "results/default/changing-replay/replay.json").read_text())
    for item in summary["not_reproduced"]:
        assert item["outcome"] == "diverged" and item["call"] == 2 and item["stage"] == "run"
        assert item["why"].startswith("model call 2 of the run stage: a tool output changed: messages[3] "
                                      "(the output of tool call c1) was ")
    assert len(endpoint.requests) == paid  # nothing was sent since the runs


def test_replay_of_a_folder_that_is_no_run_is_a_clear_error(workdir: Path):
    done = agentcompass(workdir, "replay", str(workdir))
    assert done.returncode == 2
    assert "holds no request.json: it is not a run folder" in done.stderr
