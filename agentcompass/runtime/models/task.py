"""Task and plan contracts: TaskSpec -> ExecutionPlan -> PreparedTask."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from .codec import Contract, ContractError, from_dict
from .request import EnvironmentSpec, EvaluationMode, ExecutionSpec, NetworkPolicy


@dataclass
class TaskSpec(Contract):
    """One task as the Benchmark loaded it: stable id, question, ground truth, hints.

    ``load_error`` is set, instead of the rest, for a task the Benchmark found
    but could not load (a task folder without its prompt, say): that task is
    planned without Benchmark, Harness or Recipe code and ends as ``run_error``
    with ``error_stage`` 'load' before any sandbox opens or any model is
    called, while the request's other tasks run. A Benchmark that sets it
    returns None from ``reference_solution`` for that task.
    """

    task_id: str
    question: str = ""
    category: str | None = None
    ground_truth: Any = None
    metadata: dict[str, Any] = field(default_factory=dict)
    evaluation_environment_mode: EvaluationMode | None = None
    baseline_network: NetworkPolicy | None = None
    run_network: NetworkPolicy | None = None
    evaluation_network: NetworkPolicy | None = None
    load_error: str | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.task_id:
            raise ContractError("TaskSpec.task_id must not be empty")
        if self.load_error is not None and not self.load_error:
            raise ContractError("TaskSpec.load_error must say what is wrong (or be None)")


@dataclass
class BenchmarkPlan(Contract):
    """Benchmark-private settings of one task attempt. Benchmarks subclass it."""


@dataclass
class HarnessPlan(Contract):
    """Harness runtime settings of one task attempt, after config validation."""

    harness_id: str = "none"
    params: dict[str, Any] = field(default_factory=dict)


@dataclass
class ExecutionPlan(Contract):
    """The resolved plan of one task attempt."""

    task_id: str
    attempt: int
    benchmark_id: str
    task_environment: EnvironmentSpec
    evaluation_environment: EnvironmentSpec | None
    evaluation_environment_mode: EvaluationMode
    baseline_network: NetworkPolicy | None
    run_network: NetworkPolicy | None
    evaluation_network: NetworkPolicy | None
    benchmark_plan: BenchmarkPlan
    harness_plan: HarnessPlan
    execution: ExecutionSpec
    applied_recipes: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.attempt < 1:
            raise ContractError("ExecutionPlan.attempt counts from 1")

    def copy(self) -> "ExecutionPlan":
        return copy.deepcopy(self)

    @classmethod
    def from_dict(
        cls,
        data: Any,
        benchmark_plan_cls: type = BenchmarkPlan,
        harness_plan_cls: type = HarnessPlan,
    ) -> "ExecutionPlan":
        """Rebuild a plan; the subplans take the classes their components declare."""
        return from_dict(
            cls,
            data,
            "ExecutionPlan",
            {"benchmark_plan": benchmark_plan_cls, "harness_plan": harness_plan_cls},
        )

    def audit_view(self) -> dict[str, Any]:
        """The narrow view kept in run_info.json: ids, policies, mode, Recipes."""
        def policy(p):
            return p.mode if p else None

        return {
            "task_environment": self.task_environment.id,
            "evaluation_environment": (
                self.evaluation_environment.id if self.evaluation_environment else None
            ),
            "evaluation_environment_mode": self.evaluation_environment_mode,
            "network": {
                "baseline": policy(self.baseline_network),
                "run": policy(self.run_network),
                "evaluation": policy(self.evaluation_network),
            },
            "applied_recipes": list(self.applied_recipes),
        }


@dataclass
class TaskInput(Contract):
    """What the harness gets: a prompt plus optional system prompt, media, files, tools."""

    prompt: str
    system_prompt: str | None = None
    media: list[dict[str, Any]] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    workspace: str | None = None
    tools: list[dict[str, Any]] = field(default_factory=list)
    messages: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class TaskOutput(Contract):
    """What is expected back: the form of the answer (never the answer) and output files."""

    answer: str | None = None
    files: list[str] = field(default_factory=list)


@dataclass
class PreparedTask(Contract):
    """Harness-facing input of one attempt. Holds nothing the agent must not see."""

    task_id: str
    input: TaskInput
    output: TaskOutput = field(default_factory=TaskOutput)
    category: str | None = None
    ground_truth: Any = None
    metadata: dict[str, Any] = field(default_factory=dict)

