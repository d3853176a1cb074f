"""Installed agents: the real CLIs (Claude Code, Codex) from the tool cache, in a sandbox, behind the gateway.

Each agent is driven in this process (the harness's ``run`` in a real session, as the run stage calls it)
against a ScriptedEndpoint on 127.0.0.1 whose script makes one shell tool call that writes a file, then
answers with a final text, through the gateway's translation for a chat-completions-only endpoint;
test_installed_agents_workflow runs every agent through a ``task_dir`` task in a real workflow against an
endpoint that speaks its own protocol (the Model's ``protocol`` set to it: the gateway passes the calls
through). The tools come from the cache named by ``AGENTCOMPASS_TOOL_CACHE`` (``agentcompass tools install``):
the tier ``agents`` (the fixture ``installed_agent``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import posixpath
import secrets
from pathlib import Path
from types import SimpleNamespace

import pytest

from agentcompass.environments import DockerEnvironment, HostProcessEnvironment
from agentcompass.environments.netns import network_isolation
from agentcompass.harnesses.claude_code import RETRIES, ClaudeCodeHarness
from agentcompass.harnesses.codex import CodexHarness
from agentcompass.harnesses.installed import STATE_DIR
from agentcompass.runtime import PreparedTask, TaskInput
from agentcompass.runtime.base import HarnessContext
from agentcompass.runtime.models import EnvironmentSpec, NetworkPolicy
from agentcompass.runtime.models.request import ModelSpec
from agentcompass.runtime.models.task import HarnessPlan
from agentcompass.testing.endpoint import ALL_PROTOCOLS, Reply, ScriptedEndpoint, completion, server_error, tool_call_reply
from agentcompass.tools import TOOLS
from conftest import files_holding


KEY_VARIABLE = "AGENTCOMPASS_TEST_AGENT_KEY"
GLIBC_IMAGE = os.environ.get("AGENTCOMPASS_TEST_GLIBC_IMAGE", "local/glibc:latest")
BUSYBOX_IMAGE = os.environ.get("AGENTCOMPASS_TEST_IMAGE", "local/busybox:latest")
FINAL = "I wrote out.txt."
COMMAND = "echo hello > out.txt; env > seen-env.txt"
SHELL_TOOLS = {"Bash": lambda c: {"command": c}, "shell": lambda c: {"command": ["sh", "-c", c]},
               "exec_command": lambda c: {"cmd": c}, "bash": lambda c: {"command": c, "description": "write"},
               "run_shell_command": lambda c: {"command": c}}


def shell_reply(command: str = COMMAND, final: str = FINAL):
    """A chat script: the shell tool the agent offers, called once with ``command``; then ``final``."""

    def reply(body):
        tools = [t.get("function", t).get("name") for t in body.get("tools") or []]
        shell = next((name for name in SHELL_TOOLS if name in tools), None)
        if shell is None:  # a side call of the CLI's (a title, a summary): plain text
            return completion("ok")
        if any(m.get("role") == "tool" for m in body.get("messages") or []):
            return completion(final)
        return tool_call_reply(shell, SHELL_TOOLS[shell](command), call_id="call_1")

    return reply


@dataclasses.dataclass
class Ran:
    result: object
    files: dict[str, str]  # what the agent left in its workspace
    state_left: bool
    attempt_dir: Path


def run_agent(harness, where: str, endpoint: ScriptedEndpoint | SimpleNamespace, tmp_path: Path, monkeypatch, *,
              protocol: str = "openai_chat", image: str = GLIBC_IMAGE, plant: dict[str, str] | None = None,
              prompt: str = "Write hello into out.txt.", model_id: str = "scripted-model", **params) -> Ran:
    """One attempt of ``harness`` in a fresh session of ``where`` (no network but the gateway's hole), with the
    files ``plant`` names (path in the workspace -> text) there before it starts, as a task's files would be."""
    monkeypatch.setenv(KEY_VARIABLE, "sk-agents-" + secrets.token_hex(16))
    # an anthropic Model's base_url is the host alone: its calls are /v1/messages under it
    base_url = endpoint.base_url.removesuffix("/v1") if protocol == "anthropic" else endpoint.base_url
    model = ModelSpec(id=model_id, base_url=base_url, api_key=f"${{{KEY_VARIABLE}}}", protocol=protocol)
    req = SimpleNamespace(model=model, harness=SimpleNamespace(params=params))
    config = harness.build_config(req)
    plan = HarnessPlan(harness_id=harness.id, params=dataclasses.asdict(config))
    environment = HostProcessEnvironment() if where == "host_process" else DockerEnvironment()
    spec = EnvironmentSpec(id=where, params={} if where == "host_process" else {"image": image},
                           tools=list(harness.tools(config)))
    attempt_dir = tmp_path / f"attempt-{secrets.token_hex(4)}"
    attempt_dir.mkdir()
    context = HarnessContext(attempt=1, attempt_dir=attempt_dir, trajectory_path=attempt_dir / "trajectory.jsonl")

    async def main() -> Ran:
        session = await environment.open(spec, NetworkPolicy("none"), f"agents{secrets.token_hex(5)}-t-1-run")
        try:
            for name, text in (plant or {}).items():
                path = posixpath.join(session.workdir, name)
                await session.exec(["mkdir", "-p", posixpath.dirname(path)])
                await session.write_text(path, text)
            prepared = PreparedTask(task_id="t", input=TaskInput(prompt=prompt, workspace=session.workdir))
            result = await harness.run(prepared, session, req, plan, context)
            files = {}
            for name in ("out.txt", "seen-env.txt"):
                path = posixpath.join(session.workdir, name)
                if await session.exists(path):
                    files[name] = await session.read_text(path)
            state_left = await session.exists(posixpath.join(session.workdir, STATE_DIR))
            return Ran(result, files, state_left, attempt_dir)
        finally:
            await session.close()

    return asyncio.run(main())


def trajectory(ran: Ran) -> list[dict]:
    return [json.loads(line) for line in (ran.attempt_dir / "trajectory.jsonl").read_text().splitlines()]


def assert_solved(ran: Ran, endpoint: ScriptedEndpoint, source: str) -> None:
    result = ran.result
    assert result.status.value == "completed", result.error
    assert result.answer == FINAL
    assert ran.files["out.txt"] == "hello\n"
    assert not ran.state_left, "the agent's state folder is removed after the run"
    # the gateway's count: every call the endpoint answered, with the scripted usage
    calls = [r for r in endpoint.requests if r.protocol != "openai_chat" or r.path.endswith("/chat/completions")]
    assert result.usage["calls"] == len(calls) >= 2
    assert result.usage["prompt_tokens"] == 10 * result.usage["calls"]
    # the real key reached the endpoint, the agent never saw it nor its variable
    secret = os.environ[KEY_VARIABLE]
    for r in endpoint.requests:  # as a bearer token, or as Anthropic's x-api-key
        sent = {name.lower(): value for name, value in r.headers.items()}
        assert sent.get("authorization") == f"Bearer {secret}" or sent.get("x-api-key") == secret
    assert secret not in ran.files["seen-env.txt"] and KEY_VARIABLE not in ran.files["seen-env.txt"]
    holding, scanned = files_holding(secret, ran.attempt_dir)
    assert scanned >= 2 and holding == []
    # the transcript's records: the tool call and its result, drawn by the report
    records = [r for r in trajectory(ran) if r["source"] == source]
    tool_results = [r for r in records if r.get("type") == "tool_result"]
    assert len(tool_results) == 1 and "echo hello > out.txt" in json.dumps(tool_results[0]["arguments"])
    messages = [r["message"] for r in records if "message" in r]
    assert messages[-1]["content"] == FINAL
    assert (ran.attempt_dir / f"{source}.log").is_file()


def where_params():
    return [pytest.param("host_process", marks=pytest.mark.skipif(
        not network_isolation()[0], reason=f"host_process cannot isolate a 'none' phase: {network_isolation()[1]}")),
        "docker"]


@pytest.fixture
def docker_if(request):
    def check(where: str) -> None:
        if where == "docker":
            request.getfixturevalue("needs_docker")

    return check


# --- claude_code --------------------------------------------------------------------------------

CLAUDE = TOOLS["claude-code"].key


# through translation, for a chat-completions-only endpoint (its own protocol, passed through: the workflow test)
@pytest.mark.parametrize("where", where_params())
@pytest.mark.parametrize("protocol", ["openai_chat"])
def test_claude_code_writes_the_file_and_answers(where, protocol, installed_agent, docker_if, tmp_path, monkeypatch):
    installed_agent("claude-code")
    docker_if(where)
    with ScriptedEndpoint(shell_reply(), protocols=("openai_chat", protocol)) as endpoint:
        ran = run_agent(ClaudeCodeHarness(), where, endpoint, tmp_path, monkeypatch, protocol=protocol, max_turns=5)
    assert_solved(ran, endpoint, "claude_code")
    # the route: passed through in the agent's own protocol, or translated into chat completions
    assert {r.protocol for r in endpoint.requests} == {protocol}


# --- codex --------------------------------------------------------------------------------------

CODEX = TOOLS["codex"].key


@pytest.mark.parametrize("where", where_params())
@pytest.mark.parametrize("protocol", ["openai_chat"])
def test_codex_writes_the_file_and_answers(where, protocol, installed_agent, docker_if, tmp_path, monkeypatch):
    installed_agent("codex")
    docker_if(where)
    with ScriptedEndpoint(shell_reply(), protocols=("openai_chat", protocol)) as endpoint:
        # a static program: it runs in a busybox image, with no glibc
        ran = run_agent(CodexHarness(), where, endpoint, tmp_path, monkeypatch, protocol=protocol, image=BUSYBOX_IMAGE)
    assert_solved(ran, endpoint, "codex")
    assert {r.protocol for r in endpoint.requests} == {protocol}


# --- how a run that does not complete is classed -------------------------------------------------


def run_claude(tmp_path, monkeypatch, reply, **params) -> tuple[Ran, ScriptedEndpoint]:
    with ScriptedEndpoint(reply) as endpoint:
        ran = run_agent(ClaudeCodeHarness(), "host_process", endpoint, tmp_path, monkeypatch, **params)
    return ran, endpoint


@pytest.mark.skipif(not network_isolation()[0], reason="host_process cannot isolate a 'none' phase here")
def test_claude_code_that_exits_non_zero_or_is_killed_is_a_harness_failure(installed_agent, tmp_path, monkeypatch):
    installed_agent("claude-code")
    ran, endpoint = run_claude(tmp_path, monkeypatch, shell_reply(), extra_args=["--no-such-flag"])
    assert ran.result.status.value == "run_error" and ran.result.failure_class.value == "harness"
    assert "exited with status 1" in ran.result.error and "no-such-flag" in ran.result.error
    assert endpoint.requests == [] and ran.result.usage["calls"] == 0
    # killed mid-run by a signal (its own tool call kills it): no final result
    ran, endpoint = run_claude(tmp_path, monkeypatch, shell_reply("kill -9 $PPID"))
    assert ran.result.status.value == "run_error" and ran.result.failure_class.value == "harness", ran.result.error
    assert "killed by signal 9" in ran.result.error and ran.result.usage["calls"] == 1


@pytest.mark.skipif(not network_isolation()[0], reason="host_process cannot isolate a 'none' phase here")
def test_claude_code_past_its_timeout_or_its_turns_is_a_limit(installed_agent, tmp_path, monkeypatch):
    installed_agent("claude-code")
    ran, _ = run_claude(tmp_path, monkeypatch, lambda body: Reply(200, completion("late"), delay=30), timeout=3)
    assert ran.result.status.value == "run_error" and ran.result.failure_class.value == "limit"
    assert "did not finish within 3" in ran.result.error
    # a model that never stops calling tools: stopped at max_turns, counted by the gateway
    ran, endpoint = run_claude(tmp_path, monkeypatch, lambda body: tool_call_reply("Bash", {"command": "true"}),
                               max_turns=2)
    assert ran.result.status.value == "run_error" and ran.result.failure_class.value == "limit", ran.result.error
    assert ran.result.usage["calls"] == len(endpoint.requests) == 2


def test_extra_args_and_env_cannot_redirect_the_agent():
    from agentcompass.errors import ConfigError

    for harness, params in [(ClaudeCodeHarness(), {"extra_args": ["--model=other"]}),
                            (ClaudeCodeHarness(), {"extra_args": ["--settings", "{}"]}),
                            (ClaudeCodeHarness(), {"env": {"ANTHROPIC_BASE_URL": "http://elsewhere"}}),
                            (CodexHarness(), {"extra_args": ["-c", "model_provider=openai"]}),
                            (CodexHarness(), {"extra_args": ["-cmodel_provider=openai"]}),
                            (CodexHarness(), {"env": {"HOME": "/"}})]:
        with pytest.raises(ConfigError, match="may not set"):
            harness.build_config(SimpleNamespace(harness=SimpleNamespace(params=params)))
    config = ClaudeCodeHarness().build_config(SimpleNamespace(harness=SimpleNamespace(
        params={"extra_args": ["--append-system-prompt", "be brief"], "env": {"FOO": "1"}})))
    assert ClaudeCodeHarness().tools(config) == (CLAUDE,)
    # the Models each can call, checked before any job: its own protocol's, or a chat one through the translation
    assert ClaudeCodeHarness.model_protocols == ("anthropic", "openai_chat")
    assert CodexHarness.model_protocols == ("openai_responses", "openai_chat")


def test_claude_code_in_an_image_without_glibc_is_a_clear_error_before_any_model_call(
        installed_agent, needs_docker, tmp_path, monkeypatch):
    installed_agent("claude-code")
    with ScriptedEndpoint(shell_reply()) as endpoint:
        ran = run_agent(ClaudeCodeHarness(), "docker", endpoint, tmp_path, monkeypatch, image=BUSYBOX_IMAGE)
    assert ran.result.status.value == "run_error" and ran.result.failure_class.value == "harness"
    assert "claude_code cannot run in this environment" in ran.result.error and "glibc" in ran.result.error
    assert endpoint.requests == [] and ran.result.usage == {}
    assert not (ran.attempt_dir / "trajectory.jsonl").exists(), "no gateway was started"


@pytest.mark.skipif(not network_isolation()[0], reason="host_process cannot isolate a 'none' phase here")
def test_codex_stopped_by_a_failing_endpoint_is_an_endpoint_failure(installed_agent, tmp_path, monkeypatch):
    installed_agent("codex")
    with ScriptedEndpoint(lambda body: server_error(503), protocols=ALL_PROTOCOLS) as endpoint:
        ran = run_agent(CodexHarness(), "host_process", endpoint, tmp_path, monkeypatch, protocol="openai_responses",
                        rate_limit_patience=0)  # each 503 passed on to the agent at once
    assert ran.result.status.value == "run_error" and ran.result.failure_class.value == "endpoint", ran.result.error
    assert ran.result.metadata["failure"] == {"class": "endpoint", "http_status": 503}
    assert ran.result.usage["calls"] == len(endpoint.requests) >= 1


@pytest.mark.skipif(not network_isolation()[0], reason="host_process cannot isolate a 'none' phase here")
def test_claude_code_stopped_by_a_failing_endpoint_is_an_endpoint_failure(installed_agent, tmp_path, monkeypatch):
    installed_agent("claude-code")
    ran, endpoint = run_claude(tmp_path, monkeypatch, lambda body: server_error(503), rate_limit_patience=0)
    assert ran.result.status.value == "run_error" and ran.result.failure_class.value == "endpoint", ran.result.error
    assert ran.result.metadata["failure"] == {"class": "endpoint", "http_status": 503}
    # its own retries, few: each a call the gateway counted
    assert ran.result.usage["calls"] == len(endpoint.requests) == 1 + RETRIES
