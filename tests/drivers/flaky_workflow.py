"""Run the real workflow in this process with a harness whose sandbox fails the first N times.

    python flaky_workflow.py WORKDIR CONFIG

The harness opens its session (a command in it), records the workspace path in
the result, and raises InfrastructureError on its first ``failures`` calls per
attempt (counted in a file beside the attempt's other files).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

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


def main() -> int:
    from agentcompass import sdk

    workdir, config = sys.argv[1], sys.argv[2]
    return 0 if sdk.run_snakemake(sdk.snakemake_argv(None, [config], 2, workdir=workdir)) else 1


if __name__ == "__main__":
    sys.exit(main())
