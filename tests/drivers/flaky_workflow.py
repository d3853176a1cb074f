"""Run the real workflow in this process with a harness whose sandbox fails the first N times.

    python flaky_workflow.py WORKDIR CONFIG

``test_flaky_sandbox`` opens its session (a command in it), records the
workspace path in the result, and raises InfrastructureError on its first
``failures`` calls per attempt (counted in a file beside the attempt's other
files). ``test_sandbox_fault`` raises nothing itself: on its first ``faults``
calls it ends its own sandbox from outside while a command runs in it
(``sandbox_faults``) and leaves the provider to report it.
"""

from __future__ import annotations

import asyncio
import sys
from dataclasses import dataclass

from sandbox_faults import drop_session, kill_container

from agentcompass.runtime import HARNESSES, BaseHarness, RunResult
from agentcompass.runtime.base import InfrastructureError
from agentcompass.runtime.config import ComponentConfig, config_field


@dataclass(slots=True)
class FlakyConfig(ComponentConfig):
    failures: int = config_field(default=1, description="Calls per attempt that fail like a dead sandbox.")


@HARNESSES.register()
class FlakySandbox(BaseHarness):
    """Fails like a dead sandbox a set number of times, then submits the reference."""

    id = "test_flaky_sandbox"
    config_class = FlakyConfig
    is_oracle = True
    requires_model = False

    async def run(self, prepared, env, req, plan, context) -> RunResult:
        await env.exec(["true"])
        counter = context.attempt_dir / "flaky-calls"
        calls = int(counter.read_text()) if counter.exists() else 0
        counter.write_text(str(calls + 1))
        if calls < plan.params["failures"]:
            raise InfrastructureError(f"sandbox died (call {calls + 1})")
        return RunResult(task_id=prepared.task_id, attempt=context.attempt, answer=context.reference,
                         metadata={"workspace": env.workdir})


LONG_COMMAND = ["sleep", "30"]
# how each fault ends the sandbox of the harness's session
FAULTS = {
    "kill_container": lambda env: kill_container(env.container.id, LONG_COMMAND),
    "drop_session": lambda env: drop_session(env.session_id, LONG_COMMAND),
}


@dataclass(slots=True)
class SandboxFaultConfig(ComponentConfig):
    fault: str = config_field(default="kill_container", choices=sorted(FAULTS), description="How the sandbox is ended.")
    faults: int = config_field(default=1, description="Calls per attempt whose sandbox is ended mid-command.")
    only_task: str = config_field(default="", description="The one task whose attempts are faulted; every task when empty.")


@HARNESSES.register()
class SandboxFault(BaseHarness):
    """Ends its sandbox from outside mid-command a set number of times, then submits the reference."""

    id = "test_sandbox_fault"
    config_class = SandboxFaultConfig
    is_oracle = True
    requires_model = False

    async def run(self, prepared, env, req, plan, context) -> RunResult:
        await env.exec(["true"])  # opens the session
        counter = context.attempt_dir / "fault-calls"
        calls = int(counter.read_text()) if counter.exists() else 0
        counter.write_text(str(calls + 1))
        if calls < plan.params["faults"] and plan.params.get("only_task", "") in ("", prepared.task_id):
            ending = asyncio.ensure_future(asyncio.to_thread(FAULTS[plan.params["fault"]], env))
            try:
                ran = await env.exec(LONG_COMMAND)
            finally:
                await ending
        else:
            ran = await env.exec(["true"])
        # a harness that saw only an exit status would carry on: the provider must say the sandbox died
        answer = context.reference if ran.ok else f"the command ended with exit status {ran.returncode}"
        return RunResult(task_id=prepared.task_id, attempt=context.attempt, answer=answer)


def main() -> int:
    from agentcompass import sdk

    workdir, config = sys.argv[1], sys.argv[2]
    return 0 if sdk.run_snakemake(sdk.snakemake_argv(None, [config], 2, workdir=workdir)) else 1


if __name__ == "__main__":
    sys.exit(main())
