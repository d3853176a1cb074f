"""``tool_agent``: a tool-calling loop in the task Environment; the answer is what ``submit`` got.

Each step is one model call offered four tools, ``bash``, ``read_file``,
``write_file`` (run through the attempt's EnvironmentSession, in the task's
workspace) and ``submit``; every tool call of the reply runs in order and its
result goes back to the model. A reply without a tool call is answered with a
reminder to use them. Mistakes of the model (an unknown tool, arguments that
are not a JSON object, a missing file) go back to it as tool results.

The loop ends when ``submit`` is called, or at the first limit reached (steps,
total tokens, wall time; checked before each model call). A limit ends the
attempt as completed with no answer (``None``, scored like any wrong answer)
and ``metadata.stop_reason`` naming the limit: running out of budget is the
agent's result, not a fault of the infrastructure.
"""

from __future__ import annotations

import posixpath
import time
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

from agentcompass.runtime import HARNESSES, BaseHarness, EnvironmentSession, RunResult
from agentcompass.runtime.config import ConfigError, config_field, parse_int
from agentcompass.runtime.model_client import ModelCallConfig, ModelCallError, ModelClient, ToolCall, parse_seconds

from .common import Trajectory, call_model, opening_messages, run_error

SYSTEM_PROMPT = (
    "You are an agent working in a sandbox. Use the tools: bash runs a shell command in the workspace, "
    "read_file and write_file read and write files (paths relative to the workspace), and submit hands in "
    "your final answer and ends the task. Always answer with tool calls; call submit exactly once, at the end."
)

REMINDER = "No tool was called. Use the tools to work on the task, and call submit with your final answer."


def _function(name: str, description: str, **properties: str) -> dict:
    return {"type": "function", "function": {
        "name": name,
        "description": description,
        "parameters": {
            "type": "object",
            "properties": {key: {"type": "string", "description": text} for key, text in properties.items()},
            "required": list(properties),
        },
    }}


TOOLS = [
    _function("bash", "Run a shell command in the workspace; returns its exit code, stdout and stderr.",
              command="The command, run by /bin/sh."),
    _function("read_file", "Read a text file.", path="Path of the file, relative to the workspace or absolute."),
    _function("write_file", "Write a text file, replacing it; parent directories are created.",
              path="Path of the file, relative to the workspace or absolute.", content="The whole new content."),
    _function("submit", "Hand in the final answer; this ends the task.", answer="The final answer."),
]
ARGUMENTS = {tool["function"]["name"]: set(tool["function"]["parameters"]["required"]) for tool in TOOLS}


@dataclass(slots=True)
class ToolAgentConfig(ModelCallConfig):
    max_steps: int = config_field(default=30, description="Most model calls in one attempt.")
    max_total_tokens: int | None = config_field(
        default=None, description="Most prompt plus completion tokens over the attempt (null: no limit)."
    )
    max_wall_seconds: float | None = config_field(
        default=None, description="Most seconds the loop may run, checked before each step (null: no limit)."
    )
    command_timeout: float = config_field(default=120.0, description="Seconds one bash command may run.")
    max_output_chars: int = config_field(
        default=10000, description="Longest tool result sent back to the model; a longer one keeps its head and tail."
    )
    system_prompt: str = config_field(default=SYSTEM_PROMPT, description="The system prompt, before the task's own.")

    def __post_init__(self) -> None:
        ModelCallConfig.__post_init__(self)
        self.max_steps = parse_int(self.max_steps, "max_steps", minimum=1)
        self.max_output_chars = parse_int(self.max_output_chars, "max_output_chars", minimum=100)
        if self.max_total_tokens is not None:
            self.max_total_tokens = parse_int(self.max_total_tokens, "max_total_tokens", minimum=1)
        if self.max_wall_seconds is not None:
            self.max_wall_seconds = parse_seconds(self.max_wall_seconds, "max_wall_seconds")
        self.command_timeout = parse_seconds(self.command_timeout, "command_timeout")
        if not isinstance(self.system_prompt, str):
            raise ConfigError(f"system_prompt must be text, got {self.system_prompt!r}")


class ToolError(Exception):
    """A mistake of the model in a tool call: reported back to it, never raised out of the harness."""


def clip(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n[... {len(text) - 2 * half} characters cut ...]\n{text[-half:]}"


class Tools:
    """The tools, run in one session; relative paths and commands start in the workspace."""

    def __init__(self, env: EnvironmentSession, workspace: str | None, config: ToolAgentConfig) -> None:
        self.env = env
        self.workspace = workspace
        self.config = config
        self.deadline: float | None = None

    def _path(self, path: Any) -> str:
        if not isinstance(path, str) or not path:
            raise ToolError("'path' must be a non-empty string")
        if self.workspace and not posixpath.isabs(path):
            return posixpath.join(self.workspace, path)
        return path

    async def bash(self, command: Any) -> str:
        if not isinstance(command, str):
            raise ToolError("'command' must be a string")
        timeout = self.config.command_timeout
        if self.deadline is not None:
            timeout = max(min(timeout, self.deadline - time.monotonic()), 1.0)
        result = await self.env.exec(command, shell=True, timeout=timeout, cwd=self.workspace)
        status = f"timed out after {timeout:g} s" if result.timed_out else f"exit code {result.returncode}"
        return f"{status}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"

    async def read_file(self, path: Any) -> str:
        return await self.env.read_text(self._path(path))

    async def write_file(self, path: Any, content: Any) -> str:
        if not isinstance(content, str):
            raise ToolError("'content' must be a string")
        await self.env.write_text(self._path(path), content)
        return f"wrote {len(content)} characters to {path}"

    async def run(self, call: ToolCall) -> str:
        """The output of a bash, read_file or write_file call; ToolError for a mistake of the model."""
        handlers: dict[str, Callable[..., Awaitable[str]]] = {
            "bash": self.bash, "read_file": self.read_file, "write_file": self.write_file}
        handler = handlers.get(call.name)
        if handler is None:
            raise ToolError(f"unknown tool {call.name!r}; the tools are {', '.join(ARGUMENTS)}")
        arguments = _check_arguments(call)
        try:
            # a sandbox fault (InfrastructureError) is no OSError: it reaches the run stage, which retries it
            return await handler(**arguments)
        except (OSError, ValueError) as exc:
            raise ToolError(f"{type(exc).__name__}: {exc}") from None


def _check_arguments(call: ToolCall) -> dict[str, Any]:
    """The call's arguments, when they are a JSON object with exactly the tool's names."""
    if not call.arguments_ok or not isinstance(call.arguments, dict):
        raise ToolError(f"the arguments of {call.name} must be a JSON object, got {str(call.arguments)[:200]!r}")
    if set(call.arguments) != ARGUMENTS[call.name]:
        raise ToolError(f"{call.name} takes the arguments {sorted(ARGUMENTS[call.name])}, got {sorted(call.arguments)}")
    return call.arguments


def _limit_reached(config: ToolAgentConfig, steps: int, tokens: float, started: float) -> str | None:
    if steps >= config.max_steps:
        return "max_steps"
    if config.max_total_tokens is not None and tokens >= config.max_total_tokens:
        return "max_total_tokens"
    if config.max_wall_seconds is not None and time.monotonic() - started >= config.max_wall_seconds:
        return "max_wall_seconds"
    return None


_NOTHING = object()


@HARNESSES.register()
class ToolAgentHarness(BaseHarness):
    """A tool-calling agent (bash, read_file, write_file, submit) in the task Environment."""

    id = "tool_agent"
    config_class = ToolAgentConfig

    async def run(self, prepared, env, req, plan, context) -> RunResult:
        config = ToolAgentConfig(**plan.params)
        trajectory = Trajectory(context.trajectory_path)
        tools = Tools(env, prepared.input.workspace, config)
        messages = opening_messages(prepared, config.system_prompt)
        started = time.monotonic()
        if config.max_wall_seconds is not None:
            tools.deadline = started + config.max_wall_seconds
        steps, answer, stop = 0, _NOTHING, None
        client = None
        try:
            async with ModelClient(req.model, config) as client:
                while answer is _NOTHING:
                    stop = _limit_reached(config, steps, client.usage.total_tokens, started)
                    if stop:
                        break
                    steps += 1
                    reply = await call_model(client, trajectory, messages, TOOLS, step=steps)
                    messages.append(reply.message)
                    if not reply.tool_calls:
                        messages.append({"role": "user", "content": REMINDER})
                        continue
                    answer = await self._run_calls(reply.tool_calls, tools, messages, trajectory, steps)
        except ModelCallError as exc:
            return run_error(prepared, context.attempt, exc, client, steps=steps)
        return RunResult(
            task_id=prepared.task_id, attempt=context.attempt,
            answer=None if answer is _NOTHING else answer,
            usage=client.usage.as_dict(),
            metadata={"stop_reason": stop or "submitted", "steps": steps},
        )

    async def _run_calls(self, calls: list[ToolCall], tools: Tools, messages: list, trajectory: Trajectory, step: int):
        """Run a reply's tool calls in order; the submitted answer, or _NOTHING. Calls after submit are not run."""
        for call in calls:
            answer, output, failed = _NOTHING, "", False
            try:
                if call.name == "submit":
                    answer, output = _check_arguments(call)["answer"], "submitted"
                else:
                    output = await tools.run(call)
            except ToolError as exc:
                output, failed = f"error: {exc}", True
            output = clip(output, tools.config.max_output_chars)
            trajectory.append("tool_result", step=step, tool_call_id=call.id, name=call.name,
                              arguments=call.arguments, output=output, error=failed)
            messages.append({"role": "tool", "tool_call_id": call.id, "content": output})
            if answer is not _NOTHING:
                return answer
        return _NOTHING
