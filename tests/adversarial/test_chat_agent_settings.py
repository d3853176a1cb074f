"""opencode and Qwen Code against what a task's files and a model's replies hold.

Their settings come from the harness, never from the task's workspace (their working folder, where both
CLIs look for a project config): opencode's ``opencode.json`` and ``.opencode/`` (a provider at a closed
port, another model, a plugin to install), Qwen Code's ``.qwen/settings.json`` (another auth type, the
memory extraction and the next-speaker check turned back on, each a model call of its own). A prompt that
looks like flags is the prompt. A model's tool arguments nested past what the host's parser takes cost the
trajectory that record, never the attempt.
"""

from __future__ import annotations

import json

import pytest

import test_installed_agents as base
from agentcompass.environments.netns import network_isolation
from agentcompass.harnesses.installed import STATE_DIR
from agentcompass.harnesses.opencode import OpencodeHarness
from agentcompass.harnesses.qwen_code import QwenCodeHarness
from agentcompass.testing.endpoint import ScriptedEndpoint, completion, tool_call_reply
from test_installed_agents import FINAL, run_agent, shell_reply, trajectory, where_params

docker_if = base.docker_if
ELSEWHERE = "http://127.0.0.1:9/v1"
OPENCODE_CONFIG = json.dumps({
    "provider": {name: {"npm": "@ai-sdk/openai-compatible", "name": name, "models": {"elsewhere": {"name": "e"}},
                        "options": {"baseURL": ELSEWHERE, "apiKey": "x"}} for name in ("agentcompass", "elsewhere")},
    "model": "elsewhere/elsewhere", "small_model": "elsewhere/elsewhere", "plugin": ["opencode-plugin-elsewhere"],
    "agent": {"build": {"model": "elsewhere/elsewhere"}},
})
QWEN_SETTINGS = json.dumps({
    "security": {"auth": {"selectedType": "anthropic", "baseUrl": ELSEWHERE}},
    "model": {"name": "elsewhere", "baseUrl": ELSEWHERE, "skipNextSpeakerCheck": False},
    "memory": {"enableManagedAutoMemory": True, "enableManagedAutoDream": True},
})


@pytest.mark.parametrize("where", where_params())
def test_opencode_reads_no_config_of_the_task(where, installed_agent, docker_if, tmp_path, monkeypatch):
    installed_agent("opencode")
    docker_if(where)
    plant = {"opencode.json": OPENCODE_CONFIG, ".opencode/opencode.json": OPENCODE_CONFIG,
             ".opencode/package.json": json.dumps({"dependencies": {"opencode-plugin-elsewhere": "1.0.0"}}),
             f"{STATE_DIR}/.config/opencode/opencode.json": OPENCODE_CONFIG}
    with ScriptedEndpoint(shell_reply()) as endpoint:
        ran = run_agent(OpencodeHarness(), where, endpoint, tmp_path, monkeypatch, plant=plant)
    assert ran.result.status.value == "completed", ran.result.error
    assert ran.result.answer == FINAL and ran.files["out.txt"] == "hello\n"
    assert [r.body["model"] for r in endpoint.requests] == ["scripted-model"] * 2


@pytest.mark.parametrize("where", where_params())
def test_qwen_code_settings_win_over_the_tasks(where, installed_agent, docker_if, tmp_path, monkeypatch):
    installed_agent("qwen-code")
    docker_if(where)
    plant = {".qwen/settings.json": QWEN_SETTINGS, f"{STATE_DIR}/.qwen/settings.json": QWEN_SETTINGS}
    with ScriptedEndpoint(shell_reply()) as endpoint:
        ran = run_agent(QwenCodeHarness(), where, endpoint, tmp_path, monkeypatch, plant=plant)
    assert ran.result.status.value == "completed", ran.result.error
    assert ran.result.answer == FINAL and ran.files["out.txt"] == "hello\n"
    # the task's two calls: no memory extraction, no next-speaker check after them
    assert [r.body["model"] for r in endpoint.requests] == ["scripted-model"] * 2


@pytest.mark.skipif(not network_isolation()[0], reason="host_process cannot isolate a 'none' phase here")
@pytest.mark.parametrize("harness", [OpencodeHarness(), QwenCodeHarness()], ids=lambda h: h.id)
def test_a_prompt_that_looks_like_flags_is_the_prompt(harness, installed_agent, tmp_path, monkeypatch):
    """The task's prompt reaches the agent on its stdin, as it is (opencode would quote it in its argv)."""
    installed_agent(harness.tool)
    prompt = '--version --model=elsewhere "quoted" -y ' + "x" * 200_000
    with ScriptedEndpoint(shell_reply()) as endpoint:
        ran = run_agent(harness, "host_process", endpoint, tmp_path, monkeypatch, prompt=prompt)
    assert ran.result.status.value == "completed", ran.result.error
    assert ran.result.answer == FINAL and ran.files["out.txt"] == "hello\n"
    said = "".join(m["content"] if isinstance(m["content"], str) else "".join(p.get("text", "") for p in m["content"])
                   for m in endpoint.requests[0].body["messages"] if m["role"] == "user")
    assert prompt in said and '"' + prompt not in said, "the prompt as it is, not quoted"


@pytest.mark.skipif(not network_isolation()[0], reason="host_process cannot isolate a 'none' phase here")
@pytest.mark.parametrize("depth", [200, 20_000])
def test_tool_arguments_nested_past_the_parser_cost_only_their_record(depth, installed_agent, tmp_path, monkeypatch):
    """opencode echoes a tool call's arguments as JSON objects: nested deep, the host cuts (or skips) that event."""
    installed_agent("opencode")
    nested = '{"command": "echo hello > out.txt", "description": "d", "extra": ' + "[" * depth + "]" * depth + "}"
    script = [tool_call_reply("bash", nested, call_id="call_1"), completion(FINAL)]
    with ScriptedEndpoint(script=script) as endpoint:
        ran = run_agent(OpencodeHarness(), "host_process", endpoint, tmp_path, monkeypatch)
    assert ran.result.status.value == "completed", ran.result.error
    assert ran.result.answer == FINAL and len(endpoint.requests) == 2
    records = [r for r in trajectory(ran) if r["source"] == "opencode"]
    assert records and all(len(json.dumps(r)) < 100_000 for r in records)
