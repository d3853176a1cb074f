"""``example_exact_match``: a complete, small Benchmark to copy: a handful of short questions, scored by exact match."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from agentcompass.benchmarks.config import RuntimeBenchmarkConfig
from agentcompass.runtime import (
    BENCHMARKS,
    BaseBenchmark,
    BenchmarkPlan,
    EnvironmentSpec,
    PreparedTask,
    RunRequest,
    TaskInput,
    TaskOutput,
    TaskSpec,
    TaskStatus,
)
from agentcompass.runtime.config import ConfigError, config_field, parse_bool, plan_field

DATASET_REVISION = "tutorial-v1"

# (task_id, question, category, answer)
_QUESTIONS = [
    ("capital-france", "What is the capital of France? Answer with only the city name.", "geography", "Paris"),
    ("capital-japan", "What is the capital of Japan? Answer with only the city name.", "geography", "Tokyo"),
    ("largest-planet", "Which planet in the solar system is the largest? Answer with one word.", "science", "Jupiter"),
    ("water-formula", "What is the chemical formula of water? Answer with the formula only.", "science", "H2O"),
    ("author-hamlet", "Who wrote Hamlet? Answer with the author's last name only.", "literature", "Shakespeare"),
]


@dataclass(slots=True)
class ExampleExactMatchConfig(RuntimeBenchmarkConfig):
    case_sensitive: bool = config_field(
        default=False,
        description="Compare answers with case sensitivity.",
        stage="evaluate",
    )
    strip_whitespace: bool = config_field(
        default=True,
        description="Ignore leading and trailing whitespace (and a final period) before comparing.",
        stage="evaluate",
    )
    prompt_template: str = config_field(
        default="{question}",
        description="The prompt shown to the harness; '{question}' is replaced by the task's question.",
        stage="prepare",
    )

    def __post_init__(self) -> None:
        RuntimeBenchmarkConfig.__post_init__(self)
        self.case_sensitive = parse_bool(self.case_sensitive, "case_sensitive")
        self.strip_whitespace = parse_bool(self.strip_whitespace, "strip_whitespace")
        if "{question}" not in str(self.prompt_template):
            raise ConfigError("prompt_template must contain '{question}'")


@dataclass(slots=True)
class ExampleExactMatchPlan(BenchmarkPlan):
    expected: str = plan_field("", stage="evaluate")
    case_sensitive: bool = plan_field(False, stage="evaluate")
    strip_whitespace: bool = plan_field(True, stage="evaluate")
    prompt: str = plan_field("", stage="prepare")


@BENCHMARKS.register()
class ExampleExactMatchBenchmark(BaseBenchmark[ExampleExactMatchPlan]):
    """Short factual questions scored by exact match against one reference answer."""

    id = "example_exact_match"
    config_class = ExampleExactMatchConfig
    plan_class = ExampleExactMatchPlan

    def load_tasks(self, req: RunRequest) -> list[TaskSpec]:
        _ = req
        return [
            TaskSpec(
                task_id=task_id,
                question=question,
                category=category,
                ground_truth=answer,
                metadata={"dataset_revision": DATASET_REVISION},
            )
            for task_id, question, category, answer in _QUESTIONS
        ]

    def build_plan(self, task: TaskSpec, req: RunRequest, environment: EnvironmentSpec) -> ExampleExactMatchPlan:
        _ = environment
        config = self.build_config(req)
        if not isinstance(config, ExampleExactMatchConfig):
            raise TypeError("example_exact_match requires ExampleExactMatchConfig")
        return ExampleExactMatchPlan(
            expected=str(task.ground_truth),
            case_sensitive=config.case_sensitive,
            strip_whitespace=config.strip_whitespace,
            prompt=config.prompt_template.replace("{question}", task.question),
        )

    async def prepare_task(self, task, env, req, plan) -> PreparedTask:
        _ = env, req
        plan = self._require_plan(plan)
        return PreparedTask(
            task_id=task.task_id,
            category=task.category,
            ground_truth=None,
            input=TaskInput(prompt=plan.prompt),
            output=TaskOutput(answer="Return only the answer, nothing else."),
            metadata={"dataset_revision": task.metadata["dataset_revision"]},
        )

    def reference_solution(self, task: TaskSpec, plan: BenchmarkPlan) -> str:
        return self._require_plan(plan).expected

    def _normalize(self, text: str, plan: ExampleExactMatchPlan) -> str:
        if plan.strip_whitespace:
            text = text.strip().rstrip(".").strip()
        return text if plan.case_sensitive else text.casefold()

    async def evaluate(self, task, prepared, result, env, req, plan):
        _ = prepared, env, req
        plan = self._require_plan(plan)
        answer = result.answer if isinstance(result.answer, str) else ("" if result.answer is None else str(result.answer))
        correct = self._normalize(answer, plan) == self._normalize(plan.expected, plan)
        return dataclasses.replace(
            result,
            status=TaskStatus.COMPLETED,
            correct=correct,
            score=1.0 if correct else 0.0,
            ground_truth=plan.expected,
        )
