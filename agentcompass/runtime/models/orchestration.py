"""Process-wide runtime options and the orchestration of named requests."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from .codec import OMIT_EMPTY, Contract, ContractError
from .request import BudgetSpec, CacheMode, RunRequest


@dataclass
class ResolvedRuntimeOptions(Contract):
    """Process-wide behaviour: result paths, deadline, limits, progress and logging."""

    results_dir: str = "results"
    deadline_seconds: float | None = None
    cleanup_grace_seconds: float = 10.0
    provider_limits: dict[str, int] = field(default_factory=dict)
    environment_open_rate: float | None = None
    progress: bool = True
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    # A request of more attempts than this runs as shards of this many attempts,
    # each one job that builds its slice with an inner Snakemake (0: never).
    shard_size: int = 500
    # the call cache (agentcompass.callcache): its folder (None: .call-cache in results_dir), and the bounds
    # an invocation prunes it to when it ends (None: no bound)
    cache_dir: str | None = None
    # every request's execution.cache, when set (the command line's --cache and --no-cache)
    cache: CacheMode | None = None
    cache_max_bytes: int | None = 10 << 30
    cache_max_age_days: float | None = None
    # what the whole invocation may pay, every request together (agentcompass.spend); None: no budget
    budget: BudgetSpec | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.results_dir:
            raise ContractError("runtime.results_dir must not be empty")
        if self.shard_size < 0:
            raise ContractError("runtime.shard_size must be 0 (never shard) or more")
        if self.cache_dir == "":
            raise ContractError("runtime.cache_dir must not be empty (leave it out: .call-cache in results_dir)")
        if self.cache_max_bytes is not None and self.cache_max_bytes < 0:
            raise ContractError("runtime.cache_max_bytes must be 0 or more (or null: no bound)")
        if self.cache_max_age_days is not None and not 0 <= self.cache_max_age_days < float("inf"):
            raise ContractError("runtime.cache_max_age_days must be 0 or more (or null: no bound)")


@dataclass
class OrchestratedRun(Contract):
    """One named request of an orchestration, in declaration order."""

    key: str
    index: int
    name: str
    request: RunRequest


@dataclass
class Orchestration(Contract):
    """The ordered requests one invocation builds, with the process runtime options."""

    runs: list[OrchestratedRun]
    runtime: ResolvedRuntimeOptions = field(default_factory=ResolvedRuntimeOptions)

    @classmethod
    def from_requests(
        cls,
        requests: list[RunRequest],
        runtime: ResolvedRuntimeOptions | None = None,
        task_concurrency: int | None = None,
    ) -> "Orchestration":
        """Order the requests and write the one global task concurrency into each."""
        runs = []
        for index, req in enumerate(requests):
            if task_concurrency is not None:
                req.execution.task_concurrency = task_concurrency
            name = req.metadata.request_name
            runs.append(OrchestratedRun(key=f"{req.namespace}/{req.run_id}", index=index, name=name, request=req))
        budget = runtime.budget if runtime is not None else None
        unpriced = [run.name for run in runs if run.request.model.pricing is None]
        if budget is not None and budget.cost_usd is not None and unpriced:
            raise ContractError(
                f"runtime.budget.cost_usd counts dollars at each Model's prices, and request {unpriced[0]!r} declares "
                "none. Fix: give its model pricing: {input_per_million: ..., output_per_million: ...}, or set "
                "runtime.budget.total_tokens instead")
        seen: dict[str, str] = {}
        for run in runs:
            if run.key in seen:
                raise ContractError(f"requests {seen[run.key]!r} and {run.name!r} both write results/{run.key}")
            seen[run.key] = run.name
        return cls(runs=runs, runtime=runtime or ResolvedRuntimeOptions())


@dataclass
class RequestOutcome(Contract):
    """One request's terminal state.

    ``completed``: every attempt finished without an error; ``completed_with_errors``:
    the request finished and ``errors`` counts its failed attempts by kind;
    ``stopped``: the run ended before the request was finished (``reason``);
    ``budget_spent``: a budget ran out before the request was finished: attempts wait (``reason``);
    ``partial``: the run built the files named on its command line, not the whole request;
    ``planned``: a dry run.
    """

    name: str
    key: str
    state: Literal["completed", "completed_with_errors", "stopped", "budget_spent", "partial", "planned"]
    counts: dict[str, int] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)
    results_dir: str = ""
    errors: dict[str, int] = field(default_factory=dict)
    done: int = 0
    total: int = 0
    reason: str | None = None
    # metrics.json's scored_on: what the metrics are over, and what was left out (infrastructure, quarantined)
    scored_on: dict[str, Any] | None = None
    # metrics.json's flags without its unflagged figures: attempts scanned and flagged, and by scanner id its
    # category, flagged and errors (agentcompass.results.flag_counts); only for a request with scanners
    flags: dict[str, Any] | None = field(default=None, metadata={OMIT_EMPTY: True})


# The CLI's exit status for an orchestration's outcomes (docs/reuse.md, Exit status).
EXIT_OK, EXIT_ATTEMPT_ERRORS, EXIT_USAGE, EXIT_STOPPED, EXIT_LOCKED, EXIT_BUDGET = 0, 1, 2, 3, 4, 5
# with --fail-on-flag: every request finished well, and a transcript scanner flagged an attempt of one
EXIT_FLAGGED = 6


@dataclass
class OrchestrationResult(Contract):
    """Every request's outcome, in declaration order."""

    outcomes: list[RequestOutcome]

    @property
    def ok(self) -> bool:
        return all(o.state in ("completed", "partial", "planned") for o in self.outcomes)

    @property
    def exit_status(self) -> int:
        """0 all completed, 1 finished with failed attempts, 3 stopped before finishing, 5 a budget was spent."""
        states = {o.state for o in self.outcomes}
        if "stopped" in states:
            return EXIT_STOPPED
        if "budget_spent" in states:
            return EXIT_BUDGET
        if "completed_with_errors" in states:
            return EXIT_ATTEMPT_ERRORS
        return EXIT_OK
