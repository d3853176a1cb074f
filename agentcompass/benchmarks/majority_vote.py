"""``majority_vote``: a harness-free Benchmark that samples the Model N times and votes.

Self-consistency (Wang et al., 2022) on generated arithmetic: ``run_task``
asks the Model the same question ``samples`` times, reads the last integer
of each reply and answers with the most frequent one. It runs with
``harness: none`` and shows how a Benchmark drives its own model interaction.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import re
from collections import Counter
from dataclasses import dataclass

from agentcompass.runtime import (
    BENCHMARKS,
    BenchmarkPlan,
    HarnessFreeBenchmark,
    MetricResult,
    PreparedTask,
    RunRequest,
    RunResult,
    TaskInput,
    TaskOutput,
    TaskSpec,
    TaskStatus,
)
from agentcompass.runtime.config import ConfigError, RuntimeBenchmarkConfig, config_field, parse_int, plan_field
from agentcompass.runtime.failures import endpoint_failure
from agentcompass.runtime.model_client import ModelCallConfig, ModelCallError, ModelClient

ANSWER_FORM = "Work it out step by step, then give the final answer as an integer on the last line."
_INTEGER = re.compile(r"-?\d[\d,]*")


@dataclass(slots=True)
class MajorityVoteConfig(RuntimeBenchmarkConfig):
    num_tasks: int = config_field(default=20, description="How many arithmetic questions to generate.", stage="tasks")
    samples: int = config_field(
        default=5,
        description="Replies sampled from the Model per question; the most frequent answer is submitted "
        "(use a temperature above 0 in the model params for distinct samples).",
        stage="run",
    )
    timeout: float = config_field(default=60.0, description="Seconds to wait for one model reply.", stage="run")

    def __post_init__(self) -> None:
        RuntimeBenchmarkConfig.__post_init__(self)
        self.num_tasks = parse_int(self.num_tasks, "num_tasks", minimum=1)
        self.samples = parse_int(self.samples, "samples", minimum=1)
        try:
            self.timeout = float(self.timeout)
        except (TypeError, ValueError):
            raise ConfigError(f"timeout must be a number of seconds, got {self.timeout!r}") from None
        if self.timeout <= 0:
            raise ConfigError(f"timeout must be positive, got {self.timeout}")


@dataclass(slots=True)
class MajorityVotePlan(BenchmarkPlan):
    samples: int = plan_field(5, stage="run")
    timeout: float = plan_field(60.0, stage="run")


def final_integer(text: str) -> int | None:
    """The last integer in ``text`` ('1,234' reads as 1234), or None."""
    found = _INTEGER.findall(text)
    return int(found[-1].replace(",", "")) if found else None


def majority(answers: list[int | None]) -> int | None:
    """The most frequent answer; a tie goes to the one that appeared first. Unreadable replies do not vote."""
    votes = Counter(a for a in answers if a is not None)
    return votes.most_common(1)[0][0] if votes else None


def generate_question(index: int) -> tuple[str, int]:
    rng = random.Random(index)
    a, b, c = rng.randint(11, 99), rng.randint(11, 99), rng.randint(100, 999)
    return f"What is {a} * {b} + {c}?", a * b + c


@BENCHMARKS.register()
class MajorityVoteBenchmark(HarnessFreeBenchmark[MajorityVotePlan]):
    """Self-consistency on arithmetic (harness: none): samples the Model N times and submits the majority answer."""

    id = "majority_vote"
    config_class = MajorityVoteConfig
    plan_class = MajorityVotePlan

    def load_tasks(self, req: RunRequest) -> list[TaskSpec]:
        config = self.build_config(req)
        width = len(str(config.num_tasks - 1))
        tasks = []
        for index in range(config.num_tasks):
            question, answer = generate_question(index)
            tasks.append(TaskSpec(task_id=f"arith-{index:0{width}d}", question=question, ground_truth=answer))
        return tasks

    def build_plan(self, task, req, environment) -> MajorityVotePlan:
        _ = task, environment
        config = self.build_config(req)
        return MajorityVotePlan(samples=config.samples, timeout=config.timeout)

    async def prepare_task(self, task, env, req, plan) -> PreparedTask:
        _ = env, req, plan
        return PreparedTask(task_id=task.task_id, input=TaskInput(prompt=task.question),
                            output=TaskOutput(answer=ANSWER_FORM))

    def reference_solution(self, task, plan) -> int:
        _ = plan
        return task.ground_truth

    async def run_task(self, prepared, env, req, plan) -> RunResult:
        """Each sample's call (each try of it) is a line of the attempt's trajectory, with its ``sample`` number."""
        _ = env
        settings = self._require_plan(plan.benchmark_plan)
        messages = [{"role": "user", "content": f"{prepared.input.prompt}\n\n{prepared.output.answer}"}]
        client = None
        try:
            async with ModelClient(req.model, ModelCallConfig(timeout=settings.timeout)) as client:
                replies = await asyncio.gather(
                    *(client.complete(messages, sample=n) for n in range(1, settings.samples + 1))
                )
        except ModelCallError as exc:  # no endpoint configured, or a call failed for good
            return RunResult(task_id=prepared.task_id, attempt=plan.attempt, status=TaskStatus.RUN_ERROR,
                             error=str(exc), error_stage="run", usage=client.usage.as_dict() if client else {},
                             **endpoint_failure(exc))
        answers = [final_integer(reply.text) for reply in replies]
        return RunResult(
            task_id=prepared.task_id,
            attempt=plan.attempt,
            answer=majority(answers),
            usage=client.usage.as_dict(),
            metadata={"samples": answers},
        )

    async def evaluate(self, task, prepared, result, env, req, plan):
        _ = prepared, env, req, plan
        samples = result.metadata.get("samples") or []
        # an integer equal to the answer: not 2245.0, "2245" or True where 1 is expected
        correct = type(result.answer) is int and result.answer == task.ground_truth
        return dataclasses.replace(
            result,
            status=TaskStatus.COMPLETED,
            correct=correct,
            score=1.0 if correct else 0.0,
            ground_truth=task.ground_truth,
            metadata={**result.metadata,
                      "sample_accuracy": sum(type(s) is int and s == task.ground_truth for s in samples) / len(samples) if samples else 0.0},
        )

    def aggregate_metrics(self, results: list[RunResult], req: RunRequest) -> MetricResult:
        """``accuracy`` of the voted answers, and ``sample_accuracy``: of single replies, what voting improves on."""
        metric = HarnessFreeBenchmark.aggregate_metrics(self, results, req)
        per_attempt = [r.metadata.get("sample_accuracy", 0.0) for r in results]
        metric.metrics["sample_accuracy"] = sum(per_attempt) / len(per_attempt) if per_attempt else None
        return metric
