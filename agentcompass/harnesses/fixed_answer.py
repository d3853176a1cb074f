"""``fixed_answer``: answers every task with one configured string. Needs no model."""

from __future__ import annotations

from dataclasses import dataclass

from agentcompass.runtime import HARNESSES, BaseHarness, RunResult
from agentcompass.runtime.config import ComponentConfig, config_field


@dataclass(slots=True)
class FixedAnswerConfig(ComponentConfig):
    answer: str = config_field(default="", description="The answer submitted for every task.")


@HARNESSES.register()
class FixedAnswerHarness(BaseHarness):
    """Answers every task with the same string: a floor to compare agents against."""

    id = "fixed_answer"
    config_class = FixedAnswerConfig
    requires_model = False

    async def run(self, prepared, env, req, plan, context) -> RunResult:
        _ = env, req
        return RunResult(task_id=prepared.task_id, attempt=context.attempt, answer=plan.params["answer"])
