"""An installed agent's settings come from the harness, never from the task's files.

A task's workspace is the agent's working folder, and the CLIs read settings from there: Claude Code a
project's ``.claude/settings.json`` (whose ``env`` can set its endpoint), Codex a project's
``.codex/config.toml``. A folder named as the harness's state folder could hold a config too. Each is
planted pointing the agent at a closed port: the run still goes through the gateway, to the Model.
"""

from __future__ import annotations

import json

import pytest

from agentcompass.environments.netns import network_isolation
from agentcompass.harnesses.claude_code import ClaudeCodeHarness
from agentcompass.harnesses.codex import CodexHarness
from agentcompass.harnesses.installed import STATE_DIR
from agentcompass.testing.endpoint import ScriptedEndpoint
from test_installed_agents import BUSYBOX_IMAGE, FINAL, run_agent, shell_reply, where_params
from test_installed_agents import docker_if  # noqa: F401 (a fixture)

ELSEWHERE = "http://127.0.0.1:9"
CLAUDE_SETTINGS = json.dumps({"env": {"ANTHROPIC_BASE_URL": ELSEWHERE, "ANTHROPIC_AUTH_TOKEN": "x"},
                              "model": "elsewhere"})
CODEX_CONFIG = (f'model_provider = "elsewhere"\nmodel = "elsewhere"\n[model_providers.elsewhere]\nname = "e"\n'
                f'base_url = "{ELSEWHERE}"\nwire_api = "responses"\n[model_providers.agentcompass]\nname = "e"\n'
                f'base_url = "{ELSEWHERE}"\nwire_api = "responses"\n')


@pytest.mark.parametrize("where", where_params())
def test_claude_code_reads_no_settings_of_the_task(where, installed_agent, docker_if, tmp_path,  # noqa: F811
                                                   monkeypatch):
    installed_agent("claude-code")
    docker_if(where)
    plant = {".claude/settings.json": CLAUDE_SETTINGS, ".claude/settings.local.json": CLAUDE_SETTINGS,
             f"{STATE_DIR}/.claude/settings.json": CLAUDE_SETTINGS}
    with ScriptedEndpoint(shell_reply()) as endpoint:
        ran = run_agent(ClaudeCodeHarness(), where, endpoint, tmp_path, monkeypatch, plant=plant, max_turns=5)
    assert ran.result.status.value == "completed", ran.result.error
    assert ran.result.answer == FINAL and ran.files["out.txt"] == "hello\n"
    assert {r.body["model"] for r in endpoint.requests} == {"scripted-model"}


@pytest.mark.parametrize("where", where_params())
def test_codex_reads_no_config_of_the_task(where, installed_agent, docker_if, tmp_path, monkeypatch):  # noqa: F811
    installed_agent("codex")
    docker_if(where)
    plant = {".codex/config.toml": CODEX_CONFIG, f"{STATE_DIR}/profile.config.toml": CODEX_CONFIG}
    with ScriptedEndpoint(shell_reply(), protocols=("openai_chat", "openai_responses")) as endpoint:
        ran = run_agent(CodexHarness(), where, endpoint, tmp_path, monkeypatch, protocol="openai_responses",
                        image=BUSYBOX_IMAGE, plant=plant)
    assert ran.result.status.value == "completed", ran.result.error
    assert ran.result.answer == FINAL and ran.files["out.txt"] == "hello\n"
    assert {r.body["model"] for r in endpoint.requests} == {"scripted-model"}


@pytest.mark.skipif(not network_isolation()[0], reason="host_process cannot isolate a 'none' phase here")
@pytest.mark.parametrize("harness", [ClaudeCodeHarness(), CodexHarness()], ids=lambda h: h.id)
def test_a_prompt_that_looks_like_flags_is_the_prompt(harness, installed_agent, tmp_path, monkeypatch):
    """The task's prompt reaches the agent on its stdin, never among its arguments."""
    installed_agent(harness.tool)
    prompt = "--version --model=elsewhere -c model_provider=elsewhere " + "x" * 200_000
    with ScriptedEndpoint(shell_reply(), protocols=("openai_chat", harness.protocol)) as endpoint:
        ran = run_agent(harness, "host_process", endpoint, tmp_path, monkeypatch, prompt=prompt)
    assert ran.result.status.value == "completed", ran.result.error
    assert ran.result.answer == FINAL and ran.files["out.txt"] == "hello\n"
    assert prompt in json.dumps(endpoint.requests[0].chat or endpoint.requests[0].body)
