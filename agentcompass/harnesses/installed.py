"""Installed agents: a coding agent's own CLI (Claude Code, Codex, ...) run headless in the sandbox.

The program comes from the tool cache (``agentcompass.tools``): the harness names its key in ``tools()``,
the environment mounts that folder read-only when it opens, and ``EnvironmentSession.tools`` says where.
Before the gateway starts or any model call is made, ``check_runnable`` runs ``<program> --version`` in
the session: an image that cannot run it (no glibc for a glibc program) is a run_error saying so.

The agent talks to a per-attempt model gateway (``agentcompass.gateway``) in its own protocol: the
gateway passes the calls through to a Model of that protocol and translates them for an ``openai_chat``
one. The agent gets the gateway's address and token; the real key stays in this process, and the
variable that holds it is removed from the agent's environment (``env -u``). What the CLI needs on disk
(its config, its HOME) is written into a state folder beside the workspace (``STATE_DIR``), removed
after the run. ``extra_args`` come after the harness's own arguments, and may not repeat a flag the
harness sets (``reserved_flags``), nor ``env`` a variable it sets: neither can point the agent
elsewhere nor change the model, its key or the limits.

The answer is the agent's final message. Usage is the gateway's count, whatever the CLI reports. A run
that ends any other way is a run_error whose class comes from what this process saw, never from what
the agent printed: ``limit`` when the run hit ``timeout``, the gateway forwarded ``max_turns`` calls, or
the agent held more than ``MAX_CONNECTIONS`` connections to it; ``endpoint`` when the last call the
gateway forwarded failed at the endpoint (``endpoint_failed``); else ``harness`` (the CLI exited
non-zero, was killed by a signal, or printed no final result).

A subclass gives the tool's name, the protocol its CLI speaks, its argv, environment and config files,
and a parser of its transcript (its stdout) into trajectory records and the final answer.
"""

from __future__ import annotations

import json
import posixpath
from dataclasses import dataclass, field
from typing import Any, ClassVar, Sequence

from agentcompass.gateway import ModelGateway, model_protocols_for
from agentcompass.runtime import BaseHarness, FailureClass, RunResult, TaskStatus
from agentcompass.runtime.base import after_agent
from agentcompass.runtime.config import ComponentConfig, ConfigError, config_field, parse_int
from agentcompass.runtime.config.loader import env_ref
from agentcompass.runtime.failures import endpoint_failed
from agentcompass.runtime import ratelimit
from agentcompass.runtime.model_client import model_key, parse_seconds
from agentcompass.secrets import resolve_secret

from .common import GatewaySeen
from agentcompass.tools import check_runnable, resolve, tool_key

# beside the workspace, not in it: the agent's HOME and config, removed after the run
STATE_DIR = ".agentcompass-agent"
_TAIL = 2000
# the variable that holds the gateway's token for an agent whose config names one (Codex's env_key, opencode's
# {env:...}): never the real key's
GATEWAY_TOKEN_VARIABLE = "AGENTCOMPASS_GATEWAY_TOKEN"


@dataclass(slots=True)
class InstalledAgentConfig(ComponentConfig):
    """What every installed agent takes; a subclass sets ``version``'s default to its pinned one."""

    version: str = config_field(default="", description="The version of the agent's CLI (its tool key is "
                                "<tool>@<version>); the pinned one by default.")
    timeout: float = config_field(
        default=3600.0, description="Seconds the whole agent run may take; then it is stopped and the attempt is a "
        "run_error of class limit.")
    model_call_timeout: float = config_field(
        default=600.0, description="Seconds the gateway waits for the Model to answer one call.")
    rate_limit_patience: float = config_field(
        default=ratelimit.PATIENCE, description="Seconds the gateway keeps trying one call the Model refuses as "
        "too many (429, 503), from its first refusal; then the agent gets the refusal.")
    max_output_tokens: int = config_field(
        default=0, description="Most tokens the agent asks the Model for in one reply (0: the CLI's own default).")
    extra_args: list = config_field(
        default=[], description="More CLI arguments, after the harness's own; one that repeats a flag the harness "
        "sets (the model, its endpoint, the output format, the limits) is refused.")
    env: dict = config_field(
        default={}, description="More environment variables for the agent (values may be ${VAR}); one the harness "
        "sets is refused.")

    def __post_init__(self) -> None:
        self.max_output_tokens = parse_int(self.max_output_tokens, "max_output_tokens", minimum=0)
        for name in ("timeout", "model_call_timeout"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise ConfigError(f"{name} must be a positive number of seconds, got {value!r}")
        self.rate_limit_patience = parse_seconds(self.rate_limit_patience, "rate_limit_patience")
        if not isinstance(self.extra_args, list) or not all(isinstance(a, str) for a in self.extra_args):
            raise ConfigError(f"extra_args must be a list of strings, got {self.extra_args!r}")
        if not isinstance(self.env, dict) or not all(
                isinstance(k, str) and k and isinstance(v, str) for k, v in self.env.items()):
            raise ConfigError(f"env must map variable names to strings, got {self.env!r}")


def version_field(tool: str) -> Any:
    """The ``version`` field of an agent: its tool's pinned version by default."""
    pinned = resolve(tool).version
    return config_field(default=pinned, description=f"The version of the agent's CLI (tool {tool}@<version> in the "
                        f"tool cache); default: the pinned {pinned}.")


def max_turns_field(default: int = 50) -> Any:
    """The ``max_turns`` field of an agent whose CLI has a turn limit."""
    return config_field(default=default, description="Most model calls the agent makes (its CLI's turn limit; "
                        "0: none); an agent stopped there is a run_error of class limit.")


@dataclass(slots=True)
class AgentRun:
    """What a subclass builds the command from: all of it as the sandbox sees it."""

    command: list[str]  # the argv prefix that runs the program
    prompt: str
    model: str  # the Model's id
    base_url: str  # the gateway: http://<address>
    token: str  # the gateway's token, the agent's API key
    state: str  # the state folder, the agent's HOME
    params: dict[str, Any]  # the harness's params, ${VAR}s resolved
    model_params: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class Transcript:
    """What the agent's output says: records for the trajectory, its final message (None: no final result) and
    the error it reported last (text for the run_error, never its class)."""

    records: list[dict] = field(default_factory=list)
    answer: str | None = None
    error: str | None = None


def message_record(source: str, text: str | None, calls: Sequence[tuple[str, str, Any]] = ()) -> dict:
    """A message of the agent in chat shape (the report draws it): ``calls`` are (id, name, arguments)."""
    message: dict[str, Any] = {"role": "assistant", "content": text or ""}
    if calls:
        message["tool_calls"] = [{"id": i, "type": "function", "function": {
            "name": name, "arguments": args if isinstance(args, str) else json.dumps(args)}} for i, name, args in calls]
    return {"source": source, "message": message}


def tool_record(source: str, name: str, arguments: Any, output: Any, call_id: str | None, error: bool = False) -> dict:
    """One tool call the agent ran and what it gave back (the report's ``tool_result`` event)."""
    text = output if isinstance(output, str) else json.dumps(output)
    return {"source": source, "type": "tool_result", "name": name, "arguments": arguments, "output": text,
            "tool_call_id": call_id, "error": bool(error)}


# how deep a transcript's JSON is kept: a model's tool arguments, echoed by the CLI, can nest past what the
# parser, the scrubber and the writer of the trajectory recurse into; deeper values are replaced by NESTED
MAX_DEPTH = 64
NESTED = f"<nested deeper than {MAX_DEPTH} levels: cut>"


def _bounded(value: Any, depth: int = MAX_DEPTH) -> Any:
    if isinstance(value, (dict, list)) and depth <= 0:
        return NESTED
    if isinstance(value, dict):
        return {key: _bounded(item, depth - 1) for key, item in value.items()}
    if isinstance(value, list):
        return [_bounded(item, depth - 1) for item in value]
    return value


def json_lines(text: str) -> list[dict]:
    """The JSON objects among ``text``'s lines, nested at most ``MAX_DEPTH`` levels (the rest: another line, an
    output cut in the middle, JSON nested past what the parser takes, skipped)."""
    found = []
    for line in text.splitlines():
        if line.startswith("{"):
            try:
                value = json.loads(line)
            except (json.JSONDecodeError, RecursionError):
                continue
            if isinstance(value, dict):
                found.append(_bounded(value))
    return found


def content_text(content: Any) -> str:
    """The text of a message's content: a string, or the ``text`` of each of its parts."""
    if isinstance(content, list):
        return "\n".join(str(part.get("text", "")) if isinstance(part, dict) else str(part) for part in content)
    return "" if content is None else str(content)


def stream_json_transcript(stdout: str, source: str, *, skipped: tuple[str, ...] = ()) -> Transcript:
    """The events of a ``stream-json`` output (Claude Code's, and Qwen Code's after it): each assistant message
    with its tool calls, each tool result, every other event as it is but those of a type in ``skipped``; the
    ``result`` event's text is the answer when it succeeded, else the error it reports."""
    found = Transcript()
    calls: dict[str, tuple[str, Any]] = {}  # tool_use id -> (name, input)
    for event in json_lines(stdout):
        kind = event.get("type")
        message: dict = event["message"] if isinstance(event.get("message"), dict) else {}
        content = message.get("content")
        if kind == "assistant" and isinstance(content, list):
            uses = [part for part in content if isinstance(part, dict) and part.get("type") == "tool_use"]
            for use in uses:
                calls[str(use.get("id"))] = (str(use.get("name")), use.get("input"))
            text = "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("type") == "text")
            found.records.append(message_record(source, text, [(str(u.get("id")), str(u.get("name")), u.get("input"))
                                                               for u in uses]))
        elif kind == "user" and isinstance(content, list):
            for part in content:
                if isinstance(part, dict) and part.get("type") == "tool_result":
                    name, arguments = calls.get(str(part.get("tool_use_id")), ("?", None))
                    found.records.append(tool_record(source, name, arguments, content_text(part.get("content")),
                                                     part.get("tool_use_id"), bool(part.get("is_error"))))
        elif kind not in skipped:
            found.records.append({"source": source, "event": event})
            if kind == "result" and event.get("subtype") == "success" and not event.get("is_error"):
                found.answer = content_text(event.get("result"))
            elif kind == "result":
                error: dict = event["error"] if isinstance(event.get("error"), dict) else {}
                said = content_text(error.get("message") or event.get("result") or event.get("errors"))
                found.error = said if event.get("subtype") == "success" else f"{event.get('subtype')}: {said}"
    return found


def task_text(prepared) -> str:
    parts = [prepared.input.system_prompt, prepared.input.prompt, prepared.output.answer]
    return "\n\n".join(p for p in parts if p)


def _starts(arg: str, flags: tuple[str, ...]) -> bool:
    return any(arg == flag or arg.startswith(flag + "=") or (len(flag) == 2 and flag[1] != "-" and arg.startswith(flag)
                                                              and not arg.startswith("--")) for flag in flags)


class InstalledAgentHarness(BaseHarness):
    """An agent CLI from the tool cache, run in the Environment against a per-attempt model gateway."""

    tool: ClassVar[str]  # the tool's name in agentcompass.tools.TOOLS
    protocol: ClassVar[str]  # the protocol the CLI speaks: "anthropic", "openai_responses" or "openai_chat"
    reserved_flags: ClassVar[tuple[str, ...]] = ()  # flags the harness sets: refused in extra_args
    reserved_env: ClassVar[tuple[str, ...]] = ()  # variables (or prefixes ending in "_") it sets: refused in env

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        if "protocol" in cls.__dict__:  # the Models it can call: of its own protocol, or one the gateway translates
            cls.model_protocols = model_protocols_for(cls.protocol)

    def build_config(self, req):
        config = super().build_config(req)
        if not config.version:
            raise ConfigError(f"harness {self.id!r}: version is empty")
        resolve(tool_key(self.tool, config.version))  # a version that is no plain version is a ToolError
        taken = [a for a in config.extra_args if _starts(a, self.reserved_flags)]
        if taken:
            raise ConfigError(f"harness {self.id!r}: extra_args may not set {', '.join(taken)}: the harness sets "
                              f"{', '.join(self.reserved_flags)}")
        variables = [k for k in config.env if k in ("HOME", "PATH") or any(
            k == r or (r.endswith("_") and k.startswith(r)) for r in self.reserved_env)]
        if variables:
            raise ConfigError(f"harness {self.id!r}: env may not set {', '.join(variables)}: the harness sets "
                              f"HOME, {', '.join(self.reserved_env)}")
        return config

    def tools(self, config) -> tuple[str, ...]:
        return (tool_key(self.tool, config.version),)

    # --- what a subclass gives ---------------------------------------------------------------

    def argv(self, run: AgentRun) -> list[str]:
        """The command (``run.command`` first), without ``extra_args``: they are added after it."""
        raise NotImplementedError

    def environment(self, run: AgentRun) -> dict[str, str]:
        """The agent's variables (HOME is the state folder already)."""
        return {}

    def config_files(self, run: AgentRun) -> dict[str, str]:
        """Files to write before the run: path relative to the state folder -> text."""
        return {}

    def stdin(self, run: AgentRun) -> str | None:
        """What the CLI reads on its stdin (e.g. the prompt: no argv limit on its size, no quoting of it); None: none."""
        return None

    def transcript(self, stdout: str) -> Transcript:
        """The records and the final answer the CLI's stdout holds."""
        raise NotImplementedError

    # --- the run ---------------------------------------------------------------------------

    async def run(self, prepared, env, req, plan, context) -> RunResult:
        params = {**plan.params, **resolve_secret({k: plan.params[k] for k in ("extra_args", "env")})}
        model = req.model
        key = tool_key(self.tool, params["version"])

        def failed(reason: str, cls: FailureClass = FailureClass.HARNESS, **extra) -> RunResult:
            return RunResult(task_id=prepared.task_id, attempt=context.attempt, status=TaskStatus.RUN_ERROR,
                             error=reason, error_stage="run", failure_class=cls, **extra)

        if not model.base_url:
            return failed(f"model.base_url is not set: {self.id} needs the Model's endpoint", FailureClass.ENDPOINT)
        if model.protocol not in self.model_protocols:  # refused at config time already
            return failed(f"{self.id} speaks {self.protocol}: the gateway serves it from a Model of protocol "
                          f"{' or '.join(self.model_protocols)}, not {model.protocol}")
        await env.exec(["true"])  # the run stage's session opens on its first call: its tools are known then
        why = await check_runnable(env, key)  # before the gateway and any model call
        if why is not None:
            return failed(f"{self.id} cannot run in this environment: {why}")
        command = resolve(key).command(env.tools[key])
        with ModelGateway(resolve_secret(model.base_url), model_key(model), context.trajectory_path,
                          timeout=params["model_call_timeout"], headers=resolve_secret(model.headers),
                          protocol=model.protocol, rate_limit_patience=params["rate_limit_patience"]) as gateway:
            address = await env.expose_host_socket(gateway.socket_path)
            state = posixpath.join(env.workdir, STATE_DIR)
            run = AgentRun(command, task_text(prepared), model.id, f"http://{address}", gateway.token, state, params,
                           dict(model.params))
            # a folder of that name in the task's files is not the agent's config: it goes first
            await after_agent(env, ["rm", "-rf", state], f"clearing {self.id}'s state {state}")
            await env.exec(["mkdir", "-p", state])
            for name, text in self.config_files(run).items():
                path = posixpath.join(state, name)
                await env.exec(["mkdir", "-p", posixpath.dirname(path)])
                await env.write_text(path, text)
            variables = {**params["env"], **self.environment(run), "HOME": state,
                         "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}
            argv = self.argv(run) + list(params["extra_args"])
            secret_variable = env_ref(model.api_key) if model.api_key else None
            # host_process already keeps the job's variables out; this holds for any provider that would not
            done = await env.exec(["env", "-u", secret_variable, *argv] if secret_variable else argv,
                                  env=variables, cwd=prepared.input.workspace or None, timeout=params["timeout"],
                                  input=self.stdin(run))
            await after_agent(env, ["rm", "-rf", state], f"removing {self.id}'s state {state}")
            seen = GatewaySeen.of(gateway, model, plan.params)
        usage, last_call, clean = seen.usage, seen.last_call, seen.scrubber.text
        (context.attempt_dir / f"{self.id}.log").write_text(clean(done.stdout + done.stderr), encoding="utf-8")
        transcript = self.transcript(done.stdout)
        seen.append_records(context.trajectory_path, transcript.records)
        metadata: dict[str, Any] = {"returncode": done.returncode}
        stopped = seen.over_limits(done, self.id, params["timeout"])
        if stopped is not None:
            return failed(stopped, FailureClass.LIMIT, usage=usage, metadata=metadata)
        if done.returncode == 0 and transcript.answer is not None:
            return RunResult(task_id=prepared.task_id, attempt=context.attempt, answer=transcript.answer,
                             usage=usage, metadata=metadata)
        if done.returncode < 0 or done.returncode > 128:
            reason = f"{self.id} was killed by signal {abs(done.returncode) % 128}"
        elif done.returncode:
            reason = f"{self.id} exited with status {done.returncode}"
        else:
            reason = f"{self.id} exited without a final result"
        # the class comes from what this process saw (the gateway's count of calls and the status of the last
        # one, the time the run took), never from the transcript: the agent can print anything
        cls = FailureClass.HARNESS
        if 0 < params.get("max_turns", 0) <= usage["calls"]:
            cls = FailureClass.LIMIT
        elif endpoint_failed(last_call):  # it stopped on a model call the endpoint failed (after its retries)
            cls = FailureClass.ENDPOINT
            metadata["failure"] = {"class": cls.value, "http_status": last_call}
        said = (transcript.error or done.stderr.strip() or done.stdout.strip())[-_TAIL:]
        return failed(clean(f"{reason}: {said}" if said else reason), cls, usage=usage, metadata=metadata)
