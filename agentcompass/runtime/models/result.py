"""Result contracts: one RunResult per attempt, one MetricResult per request."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from .codec import OMIT_EMPTY, Contract, ContractError


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


class FailureClass(str, enum.Enum):
    """Why an attempt did not complete, decided from the type of what stopped it, never from its message.

    A wrong answer is not a failure: a completed attempt has no class. docs/benchmarks.md, "Why attempts fail", lists
    what puts an attempt in each class.
    """

    INFRASTRUCTURE = "infrastructure"  # the environment was unavailable, an image did not build, a sandbox died
    ENDPOINT = "endpoint"  # model calls failed after their retries
    HARNESS = "harness"  # the agent's own code raised
    LIMIT = "limit"  # the attempt ran out of steps, tokens or time
    VERIFIER = "verifier"  # the evaluation could not decide
    TASK = "task"  # the task itself: quarantined (its preflight did not pass), or its data could not be loaded


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
    usage: dict[str, int | float] = field(default_factory=dict)  # counters are whole numbers, latency seconds
    timings: dict[str, float] = field(default_factory=dict)
    retries_used: int = 0
    metadata: dict[str, Any] = field(default_factory=dict)
    # where the run stage ran: {"host": ..., "slurm_job_id": ... or None} (agentcompass.pipeline.provenance)
    provenance: dict[str, Any] = field(default_factory=dict)
    # why it did not complete (None when it did, and in result.json files of older versions)
    failure_class: FailureClass | None = None

    def __post_init__(self) -> None:
        if isinstance(self.failure_class, str) and not isinstance(self.failure_class, FailureClass):
            try:
                self.failure_class = FailureClass(self.failure_class)
            except ValueError:
                allowed = [c.value for c in FailureClass]
                raise ContractError(
                    f"RunResult.failure_class must be one of {allowed}, got {self.failure_class!r}") from None
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


def _describe(text: str) -> dict[str, str]:
    return {"description": text}


@dataclass
class Spread(Contract):
    """Mean, median and 95th percentile (linear interpolation between the nearest ranks) of a quantity."""

    mean: float
    p50: float
    p95: float


@dataclass
class MetricStats(Contract):
    """What a set of attempts scored, failed on, used and cost (agentcompass.results.stats)."""

    attempts: int = field(metadata=_describe("Attempts counted (every attempt with a result.json)."))
    counts: dict[str, int] = field(metadata=_describe("Attempts by status."))
    errors: dict[str, int] = field(metadata=_describe(
        "Failed attempts by kind: the status and the error's first line with numbers written N."))
    accuracy: float | None = field(metadata=_describe(
        "Correct attempts over the attempts counted (counted): every attempt but an infrastructure failure or a "
        "quarantined one; a failed attempt of another class is wrong, as in the Benchmark's own accuracy. Null "
        "when none is counted."))
    accuracy_ci95: list[float] | None = field(metadata=_describe(
        "The Wilson score 95% interval of accuracy, [low, high]; null with accuracy."))
    pass_at_k: dict[str, float] = field(metadata=_describe(
        "pass@k by k (unbiased estimator, averaged over tasks; an error is a failed sample) for k in "
        "1, 2, 5, 10, 20, 50, 100 and the attempts per task, up to the fewest attempts any task has; over the "
        "attempts counted."))
    calls: int = field(metadata=_describe("Model calls sent (HTTP requests, failed ones included)."))
    prompt_tokens: int = field(metadata=_describe(
        "Prompt tokens, as the model's replies reported them (those answered from the call cache included)."))
    completion_tokens: int = field(metadata=_describe(
        "Completion tokens, as the model's replies reported them (those answered from the call cache included)."))
    latency_seconds: Spread | None = field(metadata=_describe(
        "Per attempt that called the model: seconds waiting on it (usage.latency_seconds). Null when none did."))
    wall_seconds: Spread | None = field(metadata=_describe(
        "Per attempt: seconds of its run and evaluate stages (timings.run_seconds + evaluate_seconds)."))
    cost_usd: float | None = field(metadata=_describe(
        "What was paid, in US dollars at the Model's declared prices (model.pricing): the tokens of the calls "
        "sent, never those answered from the call cache; null when it declares none."))
    failures: dict[str, int] = field(default_factory=dict, metadata=_describe(
        "Attempts that did not complete, by failure class (infrastructure, endpoint, harness, limit, verifier, "
        "task; docs/benchmarks.md, 'Why attempts fail'); a class no attempt has is left out. Empty in metrics.json "
        "of older versions, whose result.json files name no class."))
    counted: int | None = field(default=None, metadata=_describe(
        "Attempts accuracy, accuracy_ci95 and pass_at_k are over: attempts less the infrastructure failures "
        "and the quarantined ones (docs/reports.md). Null in metrics.json of older versions."))
    cached_calls: int = field(default=0, metadata=_describe(
        "Model calls answered from the call cache (docs/reuse.md, The call cache): not sent, not paid."))
    cached_prompt_tokens: int = field(default=0, metadata=_describe(
        "The prompt tokens of the calls answered from the call cache (counted in prompt_tokens too)."))
    cached_completion_tokens: int = field(default=0, metadata=_describe(
        "The completion tokens of the calls answered from the call cache (counted in completion_tokens too)."))
    saved_usd: float | None = field(default=None, metadata=_describe(
        "What the calls answered from the call cache would have cost at model.pricing; null without prices."))
    cost_per_attempt_usd: float | None = field(default=None, metadata=_describe(
        "What one attempt cost: cost_usd over every attempt with a result but a quarantined one (which ran "
        "nothing): attempts, infrastructure failures included, as they were paid for. Null without prices or "
        "attempts; absent from metrics.json of older versions (the views compute it from cost_usd and attempts)."))
    cost_per_solved_usd: float | None = field(default=None, metadata=_describe(
        "What one solved task cost: cost_usd (every attempt, the failed ones included) over the correct attempts "
        "(accuracy's numerator). Null without prices or without a correct attempt; absent from metrics.json of "
        "older versions (the views compute it from cost_usd, accuracy and counted)."))

    def __post_init__(self) -> None:
        super().__post_init__()
        if sum(self.counts.values()) != self.attempts:
            raise ContractError("MetricStats.counts must add up to attempts")
        unknown = set(self.failures) - {c.value for c in FailureClass}
        if unknown:
            raise ContractError(f"MetricStats.failures has unknown classes {sorted(unknown)}")
        if sum(self.failures.values()) > self.attempts - self.counts.get(TaskStatus.COMPLETED.value, 0):
            raise ContractError("MetricStats.failures counts more attempts than did not complete")


@dataclass
class MetricSummary(Contract):
    """The request's attempts summarized overall and per task category."""

    overall: MetricStats
    by_category: dict[str, MetricStats] = field(default_factory=dict, metadata=_describe(
        "The same per task category (tasks without one are counted only overall)."))


@dataclass
class Quarantined(Contract):
    """A task left out of the metrics because its preflight did not pass."""

    task_id: str
    reason: str = field(metadata=_describe(
        "preflight_failed: its reference solution did not pass; preflight_flaky: its runs disagreed."))
    error: str | None = field(default=None, metadata=_describe("The preflight's error, if it had one."))


@dataclass
class ScoredOn(Contract):
    """What every figure of a request is over (agentcompass.results.scored_on): the attempts counted, and
    those left out (infrastructure failures, quarantined tasks)."""

    tasks: int = field(metadata=_describe("Tasks of the request (with a result)."))
    scored: int = field(metadata=_describe(
        "Tasks with an attempt counted: not quarantined, and not every attempt an infrastructure failure."))
    quarantined: list[Quarantined] = field(default_factory=list, metadata=_describe(
        "Tasks whose preflight did not pass, with the reason: their attempts ran nothing and count nowhere."))
    skipped: int = field(default=0, metadata=_describe(
        "Attempts counted that were skipped for another reason (status skipped)."))
    attempts: int | None = field(default=None, metadata=_describe(
        "Attempts of the request (with a result). Null in metrics.json of older versions."))
    counted: int | None = field(default=None, metadata=_describe(
        "Attempts every figure is over: attempts less infrastructure and those quarantined. Null in metrics.json "
        "of older versions."))
    infrastructure: int = field(default=0, metadata=_describe(
        "Attempts left out because they failed for the infrastructure (failure_class infrastructure)."))


@dataclass
class ScannerFlags(Contract):
    """What one transcript scanner found over a request's attempts (agentcompass.results.flag_counts)."""

    category: str = field(metadata=_describe("The scanner's category (scan.json's category)."))
    flagged: int = field(metadata=_describe("Attempts it flagged."))
    errors: int = field(default=0, metadata=_describe(
        "Attempts it could not scan (its finding has an error, and is unflagged)."))


@dataclass
class UnflaggedFigures(Contract):
    """The request's figures over the attempts no scanner flagged, beside those over every attempt."""

    metrics: dict[str, float | None] = field(metadata=_describe(
        "The Benchmark's own numbers (as metrics) over the attempts scored_on counts that no scanner flagged."))
    summary: MetricSummary = field(metadata=_describe(
        "The summary (as summary) over the attempts no scanner flagged."))


@dataclass
class FlagFigures(Contract):
    """What the request's transcript scanners flagged (agentcompass.results.flag_figures): counted from each
    attempt's scan.json, beside the scores, which they never change."""

    scanned: int = field(metadata=_describe("Attempts with a scan.json (every attempt but a quarantined one)."))
    flagged: int = field(metadata=_describe("Attempts at least one scanner flagged."))
    scanners: dict[str, ScannerFlags] = field(metadata=_describe(
        "By scanner id: its category, the attempts it flagged and those it could not scan."))
    categories: dict[str, int] = field(metadata=_describe(
        "By category: the attempts a scanner of that category flagged (each attempt once)."))
    unflagged: UnflaggedFigures = field(metadata=_describe(
        "metrics and summary over the attempts no scanner flagged."))

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0 <= self.flagged <= self.scanned:
            raise ContractError("FlagFigures.flagged must be within 0 and scanned")


@dataclass
class MetricResult(Contract):
    """Request-level metrics with counts by status."""

    benchmark_id: str
    metrics: dict[str, float | None] = field(metadata=_describe(
        "The Benchmark's own numbers by name, over the attempts scored_on counts: accuracy and mean_score (errors "
        "other than infrastructure count as wrong and 0), and what a "
        "Benchmark adds, such as accuracy/<category>, pass@<k>, or task_dir's rewards/<key>: the mean of each "
        "reward the verifiers wrote, over the attempts whose verifier wrote it."))
    counts: dict[str, int]
    num_tasks: int
    num_attempts: int
    details: dict[str, Any] = field(default_factory=dict)
    # the same for every Benchmark, computed by the metrics stage (None only in metrics.json of older versions)
    summary: MetricSummary | None = field(default=None, metadata=_describe(
        "Accuracy with its 95% interval, pass@k, counts by status and error kind, tokens, latency, wall time "
        "and cost, overall and per category; the same for every Benchmark."))
    # what metrics and summary are over: the attempts counted, and those left out
    scored_on: ScoredOn | None = field(default=None, metadata=_describe(
        "What every figure (metrics, summary's accuracy and pass@k) is over: the tasks and attempts counted, the "
        "infrastructure failures and quarantined tasks left out. Null only in metrics.json of older versions (which "
        "held it only with preflight on)."))
    # what the transcript scanners flagged (only with scanners: left out of the metrics.json of a request without)
    flags: FlagFigures | None = field(default=None, metadata={OMIT_EMPTY: True, **_describe(
        "What the request's transcript scanners flagged: attempts scanned and flagged, by scanner and by "
        "category, and metrics and summary over the attempts no scanner flagged. Present only when the request "
        "names scanners; metrics and summary (over every attempt, flagged or not) are never changed by it.")})

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.num_tasks < 0 or self.num_attempts < 0 or any(v < 0 for v in self.counts.values()):
            raise ContractError("MetricResult counts, num_tasks and num_attempts must not be negative")
        unknown = set(self.counts) - {s.value for s in TaskStatus}
        if unknown:
            raise ContractError(f"MetricResult.counts has unknown statuses {sorted(unknown)}")
        if sum(self.counts.values()) != self.num_attempts:
            raise ContractError("MetricResult.counts must add up to num_attempts")
