"""mini_swe_agent: the real mini-swe-agent under an isolated run phase, through the model gateway.

The Model is a scripted endpoint on 127.0.0.1 that answers with bash tool
calls; the workflow is the real Snakemake, the agent the real `mini` program.
"""

from __future__ import annotations

import json
import secrets
from pathlib import Path

import pytest

from agentcompass.environments.netns import network_isolation
from agentcompass.harnesses.mini_swe_agent import MiniSweAgentHarness
from agentcompass.testing.dependencies import needs
from agentcompass.testing.endpoint import ScriptedEndpoint
from conftest import clean_env, files_holding, snakemake

pytestmark = [
    pytest.mark.skipif(
        not network_isolation()[0], reason=f"host_process cannot isolate a 'none' phase here: {network_isolation()[1]}"
    ),
    needs(*MiniSweAgentHarness.dependencies),
]

KEY_VARIABLE = "AGENTCOMPASS_TEST_KEY"

# The solver writes its answer into the workspace, records what the agent can see
# (its environment, its config dir, its network) and submits the file's content.
SOLVER_STEPS = [
    "echo Paris > answer.txt",
    'env > seen-env.txt; cp -r "$MSWEA_GLOBAL_CONFIG_DIR" seen-config; ip -o link > seen-links.txt; '
    "ip route > seen-routes.txt",
    "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && cat answer.txt",
]


def tool_call_reply(step: int, command: str) -> dict:
    return {
        "id": f"chatcmpl-{step}",
        "object": "chat.completion",
        "model": "solver",
        "choices": [{
            "index": 0,
            "finish_reason": "tool_calls",
            "message": {
                "role": "assistant",
                "content": f"Step {step}.",
                "tool_calls": [{"id": f"call_{step}", "type": "function",
                                "function": {"name": "bash", "arguments": json.dumps({"command": command})}}],
            },
        }],
        "usage": {"prompt_tokens": 100, "completion_tokens": 7, "total_tokens": 107},
    }


def reply(body) -> tuple[int, dict]:
    step = sum(1 for m in body["messages"] if m["role"] == "assistant")
    if body["model"] == "babbler":  # never calls a tool: mini gives up after three format errors
        return 200, {"id": "x", "object": "chat.completion", "model": "babbler", "usage": {},
                     "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "Paris?"}}]}
    if body["model"] == "outage":  # every call fails: mini stops after its retries
        return 503, {"error": {"message": "scripted outage", "type": "server_error"}}
    if body["model"] == "looper":  # never submits: mini stops at its step limit
        return 200, tool_call_reply(step, "echo still working")
    return 200, tool_call_reply(step, SOLVER_STEPS[min(step, len(SOLVER_STEPS) - 1)])


def request(name: str, model_id: str, base_url: str, sessions: Path) -> str:
    return (
        f"  {name}:\n"
        "    benchmark: {id: example_exact_match, params: {task_ids: [capital-france]}}\n"
        "    harness: {id: mini_swe_agent, params: {step_limit: 6, model_retries: 1, rate_limit_patience: 0}}\n"
        f"    environment: {{id: host_process, run_network: none, params: {{keep_workspace: true, workspace_root: '{sessions}'}}}}\n"
        f"    model: {{id: {model_id}, base_url: '{base_url}', api_key: '${{{KEY_VARIABLE}}}', params: {{temperature: 0}}}}\n"
    )


def test_mini_swe_agent_solves_a_task_through_the_gateway_and_the_key_stays_outside(workdir: Path, tmp_path: Path):
    key = "sk-test-" + secrets.token_hex(16)
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    with ScriptedEndpoint(reply) as endpoint:
        config = workdir / "mini.yaml"
        config.write_text("requests:\n" + request("solver", "solver", endpoint.base_url, sessions)
                          + request("babbler", "babbler", endpoint.base_url, sessions)
                          + request("looper", "looper", endpoint.base_url, sessions)
                          + request("outage", "outage", endpoint.base_url, sessions))
        done = snakemake(workdir, "--configfile", str(config), env=clean_env(**{KEY_VARIABLE: key}))
    assert done.returncode == 0, done.stderr[-3000:]

    # the solver's answer came from the file it wrote in its workspace, and was scored
    attempt = workdir / "results/default/solver/attempts/capital-france/1"
    result = json.loads((attempt / "result.json").read_text())
    assert result["status"] == "completed", result.get("error")
    assert result["answer"].strip() == "Paris" and result["correct"] is True
    assert result["usage"]["calls"] == 3
    assert result["usage"]["prompt_tokens"] == 300 and result["usage"]["completion_tokens"] == 21
    # counted by the gateway as each call is made; agentcompass retries none (the agent's own retries are calls)
    assert set(result["usage"]) == {"calls", "retries", "prompt_tokens", "completion_tokens", "total_tokens",
                                    "latency_seconds"}
    assert result["usage"]["retries"] == 0
    assert all(type(result["usage"][k]) is int for k in ("calls", "prompt_tokens", "completion_tokens", "total_tokens"))

    # every call went through the gateway and carried the real key, never the agent's token
    solver_calls = [r for r in endpoint.requests if r.body["model"] == "solver"]
    assert len(solver_calls) == 3
    assert {r.headers.get("Authorization") for r in endpoint.requests} == {f"Bearer {key}"}
    assert solver_calls[0].body["temperature"] == 0
    assert solver_calls[0].body["tools"][0]["function"]["name"] == "bash"

    # the trajectory: each call as the gateway saw it, then the agent's own messages
    lines = [json.loads(line) for line in (attempt / "trajectory.jsonl").read_text().splitlines()]
    wire = [line for line in lines if line["source"] == "gateway"]
    assert [w["status"] for w in wire] == [200, 200, 200]
    assert [w["reply"]["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] for w in wire] == [
        json.dumps({"command": c}) for c in SOLVER_STEPS
    ]
    agent = [line for line in lines if line["source"] == "mini_swe_agent"]
    assert [a["message"]["role"] for a in agent[:-1]] == ["system", "user"] + ["assistant", "tool"] * 3 + ["exit"]
    assert agent[-1]["info"]["exit_status"] == "Submitted"

    # what the agent saw: only loopback, no route, and an environment without the key or its variable
    workspace = next(sessions.glob("agentcompass-solver-*-run-*"))
    assert (workspace / "answer.txt").read_text() == "Paris\n"
    links = (workspace / "seen-links.txt").read_text().splitlines()
    assert len(links) == 1 and links[0].split(":")[1].strip() == "lo"
    assert (workspace / "seen-routes.txt").read_text() == ""
    seen_env = (workspace / "seen-env.txt").read_text()
    assert "MSWEA_CONFIGURED=true" in seen_env and KEY_VARIABLE not in seen_env
    assert (workspace / "seen-config").is_dir()
    assert not (workspace / ".mini-swe-agent").exists(), "the agent's state is removed after the run"

    # the key is in no file the agent could read, nor under results/ or .snakemake/
    holding, scanned = files_holding(key, sessions, workdir / "results", workdir / ".snakemake")
    assert scanned > 30
    assert holding == []
    assert key not in done.stdout + done.stderr

    # an agent that never submits is a run_error with mini-swe-agent's reason
    babbled = json.loads((workdir / "results/default/babbler/attempts/capital-france/1/result.json").read_text())
    assert babbled["status"] == "run_error"
    assert "RepeatedFormatError" in babbled["error"] and babbled["failure_class"] == "harness"
    assert babbled["usage"]["calls"] == 3
    # one stopped at its step limit is one of class limit (from mini-swe-agent's exit status, its exception's type)
    looped = json.loads((workdir / "results/default/looper/attempts/capital-france/1/result.json").read_text())
    assert looped["status"] == "run_error" and "LimitsExceeded" in looped["error"]
    assert looped["failure_class"] == "limit" and looped["usage"]["calls"] == 6
    # one stopped by the endpoint's 503s is of class endpoint, with the status of the last call the gateway forwarded
    down = json.loads((workdir / "results/default/outage/attempts/capital-france/1/result.json").read_text())
    assert down["status"] == "run_error" and down["failure_class"] == "endpoint"
    assert down["metadata"]["failure"] == {"class": "endpoint", "http_status": 503}
