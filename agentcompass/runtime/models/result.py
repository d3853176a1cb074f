"""Result contracts: one RunResult per attempt, one MetricResult per request."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from .codec import Contract, ContractError


class TaskStatus(str, enum.Enum):
    """Terminal state of one attempt. A valid score of 0 is COMPLETED, never an error."""

    COMPLETED = "completed"
    RUN_ERROR = "run_error"
    EVAL_ERROR = "eval_error"
    SKIPPED = "skipped"
    # The failing stage cannot be narrowed further.
    ERROR = "run_error_or_eval_error"

    @property
    def is_error(self) -> bool:
        return self in (TaskStatus.RUN_ERROR, TaskStatus.EVAL_ERROR, TaskStatus.ERROR)


@dataclass
class RunResult(Contract):
    """One execution or evaluation attempt (output.json before scoring, result.json after)."""

    task_id: str
    attempt: int = 1
    status: TaskStatus = TaskStatus.COMPLETED
    answer: Any = None
    correct: bool | None = None
    score: float | None = None
    ground_truth: Any = None
    error: str | None = None
    error_stage: str | None = None
    artifacts: list[str] = field(default_factory=list)
    usage: dict[str, float] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    retries_used: int = 0
    metadata: dict[str, Any] = field(default_factory=dict)
    # where the run stage ran: {"host": ..., "slurm_job_id": ... or None} (agentcompass.pipeline.provenance)
    provenance: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if isinstance(self.status, str) and not isinstance(self.status, TaskStatus):
            try:
                self.status = TaskStatus(self.status)
            except ValueError:
                allowed = [s.value for s in TaskStatus]
                raise ContractError(f"RunResult.status must be one of {allowed}, got {self.status!r}") from None
        super().__post_init__()
        if self.attempt < 1:
            raise ContractError("RunResult.attempt counts from 1")
        if self.retries_used < 0:
            raise ContractError("RunResult.retries_used must not be negative")
        if self.status.is_error and not self.error:
            raise ContractError(f"RunResult with status {self.status.value} needs an error message")


@dataclass
class MetricResult(Contract):
    """Request-level metrics with counts by status."""

    benchmark_id: str
    metrics: dict[str, float | None]
    counts: dict[str, int]
    num_tasks: int
    num_attempts: int
    details: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.num_tasks < 0 or self.num_attempts < 0 or any(v < 0 for v in self.counts.values()):
            raise ContractError("MetricResult counts, num_tasks and num_attempts must not be negative")
        unknown = set(self.counts) - {s.value for s in TaskStatus}
        if unknown:
            raise ContractError(f"MetricResult.counts has unknown statuses {sorted(unknown)}")
        if sum(self.counts.values()) != self.num_attempts:
            raise ContractError("MetricResult.counts must add up to num_attempts")
