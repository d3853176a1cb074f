"""The rules' params: for each file, a fingerprint of exactly what its stage reads.

Snakemake compares a job's params with those it recorded for the job's
outputs and reruns the job when they differ. Each param here holds what its
stage depends on and nothing else, so a new temperature reruns the harness
but not preparation, and a new scoring setting reruns evaluation but never
calls the model. The stage table (``agentcompass.stages``) names each stage's
function here, and its version.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import agentcompass
from agentcompass import layout
from agentcompass.runtime.base import BaseBenchmark, BaseHarness
from agentcompass.runtime.models import ExecutionPlan, RunRequest, TaskSpec
from agentcompass.runtime.registry import ENVIRONMENTS, RECIPES, SCANNERS
from agentcompass.stages import STAGES, Stage, sole, where

from . import engine, plan_index, reading, reuse, shards
from .bulk import BulkOutput, settled
from .engine import IncompleteCheckpointException, WorkflowError
from .invocation import Invocation

# an attempt's stages (a shard's inner run builds them), the shard, and the stages after every attempt
ATTEMPT_STAGES = where(in_shards=True)
SHARD_STAGE = sole(slices_attempts=True)
SUMMARY_STAGES = tuple(s.name for s in where(after_attempts=True))
CHECKPOINTS = tuple(s for s in STAGES if s.checkpoint)


def as_value(value: Any) -> Any:
    """A request setting as a JSON value: a contract (or a list of them) as its dict."""
    if isinstance(value, list):
        return [as_value(item) for item in value]
    return value.to_dict() if hasattr(value, "to_dict") else value


def as_param(value: Any) -> str:
    """A rule param as canonical JSON: Snakemake compares params by their text."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


# -- what each stage reads, as pure functions of a request, its task and its plan ------------
# The stage table names each stage's function; the rules' params below and ``agentcompass diff``
# (agentcompass.plan_diff) both call them, so what diff says a change reruns is what Snakemake
# reruns. None of them holds the task source (it is not in the files a run leaves) or the
# reuse-off nonce (recompute_param): ``Extra`` brings them.


@dataclass(frozen=True)
class Extra:
    """What a request or summary stage's params hold besides what the stage reads of the request:
    the Benchmark's task files (``source``) and the reuse-off nonce (``recompute``)."""

    source: dict[str, str] = field(default_factory=dict)
    recompute: dict[str, str] = field(default_factory=dict)


def recompute_param(req: RunRequest, nonce: str) -> dict[str, str]:
    """Added to every param of a request with reuse off: ``nonce`` is new with each invocation."""
    return {} if req.runtime.reuse else {"recompute": nonce}


def component_versions(req: RunRequest) -> dict[str, str]:
    harness = reading.harness_for(req)
    return {
        "agentcompass": agentcompass.__version__,
        "benchmark": reading.benchmark_for(req).version,
        "harness": harness.version if harness else "none",
        "environment": ENVIRONMENTS.get(req.environment.id).version,
    }


def request_params(s: Stage, req: RunRequest, extra: Extra = Extra()) -> list[Any]:
    """The values of a request or summary stage's params (one per ``s.params``), before ``as_param``."""
    return s.resolve("fingerprint")(req, s, extra)


def request_param(req: RunRequest, s: Stage, extra: Extra) -> list[Any]:
    return [reuse.request_record(req)]


def tasks_param(req: RunRequest, s: Stage, extra: Extra) -> list[Any]:
    benchmark = reading.benchmark_for(req)
    return [{
        "stage": s.version,
        "benchmark": req.benchmark.id,
        "params": reuse.benchmark_params_for(benchmark, req.benchmark.params, (s.name,)),
        "version": benchmark.version,
        **extra.source, **extra.recompute,
    }]


def plans_param(req: RunRequest, s: Stage, extra: Extra) -> list[Any]:
    """The plans, and what run_info.json records besides them."""
    execution = req.execution.to_dict()
    execution.pop("task_concurrency")  # how fast, not what: never a reason to rerun
    execution.pop("analyzers")
    execution.pop("preflight")  # the preflight stage's, not the plans'
    execution.pop("cache", None)  # what is paid, never what a file holds
    execution.pop("budget", None)  # the same
    plans = {
        "stage": s.version,
        "benchmark": req.benchmark.to_dict(),
        "harness": req.harness.to_dict(),
        "environment": req.environment.to_dict(),
        "execution": execution,
        # the built-in Recipes that may adapt this request's plans (a new one for another Benchmark is not)
        "recipes": {rid: cls.version for rid, cls in RECIPES.items() if cls.may_adapt(req)},
        "recipe_dirs": req.metadata.recipe_dirs,
        "versions": component_versions(req),
        **extra.source, **extra.recompute,
    }
    return [plans, {"model": req.model.id, "versions": component_versions(req)}]


def metrics_param(req: RunRequest, s: Stage, extra: Extra) -> list[Any]:
    benchmark = reading.benchmark_for(req)
    return [{
        "stage": s.version, "benchmark": benchmark.version,
        "params": reuse.benchmark_params_for(benchmark, req.benchmark.params, (s.name,)),
        "analyzers": req.execution.analyzers,
        "pricing": req.model.pricing.to_dict() if req.model.pricing else None,
        # metrics.json's flags are by scanner: only with scanners, so a request without has the params it had
        **({"scanners": scanners_view(req)} if req.scanners else {}),
        **extra.recompute,
    }]


def report_param(req: RunRequest, s: Stage, extra: Extra) -> list[Any]:
    return [{"stage": s.version, **extra.recompute}]


@dataclass(frozen=True)
class AttemptView:
    """What an attempt stage's params are computed from. ``versions``, ``benchmark`` and ``harness``
    are ``component_versions(req)`` and the request's components: a request of 10,000 attempts
    computes them once."""

    req: RunRequest
    task: TaskSpec
    plan: ExecutionPlan
    versions: dict[str, str]
    benchmark: BaseBenchmark
    harness: BaseHarness | None
    task_digest: str


def _plan_view(plan: ExecutionPlan, s: Stage, **fields: Any) -> str:
    """The digest of the part of an attempt's plan that ``s`` reads: the task and its environment,
    ``fields``, and the BenchmarkPlan fields marked as read by it (or unmarked)."""
    bplan = plan.benchmark_plan
    view: dict[str, Any] = {
        "task_id": plan.task_id,
        "attempt": plan.attempt,
        "task_environment": {"id": plan.task_environment.id, "params": plan.task_environment.params},
        **fields,
    }
    if "benchmark_plan" in fields:
        view["benchmark_plan"] = {f.name: getattr(bplan, f.name) for f in dataclasses.fields(bplan)
                                  if reuse.field_stage(f) in (s.name, None)}
    return reuse.digest(view)


def _policy(policy) -> str | None:
    return policy.mode if policy else None


def prepare_param(v: AttemptView, s: Stage) -> dict[str, Any]:
    plan = v.plan
    return {
        "stage": s.version,
        "benchmark": v.versions["benchmark"], "environment": v.versions["environment"], "task": v.task_digest,
        "plan": _plan_view(plan, s, baseline_network=_policy(plan.baseline_network), benchmark_plan=True),
    }


def run_param(v: AttemptView, s: Stage) -> dict[str, Any]:
    plan = v.plan
    fields: dict[str, Any] = {
        "run_network": _policy(plan.run_network),
        "evaluation_environment_mode": plan.evaluation_environment_mode,
        "harness_plan": plan.harness_plan.to_dict(),
        "execution": {"max_retries": plan.execution.max_retries, "task_timeout": plan.execution.task_timeout},
    }
    if plan.task_environment.tools:  # the agent programs it runs (none: the view it had before tools existed)
        fields["tools"] = list(plan.task_environment.tools)
    if plan.harness_plan.harness_id == "none":  # a harness-free Benchmark's run_task reads its own plan
        fields["benchmark_plan"] = True
    run = {
        # The Model as configured: api_key is its ${VAR} reference, never the key.
        "stage": s.version, "model": reuse.model_view(v.req),
        "harness": v.versions["harness"], "environment": v.versions["environment"],
        "plan": _plan_view(plan, s, **fields),
    }
    if v.harness is None:  # a harness-free Benchmark runs its own code on the task
        run["benchmark"] = v.versions["benchmark"]
        run["task"] = v.task_digest
    elif v.harness.is_oracle:  # the oracle's answer is the reference, nothing else of the plan
        run["reference"] = reuse.digest(v.benchmark.reference_solution(v.task, plan.benchmark_plan))
    return run


def evaluate_param(v: AttemptView, s: Stage) -> dict[str, Any]:
    plan = v.plan
    return {
        "stage": s.version,
        "benchmark": v.versions["benchmark"], "environment": v.versions["environment"], "task": v.task_digest,
        "plan": _plan_view(
            plan, s, evaluation_network=_policy(plan.evaluation_network),
            evaluation_environment_mode=plan.evaluation_environment_mode,
            evaluation_environment=plan.evaluation_environment.to_dict() if plan.evaluation_environment else None,
            benchmark_plan=True,
        ),
    }


def scanners_view(req: RunRequest) -> list[dict[str, Any]]:
    """The request's scanners as the scan stage reads them: each one's id, version and params, in order."""
    return [{"id": spec.id, "version": SCANNERS.get(spec.id).version, "params": spec.params}
            for spec in req.scanners or ()]


def scan_param(v: AttemptView, s: Stage) -> dict[str, Any]:
    """The scanners selected, their versions and params: a new or changed one rescans, and nothing else reruns
    (the scan stage reads result.json, its input, and the trajectory the run stage wrote beside it)."""
    return {"stage": s.version, "scanners": scanners_view(v.req)}


def attempt_params(req: RunRequest, task: TaskSpec, plan: ExecutionPlan, *, versions: dict[str, str],
                   benchmark: BaseBenchmark, harness: BaseHarness | None,
                   task_digest: str | None = None) -> dict[str, dict[str, Any]]:
    """What each attempt stage of one attempt reads, by stage."""
    view = AttemptView(req, task, plan, versions, benchmark, harness, task_digest or reuse.task_fingerprint(task))
    return {s.name: s.resolve("fingerprint")(view, s) for s in ATTEMPT_STAGES}


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
            self._sources[key] = reading.benchmark_for(req).source_fingerprint(req)
        source = self._sources[key]
        return {} if source is None else {"source": source}

    def extra(self, req: RunRequest) -> Extra:
        return Extra(self.source(req), self.recompute(req))

    def values(self, s: Stage, w) -> tuple[str, ...]:
        """A request or summary stage's params for the wildcards ``w``, as the rule records them."""
        self.inv.begin()
        req = self.inv.request(w)
        return tuple(as_param(value) for value in request_params(s, req, self.extra(req)))

    def param(self, s: Stage, index: int) -> Callable:
        """The rule's ``index``-th param of stage ``s``, as a param function of Snakemake's."""
        return engine.signature_once(lambda wildcards: self.values(s, wildcards)[index])

    # -- the bulk files, read at parse time once current --------------------------------

    def bulk_outputs(self, req: RunRequest) -> list[BulkOutput]:
        """The checkpoints' files (tasks.json, plans.json, run_info.json) with what their rules
        record for them now."""
        run, w = self.inv.run_path(req), self.inv.wildcards(req)
        return [
            BulkOutput(Path(layout.file_in(run, s, o.name)), s.name, self.values(s, w),
                       tuple(Path(layout.file_in(run, source, name)) for _, source, name in s.inputs))
            for s in CHECKPOINTS for o in s.outputs
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

    def param(self, s: Stage) -> Callable:
        """The param of attempt stage ``s``, as a param function of Snakemake's."""
        return engine.signature_once(lambda wildcards: self.of(wildcards)[s.name])

    def of(self, w) -> dict[str, str]:
        """The params of one attempt's stages, by stage."""
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
                    f"target, or {layout.file_in(self.inv.run_path(req), SUMMARY_STAGES[0])}) rather than single "
                    f"attempt files."
                ) from None
            # a shard's inner run needs its slice only: the rest of plans.json is never read (plan_index)
            attempts = None if self.inv.inner is None else self.targets.shard_slice(req, self.inv.inner[2])
            table = self._tables[(req.namespace, req.run_id)] = self._table(req, tasks_file, plans_file, attempts)
        return table

    def _table(self, req: RunRequest, tasks_file: str, plans_file: str, attempts=None) -> dict:
        versions = self.fingerprints.components(req)
        recompute = self.fingerprints.recompute(req)
        benchmark, harness = reading.benchmark_for(req), reading.harness_for(req)
        tasks_seen: dict[str, str] = {}
        table = {}
        plans = reading.plans_for(req, plans_file, reading.plan_keys(plans_file) if attempts is None else attempts)
        for (segment, attempt), plan in plans.items():
            task = reading.task_by_segment(tasks_file, segment)
            if segment not in tasks_seen:
                tasks_seen[segment] = reuse.task_fingerprint(task)
            params = attempt_params(req, task, plan, versions=versions, benchmark=benchmark, harness=harness,
                                    task_digest=tasks_seen[segment])
            table[(segment, attempt)] = {name: as_param({**value, **recompute}) for name, value in params.items()}
        return table

    @engine.signature_once
    def shard(self, w) -> str:
        """Everything the slice's per-attempt params are computed from, digested as it is on disk.

        It changes whenever one of those params does (and, rarely, when a plan
        field no stage reads does: the inner run then finds nothing to do). Not
        decoding 10,000 plans to compute it is most of a no-op rerun's saving; the
        digest of the slice is the plans index's (``plan_index``), so plans.json is
        not even parsed.
        """
        self.inv.begin()
        req = self.inv.request(w)
        tasks_file, plans_file = self.targets.bulk_files(req)
        index = int(w.shard)
        attempts = self.targets.shard_slice(req, index)
        forced = {"forced": self.inv.nonce} if shards.forced_rules(self.inv.snakemake) else {}
        return as_param({**shard_param(req, tasks_file, plans_file, self.inv.runtime.shard_size, index, attempts,
                                       self.fingerprints.components(req), self.fingerprints.recompute(req)),
                         **forced})


def shard_param(req: RunRequest, tasks_file: str, plans_file: str, shard_size: int, index: int,
                attempts: list[tuple[str, int]], versions: dict[str, str], recompute: dict[str, str]) -> dict[str, Any]:
    """The value of the shard rule's first param (``AttemptFingerprints.shard``) for shard ``index``, the
    slice ``attempts`` of ``shard_size``, without a ``--forcerun``: also what ``agentcompass status``
    compares with the shard's record. Its slice's digest comes from the plans index (``plan_index``)."""
    harness = reading.harness_for(req)
    return {
        "stage": SHARD_STAGE.version,
        # the stages its inner run builds: a new metrics stage reruns metrics.json, not the shards
        # (those built for the request: a stage with a ``when`` setting only with it, and then what it reads of it)
        "stages": {s.name: s.version for s in ATTEMPT_STAGES if s.built_for(req)},
        **{s.when: as_value(s.setting(req)) for s in ATTEMPT_STAGES if s.when and s.built_for(req)},
        # the scanners' versions too (the setting holds their ids and params): a new version rescans the slice
        **({"scanners": scanners_view(req)} if req.scanners else {}),
        "versions": versions,
        "model": reuse.model_view(req), "oracle": bool(harness and harness.is_oracle),
        "attempts": plan_index.shard_digest(plans_file, tasks_file, shard_size, index, attempts,
                                            lambda: reading.raw_tasks(tasks_file)),
        **recompute,
    }


class TaskFingerprints:
    """A task stage's rule param (``preflight``'s), per task: computed from the task and its first attempt's plan."""

    def __init__(self, inv, fingerprints, targets) -> None:
        self.inv = inv
        self.fingerprints = fingerprints
        self.targets = targets
        self._values: dict[tuple[str, str, str, str], str] = {}

    def param(self, s: Stage) -> Callable:
        return engine.signature_once(lambda wildcards: self.of(s, wildcards))

    def of(self, s: Stage, w) -> str:
        self.inv.begin()
        req = self.inv.request(w)
        key = (s.name, req.namespace, req.run_id, w.task)
        value = self._values.get(key)
        if value is None:
            tasks_file, plans_file = self.targets.bulk_files(req)
            value = self._values[key] = as_param({**task_param(req, s, tasks_file, plans_file, w.task),
                                                  **self.fingerprints.recompute(req)})
        return value


def task_param(req: RunRequest, s: Stage, tasks_file: str, plans_file: str, segment: str) -> dict[str, Any]:
    """Stage ``s``'s fingerprint of the task at ``segment``, from its first attempt's plan (``status``'s prediction makes the same)."""
    task = reading.task_by_segment(tasks_file, segment)
    plan = reading.plan_for(req, plans_file, segment, 1)
    view = AttemptView(req, task, plan, component_versions(req), reading.benchmark_for(req),
                       reading.harness_for(req), reuse.task_fingerprint(task))
    return s.resolve("fingerprint")(view, s)
