"""``synthetic``: N generated tasks with known answers, for measuring the framework itself."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from agentcompass.runtime import (
    BENCHMARKS,
    BaseBenchmark,
    BenchmarkPlan,
    PreparedTask,
    RunRequest,
    TaskInput,
    TaskOutput,
    TaskSpec,
    TaskStatus,
)
from agentcompass.runtime.config import RuntimeBenchmarkConfig, config_field, parse_int, plan_field


@dataclass(slots=True)
class SyntheticConfig(RuntimeBenchmarkConfig):
    num_tasks: int = config_field(default=100, description="How many tasks to generate.", stage="tasks")

    def __post_init__(self) -> None:
        RuntimeBenchmarkConfig.__post_init__(self)
        self.num_tasks = parse_int(self.num_tasks, "num_tasks", minimum=1)


@dataclass(slots=True)
class SyntheticPlan(BenchmarkPlan):
    expected: str = plan_field("", stage="evaluate")


@BENCHMARKS.register()
class SyntheticBenchmark(BaseBenchmark[SyntheticPlan]):
    """Generated echo tasks ('repeat the word wN'): an instant workload to time the framework."""

    id = "synthetic"
    config_class = SyntheticConfig
    plan_class = SyntheticPlan

    def load_tasks(self, req: RunRequest) -> list[TaskSpec]:
        config = self.build_config(req)
        width = len(str(config.num_tasks))
        return [
            TaskSpec(task_id=f"t{i:0{width}d}", question=f"Repeat the word w{i}.", category=f"c{i % 4}", ground_truth=f"w{i}")
            for i in range(config.num_tasks)
        ]

    def build_plan(self, task, req, environment) -> SyntheticPlan:
        return SyntheticPlan(expected=str(task.ground_truth))

    async def prepare_task(self, task, env, req, plan) -> PreparedTask:
        return PreparedTask(task_id=task.task_id, category=task.category, input=TaskInput(prompt=task.question),
                            output=TaskOutput(answer="Only the word."))

    def reference_solution(self, task, plan) -> str:
        return self._require_plan(plan).expected

    async def evaluate(self, task, prepared, result, env, req, plan):
        # text only: no list or object whose printed form happens to match
        correct = isinstance(result.answer, str) and result.answer.strip() == self._require_plan(plan).expected
        return dataclasses.replace(result, status=TaskStatus.COMPLETED, correct=correct, score=float(correct))
