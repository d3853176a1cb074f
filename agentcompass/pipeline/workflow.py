"""What the Snakefile needs: the resolved requests, target lists, params and stage calls.

Config merging happens here once per parse: the layers (user config, project
``configs/config.yaml``, each ``--configfile``, then ``--config``) are read
again from their files so every error names the file and field it came from.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import json
import os
import sys
import time
import traceback
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import yaml

import agentcompass
from agentcompass.runtime.config import ConfigError, load_run_config
from agentcompass.runtime.model_client import endpoint_resource
from agentcompass.runtime.models import Orchestration, RunRequest
from agentcompass.runtime.orchestration import resolve_orchestration
from agentcompass.runtime.registry import ENVIRONMENTS, RECIPES
from agentcompass.jsonio import read_json
from agentcompass.paths import run_dir, task_segment
from agentcompass.secrets import scrub

from . import engine, provenance, reuse, shards, stages
from .engine import IncompleteCheckpointException, WorkflowError
from .bulk import BulkOutput, settled
from .files import ShardRecord, write_file

# Bump a stage's version when its behaviour changes: Snakemake then reruns it.
STAGE_VERSIONS = {
    "tasks": "1", "plans": "1", "prepare": "1", "run": "1", "evaluate": "1", "metrics": "1", "shard": "1",
}
ATTEMPT_FILES = ("plan.json", "prepared.json", "output.json", "result.json")


def _param(value: Any) -> str:
    """A rule param as canonical JSON: Snakemake compares params by their text."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def command_line_overrides(workflow) -> dict[str, Any]:
    """The ``--config key=value`` overrides, with YAML types.

    Snakemake parses nested ``--config`` values as strings only; the raw
    ``key=value`` arguments are read again so ``attempts: 2`` stays an integer.
    """
    raw = engine.config_args(workflow)
    if isinstance(raw, dict):
        return raw
    overrides: dict[str, Any] = {}
    for entry in raw:
        key, _, value = entry.partition("=")
        try:
            overrides[key] = yaml.safe_load(value) if value != "" else None
        except yaml.YAMLError:
            overrides[key] = value
    return overrides


class EvaluationWorkflow:
    """The resolved orchestration, seen from the Snakefile."""

    def __init__(self, orchestration: Orchestration) -> None:
        self.orchestration = orchestration
        self.results_dir = orchestration.runtime.results_dir
        self.by_key: dict[tuple[str, str], RunRequest] = {
            (run.request.namespace, run.request.run_id): run.request for run in orchestration.runs
        }
        self._nonce = shards.invocation(f"{time.time_ns()}")
        self._param_tables: dict[tuple[str, str], dict] = {}
        self._settled: dict[tuple[str, str], bool] = {}
        self._bulk_files: dict[tuple[str, str], tuple[str, str]] = {}
        self._sources: dict[tuple[str, str], str | None] = {}
        self._attempts: dict[tuple[str, str], list[tuple[str, int]]] = {}
        self._roots: dict[tuple[str, str], str] = {}
        # set when this Snakemake is a shard's inner run: it builds that slice only
        self.inner = shards.inner_shard()
        self.checkpoints = None
        self.snakemake = None

    # -- loading ---------------------------------------------------------------

    @classmethod
    def from_snakemake(cls, workflow) -> "EvaluationWorkflow":
        """Load and validate the config of a Snakemake run; exit with a clear error if bad."""
        try:
            config = load_run_config(
                engine.config_files(workflow),
                command_line_overrides(workflow),
                project_fallback=Path(workflow.basedir) / "configs" / "config.yaml",
            )
            return cls(resolve_orchestration(config))
        except ConfigError as exc:
            print(f"agentcompass: invalid run config: {exc}", file=sys.stderr)
            # Raising inside the Snakefile stops Snakemake before any job or file exists.
            raise SystemExit(1) from None

    def bind(self, checkpoints, workflow=None) -> None:
        """Snakemake's checkpoints, and its workflow to read its records (Decision 4)."""
        self.checkpoints = checkpoints
        self.snakemake = workflow

    def start_progress(self) -> None:
        from agentcompass import progress

        progress.start(self)

    def stop_progress(self) -> None:
        from agentcompass import progress

        progress.stop()

    @staticmethod
    def freeze_heap() -> None:
        """Keep the garbage collector off every object alive now (``gc.freeze``).

        Called once the Snakefile is parsed (modules, config, rules: they live
        until exit) and when the run is over. Python's finalization otherwise
        collects over the whole heap again and again as it tears modules down:
        0.8 s at the end of a run of 20 attempts, and of every shard's inner
        run. A process that goes on after Snakemake (``sdk.run_snakemake``)
        unfreezes it.
        """
        gc.freeze()

    def finish(self) -> None:
        """The run is over: stop the progress line, and what would hold the exit
        (the scheduler's re-selection timers, ``engine.cancel_scheduler_timers``)."""
        self.stop_progress()
        engine.cancel_scheduler_timers()
        self.freeze_heap()

    # -- paths -----------------------------------------------------------------

    def request(self, w) -> RunRequest:
        return self.by_key[(w.ns, w.run_id)]

    def run_path(self, req: RunRequest) -> Path:
        return run_dir(self.results_dir, req.namespace, req.run_id)

    def _w(self, req: RunRequest) -> SimpleNamespace:
        return SimpleNamespace(ns=req.namespace, run_id=req.run_id)

    def bulk_outputs(self, req: RunRequest) -> list[BulkOutput]:
        """tasks.json, plans.json and run_info.json with what their rules record for them now."""
        base, w = self.run_path(req), self._w(req)
        plans_params = (self.plans_param(w), self.run_info_param(w))
        return [
            BulkOutput(base / "tasks.json", "tasks", (self.tasks_param(w),)),
            BulkOutput(base / "plans.json", "plans", plans_params, (base / "tasks.json",)),
            BulkOutput(base / "run_info.json", "plans", plans_params, (base / "tasks.json",)),
        ]

    def is_settled(self, req: RunRequest) -> bool:
        """Whether this request's task list and plans are read at parse time (Decision 4)."""
        key = (req.namespace, req.run_id)
        if key not in self._settled:
            self._settled[key] = settled(self.snakemake, self.bulk_outputs(req))
        return self._settled[key]

    def bulk_files(self, req: RunRequest) -> tuple[str, str]:
        """Paths of tasks.json and plans.json once they are current.

        Until then they come from the checkpoints, which raise (and so make
        Snakemake wait for them) while they still have to be written. Once
        known, they stay so for the invocation: a checkpoint that completed
        does not run again in it. Every attempt job asks, so this is on the hot path.
        """
        key = (req.namespace, req.run_id)
        files = self._bulk_files.get(key)
        if files is None:
            if self.is_settled(req):
                base = self.run_path(req)
                files = str(base / "tasks.json"), str(base / "plans.json")
            else:
                files = (
                    self.checkpoints.tasks.get(ns=req.namespace, run_id=req.run_id).output[0],
                    self.checkpoints.plans.get(ns=req.namespace, run_id=req.run_id).output[0],
                )
            self._bulk_files[key] = files
        return files

    def attempt_paths(self, req: RunRequest) -> list[tuple[str, int]]:
        """(task segment, attempt) of every attempt, once tasks.json and plans.json are settled."""
        key = (req.namespace, req.run_id)
        paths = self._attempts.get(key)
        if paths is None:
            tasks_file, _ = self.bulk_files(req)  # raises until the checkpoints are done
            paths = self._attempts[key] = [
                (segment, attempt)
                for segment in stages.task_segments(tasks_file)
                for attempt in range(1, req.execution.attempts + 1)
            ]
        return paths

    def attempt_dir(self, req: RunRequest, segment: str, attempt: int) -> str:
        # plain strings: tens of thousands of paths per parse, and pathlib costs 10x more
        return f"{self._attempts_root(req)}/{segment}/{attempt}"

    def _attempts_root(self, req: RunRequest) -> str:
        key = (req.namespace, req.run_id)
        root = self._roots.get(key)
        if root is None:
            root = self._roots[key] = str(self.run_path(req) / "attempts")
        return root

    def _attempt_targets(self, req: RunRequest, attempts) -> list[str]:
        return [f"{self.attempt_dir(req, s, a)}/{name}" for s, a in attempts for name in ATTEMPT_FILES]

    def request_targets(self, req: RunRequest) -> list[str]:
        if self.inner is not None:  # a shard's inner run: its slice's attempt files, nothing else
            ns, run_id, index = self.inner
            if (req.namespace, req.run_id) != (ns, run_id):
                return []
            if not self.is_settled(req):
                raise WorkflowError(
                    f"shard {index} of request {req.metadata.request_name!r} started while its tasks.json "
                    f"or plans.json still had to be rebuilt. Fix: run the whole request, not the shard alone."
                )
            return self._attempt_targets(req, self.shard_slice(req, index))
        base = self.run_path(req)
        # Settled bulk files are left out: naming a checkpoint's output would make
        # Snakemake re-evaluate everything depending on it, for files it will not rebuild.
        bulk = () if self.is_settled(req) else ("tasks.json", "plans.json", "run_info.json")
        targets = [str(base / name) for name in ("request.json", *bulk, "metrics.json")]
        count = self.shard_count(req)
        if count:
            return targets + [str(self.shard_file(req, k)) for k in range(count)]
        return targets + self._attempt_targets(req, self.attempt_paths(req))

    @engine.signature_once
    def all_targets(self, wildcards=None) -> list[str]:
        return [t for run in self.orchestration.runs for t in self.request_targets(run.request)]

    def results_of(self, req: RunRequest) -> list[str]:
        return [f"{self.attempt_dir(req, s, a)}/result.json" for s, a in self.attempt_paths(req)]

    @engine.signature_once
    def metrics_inputs(self, w) -> list[str]:
        """Every result.json of the request, or, for a sharded one, the shard records standing for them."""
        req = self.request(w)
        count = self.shard_count(req)
        if count:
            return [str(self.shard_file(req, k)) for k in range(count)]
        return self.results_of(req)

    # -- shards: large requests built in slices (agentcompass.pipeline.shards) ----------

    def shard_count(self, req: RunRequest) -> int:
        """How many shard jobs build this request: 0 when it is built attempt by attempt.

        Locally a request of at most ``shard_size`` attempts is built attempt by
        attempt. On a cluster (an executor that submits jobs) a job costs seconds
        to start, so every request is built in shards: one cluster job per
        ``shard_size`` attempts, or fewer.
        """
        size = self.orchestration.runtime.shard_size
        if self.inner is not None or not size:
            return 0
        total = len(self.attempt_paths(req))
        if total <= size and not self.on_cluster():
            return 0
        return -(-total // size)

    def on_cluster(self) -> bool:
        """Whether this Snakemake submits its jobs to a cluster (``--executor slurm``, say)."""
        return engine.on_cluster(self.snakemake)

    def shard_slice(self, req: RunRequest, index: int) -> list[tuple[str, int]]:
        size = self.orchestration.runtime.shard_size
        return self.attempt_paths(req)[index * size:(index + 1) * size]

    def shard_file(self, req: RunRequest, index: int) -> Path:
        return self.run_path(req) / "shards" / str(index) / "shard.json"

    @engine.signature_once
    def shard_inputs(self, w) -> list[str]:
        """The slice's files named by --forcerun (``agentcompass retry``), which the
        outer run builds first; none otherwise. The attempt folders are not inputs:
        Snakemake measures every input of every waiting job on each scheduling pass,
        and 10,000 of them cost the outer run minutes. ``shard_generation`` stands for them."""
        req = self.request(w)
        attempts = self.shard_slice(req, int(w.shard))
        return shards.forced_files(self.snakemake, lambda: self._attempt_targets(req, attempts))

    @engine.signature_once
    def shard_generation(self, w) -> int:
        """The generation the shard was last built for, plus one when a file of its
        slice changed since: an attempt folder missing or newer than shard.json (a
        file deleted or replaced in it; every file here is written by rename).

        The shard job holds the generation it ran with, so after a rebuild the
        next run finds the shard current again.
        """
        req = self.request(w)
        index = int(w.shard)
        attempts = self.shard_slice(req, index)  # raises until tasks and plans are settled
        return shards.generation(str(self.shard_file(req, index)), self._generation_file(req, index),
                                 (self.attempt_dir(req, s, a) for s, a in attempts))

    def _generation_file(self, req: RunRequest, index: int) -> str:
        """Beside shard.json, and not an output of the shard job (``shards.generation``)."""
        return str(self.shard_file(req, index).parent / "generation")

    @engine.signature_once
    def shard_param(self, w) -> str:
        """Everything the slice's per-attempt params are computed from, digested as it is on disk.

        It changes whenever one of those params does (and, rarely, when a plan
        field no stage reads does: the inner run then finds nothing to do). Not
        decoding 10,000 plans to compute it is most of a no-op rerun's saving.
        """
        req = self.request(w)
        index = int(w.shard)
        tasks_file, plans_file = self.bulk_files(req)
        tasks, plans = stages.raw_tasks(tasks_file), stages.raw_plans(plans_file)
        attempts = self.shard_slice(req, index)
        harness = stages.harness_for(req)
        forced = {"forced": self._nonce} if shards.forced_rules(self.snakemake) else {}
        return _param({
            "stage": STAGE_VERSIONS["shard"], "stages": STAGE_VERSIONS, "versions": self._components(req),
            "model": req.model.to_dict(), "oracle": bool(harness and harness.is_oracle),
            "attempts": reuse.digest([[tasks[s], plans[(s, a)]] for s, a in attempts]),
            **self._recompute(req), **forced,
        })

    def shard_threads(self) -> int:
        """Threads of one shard job: as many shards run at once as there are CPUs,
        and their inner runs share this run's --cores between them."""
        cores = engine.cores(self.snakemake) if self.snakemake else None
        if not cores:
            return 1
        return max(1, int(cores) // max(1, os.cpu_count() or 1))

    def shard_endpoint_resources(self) -> dict[str, Any]:
        """A shard claims of its own endpoint's resource what its inner run may use at once:
        its threads, or the whole cap when that is smaller. The threads are the job's own,
        after a profile's ``set-threads`` (a cluster profile's usual way to size a shard)."""
        return {name: engine.signature_once(functools.partial(self._shard_share, name)) for name in self._endpoint_names()}

    def _shard_share(self, name: str, wildcards, threads) -> int:
        if not self._endpoint_share(name, wildcards):
            return 0
        cap = engine.global_resource(self.snakemake, name) if self.snakemake else None
        return min(threads, int(cap)) if cap else threads

    def run_shard(self, w, threads: int, resources, params, output, log) -> None:
        """Build one slice with an inner Snakemake; record what it left in shard.json."""
        req = self.request(w)
        index = int(w.shard)
        started = time.monotonic()
        capped = {
            name: int(getattr(resources, name))
            for name in self._endpoint_names()
            if engine.global_resource(self.snakemake, name) is not None
        }
        attempts = self.shard_slice(req, index)
        argv = shards.inner_argv(self.snakemake, threads, capped, shards.forced_rules(self.snakemake),
                                 self._attempt_targets(req, attempts))
        # on a cluster this job is one SLURM job: its inner run records that job in every output.json
        where = provenance.here()
        env = shards.inner_env(req.namespace, req.run_id, index, self._nonce)
        if where["slurm_job_id"]:
            env[provenance.JOB_ID_ENV] = where["slurm_job_id"]
        code = shards.run_inner(argv, env, Path(log[0]))
        if code != 0:
            raise WorkflowError(
                f"shard {index} of request {req.metadata.request_name!r}: its inner Snakemake exited with "
                f"{code}; the jobs that failed are named in {log[0]}. Finished attempts are kept: "
                f"run again to retry the rest."
            )
        counts: dict[str, int] = {}
        for segment, attempt in attempts:
            result = read_json(f"{self.attempt_dir(req, segment, attempt)}/result.json")
            counts[result["status"]] = counts.get(result["status"], 0) + 1
        first, last = attempts[0], attempts[-1]
        write_file("shard", output[0], ShardRecord(
            request_name=req.metadata.request_name, shard=index, attempts=len(attempts),
            first=f"{first[0]}/{first[1]}", last=f"{last[0]}/{last[1]}", counts=counts,
            host=where["host"], seconds=round(time.monotonic() - started, 3), slurm_job_id=where["slurm_job_id"],
        ))
        shards.hold(self._generation_file(req, index), int(params.generation))

    # -- params: exactly what each stage depends on ------------------------------

    def _components(self, req: RunRequest) -> dict[str, str]:
        harness = stages.harness_for(req)
        return {
            "agentcompass": agentcompass.__version__,
            "benchmark": stages.benchmark_for(req).version,
            "harness": harness.version if harness else "none",
            "environment": ENVIRONMENTS.get(req.environment.id).version,
        }

    def _recompute(self, req: RunRequest) -> dict[str, str]:
        # reuse off: every param of the request changes with each invocation
        return {} if req.runtime.reuse else {"recompute": self._nonce}

    def _attempt_params(self, w) -> dict[str, str]:
        """The prepare, run and evaluate params of one attempt.

        They are computed for every attempt of the request at once, when its
        tasks.json and plans.json are settled: Snakemake asks for them once per
        job, and at 10,000 attempts one pass is much cheaper than 30,000.
        """
        return self._table(self.request(w))[(w.task, int(w.attempt))]

    def _table(self, req: RunRequest) -> dict:
        table = self._param_tables.get((req.namespace, req.run_id))
        if table is None:
            try:
                tasks_file, plans_file = self.bulk_files(req)
            except IncompleteCheckpointException:
                raise WorkflowError(
                    f"request {req.metadata.request_name!r}: its tasks.json or plans.json must be "
                    f"(re)built before its attempt files. Fix: run the whole request (the default "
                    f"target, or {self.run_path(req) / 'metrics.json'}) rather than single attempt files."
                ) from None
            # a shard's inner run needs its slice only: the rest is never decoded
            attempts = None if self.inner is None else self.shard_slice(req, self.inner[2])
            table = self._param_tables[(req.namespace, req.run_id)] = self._param_table(
                req, tasks_file, plans_file, attempts)
        return table

    def _param_table(self, req: RunRequest, tasks_file: str, plans_file: str, attempts=None) -> dict:
        c = self._components(req)
        recompute = self._recompute(req)
        benchmark = stages.benchmark_for(req)
        harness = stages.harness_for(req)
        model = req.model.to_dict()
        fingerprints: dict[str, str] = {}
        table = {}
        for segment, attempt in stages.raw_plans(plans_file) if attempts is None else attempts:
            plan = stages.plan_for(req, plans_file, segment, attempt)
            task = stages.task_by_segment(tasks_file, segment)
            if segment not in fingerprints:
                fingerprints[segment] = reuse.task_fingerprint(task)
            run = {
                "stage": STAGE_VERSIONS["run"], "model": model,
                "harness": c["harness"], "environment": c["environment"],
                "plan": reuse.digest(reuse.plan_view(plan, "run")),
                **recompute,
            }
            if harness is None:  # a harness-free Benchmark runs its own code on the task
                run["benchmark"] = c["benchmark"]
                run["task"] = fingerprints[segment]
            elif harness.is_oracle:  # the oracle's answer is the reference, nothing else of the plan
                run["reference"] = reuse.digest(benchmark.reference_solution(task, plan.benchmark_plan))
            table[(segment, attempt)] = {
                "prepare": _param({
                    "stage": STAGE_VERSIONS["prepare"], "benchmark": c["benchmark"], "environment": c["environment"],
                    "task": fingerprints[segment], "plan": reuse.digest(reuse.plan_view(plan, "prepare")),
                    **recompute,
                }),
                "run": _param(run),
                "evaluate": _param({
                    "stage": STAGE_VERSIONS["evaluate"], "benchmark": c["benchmark"], "environment": c["environment"],
                    "task": fingerprints[segment], "plan": reuse.digest(reuse.plan_view(plan, "evaluate")),
                    **recompute,
                }),
            }
        return table

    @engine.signature_once
    def request_param(self, w) -> str:
        return _param(reuse.request_record(self.request(w)))

    @engine.signature_once
    def tasks_param(self, w) -> str:
        req = self.request(w)
        benchmark = stages.benchmark_for(req)
        return _param({
            "stage": STAGE_VERSIONS["tasks"],
            "benchmark": req.benchmark.id,
            "params": reuse.benchmark_params_for(benchmark, req.benchmark.params, ("tasks",)),
            "version": benchmark.version,
            **self._source(req),
            **self._recompute(req),
        })

    def _source(self, req: RunRequest) -> dict[str, str]:
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
    def plans_param(self, w) -> str:
        req = self.request(w)
        execution = req.execution.to_dict()
        execution.pop("task_concurrency")  # how fast, not what: never a reason to rerun
        execution.pop("analyzers")
        return _param({
            "stage": STAGE_VERSIONS["plans"],
            "benchmark": req.benchmark.to_dict(),
            "harness": req.harness.to_dict(),
            "environment": req.environment.to_dict(),
            "execution": execution,
            "recipes": {rid: cls.version for rid, cls in RECIPES.items()},
            "recipe_dirs": req.metadata.recipe_dirs,
            "versions": self._components(req),
            **self._source(req),
            **self._recompute(req),
        })

    @engine.signature_once
    def run_info_param(self, w) -> str:
        req = self.request(w)
        return _param({"model": req.model.id, "versions": self._components(req)})

    @engine.signature_once
    def prepare_param(self, w) -> str:
        return self._attempt_params(w)["prepare"]

    @engine.signature_once
    def run_param(self, w) -> str:
        # The Model as configured: api_key is its ${VAR} reference, never the key.
        return self._attempt_params(w)["run"]

    @engine.signature_once
    def evaluate_param(self, w) -> str:
        return self._attempt_params(w)["evaluate"]

    @engine.signature_once
    def metrics_param(self, w) -> str:
        req = self.request(w)
        benchmark = stages.benchmark_for(req)
        return _param({
            "stage": STAGE_VERSIONS["metrics"], "benchmark": benchmark.version,
            "params": reuse.benchmark_params_for(benchmark, req.benchmark.params, ("metrics",)),
            "analyzers": req.execution.analyzers,
            **self._recompute(req),
        })

    # -- resources ----------------------------------------------------------------

    def model_endpoint_resources(self) -> dict[str, Any]:
        """One Snakemake resource per model endpoint of the run; a run job takes 1 of its own
        endpoint's and 0 of the others, so a profile's ``resources:`` caps the calls in flight."""
        return {name: engine.signature_once(functools.partial(self._endpoint_share, name)) for name in self._endpoint_names()}

    def _endpoint_names(self) -> list[str]:
        """The resource name of every model endpoint the run's requests call."""
        return sorted({endpoint_resource(r.model.base_url) for r in self.by_key.values() if _calls_model(r)})

    def _endpoint_share(self, name: str, wildcards) -> int:
        req = self.request(wildcards)
        return int(_calls_model(req) and endpoint_resource(req.model.base_url) == name)

    # -- stage calls: each logs to its rule's log file --------------------------------

    def write_request(self, w, output, log) -> None:
        with stage_log(log, "request", w, self.request(w)):
            stages.write_request(self.request(w), output[0])

    def write_tasks(self, w, output, log) -> None:
        with stage_log(log, "tasks", w, self.request(w)):
            stages.write_tasks(self.request(w), output[0])

    def write_plans(self, w, input, output, log) -> None:
        """plans.json and, from it, run_info.json: one job, so run_info.json never lags its plans."""
        with stage_log(log, "plans", w, self.request(w)):
            req = self.request(w)
            stages.write_plans(req, input.tasks, output.plans)
            stages.run_info(req, output.plans, output.run_info)
            # every attempt's folder: a shard of a large request takes its slice's folders as input
            for task in stages.read_tasks(input.tasks):
                for attempt in range(1, req.execution.attempts + 1):
                    os.makedirs(self.attempt_dir(req, task_segment(task.task_id), attempt), exist_ok=True)

    def _stage_inputs(self, w) -> tuple[RunRequest, str, str]:
        # A job runs after its request's tasks.json and plans.json are written (the DAG
        # orders it so), and reads its own slice of them.
        req = self.request(w)
        base = self.run_path(req)
        return req, str(base / "tasks.json"), str(base / "plans.json")

    def prepare(self, w, input, output, log) -> None:
        req, tasks, plans = self._stage_inputs(w)
        with stage_log(log, "prepare", w, req):
            stages.prepare(req, tasks, plans, w.task, int(w.attempt), output[0])

    def run(self, w, input, output, log) -> None:
        req, tasks, plans = self._stage_inputs(w)
        with stage_log(log, "run", w, req):
            stages.run(req, tasks, plans, input.prepared, w.task, int(w.attempt), output[0])

    def evaluate(self, w, input, output, log) -> None:
        req, tasks, plans = self._stage_inputs(w)
        with stage_log(log, "evaluate", w, req):
            stages.evaluate(
                req, tasks, plans, input.prepared, input.output,
                w.task, int(w.attempt), output.result, output.plan,
            )

    def metrics(self, w, input, output, log) -> None:
        req = self.request(w)
        with stage_log(log, "metrics", w, req):
            stages.metrics(req, self.results_of(req), output[0])


def _calls_model(req: RunRequest) -> bool:
    return bool(req.model.base_url) and not req.model.is_none


@contextlib.contextmanager
def stage_log(log, stage: str, w, req: RunRequest):
    """Write a failing stage's traceback, scrubbed of the key, to its rule's log file.

    A stage that succeeds writes no log: its timings are in the files it writes,
    and Snakemake removes the log of an earlier failure before it reruns the job.
    """
    try:
        yield
    except BaseException:
        path = Path(log[0])
        path.parent.mkdir(parents=True, exist_ok=True)
        where = " ".join(f"{k}={v}" for k, v in dict(w.items()).items())
        path.write_text(f"{stage} {where}: failed\n" + scrub(traceback.format_exc(), [req.model.api_key]))
        raise
