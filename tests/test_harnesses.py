"""The chat and tool_agent harnesses called directly: a scripted endpoint on 127.0.0.1, a real host_process session."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from pathlib import Path

from agentcompass.benchmarks.majority_vote import MajorityVoteBenchmark, MajorityVotePlan
from agentcompass.harnesses.chat import ChatConfig, ChatHarness
from agentcompass.harnesses.tool_agent import ToolAgentConfig, ToolAgentHarness
from agentcompass.environments import HostProcessEnvironment
from agentcompass.pipeline.sessions import LazySession
from agentcompass.runtime import ExecutionPlan, ExecutionSpec, HarnessContext
from agentcompass.runtime.base import ImageMissingError
from agentcompass.runtime.model_client import ATTEMPT_USAGE, Usage
from agentcompass.runtime.models import (
    BenchmarkSpec,
    EnvironmentSpec,
    HarnessPlan,
    HarnessSpec,
    ModelSpec,
    NetworkPolicy,
    PreparedTask,
    RunRequest,
    TaskInput,
)
from agentcompass.testing.endpoint import (
    Hang,
    ScriptedEndpoint,
    completion,
    tool_call,
    tool_call_reply,
    tool_calls_reply,
)

WEATHER = [{"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}}]


def run_harness(harness, config, endpoint, prepared: PreparedTask, tmp_path: Path, workspace: bool = False):
    req = RunRequest(model=ModelSpec(id="m", base_url=endpoint.base_url), benchmark=BenchmarkSpec(id="b"),
                     harness=HarnessSpec(id=harness.id))
    plan = HarnessPlan(harness_id=harness.id, params=dataclasses.asdict(config))
    context = HarnessContext(attempt=1, attempt_dir=tmp_path, trajectory_path=tmp_path / "trajectory.jsonl")

    async def go():
        session = await HostProcessEnvironment().open(EnvironmentSpec(), NetworkPolicy(), "test-harness")
        try:
            if workspace:
                await session.write_text("task/notes.txt", "the workspace\n")
            result = await harness.run(prepared, session, req, plan, context)
            made = await session.read_text("task/made.txt") if await session.exists("task/made.txt") else None
            return result, made
        finally:
            await session.close()

    return asyncio.run(go())


def events(tmp_path: Path) -> list[dict]:
    return [json.loads(line) for line in (tmp_path / "trajectory.jsonl").read_text().splitlines()]


def test_chat_offers_the_tasks_tools_and_answers_with_the_calls_in_order(tmp_path: Path):
    reply = tool_calls_reply([tool_call("get_weather", {"city": "Paris"}, "a"), tool_call("get_weather", {"city": "Oslo"}, "b")])
    prepared = PreparedTask(task_id="t", input=TaskInput(prompt="Weather in Paris and Oslo?", tools=WEATHER))
    with ScriptedEndpoint(script=[reply]) as endpoint:
        result, _ = run_harness(ChatHarness(), ChatConfig(), endpoint, prepared, tmp_path)
    assert endpoint.requests[0].body["tools"] == WEATHER
    assert result.answer == [{"name": "get_weather", "arguments": {"city": "Paris"}},
                             {"name": "get_weather", "arguments": {"city": "Oslo"}}]


def test_chat_with_tools_answers_an_empty_list_when_the_model_calls_none(tmp_path: Path):
    prepared = PreparedTask(task_id="t", input=TaskInput(prompt="Tell me a joke.", tools=WEATHER))
    with ScriptedEndpoint(script=[completion("No tool needed.")]) as endpoint:
        result, _ = run_harness(ChatHarness(), ChatConfig(), endpoint, prepared, tmp_path)
    assert result.answer == [] and result.metadata["text"] == "No tool needed."


def test_chat_without_tools_sends_none(tmp_path: Path):
    prepared = PreparedTask(task_id="t", input=TaskInput(prompt="Hi", system_prompt="Be brief."))
    with ScriptedEndpoint(script=[completion("Hello")]) as endpoint:
        result, _ = run_harness(ChatHarness(), ChatConfig(), endpoint, prepared, tmp_path)
    assert result.answer == "Hello" and "tools" not in endpoint.requests[0].body
    assert endpoint.requests[0].body["messages"][0] == {"role": "system", "content": "Be brief."}


def test_tool_agent_writes_and_reads_files_in_the_workspace(tmp_path: Path):
    script = [
        tool_call_reply("read_file", {"path": "notes.txt"}, call_id="r"),
        tool_call_reply("write_file", {"path": "made.txt", "content": "written by the agent"}, call_id="w"),
        tool_call_reply("bash", {"command": "cat made.txt; pwd"}, call_id="b"),
        tool_call_reply("submit", {"wrong": 1}, call_id="s1"),
        tool_calls_reply([tool_call("submit", {"answer": "done"}, "s2"), tool_call("bash", {"command": "touch late"}, "x")]),
    ]
    prepared = PreparedTask(task_id="t", input=TaskInput(prompt="Work.", workspace="task"))
    with ScriptedEndpoint(script=script) as endpoint:
        result, made = run_harness(ToolAgentHarness(), ToolAgentConfig(), endpoint, prepared, tmp_path, workspace=True)
    assert result.answer == "done" and result.metadata == {"stop_reason": "submitted", "steps": 5}
    assert made == "written by the agent"
    outputs = {e["tool_call_id"]: e for e in events(tmp_path) if e["type"] == "tool_result"}
    assert outputs["r"]["output"] == "the workspace\n"
    assert outputs["b"]["output"].startswith("exit code 0\nstdout:\nwritten by the agent/")
    assert "/task\n\nstderr:" in outputs["b"]["output"]  # commands start in the workspace
    assert outputs["s1"]["error"] and "submit takes the arguments ['answer']" in outputs["s1"]["output"]
    assert "x" not in outputs  # calls after submit are not run
    system = endpoint.requests[0].body["messages"][0]
    assert system["role"] == "system" and "submit" in system["content"]
    assert [t["function"]["name"] for t in endpoint.requests[0].body["tools"]] == ["bash", "read_file", "write_file", "submit"]


def test_tool_agent_reports_a_missing_file_to_the_model(tmp_path: Path):
    script = [tool_call_reply("read_file", {"path": "nope.txt"}, call_id="r"), tool_call_reply("submit", {"answer": "x"})]
    prepared = PreparedTask(task_id="t", input=TaskInput(prompt="Work."))
    with ScriptedEndpoint(script=script) as endpoint:
        result, _ = run_harness(ToolAgentHarness(), ToolAgentConfig(), endpoint, prepared, tmp_path)
    assert result.answer == "x"
    (read,) = [e for e in events(tmp_path) if e.get("tool_call_id") == "r"]
    assert read["error"] and "FileNotFoundError" in read["output"]
    assert endpoint.requests[1].body["messages"][-1]["content"] == read["output"]


def test_tool_agent_stops_at_its_token_and_time_limits(tmp_path: Path):
    forever = lambda body: tool_call_reply("bash", {"command": "sleep 0.2"})  # noqa: E731
    prepared = PreparedTask(task_id="t", input=TaskInput(prompt="Work."))
    with ScriptedEndpoint(forever) as endpoint:  # each reply counts 12 tokens
        result, _ = run_harness(ToolAgentHarness(), ToolAgentConfig(max_total_tokens=30), endpoint, prepared, tmp_path)
    assert result.answer is None and result.metadata == {"stop_reason": "max_total_tokens", "steps": 3}
    with ScriptedEndpoint(forever) as endpoint:
        started = time.monotonic()
        result, _ = run_harness(ToolAgentHarness(), ToolAgentConfig(max_wall_seconds=0.5), endpoint, prepared, tmp_path)
    # each step sleeps 0.2 s, so at most 4 fit before the limit, however fast the machine; on a loaded one
    # the first step alone may use the whole half second, so only one step is certain
    assert result.metadata["stop_reason"] == "max_wall_seconds" and 1 <= result.metadata["steps"] <= 4
    assert time.monotonic() - started >= 0.5


def test_tool_agent_ends_as_run_error_when_the_model_fails_every_time(tmp_path: Path):
    prepared = PreparedTask(task_id="t", input=TaskInput(prompt="Work."))
    with ScriptedEndpoint(lambda body: (503, {"error": "busy"})) as endpoint:
        result, _ = run_harness(ToolAgentHarness(), ToolAgentConfig(max_model_retries=1, retry_backoff=0,
                                                                   rate_limit_patience=0), endpoint,
                                prepared, tmp_path)
    assert result.status.value == "run_error" and "HTTP 503" in result.error and result.usage["calls"] == 2
    first, last = events(tmp_path)  # each try is a line: the retried one, then the last
    assert [(e["type"], e["step"], e["try"], e["status"], e["retried"]) for e in (first, last)] == [
        ("model_call", 1, 1, 503, True), ("model_call", 1, 2, 503, False)]
    assert "HTTP 503" in first["error"] and "HTTP 503" in last["error"]


def counted_in_the_attempt(body) -> tuple[Usage, BaseException | None]:
    """What ``body`` (an attempt's work, a coroutine function) spent, as the run stage counts it
    (``ATTEMPT_USAGE``), whatever ended it; and what it raised."""
    spent = Usage()

    async def attempt():
        ATTEMPT_USAGE.set(spent)
        await body()

    try:
        asyncio.run(attempt())
    except Exception as exc:
        return spent, exc
    return spent, None


def test_the_calls_an_attempt_made_count_whatever_ended_it(tmp_path: Path):
    prepared = PreparedTask(task_id="t", input=TaskInput(prompt="Work."))
    req = RunRequest(model=ModelSpec(id="m", base_url="http://127.0.0.1:1/v1"), benchmark=BenchmarkSpec(id="b"),
                     harness=HarnessSpec(id="h"))
    context = HarnessContext(attempt=1, attempt_dir=tmp_path, trajectory_path=tmp_path / "trajectory.jsonl")

    async def no_image():  # the sandbox opens at the first command: its image is not on the engine
        raise ImageMissingError("docker environment: image 'gone' is not on the engine, and nothing is pulled")

    def with_model(endpoint) -> RunRequest:
        return dataclasses.replace(req, model=ModelSpec(id="m", base_url=endpoint.base_url))

    # tool_agent: one call (12 tokens), then its bash command meets an environment error
    with ScriptedEndpoint(script=[tool_call_reply("bash", {"command": "ls"})]) as endpoint:
        plan = HarnessPlan(harness_id="tool_agent", params=dataclasses.asdict(ToolAgentConfig()))
        spent, raised = counted_in_the_attempt(lambda: ToolAgentHarness().run(
            prepared, LazySession(no_image), with_model(endpoint), plan, context))
    assert isinstance(raised, ImageMissingError)
    assert (spent.calls, spent.prompt_tokens, spent.completion_tokens) == (1, 10, 2)

    # chat: the attempt's time limit cuts its second call short (a follow-up the model never answers)
    with ScriptedEndpoint(script=[completion("Lyon?"), Hang(seconds=30)]) as endpoint:
        plan = HarnessPlan(harness_id="chat", params=dataclasses.asdict(ChatConfig(follow_ups=["Sure?"])))
        spent, raised = counted_in_the_attempt(lambda: asyncio.wait_for(ChatHarness().run(
            prepared, LazySession(no_image), with_model(endpoint), plan, context), 1.0))
    assert isinstance(raised, asyncio.TimeoutError)
    assert (spent.calls, spent.prompt_tokens, spent.completion_tokens) == (2, 10, 2)
    assert spent.latency_seconds >= 0.5  # the call cut short waited too

    # majority_vote (a harness-free Benchmark): three samples, one never answered before the time limit
    with ScriptedEndpoint(script=[completion("7"), completion("7"), Hang(seconds=30)]) as endpoint:
        run_plan = ExecutionPlan(
            task_id="t", attempt=1, benchmark_id="majority_vote", task_environment=EnvironmentSpec(),
            evaluation_environment=None, evaluation_environment_mode="task", baseline_network=None,
            run_network=None, evaluation_network=None, benchmark_plan=MajorityVotePlan(samples=3, timeout=30.0),
            harness_plan=HarnessPlan(), execution=ExecutionSpec(),
        )
        spent, raised = counted_in_the_attempt(lambda: asyncio.wait_for(MajorityVoteBenchmark().run_task(
            prepared, None, with_model(endpoint), run_plan), 1.0))
    assert isinstance(raised, asyncio.TimeoutError)
    assert (spent.calls, spent.prompt_tokens, spent.completion_tokens) == (3, 20, 4)
