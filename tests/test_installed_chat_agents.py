"""Installed agents that speak chat completions: opencode and Qwen Code, the real CLIs from the tool cache.

As in test_installed_agents: each agent driven in this process (the harness's ``run`` in a real session)
against a ScriptedEndpoint on 127.0.0.1 whose script makes one shell tool call that writes a file, then
answers; the gateway passes the chat calls through (streamed: both CLIs ask for a stream); one failure of
each is classed. test_installed_agents_workflow runs them through a task folder's task in a real workflow.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

import test_installed_agents as base
from agentcompass.environments.netns import network_isolation
from agentcompass.harnesses.opencode import OpencodeHarness
from agentcompass.harnesses.qwen_code import QwenCodeHarness
from agentcompass.testing.endpoint import Reply, ScriptedEndpoint, completion, tool_call_reply
from agentcompass.tools import TOOLS
from test_installed_agents import (
    assert_solved, run_agent, shell_reply, trajectory, where_params,
)

docker_if = base.docker_if

AGENTS = {"opencode": (OpencodeHarness, "opencode", "bash"), "qwen_code": (QwenCodeHarness, "qwen-code", "run_shell_command")}
needs_isolation = pytest.mark.skipif(not network_isolation()[0], reason="host_process cannot isolate a 'none' phase here")


# on host_process (on docker too: the workflow test)
@pytest.mark.parametrize("where", where_params()[:1])
@pytest.mark.parametrize("agent", list(AGENTS))
def test_agent_writes_the_file_and_answers(agent, where, installed_agent, docker_if, tmp_path, monkeypatch):
    harness, tool, shell = AGENTS[agent]
    installed_agent(tool)
    docker_if(where)
    with ScriptedEndpoint(shell_reply()) as endpoint:
        ran = run_agent(harness(), where, endpoint, tmp_path, monkeypatch, max_turns=5)
    assert_solved(ran, endpoint, agent)
    assert [r["name"] for r in trajectory(ran) if r.get("type") == "tool_result"] == [shell]
    # no side call (a title, a memory, a next-speaker check): the task's two calls, streamed, the prompt as it is
    # (on stdin: Qwen Code ends it with a blank line)
    assert [r.path for r in endpoint.requests] == ["/v1/chat/completions"] * 2
    assert all(r.body["stream"] is True and r.body["model"] == "scripted-model" for r in endpoint.requests)
    users = [m["content"] for m in endpoint.requests[0].body["messages"] if m["role"] == "user"]
    assert any("Write hello into out.txt." == (u if isinstance(u, str) else u[-1]["text"]).rstrip() for u in users), users


@needs_isolation
@pytest.mark.parametrize("agent", list(AGENTS))
def test_agent_past_its_timeout_is_a_limit(agent, installed_agent, tmp_path, monkeypatch):
    harness, tool, _ = AGENTS[agent]
    installed_agent(tool)
    with ScriptedEndpoint(lambda body: Reply(200, completion("late"), delay=30)) as endpoint:
        ran = run_agent(harness(), "host_process", endpoint, tmp_path, monkeypatch, timeout=4)
    assert ran.result.status.value == "run_error" and ran.result.failure_class.value == "limit", ran.result.error
    assert "did not finish within 4" in ran.result.error
    assert not ran.state_left


@needs_isolation
def test_qwen_code_stopped_at_max_turns_is_a_limit(installed_agent, tmp_path, monkeypatch):
    """A model that never stops calling tools: Qwen Code's own turn limit stops it (status 53), the gateway counts."""
    installed_agent("qwen-code")
    with ScriptedEndpoint(lambda body: tool_call_reply("run_shell_command", {"command": "true"})) as endpoint:
        ran = run_agent(QwenCodeHarness(), "host_process", endpoint, tmp_path, monkeypatch, max_turns=2)
    assert ran.result.status.value == "run_error" and ran.result.failure_class.value == "limit", ran.result.error
    assert "exited with status 53" in ran.result.error
    assert ran.result.usage["calls"] == len(endpoint.requests) == 2


def test_extra_args_and_env_cannot_redirect_the_agent():
    from agentcompass.errors import ConfigError

    for harness, params in [(OpencodeHarness(), {"extra_args": ["--model=other/m"]}),
                            (OpencodeHarness(), {"extra_args": ["-mother/m"]}),
                            (OpencodeHarness(), {"extra_args": ["--attach", "http://elsewhere"]}),
                            (OpencodeHarness(), {"env": {"OPENCODE_CONFIG_CONTENT": "{}"}}),
                            (OpencodeHarness(), {"env": {"XDG_CONFIG_HOME": "/"}}),
                            (QwenCodeHarness(), {"extra_args": ["--openai-base-url", "http://elsewhere"]}),
                            (QwenCodeHarness(), {"extra_args": ["--max-session-turns=1000"]}),
                            (QwenCodeHarness(), {"env": {"OPENAI_BASE_URL": "http://elsewhere"}}),
                            (QwenCodeHarness(), {"env": {"QWEN_TELEMETRY_ENABLED": "true"}})]:
        with pytest.raises(ConfigError, match="may not set"):
            harness.build_config(SimpleNamespace(harness=SimpleNamespace(params=params)))
    config = QwenCodeHarness().build_config(SimpleNamespace(harness=SimpleNamespace(
        params={"extra_args": ["--append-system-prompt", "be brief"], "env": {"FOO": "1"}})))
    assert QwenCodeHarness().tools(config) == (TOOLS["qwen-code"].key,)
