"""``mini_swe_agent``: the real mini-swe-agent, headless in the Environment, behind the model gateway.

The agent program (``mini``) runs as a command of the session, so under a
``none`` run phase it has no network but the one hole to its per-attempt
gateway (``agentcompass.gateway``). It gets the gateway's token as its API
key; the real key stays in this process, and the variable that holds it is
removed from the agent's environment.

The Model must answer with ``bash`` tool calls and finish with
``echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT``: what that command prints after
its first line is the agent's submission, and the attempt's answer. A run
that ends any other way (a limit, repeated format errors, a refused or
failing model) is a run_error with the reason mini-swe-agent gave. Its class
comes from what this process saw, never from the trajectory the agent could
have written: ``limit`` when the run hit ``timeout``, the gateway forwarded
``step_limit`` calls or the run took mini-swe-agent's own time limit;
``endpoint`` when the last call the gateway forwarded failed at the endpoint
(``endpoint_failed``); else ``harness``.
"""

from __future__ import annotations

import json
import posixpath
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from agentcompass.environments.transfer import CopyLimitError
from agentcompass.gateway import ModelGateway
from agentcompass.harnesses.installed import task_text
from agentcompass.runtime import HARNESSES, BaseHarness, FailureClass, RunResult, TaskStatus
from agentcompass.runtime.base import after_agent
from agentcompass.runtime.config import ComponentConfig, ConfigError, config_field, parse_int
from agentcompass.runtime.config.loader import env_ref
from agentcompass.runtime.dependencies import DependencySpec
from agentcompass.runtime.failures import endpoint_failed
from agentcompass.runtime import ratelimit
from agentcompass.runtime.model_client import model_key, parse_seconds
from agentcompass.harnesses.common import GatewaySeen
from agentcompass.secrets import resolve_secret

# beside the workspace, not in it: the agent's config and trajectory, removed after the run
STATE_DIR = ".mini-swe-agent"
LOG_NAME = "mini_swe_agent.log"
_TAIL = 2000
# mini-swe-agent's own time limit, among the harness's `settings`
_WALL_TIME_SETTING = "agent.wall_time_limit_seconds"


@dataclass(slots=True)
class MiniSweAgentConfig(ComponentConfig):
    executable: str | None = config_field(
        default=None,
        description="The `mini` program as the Environment sees it. Default: the `mini` installed next to the "
        "running Python (pip install 'agentcompass[mini-swe-agent]'), which host_process runs; for docker, an "
        "image with mini-swe-agent installed and e.g. 'mini'.",
    )
    config: str = config_field(
        default="mini.yaml",
        description="The mini-swe-agent config the run starts from: a built-in one (mini.yaml, swebench.yaml, ...) "
        "or a path in the Environment.",
    )
    step_limit: int = config_field(
        default=50, description="Most model calls the agent makes (agent.step_limit; 0: no limit)."
    )
    command_timeout: int = config_field(
        default=60, description="Seconds one bash command of the agent may run (environment.timeout)."
    )
    timeout: float = config_field(
        default=3600.0, description="Seconds the whole agent run may take; then it is stopped and the attempt is a run_error."
    )
    model_call_timeout: float = config_field(
        default=600.0, description="Seconds the gateway waits for the Model to answer one call."
    )
    rate_limit_patience: float = config_field(
        default=ratelimit.PATIENCE, description="Seconds the gateway keeps trying one call the Model refuses as "
        "too many (429, 503), from its first refusal; then the agent gets the refusal.")
    model_retries: int = config_field(
        default=3,
        description="Tries mini-swe-agent makes per model call before it gives up (it waits 4 to 60 s between "
        "them; a refused key is not retried).",
    )
    settings: dict = config_field(
        default={},
        description="Further mini-swe-agent settings as dotted keys, each passed as `-c KEY=VALUE` after the "
        "ones above, e.g. {'agent.wall_time_limit_seconds': 600, 'model.model_kwargs.max_tokens': 2048}.",
    )

    def __post_init__(self) -> None:
        self.step_limit = parse_int(self.step_limit, "step_limit", minimum=0)
        self.command_timeout = parse_int(self.command_timeout, "command_timeout", minimum=1)
        self.model_retries = parse_int(self.model_retries, "model_retries", minimum=1)
        for name in ("timeout", "model_call_timeout"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise ConfigError(f"{name} must be a positive number of seconds, got {value!r}")
        self.rate_limit_patience = parse_seconds(self.rate_limit_patience, "rate_limit_patience")
        if not isinstance(self.settings, dict) or not all(isinstance(k, str) and k for k in self.settings):
            raise ConfigError(f"settings must map dotted mini-swe-agent keys to values, got {self.settings!r}")


def _setting(key: str, value) -> list[str]:
    # mini reads each value as JSON: every value keeps its type, and a string stays a string
    return ["-c", f"{key}={json.dumps(value)}"]


@HARNESSES.register()
class MiniSweAgentHarness(BaseHarness):
    """Runs mini-swe-agent (PyPI) in the Environment against a per-attempt model gateway."""

    id = "mini_swe_agent"
    config_class = MiniSweAgentConfig
    dependencies = (DependencySpec(
        extra="mini-swe-agent", imports=("minisweagent",), pip="pip install 'agentcompass[mini-swe-agent]'",
    ),)

    def required_dependencies(self, config: MiniSweAgentConfig) -> tuple[DependencySpec, ...]:
        """The package provides the default program; a set ``executable`` is found in the Environment instead."""
        return () if config.executable else self.dependencies

    async def run(self, prepared, env, req, plan, context) -> RunResult:
        # ${VAR} references in the params this harness hands on are resolved here, where they are used
        params = {**plan.params, **resolve_secret({k: plan.params[k] for k in ("executable", "config", "settings")})}
        model = req.model

        def failed(reason: str, cls: FailureClass = FailureClass.HARNESS, **extra) -> RunResult:
            return RunResult(task_id=prepared.task_id, attempt=context.attempt, status=TaskStatus.RUN_ERROR,
                             error=reason, error_stage="run", failure_class=cls, **extra)

        if not model.base_url:
            return failed("model.base_url is not set: mini_swe_agent needs an OpenAI-compatible endpoint",
                          FailureClass.ENDPOINT)  # as a ModelClient without one raises ModelCallError
        executable = params["executable"] or str(Path(sys.executable).parent / "mini")
        # looked up as a command there sees it (a session without its sandbox confines file calls to the workspace)
        if "/" in executable and not (await env.exec(["test", "-x", executable])).ok:
            return failed(
                f"mini-swe-agent's program is not at {executable} in the environment: install it "
                "(pip install 'agentcompass[mini-swe-agent]') or set the harness parameter `executable`"
            )
        with ModelGateway(resolve_secret(model.base_url), model_key(model), context.trajectory_path,
                          timeout=params["model_call_timeout"], headers=resolve_secret(model.headers),
                          protocol=model.protocol, rate_limit_patience=params["rate_limit_patience"]) as gateway:
            address = await env.expose_host_socket(gateway.socket_path)
            state = posixpath.join(env.workdir, STATE_DIR)
            await env.exec(["mkdir", "-p", f"{state}/config"])
            started = time.monotonic()
            done = await env.exec(
                self._argv(executable, prepared, model, params, state, f"http://{address}", gateway.token),
                env=self._environment(state, params), cwd=prepared.input.workspace or None, timeout=params["timeout"],
            )
            elapsed = time.monotonic() - started
            trajectory = await self._read_trajectory(env, f"{state}/traj.json")
            await after_agent(env, ["rm", "-rf", state], f"removing mini-swe-agent's state {state}")
            seen = GatewaySeen.of(gateway, model, plan.params)
        usage, last_call, clean = seen.usage, seen.last_call, seen.scrubber.text

        (context.attempt_dir / LOG_NAME).write_text(clean(done.stdout + done.stderr), encoding="utf-8")
        if trajectory is not None:
            seen.append_records(context.trajectory_path, self._records(trajectory))
        info = (trajectory or {}).get("info") or {}
        status = info.get("exit_status") or ""
        metadata = {"exit_status": status, "returncode": done.returncode}
        stopped = seen.over_limits(done, "mini-swe-agent", params["timeout"])
        if stopped is not None:
            return failed(stopped, FailureClass.LIMIT, usage=usage, metadata=metadata)
        if status == "Submitted":
            return RunResult(task_id=prepared.task_id, attempt=context.attempt, answer=info.get("submission", ""),
                             usage=usage, metadata=metadata)
        if trajectory is None:
            reason = f"mini-swe-agent exited with status {done.returncode} and wrote no trajectory"
            return failed(f"{reason}: {clean((done.stderr or done.stdout)[-_TAIL:])}", usage=usage, metadata=metadata)
        last = (trajectory.get("messages") or [{}])[-1]
        why = str(last.get("content") or "")[-_TAIL:] if last.get("role") == "exit" else ""
        # the class comes from what this process saw (the gateway's count of calls and the status of the last
        # one, the time the run took), never from the trajectory or the output: the agent can write both
        cls = FailureClass.HARNESS
        wall = params["settings"].get(_WALL_TIME_SETTING)
        if 0 < params["step_limit"] <= usage["calls"] or (
                isinstance(wall, (int, float)) and not isinstance(wall, bool) and 0 < wall <= elapsed):
            cls = FailureClass.LIMIT
        elif endpoint_failed(last_call):  # it stopped on a model call the endpoint failed (after its retries)
            cls = FailureClass.ENDPOINT
            metadata["failure"] = {"class": cls.value, "http_status": last_call}
        return failed(clean(f"mini-swe-agent stopped without submitting ({status or 'no exit status'})"
                            + (f": {why}" if why and why != status else "")),
                      cls, usage=usage, metadata=metadata)

    @staticmethod
    def _argv(executable, prepared, model, params, state, api_base, token) -> list[str]:
        argv = [executable, "-m", f"openai/{model.id}", "-t", task_text(prepared), "-y", "--exit-immediately",
                "-o", f"{state}/traj.json", "-c", params["config"]]
        argv += _setting("agent.step_limit", params["step_limit"])
        argv += _setting("agent.cost_limit", 0)  # prices are unknown offline: steps and time are the limits
        argv += _setting("environment.timeout", params["command_timeout"])
        for key, value in model.params.items():
            argv += _setting(f"model.model_kwargs.{key}", value)
        for key, value in params["settings"].items():
            argv += _setting(key, value)
        # last, so no setting can point the agent elsewhere
        argv += _setting("model.model_kwargs.api_base", api_base) + _setting("model.model_kwargs.api_key", token)
        secret_variable = env_ref(model.api_key) if model.api_key else None
        # host_process already keeps the job's variables out; this holds for any provider that would not
        return ["env", "-u", secret_variable, *argv] if secret_variable else argv

    @staticmethod
    def _environment(state: str, params) -> dict[str, str]:
        return {
            "MSWEA_CONFIGURED": "true",  # no first-run questions
            "MSWEA_GLOBAL_CONFIG_DIR": f"{state}/config",
            "MSWEA_COST_TRACKING": "ignore_errors",
            "MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT": str(params["model_retries"]),
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # litellm would fetch its price list at import
            "NO_PROXY": "127.0.0.1,localhost",
            "no_proxy": "127.0.0.1,localhost",
        }

    @staticmethod
    async def _read_trajectory(env, path: str) -> dict | None:
        if not await env.exists(path):
            return None
        try:
            data = json.loads(await env.read_text(path))
        except (json.JSONDecodeError, UnicodeDecodeError, CopyLimitError):  # past READ_LIMIT: not read
            return None
        return data if isinstance(data, dict) else None

    @staticmethod
    def _records(trajectory: dict) -> list[dict]:
        """The agent's messages, then its outcome (its config, large and known, is left out)."""
        records = [{"source": "mini_swe_agent", "message": m} for m in trajectory.get("messages") or []]
        info = {k: v for k, v in (trajectory.get("info") or {}).items() if k != "config"}
        records.append({"source": "mini_swe_agent", "info": info})
        return records
