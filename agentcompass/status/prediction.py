"""Which jobs the next run would run, and why: the prediction behind ``agentcompass status``.

It compares the params the rules would compute now with those Snakemake
recorded for each file (read through Snakemake's own code, ``engine.Records``),
so the answer is the one the next run acts on. The stages are judged scope by
scope, in the order of the scope rows (``stages.SCOPE_ROWS``): each stage of a
row once per instance of it (the request; each task; each attempt), with the
files and params its rule has there. Of a sharded request, the same comparison
of each shard's record comes first: the attempts of a shard that does not rerun
are not judged, and its record counts them.
"""

from __future__ import annotations

import json
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Iterator, Mapping, cast

from agentcompass import layout, results
from agentcompass.pipeline import engine, fingerprints, reading, reuse, shards
from agentcompass.pipeline.jobs import RequestJob
from agentcompass.runtime.models import Orchestration, RunRequest
from agentcompass.stages import SCOPE_ROWS, Scope, Stage
from agentcompass.stages import stage as stage_of
from agentcompass.status.counts import FailedAttempt, status_counts

# the wildcards of an attempt's folder (a scope row's ``wildcards``): its task's path segment and its number
TASK_WILDCARD, ATTEMPT_WILDCARD = "task", "attempt"
# the attempt whose plan a stage built once per task reads (``fingerprints.task_param``)
TASK_PLAN_ATTEMPT = 1
# an instance of a scope: the values of its row's wildcards, in their order (() for the request's)
Instance = tuple


@dataclass
class PendingJob:
    rule: str
    outputs: list[str]
    reason: str


@dataclass
class RequestStatus:
    name: str
    path: Path
    counts: Counter = field(default_factory=Counter)
    pending: list[PendingJob] = field(default_factory=list)
    errors: list[FailedAttempt] = field(default_factory=list)
    # why the rest could not be predicted (the tasks cannot be loaded now), if so
    problem: str | None = None
    # what the next run would spend, as agentcompass.forecast says it (lines shown after the counts)
    forecast: list[str] = field(default_factory=list)


def predict(orchestration: Orchestration, workdir: Path) -> list[RequestStatus]:
    """Which files the next run rebuilds and why, from the params the rules would compute.

    A dry run of Snakemake cannot look past a checkpoint that would rerun; this
    computes each stage's params with the functions the rules' params come
    from (``agentcompass.pipeline.fingerprints``), stage by stage in the stage
    table's order, and builds the would-be files of a checkpoint that would
    rerun (the task list, the plans) in a scratch directory for the stages
    after it to read: so a prompt change shows up as "prepared.json would
    rerun" before anything runs.
    """
    workdir = workdir.absolute()
    records = engine.Records.open(workdir)
    # with reuse off, every param holds a value new with each invocation: the next run's is not this one
    nonce = f"status-{time.time_ns()}"
    statuses = []
    with tempfile.TemporaryDirectory(prefix="agentcompass-status-") as scratch:
        for index, run in enumerate(orchestration.runs):
            req = run.request
            # Each output named as the workflow names it (the rules' f"{RESULTS}/{layout.RUN_PATTERN}/...",
            # results_dir as configured): Snakemake keys its records by that text, relative or absolute.
            prefix = f"{orchestration.runtime.results_dir}/" + layout.RUN_PATTERN.format(
                ns=req.namespace, run_id=req.run_id)
            shard_size = orchestration.runtime.shard_size
            counts, errors = status_counts(workdir / prefix, req, shard_size)
            state = RequestStatus(run.name, Path(prefix), counts, errors=errors)
            statuses.append(state)
            Prediction(state, req, prefix, workdir, records, nonce, Path(scratch) / str(index), shard_size).run()
    return statuses


def _rows_of(*, instances: bool) -> tuple[tuple[Scope, tuple[Stage, ...]], ...]:
    """The scope rows status judges, with their stages: those built once per request before the attempts
    (``instances`` False: their files say what the instances are), or the rest in their order. A shard's
    record is not judged as a stage: its slice's attempts are (``Prediction._current_shards``)."""
    rows = []
    for row in SCOPE_ROWS:
        if row.slices_attempts or (row.per_request and not row.after_attempts) == instances:
            continue
        rows.append((row, row.stages))
    return tuple(rows)


BEFORE_INSTANCES = _rows_of(instances=False)
AFTER_REQUEST = _rows_of(instances=True)


def stage_files(prefix: str, s: Stage, names: tuple[str, ...], instance: Instance) -> list[str]:
    """The files ``names`` of stage ``s`` of the request at ``prefix``, in the folder of its scope's
    ``instance`` (the scope row's folder pattern, its wildcards filled)."""
    wildcards = dict(zip(s.scope_row.wildcards, instance))
    return [f"{prefix}/{pattern.format_map(wildcards)}" for pattern in _patterns(s.name, names)]


@cache
def _patterns(name: str, names: tuple[str, ...]) -> tuple[str, ...]:
    """The paths of stage ``name``'s files ``names`` below the run folder, their scope's wildcards unfilled."""
    s = stage_of(name)
    folder = s.scope_row.folder_of(s)
    return tuple(f"{folder}/{s.output(output).file}" if folder else s.output(output).file for output in names)


@cache
def _projection(of: str, upstream: str) -> tuple[int, ...] | None:
    """Where the wildcards of stage ``upstream``'s scope are in those of ``of``'s: the instance of ``upstream``
    an instance of ``of`` reads; None when ``upstream`` is built per instance ``of`` is built over (it reads
    every instance's)."""
    mine, theirs = stage_of(of).scope_row.wildcards, stage_of(upstream).scope_row.wildcards
    if not set(theirs) <= set(mine):
        return None
    return tuple(mine.index(w) for w in theirs)


@cache
def _judged(name: str) -> tuple[str, ...]:
    """The outputs of stage ``name`` in the order they are judged: those a person names first (index.html
    before the report's charts), so the file a pending job shows is the one ``Stage.shown`` names."""
    s = stage_of(name)
    shown = s.shown.split(" and ")
    return tuple(o.name for o in sorted(s.outputs, key=lambda o: o.file not in shown))


class Prediction:
    """What the next run rebuilds of one request, added to its ``RequestStatus`` (``run``)."""

    def __init__(self, state: RequestStatus, req: RunRequest, prefix: str, workdir: Path,
                 records: engine.Records | None, nonce: str, scratch: Path, shard_size: int) -> None:
        self.state, self.req, self.prefix, self.workdir = state, req, prefix, workdir
        self.records, self.nonce, self.scratch, self.shard_size = records, nonce, scratch, shard_size
        self.marked: set[str] = set()  # the files Snakemake marked incomplete (a run was killed)
        # the file each output name of the workflow is read from now: a checkpoint that would rerun is
        # built again in ``scratch``
        self.now: dict[str, str] = {}
        # the instances of each stage of which a file reruns
        self.rebuilt: dict[str, set[Instance]] = {}
        # the params of each stage built per task or attempt, by instance (computed before any is judged)
        self.params: dict[str, dict[Instance, str]] = {}
        self.tasks_file = self.plans_file = ""
        self.extra = fingerprints.Extra(cast(dict, _Source(req)), fingerprints.recompute_param(req, nonce))

    def run(self) -> None:
        """Judge the request's stages scope by scope; if its tasks cannot be loaded and planned, say so in
        ``state.problem`` and predict no further."""
        records = self.records
        if records:
            self.marked = records.incomplete(f for row, stages in (*BEFORE_INSTANCES, *AFTER_REQUEST)
                                             if row.per_request for s in stages for f in self._files(s, ()))
        try:
            for row, stages in BEFORE_INSTANCES:
                self._judge_row(stages, [()])
            instances = self._instances()
            for row, stages in AFTER_REQUEST:
                if not row.per_request:
                    self.params.update(self._row_params(self._built(stages), instances[row.wildcards]))
        except Exception as exc:  # the run would fail at the same place: say so, and predict no further
            self.state.problem = f"its tasks cannot be loaded and planned now: {type(exc).__name__}: {exc}"
            return
        if records and records.any_incomplete():
            self.marked |= records.incomplete(f for row, stages in AFTER_REQUEST if not row.per_request
                                              for instance in instances[row.wildcards]
                                              for s in self._built(stages) for f in self._files(s, instance))
        for row, stages in AFTER_REQUEST:
            self._judge_row(stages, instances[row.wildcards])

    def _built(self, stages: tuple[Stage, ...]) -> list[Stage]:
        return [s for s in stages if s.built_for(self.req)]

    def _files(self, s: Stage, instance: Instance) -> list[str]:
        return stage_files(self.prefix, s, tuple(o.name for o in s.outputs), instance)

    def _judge_row(self, stages: tuple[Stage, ...], instances: list[Instance]) -> None:
        """Judge each stage of a scope built for the request, in each of ``instances``; a checkpoint that
        reruns is built in the scratch folder."""
        built = self._built(stages)
        for instance in instances:
            for s in built:
                if self.judge(s, instance, self._params(s, instance)) and s.checkpoint:
                    # the stages after it read its files: build them as the next run would
                    _build_in(s, self.req, self.scratch, {
                        name: self.read(layout.file_in(self.prefix, source_stage, output))
                        for name, source_stage, output in s.inputs}, self.prefix, self.now)

    def _params(self, s: Stage, instance: Instance) -> list[str]:
        """The params of ``s``'s job of ``instance``: of a stage built once per request, computed from the
        request now (``fingerprints.request_params``); of one built per task or attempt, those computed
        before any was judged (``_row_params``)."""
        if s.scope_row.per_request:
            return [fingerprints.as_param(v) for v in fingerprints.request_params(s, self.req, self.extra)]
        return [self.params[s.name][instance]]

    def judge(self, s: Stage, instance: Instance, params: list[str]) -> bool:
        """Whether the job of ``s`` of ``instance`` reruns (and why, added to ``state.pending``)."""
        records = self.records
        for out in stage_files(self.prefix, s, _judged(s.name), instance):
            if not (self.workdir / out).exists():
                reason = "missing"
            elif out in self.marked:
                reason = "incomplete (a run was killed)"
            else:
                record = records.record(out) if records else None
                if records and record is not None and record.params is not None \
                        and record.params != records.params_of(params):
                    reason = _changed_keys(record.param_values(), params)
                elif self._upstream_reruns(s, instance):
                    reason = "upstream file reruns"
                else:
                    continue
            self.state.pending.append(PendingJob(s.name, [out], reason))
            self.rebuilt.setdefault(s.name, set()).add(instance)
            return True
        return False

    def _upstream_reruns(self, s: Stage, instance: Instance) -> bool:
        """Whether a file ``s``'s job of ``instance`` is rebuilt from reruns: that of the same task or
        attempt, or of any, for a stage that reads every instance's."""
        for upstream in s.rebuilt_from():
            rebuilt = self.rebuilt.get(upstream)
            if not rebuilt:
                continue
            where = _projection(s.name, upstream)
            if where is None or tuple(instance[i] for i in where) in rebuilt:
                return True
        return False

    def read(self, out: str) -> str:
        return self.now.get(out) or str(self.workdir / out)

    def _instances(self) -> dict[tuple[str, ...], list[Instance]]:
        """The instances of each scope, by its row's wildcards: the request, every task, and the attempts
        the next run builds (those of a shard that does not rerun are not rebuilt: its inner run, which
        builds the rows ``in_shards``, does not start)."""
        req, prefix = self.req, self.prefix
        self.tasks_file, self.plans_file = self.read(layout.tasks_file(prefix)), self.read(layout.plans_file(prefix))
        segments = reading.task_segments(self.tasks_file)
        slices = results.attempt_slices(segments, req.execution.attempts, self.shard_size)
        if len(slices) > 1:  # built as shards: the attempts of a shard that does not rerun are not rebuilt
            current = self._current_shards(slices)
            slices = [part for index, part in enumerate(slices) if index not in current]
        return {(): [()], (TASK_WILDCARD,): [(segment,) for segment in segments],
                (TASK_WILDCARD, ATTEMPT_WILDCARD): [attempt for part in slices for attempt in part]}

    def _row_params(self, stages: list[Stage], instances: list[Instance]) -> dict[str, dict[Instance, str]]:
        """The params of ``stages`` (of one scope) in each of ``instances``, as the rules compute them: from
        the instance's task and plan (a task's: its first attempt's plan, as ``fingerprints.task_param``'s)."""
        if not stages:
            return {}
        req = self.req
        keys = [(instance[0], instance[1] if len(instance) > 1 else TASK_PLAN_ATTEMPT) for instance in instances]
        versions = fingerprints.component_versions(req)
        benchmark, harness = reading.benchmark_for(req), reading.harness_for(req)
        plans = reading.plans_for(req, self.plans_file, keys)  # plans.json read once, at their places
        fingerprint = [(s.name, s.resolve("fingerprint"), s) for s in stages]
        digests: dict[str, str] = {}
        table: dict[str, dict[Instance, str]] = {s.name: {} for s in stages}
        recompute = self.extra.recompute
        for instance, (segment, attempt) in zip(instances, keys):
            task = reading.task_by_segment(self.tasks_file, segment)
            if segment not in digests:
                digests[segment] = reuse.task_fingerprint(task)
            view = fingerprints.AttemptView(req, task, plans[(segment, attempt)], versions, benchmark, harness,
                                            digests[segment])
            for name, param, s in fingerprint:
                table[name][instance] = fingerprints.as_param({**param(view, s), **recompute})
        return table

    def _current_shards(self, slices: list[list[tuple[str, int]]]) -> set[int]:
        """The shards the next run does not rerun: their record (shard.json) is there, not marked incomplete,
        and holds the params the shard rule computes now (``fingerprints.shard_param`` and
        ``shards.generation``). Their inner runs do not start, so none of their attempts' files is rebuilt,
        whatever its own record says."""
        records, req, prefix = self.records, self.req, self.prefix
        if not records:
            return set()
        outputs = [layout.file_in(layout.shard_folder(prefix, index), fingerprints.SHARD_STAGE)
                   for index in range(len(slices))]
        marked = records.incomplete(outputs) if records.any_incomplete() else set()
        versions = fingerprints.component_versions(req)
        run = self.workdir / prefix
        current = set()
        for index, (out, part) in enumerate(zip(outputs, slices)):
            record = records.record(out) if out not in marked and (self.workdir / out).exists() else None
            if record is None or record.params is None:
                continue
            generation = shards.generation(layout.generation_file(run, index),
                                           (layout.attempt_folder(run, segment, attempt) for segment, attempt in part))
            depends = fingerprints.as_param(fingerprints.shard_param(
                req, self.tasks_file, self.plans_file, self.shard_size, index, part, versions, self.extra.recompute))
            if record.params == records.params_of([depends, generation]):
                current.add(index)
        return current


def _merged(params: list | None) -> dict | None:
    if params is None:
        return None
    merged: dict = {}
    for text in params:
        try:
            value = json.loads(text)
        except (json.JSONDecodeError, TypeError):
            return None
        if not isinstance(value, dict):
            return None
        merged.update(value)
    return merged


def _changed_keys(before: list | None, now: list[str]) -> str:
    old, new = _merged(before), _merged(now)
    if old is None or new is None:
        return "params changed"
    keys = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
    return f"params changed: {', '.join(keys)}"


class _Source(Mapping[str, str]):
    """The Benchmark's task files as the params hold them (``Fingerprints.source``), digested when a
    stage's params first read them: a stage before (the request's record) is judged even when they
    cannot be read."""

    def __init__(self, req: RunRequest) -> None:
        self.req = req
        self._value: dict[str, str] | None = None

    def _get(self) -> dict[str, str]:
        if self._value is None:
            source = reading.benchmark_for(self.req).source_fingerprint(self.req)
            self._value = {} if source is None else {"source": source}
        return self._value

    def __getitem__(self, key: str) -> str:
        return self._get()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._get())

    def __len__(self) -> int:
        return len(self._get())


def _build_in(s: Stage, req: RunRequest, scratch: Path, inputs: dict[str, str], prefix: str,
              now: dict[str, str]) -> None:
    """Build a checkpoint's files in ``scratch`` with its body, as its rule would, from ``inputs``."""
    scratch.mkdir(parents=True, exist_ok=True)
    outputs = {o.name: layout.file_in(scratch, s, o.name) for o in s.outputs}
    s.resolve("body")(RequestJob(req, str(scratch), inputs, outputs, None, s.name))
    for o in s.outputs:
        now[layout.file_in(prefix, s, o.name)] = outputs[o.name]
