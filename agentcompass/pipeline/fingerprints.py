"""The rules' params: for each file, a fingerprint of exactly what its stage reads.

Snakemake compares a job's params with those it recorded for the job's
outputs and reruns the job when they differ. Each param here holds what its
stage depends on and nothing else, so a new temperature reruns the harness
but not preparation, and a new scoring setting reruns evaluation but never
calls the model (``agentcompass.pipeline.reuse`` says what each stage reads).
"""

from __future__ import annotations

import json
from typing import Any

import agentcompass
from agentcompass import report
from agentcompass.runtime.base import BaseBenchmark, BaseHarness
from agentcompass.runtime.models import ExecutionPlan, RunRequest, TaskSpec
from agentcompass.runtime.registry import ENVIRONMENTS, RECIPES

from . import engine, reuse, shards, stages
from .bulk import BulkOutput, settled
from .engine import IncompleteCheckpointException, WorkflowError
from .invocation import Invocation

# Bump a stage's version when its behaviour changes: Snakemake then reruns it.
STAGE_VERSIONS = {
    "tasks": "1", "plans": "1", "prepare": "1", "run": "1", "evaluate": "1", "metrics": "2", "shard": "1",
}


def as_param(value: Any) -> str:
    """A rule param as canonical JSON: Snakemake compares params by their text."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


# -- what each stage reads, as pure functions of a request, its task and its plan ------------
# The rules' params below and ``agentcompass diff`` (agentcompass.plan_diff) both call these,
# so what diff says a change reruns is what Snakemake reruns. None of them holds the task
# source (it is not in the files a run leaves) or the reuse-off nonce (recompute_param).


def recompute_param(req: RunRequest, nonce: str) -> dict[str, str]:
    """Added to every param of a request with reuse off: ``nonce`` is new with each invocation."""
    return {} if req.runtime.reuse else {"recompute": nonce}


def component_versions(req: RunRequest) -> dict[str, str]:
    harness = stages.harness_for(req)
    return {
        "agentcompass": agentcompass.__version__,
        "benchmark": stages.benchmark_for(req).version,
        "harness": harness.version if harness else "none",
        "environment": ENVIRONMENTS.get(req.environment.id).version,
    }


def tasks_param(req: RunRequest) -> dict[str, Any]:
    benchmark = stages.benchmark_for(req)
    return {
        "stage": STAGE_VERSIONS["tasks"],
        "benchmark": req.benchmark.id,
        "params": reuse.benchmark_params_for(benchmark, req.benchmark.params, ("tasks",)),
        "version": benchmark.version,
    }


def plans_param(req: RunRequest) -> dict[str, Any]:
    execution = req.execution.to_dict()
    execution.pop("task_concurrency")  # how fast, not what: never a reason to rerun
    execution.pop("analyzers")
    return {
        "stage": STAGE_VERSIONS["plans"],
        "benchmark": req.benchmark.to_dict(),
        "harness": req.harness.to_dict(),
        "environment": req.environment.to_dict(),
        "execution": execution,
        "recipes": {rid: cls.version for rid, cls in RECIPES.items()},
        "recipe_dirs": req.metadata.recipe_dirs,
        "versions": component_versions(req),
    }


def run_info_param(req: RunRequest) -> dict[str, Any]:
    """The plans rule's second param: what run_info.json records besides the plans."""
    return {"model": req.model.id, "versions": component_versions(req)}


def report_param() -> dict[str, Any]:
    return {"stage": report.VERSION}


def metrics_param(req: RunRequest) -> dict[str, Any]:
    benchmark = stages.benchmark_for(req)
    return {
        "stage": STAGE_VERSIONS["metrics"], "benchmark": benchmark.version,
        "params": reuse.benchmark_params_for(benchmark, req.benchmark.params, ("metrics",)),
        "analyzers": req.execution.analyzers,
        "pricing": req.model.pricing.to_dict() if req.model.pricing else None,
    }


def attempt_params(req: RunRequest, task: TaskSpec, plan: ExecutionPlan, *, versions: dict[str, str],
                   benchmark: BaseBenchmark, harness: BaseHarness | None,
                   task_digest: str | None = None) -> dict[str, dict[str, Any]]:
    """What the prepare, run and evaluate stages of one attempt read.

    ``versions``, ``benchmark`` and ``harness`` are ``component_versions(req)`` and the request's
    components, passed in because a request of 10,000 attempts computes them once.
    """
    task_digest = task_digest or reuse.task_fingerprint(task)
    run = {
        "stage": STAGE_VERSIONS["run"], "model": reuse.model_view(req),
        "harness": versions["harness"], "environment": versions["environment"],
        "plan": reuse.digest(reuse.plan_view(plan, "run")),
    }
    if harness is None:  # a harness-free Benchmark runs its own code on the task
        run["benchmark"] = versions["benchmark"]
        run["task"] = task_digest
    elif harness.is_oracle:  # the oracle's answer is the reference, nothing else of the plan
        run["reference"] = reuse.digest(benchmark.reference_solution(task, plan.benchmark_plan))
    return {
        "prepare": {
            "stage": STAGE_VERSIONS["prepare"],
            "benchmark": versions["benchmark"], "environment": versions["environment"],
            "task": task_digest, "plan": reuse.digest(reuse.plan_view(plan, "prepare")),
        },
        "run": run,
        "evaluate": {
            "stage": STAGE_VERSIONS["evaluate"],
            "benchmark": versions["benchmark"], "environment": versions["environment"],
            "task": task_digest, "plan": reuse.digest(reuse.plan_view(plan, "evaluate")),
        },
    }


class Fingerprints:
    """Params of the per-request rules, and whether the bulk files are current (read at parse time)."""

    def __init__(self, inv: Invocation) -> None:
        self.inv = inv
        self._settled: dict[tuple[str, str], bool] = {}
        self._sources: dict[tuple[str, str], str | None] = {}

    def components(self, req: RunRequest) -> dict[str, str]:
        return component_versions(req)

    def recompute(self, req: RunRequest) -> dict[str, str]:
        return recompute_param(req, self.inv.nonce)

    def source(self, req: RunRequest) -> dict[str, str]:
        """The Benchmark's task files on disk, if it reads any: an edit loads and plans the tasks again.

        Both stages need it: an edit that leaves tasks.json as it was (a test
        script's) changes only the plans, and Snakemake skips a job whose input
        was rewritten with the same content.
        """
        key = (req.namespace, req.run_id)
        if key not in self._sources:  # digesting a folder of task files: once per parse, not per param
            self._sources[key] = stages.benchmark_for(req).source_fingerprint(req)
        source = self._sources[key]
        return {} if source is None else {"source": source}

    @engine.signature_once
    def request(self, w) -> str:
        self.inv.begin()
        return as_param(reuse.request_record(self.inv.request(w)))

    @engine.signature_once
    def tasks(self, w) -> str:
        self.inv.begin()
        req = self.inv.request(w)
        return as_param({**tasks_param(req), **self.source(req), **self.recompute(req)})

    @engine.signature_once
    def plans(self, w) -> str:
        self.inv.begin()
        req = self.inv.request(w)
        return as_param({**plans_param(req), **self.source(req), **self.recompute(req)})

    @engine.signature_once
    def run_info(self, w) -> str:
        return as_param(run_info_param(self.inv.request(w)))

    @engine.signature_once
    def metrics(self, w) -> str:
        self.inv.begin()
        req = self.inv.request(w)
        return as_param({**metrics_param(req), **self.recompute(req)})

    @engine.signature_once
    def report(self, w) -> str:
        self.inv.begin()
        return as_param({**report_param(), **self.recompute(self.inv.request(w))})

    # -- the bulk files, read at parse time once current --------------------------------

    def bulk_outputs(self, req: RunRequest) -> list[BulkOutput]:
        """tasks.json, plans.json and run_info.json with what their rules record for them now."""
        base, w = self.inv.run_path(req), self.inv.wildcards(req)
        plans_params = (self.plans(w), self.run_info(w))
        return [
            BulkOutput(base / "tasks.json", "tasks", (self.tasks(w),)),
            BulkOutput(base / "plans.json", "plans", plans_params, (base / "tasks.json",)),
            BulkOutput(base / "run_info.json", "plans", plans_params, (base / "tasks.json",)),
        ]

    def settled(self, req: RunRequest) -> bool:
        """Whether this request's task list and plans are read at parse time (``bulk``)."""
        key = (req.namespace, req.run_id)
        if key not in self._settled:
            self._settled[key] = settled(self.inv.snakemake, self.bulk_outputs(req))
        return self._settled[key]


class AttemptFingerprints:
    """Params of the per-attempt rules (prepare, run, evaluate) and of the shard rule.

    They are computed for every attempt of a request at once, when its
    tasks.json and plans.json are settled: Snakemake asks for them once per
    job, and at 10,000 attempts one pass is much cheaper than 30,000.
    """

    def __init__(self, inv: Invocation, fingerprints: Fingerprints, targets) -> None:
        self.inv = inv
        self.fingerprints = fingerprints
        self.targets = targets
        self._tables: dict[tuple[str, str], dict] = {}

    @engine.signature_once
    def prepare(self, w) -> str:
        return self.of(w)["prepare"]

    @engine.signature_once
    def run(self, w) -> str:
        # The Model as configured: api_key is its ${VAR} reference, never the key.
        return self.of(w)["run"]

    @engine.signature_once
    def evaluate(self, w) -> str:
        return self.of(w)["evaluate"]

    def of(self, w) -> dict[str, str]:
        """The prepare, run and evaluate params of one attempt."""
        return self.table(self.inv.request(w))[(w.task, int(w.attempt))]

    def table(self, req: RunRequest) -> dict:
        self.inv.begin()
        table = self._tables.get((req.namespace, req.run_id))
        if table is None:
            try:
                tasks_file, plans_file = self.targets.bulk_files(req)
            except IncompleteCheckpointException:
                raise WorkflowError(
                    f"request {req.metadata.request_name!r}: its tasks.json or plans.json must be "
                    f"(re)built before its attempt files. Fix: run the whole request (the default "
                    f"target, or {self.inv.run_path(req) / 'metrics.json'}) rather than single attempt files."
                ) from None
            # a shard's inner run needs its slice only: the rest is never decoded
            attempts = None if self.inv.inner is None else self.targets.shard_slice(req, self.inv.inner[2])
            table = self._tables[(req.namespace, req.run_id)] = self._table(req, tasks_file, plans_file, attempts)
        return table

    def _table(self, req: RunRequest, tasks_file: str, plans_file: str, attempts=None) -> dict:
        versions = self.fingerprints.components(req)
        recompute = self.fingerprints.recompute(req)
        benchmark, harness = stages.benchmark_for(req), stages.harness_for(req)
        tasks_seen: dict[str, str] = {}
        table = {}
        for segment, attempt in stages.raw_plans(plans_file) if attempts is None else attempts:
            plan = stages.plan_for(req, plans_file, segment, attempt)
            task = stages.task_by_segment(tasks_file, segment)
            if segment not in tasks_seen:
                tasks_seen[segment] = reuse.task_fingerprint(task)
            params = attempt_params(req, task, plan, versions=versions, benchmark=benchmark, harness=harness,
                                    task_digest=tasks_seen[segment])
            table[(segment, attempt)] = {stage: as_param({**value, **recompute}) for stage, value in params.items()}
        return table

    @engine.signature_once
    def shard(self, w) -> str:
        """Everything the slice's per-attempt params are computed from, digested as it is on disk.

        It changes whenever one of those params does (and, rarely, when a plan
        field no stage reads does: the inner run then finds nothing to do). Not
        decoding 10,000 plans to compute it is most of a no-op rerun's saving.
        """
        self.inv.begin()
        req = self.inv.request(w)
        tasks_file, plans_file = self.targets.bulk_files(req)
        tasks, plans = stages.raw_tasks(tasks_file), stages.raw_plans(plans_file)
        attempts = self.targets.shard_slice(req, int(w.shard))
        harness = stages.harness_for(req)
        forced = {"forced": self.inv.nonce} if shards.forced_rules(self.inv.snakemake) else {}
        return as_param({
            "stage": STAGE_VERSIONS["shard"],
            # the stages its inner run builds: a new metrics stage reruns metrics.json, not the shards
            "stages": {stage: STAGE_VERSIONS[stage] for stage in ("prepare", "run", "evaluate")},
            "versions": self.fingerprints.components(req),
            "model": reuse.model_view(req), "oracle": bool(harness and harness.is_oracle),
            "attempts": reuse.digest([[tasks[s], plans[(s, a)]] for s, a in attempts]),
            **self.fingerprints.recompute(req), **forced,
        })
