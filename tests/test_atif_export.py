"""``agentcompass export --format atif``: real runs of chat, tool_agent and mini_swe_agent (a scripted endpoint on
127.0.0.1) exported as ATIF, every file validated by Harbor's own models in a process of Harbor's Python.

Harbor needs Python 3.12 or later: its Python is named by AGENTCOMPASS_HARBOR_PYTHON (a venv with ``harbor``
installed; CI sets it). Without it these tests fail when CI=true, and are skipped otherwise.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from agentcompass import atif
from agentcompass.environments.netns import network_isolation
from agentcompass.harnesses.mini_swe_agent import MiniSweAgentHarness
from agentcompass.testing.dependencies import missing_dependencies
from agentcompass.testing.endpoint import ScriptedEndpoint, completion, tool_call_reply
from conftest import agentcompass

HARBOR_PYTHON = "AGENTCOMPASS_HARBOR_PYTHON"
# run by Harbor's Python: each file through Harbor's validator and its Trajectory model; the errors by file
VALIDATE = """
import json, sys
from harbor.models.trajectories import Trajectory
from harbor.utils.trajectory_validator import TrajectoryValidator
found = {}
for path in sys.argv[1:]:
    validator = TrajectoryValidator()
    errors = [] if validator.validate(path) else validator.get_errors()
    if not errors:
        trajectory = Trajectory.model_validate(json.load(open(path)))
        errors = [] if trajectory.schema_version == json.load(open(path))["schema_version"] else ["version changed"]
    found[path] = errors
print(json.dumps(found))
"""


def harbor_python() -> str:
    python = os.environ.get(HARBOR_PYTHON)
    if not python:
        why = f"validating ATIF needs Harbor's own models: set {HARBOR_PYTHON} to the Python of a venv with harbor installed"
        if os.environ.get("CI") == "true":
            pytest.fail(why)
        pytest.skip(why)
    return python


def harbor_errors(files: list[Path]) -> dict[str, list[str]]:
    """Harbor's validation errors of each file (none: valid), from a process of Harbor's Python."""
    done = subprocess.run([harbor_python(), "-c", VALIDATE, *map(str, files)], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return {Path(path).name: errors for path, errors in json.loads(done.stdout).items() if errors}


def exported(workdir: Path, out: Path, *runs: Path) -> dict[str, dict]:
    """Export ``runs`` as ATIF into ``out``: each file's document by its path under ``out``, all valid for Harbor."""
    done = agentcompass(workdir, "export", *map(str, runs), "--format", "atif", "--output", str(out))
    assert done.returncode == 0, done.stderr[-3000:]
    files = sorted(out.rglob("*.json"))
    assert f"{len(files)} ATIF trajectories ({atif.SCHEMA_VERSION})" in done.stdout
    assert harbor_errors(files) == {}
    return {str(f.relative_to(out)): json.loads(f.read_text()) for f in files}


def agent_steps(document: dict) -> list[dict]:
    return [s for s in document["steps"] if s["source"] == "agent"]


def check_usage(document: dict, attempt: Path) -> None:
    """The token totals of the document, and the sums of its steps, are the attempt's usage."""
    usage = json.loads((attempt / "result.json").read_text())["usage"]
    steps = [s["metrics"] for s in agent_steps(document)]
    assert sum(m["prompt_tokens"] for m in steps) == document["final_metrics"]["total_prompt_tokens"] == usage["prompt_tokens"]
    assert sum(m["completion_tokens"] for m in steps) == document["final_metrics"]["total_completion_tokens"] \
        == usage["completion_tokens"]
    assert document["final_metrics"]["total_steps"] == len(document["steps"])


def city(body) -> str:
    """The right answer to the task the request asks (example_exact_match's two first tasks)."""
    return "Paris" if "France" in json.dumps(body["messages"]) else "Tokyo"


def solver(body) -> dict:
    """A scripted tool_agent: one bash command, then it submits what the command printed last."""
    tools = [m for m in body["messages"] if m["role"] == "tool"]
    if not tools:
        return tool_call_reply("bash", {"command": f"echo {city(body)}"}, call_id="c1", text="Let me run it.")
    return tool_call_reply("submit", {"answer": tools[-1]["content"].split("stdout:\n")[-1].split()[0]}, call_id="c2")


def test_chat_and_tool_agent_runs_export_as_atif_that_harbor_validates(workdir: Path, tmp_path: Path):
    harbor_python()
    runs = []
    for harness, reply in (("chat", lambda body: (200, completion(city(body)))), ("tool_agent", solver)):
        with ScriptedEndpoint(reply) as endpoint:
            done = agentcompass(workdir, "run", "example_exact_match", harness, "scripted", "--base-url",
                                endpoint.base_url, "-b", "limit=2")
        assert done.returncode == 0, done.stderr[-3000:]
        runs.append(next(workdir.glob(f"results/default/*-{harness}-*")))

    out = tmp_path / "atif"
    documents = exported(workdir, out, *runs)
    assert len(documents) == 4
    for name, document in documents.items():
        namespace, run_id, task, attempt = name.removesuffix(".json").split("/")
        folder = workdir / "results" / namespace / run_id / "attempts" / task / attempt
        result = json.loads((folder / "result.json").read_text())
        identity = document["extra"]["agentcompass"]
        assert (identity["namespace"], identity["run_id"], identity["task_id"], identity["attempt"]) == (
            namespace, run_id, task, int(attempt))
        assert identity["verdict"]["status"] == result["status"] == "completed"
        assert identity["verdict"]["correct"] is result["correct"] is True and identity["verdict"]["score"] == 1.0
        assert document["agent"]["model_name"] == "scripted" and document["agent"]["version"]
        check_usage(document, folder)
        steps = document["steps"]
        if "-chat-" in run_id:
            assert document["agent"]["name"] == "chat"
            assert [s["source"] for s in steps] == ["user", "agent"] and steps[1]["message"] == result["answer"]
            assert "tool_calls" not in steps[1]
        else:
            assert document["agent"]["name"] == "tool_agent"
            assert [s["source"] for s in steps] == ["system", "user", "agent", "agent"]
            assert [[c["function_name"] for c in s["tool_calls"]] for s in agent_steps(document)] == [["bash"], ["submit"]]
            assert steps[2]["tool_calls"][0]["arguments"] == {"command": f"echo {result['answer']}"}
            (seen,) = steps[2]["observation"]["results"]
            assert seen["source_call_id"] == "c1" and result["answer"] in seen["content"]
            assert steps[3]["observation"]["results"] == [{"content": "submitted", "source_call_id": "c2"}]
            assert [t["function"]["name"] for t in document["agent"]["tool_definitions"]] == [
                "bash", "read_file", "write_file", "submit"]

    # a folder that is not empty is refused without --force, a run folder always, and atif needs a folder
    again = agentcompass(workdir, "export", str(runs[0]), "--format", "atif", "--output", str(out))
    assert again.returncode == 2 and "--force" in again.stderr
    forced = agentcompass(workdir, "export", str(runs[0]), "--format", "atif", "--output", str(out), "--force")
    assert forced.returncode == 0 and "2 ATIF trajectories" in forced.stdout, forced.stderr[-3000:]
    inside = agentcompass(workdir, "export", str(runs[0]), "-f", "atif", "-o", str(runs[0] / "atif"), "--force")
    assert inside.returncode == 2 and "run folder" in inside.stderr and not (runs[0] / "atif").exists()
    nowhere = agentcompass(workdir, "export", str(runs[0]), "-f", "atif")
    assert nowhere.returncode == 2 and "-o FOLDER" in nowhere.stderr


MINI_STEPS = ["echo Paris > answer.txt", "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && cat answer.txt"]


def mini_reply(body) -> tuple[int, dict]:
    step = sum(1 for m in body["messages"] if m["role"] == "assistant")
    reply = tool_call_reply("bash", {"command": MINI_STEPS[min(step, 1)]}, call_id=f"call_{step}", text=f"Step {step}.")
    reply["usage"] = {"prompt_tokens": 100 + step, "completion_tokens": 7, "total_tokens": 107 + step}
    return 200, reply


@pytest.mark.skipif(not network_isolation()[0],
                    reason=f"host_process cannot isolate a 'none' phase here: {network_isolation()[1]}")
def test_a_mini_swe_agent_attempt_exports_as_atif_that_harbor_validates(workdir: Path, tmp_path: Path):
    harbor_python()
    missing = missing_dependencies(MiniSweAgentHarness.dependencies)
    if missing:
        pytest.skip(f"mini-swe-agent is not installed: {missing}")
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    with ScriptedEndpoint(mini_reply) as endpoint:
        config = workdir / "mini.yaml"
        config.write_text(yaml.safe_dump({"requests": {"mini": {
            "benchmark": {"id": "example_exact_match", "params": {"task_ids": ["capital-france"]}},
            "harness": {"id": "mini_swe_agent", "params": {"step_limit": 4, "model_retries": 1}},
            "environment": {"id": "host_process", "run_network": "none", "params": {"workspace_root": str(sessions)}},
            "model": {"id": "solver", "base_url": endpoint.base_url}}}}))
        done = agentcompass(workdir, "run", "--config", str(config))
    assert done.returncode == 0, done.stderr[-3000:]
    run = workdir / "results/default/mini"

    (document,) = exported(workdir, tmp_path / "atif", run).values()
    assert document["agent"]["name"] == "mini_swe_agent" and document["extra"]["agentcompass"]["verdict"]["correct"] is True
    assert [s["source"] for s in document["steps"]] == ["system", "user", "agent", "agent"]
    steps = agent_steps(document)
    assert [[c["function_name"] for c in s["tool_calls"]] for s in steps] == [["bash"], ["bash"]]
    assert [s["tool_calls"][0]["arguments"]["command"] for s in steps] == MINI_STEPS
    # each command's output is matched to its call: the first from the next request, the last (never sent back
    # to the model) from mini-swe-agent's own messages
    assert [[r["source_call_id"] for r in s["observation"]["results"]] for s in steps] == [["call_0"], ["call_1"]]
    assert [s["metrics"]["prompt_tokens"] for s in steps] == [100, 101]
    check_usage(document, run / "attempts/capital-france/1")


def test_every_reply_shape_converts_to_atif_that_harbor_validates(tmp_path: Path):
    """The shapes the runs above do not reach (Anthropic's Messages, OpenAI's Responses, streams, an attempt
    without a model call), converted from hand-made lines."""
    harbor_python()
    anthropic = [
        {"type": "message_start", "message": {"model": "claude-x", "usage": {"input_tokens": 5, "cache_read_input_tokens": 2}}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "hm"}},
        {"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": "t1", "name": "Bash", "input": {}}},
        {"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "{\"command\": \"ls\"}"}},
        {"type": "message_delta", "usage": {"output_tokens": 3}},
    ]
    responses = {"model": "gpt-x", "output": [{"type": "function_call", "call_id": "f1", "name": "shell", "arguments": "{}"}],
                 "usage": {"input_tokens": 4, "output_tokens": 1}}
    shapes = {
        "anthropic": [
            {"source": "gateway", "method": "POST", "path": "/v1/messages", "status": 200,
             "request": {"system": "sys", "messages": [{"role": "user", "content": "go"}]}, "reply": anthropic},
            {"source": "claude_code", "type": "tool_result", "tool_call_id": "t1", "name": "Bash", "output": "a\n"}],
        "responses": [
            {"source": "gateway", "method": "POST", "path": "/v1/responses", "status": 200,
             "request": {"instructions": "sys", "input": "go"}, "reply": [{"type": "response.completed", "response": responses}]},
            {"source": "gateway", "method": "POST", "path": "/v1/responses", "status": 200, "request": {"input": [
                {"type": "function_call", "call_id": "f1"}, {"type": "function_call_output", "call_id": "f1", "output": "x"},
                {"role": "user", "content": [{"type": "input_text", "text": "more"}]}]},
             "reply": {"output": [{"type": "message", "content": [{"type": "output_text", "text": "ok"}]}]}}],
        "none": [],
    }
    files = []
    for name, lines in shapes.items():
        folder = tmp_path / name
        folder.mkdir()
        (folder / "trajectory.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines) + "{cut\n")
        (folder / "result.json").write_text(json.dumps({"status": "completed", "answer": "Paris"}))
        document = atif.attempt_document(folder, {"namespace": "n", "run_id": "r", "task_id": name, "attempt": 1,
                                                  "harness": "h", "model": "m", "status": "completed"})
        assert document["extra"]["agentcompass"]["skipped_lines"] == 1
        files.append(tmp_path / f"{name}.json")
        files[-1].write_text(json.dumps(document))
    assert harbor_errors(files) == {}
