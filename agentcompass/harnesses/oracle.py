"""``oracle``: submits the Benchmark's reference answer. Needs no model."""

from __future__ import annotations

from agentcompass.runtime import HARNESSES, BaseHarness, RunResult


@HARNESSES.register()
class OracleHarness(BaseHarness):
    """Submits the Benchmark's reference solution: a check that scoring works end to end."""

    id = "oracle"
    is_oracle = True
    requires_model = False

    async def run(self, prepared, env, req, plan, context) -> RunResult:
        _ = env, req, plan
        return RunResult(task_id=prepared.task_id, attempt=context.attempt, answer=context.reference)
