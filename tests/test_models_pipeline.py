"""Models through the real workflow: retries and usage in result.json, the tool_agent loop, the
per-endpoint concurrency resource; a scripted endpoint on 127.0.0.1 stands in for the model."""

from __future__ import annotations

import json
import secrets
from pathlib import Path

import pytest
import yaml

from agentcompass.runtime.model_client import endpoint_resource
from agentcompass.testing.endpoint import (
    Reply,
    ScriptedEndpoint,
    completion,
    rate_limited,
    tool_call,
    tool_call_reply,
    tool_calls_reply,
)
from conftest import clean_env, files_holding, snakemake

FAST_RETRIES = {"retry_backoff": 0, "max_model_retries": 2}


def run_request(workdir: Path, request: dict, *args: str, env: dict | None = None, **config) -> Path:
    """Run one request named ``r`` through Snakemake; its results directory."""
    path = workdir / "eval.yaml"
    path.write_text(yaml.safe_dump({"requests": {"r": request}, **config}))
    done = snakemake(workdir, "--configfile", str(path), *args, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    return workdir / "results/default/r"


def attempt_file(run: Path, task: str, name: str = "result.json") -> dict:
    return json.loads((run / "attempts" / task / "1" / name).read_text())


def test_two_429s_then_an_answer_complete_the_attempt_with_three_calls_and_no_retry(workdir: Path):
    with ScriptedEndpoint(script=[rate_limited(0), rate_limited(0), completion("Paris")]) as endpoint:
        run = run_request(workdir, {
            "benchmark": {"id": "example_exact_match", "params": {"limit": 1}},
            "harness": {"id": "chat", "params": FAST_RETRIES},
            "model": {"id": "scripted", "base_url": endpoint.base_url},
        })
    result = attempt_file(run, "capital-france")
    assert result["status"] == "completed" and result["correct"] is True
    assert result["usage"]["calls"] == 3 and result["usage"]["retries"] == 0 and result["usage"]["rate_limited"] == 2
    assert set(result["usage"]) >= {"calls", "prompt_tokens", "completion_tokens", "latency_seconds"}
    assert len(endpoint.requests) == 3


def test_a_model_failing_every_time_ends_that_attempt_as_run_error_and_the_run_goes_on(workdir: Path):
    def model(body):
        if "Japan" in body["messages"][-1]["content"]:
            return rate_limited(0)
        return completion("Paris")

    with ScriptedEndpoint(model) as endpoint:
        run = run_request(workdir, {
            "benchmark": {"id": "example_exact_match", "params": {"limit": 2}},
            # no patience: each 429 counts as a fault at once
            "harness": {"id": "chat", "params": {**FAST_RETRIES, "rate_limit_patience": 0}},
            "model": {"id": "scripted", "base_url": endpoint.base_url},
            "execution": {"attempts": 2},
        })
    for attempt in ("1", "2"):
        failed = json.loads((run / "attempts/capital-japan" / attempt / "result.json").read_text())
        assert failed["status"] == "run_error" and failed["error_stage"] == "run"
        assert "after 3 tries" in failed["error"] and "HTTP 429" in failed["error"]
        assert failed["usage"]["calls"] == 3
        done = json.loads((run / "attempts/capital-france" / attempt / "result.json").read_text())
        assert done["status"] == "completed" and done["correct"] is True
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["counts"] == {"completed": 2, "run_error": 2}


def test_malformed_reply_is_scored_as_the_models_answer(workdir: Path):
    with ScriptedEndpoint(script=[Reply(200, b"this is not JSON")]) as endpoint:
        run = run_request(workdir, {
            "benchmark": {"id": "example_exact_match", "params": {"limit": 1}},
            "harness": "chat",
            "model": {"id": "scripted", "base_url": endpoint.base_url},
        })
    result = attempt_file(run, "capital-france")
    assert result["status"] == "completed" and result["score"] == 0.0 and result["answer"] == ""
    assert result["metadata"]["malformed_reply"] == "the reply is not a JSON object"


def test_chat_sends_follow_up_turns_and_answers_with_the_last_reply(workdir: Path):
    with ScriptedEndpoint(script=[completion("Lyon?"), completion("Paris")]) as endpoint:
        run = run_request(workdir, {
            "benchmark": {"id": "example_exact_match", "params": {"limit": 1}},
            "harness": {"id": "chat", "params": {"follow_ups": ["Are you sure? Check again."]}},
            "model": {"id": "scripted", "base_url": endpoint.base_url},
        })
    result = attempt_file(run, "capital-france")
    assert result["answer"] == "Paris" and result["correct"] is True and result["usage"]["calls"] == 2
    second = endpoint.requests[1].body["messages"]
    assert [m["role"] for m in second] == ["user", "assistant", "user"]
    assert second[1]["content"] == "Lyon?" and second[2]["content"] == "Are you sure? Check again."
    trajectory = (run / "attempts/capital-france/1/trajectory.jsonl").read_text().splitlines()
    assert [json.loads(line)["turn"] for line in trajectory] == [1, 2]


def agent_model(body) -> dict:
    """A scripted agent: writes a file through bash, makes mistakes, reads the file back, submits what it read."""
    messages = body["messages"]
    step = sum(1 for m in messages if m["role"] == "assistant")
    if step == 0:
        return tool_calls_reply([
            tool_call("bash", {"command": "mkdir -p out && echo Paris > out/answer.txt && echo made"}, "c1"),
            tool_call("no_such_tool", {}, "c2"),
        ])
    if step == 1:
        return tool_call_reply("read_file", "{not json", call_id="c3")
    if step == 2:
        return completion("I think I am done.")  # no tool call: the harness reminds it
    if step == 3:
        return tool_call_reply("read_file", {"path": "out/answer.txt"}, call_id="c4")
    return tool_call_reply("submit", {"answer": messages[-1]["content"].strip()}, call_id="c5")


def test_tool_agent_writes_a_file_through_bash_submits_and_records_every_step(workdir: Path, tmp_path: Path):
    key = "sk-agent-" + secrets.token_hex(16)
    workspaces = tmp_path / "workspaces"
    workspaces.mkdir()
    with ScriptedEndpoint(agent_model) as endpoint:
        run = run_request(workdir, {
            "benchmark": {"id": "example_exact_match", "params": {"limit": 1}},
            "harness": "tool_agent",
            "environment": {"id": "host_process", "params": {"workspace_root": str(workspaces), "keep_workspace": True}},
            "model": {"id": "scripted", "base_url": endpoint.base_url, "api_key": "${AGENTCOMPASS_TEST_KEY}",
                      "params": {"temperature": 0}},
        }, env=clean_env(AGENTCOMPASS_TEST_KEY=key))
    result = attempt_file(run, "capital-france")
    assert result["status"] == "completed" and result["answer"] == "Paris" and result["correct"] is True
    assert result["metadata"] == {"stop_reason": "submitted", "steps": 5}
    assert result["usage"]["calls"] == 5
    # the file is in the run phase's workspace, made by the agent's bash command
    (made,) = workspaces.glob("agentcompass-*/out/answer.txt")
    assert made.read_text() == "Paris\n"

    events = [json.loads(line) for line in (run / "attempts/capital-france/1/trajectory.jsonl").read_text().splitlines()]
    assert [(e["type"], e.get("step"), e.get("tool_call_id")) for e in events] == [
        ("model_call", 1, None), ("tool_result", 1, "c1"), ("tool_result", 1, "c2"),
        ("model_call", 2, None), ("tool_result", 2, "c3"),
        ("model_call", 3, None),
        ("model_call", 4, None), ("tool_result", 4, "c4"),
        ("model_call", 5, None), ("tool_result", 5, "c5"),
    ]
    calls = [e for e in events if e["type"] == "model_call"]
    assert [c["request"] for c in calls] == [r.body for r in endpoint.requests]  # exactly what was sent
    assert all(c["reply"]["choices"] for c in calls)
    tool_results = {e["tool_call_id"]: e for e in events if e["type"] == "tool_result"}
    assert tool_results["c1"]["output"].startswith("exit code 0") and "made" in tool_results["c1"]["output"]
    assert tool_results["c2"]["error"] and "unknown tool 'no_such_tool'" in tool_results["c2"]["output"]
    assert tool_results["c3"]["error"] and "must be a JSON object" in tool_results["c3"]["output"]
    assert tool_results["c4"]["output"] == "Paris\n" and not tool_results["c4"]["error"]
    # the model saw each tool result, and the reminder after the reply without a tool call
    last = endpoint.requests[-1].body["messages"]
    assert any(m["role"] == "user" and "No tool was called" in m["content"] for m in last)
    assert [m["tool_call_id"] for m in last if m["role"] == "tool"] == ["c1", "c2", "c3", "c4"]

    # the key reached the endpoint with every call, and no file of the run
    assert {r.headers["Authorization"] for r in endpoint.requests} == {f"Bearer {key}"}
    holding, scanned = files_holding(key, workdir / "results", workdir / ".snakemake")
    assert holding == [] and scanned > 10


def test_tool_agent_stops_at_its_step_limit_without_an_answer(workdir: Path):
    with ScriptedEndpoint(lambda body: tool_call_reply("bash", {"command": "true"})) as endpoint:
        run = run_request(workdir, {
            "benchmark": {"id": "example_exact_match", "params": {"limit": 1}},
            "harness": {"id": "tool_agent", "params": {"max_steps": 3}},
            "model": {"id": "scripted", "base_url": endpoint.base_url},
        })
    result = attempt_file(run, "capital-france")
    assert result["status"] == "completed" and result["answer"] is None and result["score"] == 0.0
    assert result["metadata"] == {"stop_reason": "max_steps", "steps": 3}
    assert len(endpoint.requests) == 3


def slow(body):
    return Reply(200, completion("Paris"), delay=0.4)


def three_questions(url: str) -> dict:
    """Three attempts, a model call each (the answer is right for the first only)."""
    return {"benchmark": {"id": "example_exact_match", "params": {"limit": 3}}, "harness": "chat",
            "model": {"id": "scripted", "base_url": url}}


@pytest.fixture(scope="module")
def uncapped(tmp_path_factory) -> ScriptedEndpoint:
    """The endpoint of the three questions run once with no cap (the same for every way of setting one)."""
    with ScriptedEndpoint(slow) as endpoint:
        run_request(tmp_path_factory.mktemp("uncapped"), three_questions(endpoint.base_url), "--cores", "8")
    return endpoint


@pytest.mark.parametrize("how", ["command line", "profile"])
def test_endpoint_resource_caps_model_calls_in_flight(how: str, uncapped: ScriptedEndpoint, workdir: Path,
                                                      tmp_path: Path):
    assert len(uncapped.requests) == 3 and uncapped.max_in_flight > 1  # without a cap, calls overlap

    with ScriptedEndpoint(slow) as endpoint:
        name = endpoint_resource(endpoint.base_url)
        assert name.startswith("model_endpoint_127_0_0_1_")
        if how == "profile":
            profile = tmp_path / "profile"
            profile.mkdir()
            (profile / "config.yaml").write_text(yaml.safe_dump({"resources": {name: 1}}))
            cap = ["--profile", str(profile)]
        else:
            cap = ["--resources", f"{name}=1"]
        run = run_request(workdir, three_questions(endpoint.base_url), "--cores", "8", *cap)
    assert len(endpoint.requests) == 3 and endpoint.max_in_flight == 1
    assert json.loads((run / "metrics.json").read_text())["metrics"]["accuracy"] == pytest.approx(1 / 3)
    # a prepare holds a unit too: attempts are prepared as the endpoint takes them, not all ahead of it
    changes = sorted((p.stat().st_mtime_ns, +1 if p.name == "prepared.json" else -1)
                     for p in run.glob("attempts/*/*/*.json") if p.name in ("prepared.json", "output.json"))
    assert len(changes) == 6
    waiting = [sum(step for _, step in changes[: i + 1]) for i in range(len(changes))]
    assert max(waiting) == 1, changes


def test_endpoint_resource_names():
    assert endpoint_resource("http://127.0.0.1:8000/v1") == "model_endpoint_127_0_0_1_8000_v1"
    assert endpoint_resource("https://API.example.com/v1/") == "model_endpoint_api_example_com_v1"
    long = endpoint_resource("https://" + "a" * 200 + ".example.com/v1")
    assert len(long) < 80 and long != endpoint_resource("https://" + "a" * 199 + ".example.com/v1")
