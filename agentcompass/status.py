"""What is done, what failed, and what would rerun and why.

``agentcompass status`` reads the result files for the counts, and compares
the params the rules would compute now with those Snakemake recorded for
each file (read through Snakemake's own code, ``engine.Records``), so the
answer is the one the next run acts on. Of a sharded request, the same
comparison of each shard's record comes first: the attempts of a shard that
does not rerun are not judged, and its record counts them.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Mapping, cast

from agentcompass import layout, results
from agentcompass._util.display import visible
from agentcompass.pipeline import engine, fingerprints, preflight, reading, reuse, shards
from agentcompass.pipeline.jobs import RequestJob
from agentcompass.results import read_json
from agentcompass.runtime.models import FailureClass, Orchestration, RunRequest, TaskStatus
from agentcompass.stages import ATTEMPT, LAST_ATTEMPT_STAGE, REQUEST, SUMMARY, TASK, Stage, names, of_scope
from agentcompass.stages import stage as stage_of

# Failed attempts listed without --verbose.
SHOWN_ERRORS = 5
_CLASSES = frozenset(c.value for c in FailureClass)
# the stages status predicts, in the order their files are built (a sharded request's shard
# records are not predicted: its attempts' files are)
PREDICTED = of_scope(REQUEST, TASK, ATTEMPT, SUMMARY)
# the stage each task's attempts are prepared after (with execution.preflight)
TASK_STAGE = of_scope(TASK)[0].name


@dataclass
class PendingJob:
    rule: str
    outputs: list[str]
    reason: str


@dataclass
class FailedAttempt:
    task_id: str
    attempt: int
    status: str
    stage: str | None
    error: str
    failure_class: str | None = None  # None in result.json files of older versions


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


def rebuilt_from(s: Stage) -> tuple[str, ...]:
    """The stages whose files, when rebuilt, rebuild ``s``'s (Snakemake reruns a job whose input is
    newer): its rule's inputs; for a stage without any in the table (metrics), the stages of every
    attempt it is built from. An attempt stage is not rebuilt with the request's files it reads a
    slice of: its params say whether its slice changed."""
    if s.inputs:
        return tuple(dict.fromkeys(source for _, source, _ in s.inputs))
    if s.name == of_scope(ATTEMPT)[0].name:  # an attempt's first stage: its task's preflight, with preflight on
        return (TASK_STAGE,)
    return tuple(name for name in s.built_from if stage_of(name).scope != REQUEST)


def read_results(run_path: Path, req: RunRequest,
                 shard_size: int = 0) -> tuple[Counter, list[tuple[FailedAttempt, str]]]:
    """Attempts by the status of their result ('missing' when there is none yet), and each failed one
    with its result file.

    The slice of a sharded request whose shard record is current (it records
    that slice, and no attempt folder of it changed since: ``shards.generation``)
    and counts no failure is counted from its record: its result files are not read.
    """
    counts: Counter = Counter()
    failed = []
    tasks_file = layout.tasks_file(run_path)
    tasks = reading.raw_tasks(tasks_file) if Path(tasks_file).exists() else {}
    for index, part in enumerate(results.attempt_slices(list(tasks), req.execution.attempts, shard_size)):
        record = _current_record(run_path, index, part) if shard_size else None
        if record is not None and not any(TaskStatus(status).is_error for status in record["counts"]):
            counts.update(record["counts"])
            continue
        for segment, attempt in part:
            path = layout.result_file(layout.attempt_folder(run_path, segment, attempt))
            try:
                result = read_json(path)
            except FileNotFoundError:
                counts["missing"] += 1
                continue
            counts[result["status"]] += 1
            if TaskStatus(result["status"]).is_error:
                failed.append((FailedAttempt(tasks[segment]["task_id"], attempt, result["status"],
                                             result.get("error_stage"), str(result.get("error") or ""),
                                             result.get("failure_class")), path))
    return counts, failed


def _current_record(run_path: Path, index: int, part: list[tuple[str, int]]) -> dict | None:
    """Shard ``index``'s record, when it records the slice ``part``, counts each of its attempts, and no
    attempt folder of it changed since."""
    record = results.recorded_slice(run_path, index, part)
    counts = record.get("counts") if record is not None else None
    if not isinstance(counts, dict) or sum(counts.values()) != len(part):
        return None
    held = layout.generation_file(run_path, index)
    try:
        with open(held, "rb") as f:
            built = int(f.read().strip() or 0)
    except (OSError, ValueError):
        return None
    folders = (layout.attempt_folder(run_path, segment, attempt) for segment, attempt in part)
    return record if shards.generation(held, folders) == built else None


def status_counts(run_path: Path, req: RunRequest, shard_size: int = 0) -> tuple[Counter, list[FailedAttempt]]:
    """Attempts by the status of their result ('missing' when there is none yet), and the failed ones."""
    counts, failed = read_results(run_path, req, shard_size)
    return counts, [attempt for attempt, _ in failed]


def failed_attempt_targets(run_path: Path, req: RunRequest, shard_size: int = 0,
                           only: frozenset[FailureClass] | None = None) -> list[str]:
    """The files to force so that exactly the failed attempts rerun (of the classes ``only`` names, if given).

    A run error reruns the harness (its ``output.json``, the answer the last
    stage scores: that stage's last input); one of a task that could not be
    prepared (its image did not build: ``error_stage`` 'prepare') prepares it
    again (its ``prepared.json``); an evaluation error only the evaluation
    (``result.json``): the agent's answer is kept. A completed
    attempt, whatever its score, is never among them; nor, with ``only``, an
    attempt whose result.json names no class (one of an older version).
    """
    _, answer_stage, answer = stage_of(LAST_ATTEMPT_STAGE).inputs[-1]
    targets = []
    wanted = None if only is None else {cls.value for cls in only}
    for attempt, path in read_results(run_path, req, shard_size)[1]:
        if wanted is not None and attempt.failure_class not in wanted:
            continue
        if attempt.status == TaskStatus.EVAL_ERROR.value:
            targets.append(path)
        elif attempt.stage == "prepare":  # the stage that failed, as the rules name it
            targets.append(layout.file_in(os.path.dirname(path), "prepare"))
        else:
            targets.append(layout.file_in(os.path.dirname(path), answer_stage, answer))
    return targets


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


def _judged(s: Stage) -> list[str]:
    """The outputs of ``s`` in the order they are judged: those a person names first (index.html
    before the report's charts), so the file a pending job shows is the one ``Stage.shown`` names."""
    shown = s.shown.split(" and ")
    return [o.name for o in sorted(s.outputs, key=lambda o: o.file not in shown)]


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
            _predict_request(state, req, prefix, workdir, records, nonce, Path(scratch) / str(index), shard_size)
    return statuses


def _predict_request(state: RequestStatus, req: RunRequest, prefix: str, workdir: Path,
                     records: engine.Records | None, nonce: str, scratch: Path, shard_size: int) -> None:
    marked: set[str] = set()
    # the file each output name of the workflow is read from now: a checkpoint that would rerun is
    # built again in ``scratch``
    now: dict[str, str] = {}
    rebuilt: set[str] = set()  # the stages of which a file reruns (of any attempt, for an attempt stage)

    def judge(s: Stage, folder: str, params: list[str], attempt_rebuilt: set[str] | None = None,
              files: list[str] | None = None) -> bool:
        """Whether a job of ``s`` in ``folder`` (writing ``files``, when not its outputs there) reruns
        (and why, added to ``state.pending``)."""
        upstream = rebuilt if attempt_rebuilt is None else attempt_rebuilt
        for out in files or [layout.file_in(folder, s, name) for name in _judged(s)]:
            if not (workdir / out).exists():
                reason = "missing"
            elif out in marked:
                reason = "incomplete (a run was killed)"
            else:
                record = records.record(out) if records else None
                if records and record is not None and record.params is not None \
                        and record.params != records.params_of(params):
                    reason = _changed_keys(record.param_values(), params)
                elif any(u in upstream for u in rebuilt_from(s)):
                    reason = "upstream file reruns"
                else:
                    continue
            state.pending.append(PendingJob(s.name, [out], reason))
            return True
        return False

    def read(out: str) -> str:
        return now.get(out) or str(workdir / out)

    request_stages = of_scope(REQUEST)
    if records:
        marked = records.incomplete(f for s in of_scope(REQUEST, SUMMARY) for f in layout.files_in(prefix, s))
    try:
        extra = fingerprints.Extra(cast(dict, _Source(req)), fingerprints.recompute_param(req, nonce))
        for s in request_stages:
            params = [fingerprints.as_param(v) for v in fingerprints.request_params(s, req, extra)]
            if judge(s, prefix, params):
                rebuilt.add(s.name)
                if s.checkpoint:  # the stages after it read its files: build them as the next run would
                    _build_in(s, req, scratch, {name: read(layout.file_in(prefix, source_stage, output))
                                                for name, source_stage, output in s.inputs}, prefix, now)
        tasks_file, plans_file = read(layout.tasks_file(prefix)), read(layout.plans_file(prefix))
        slices = results.attempt_slices(reading.task_segments(tasks_file), req.execution.attempts, shard_size)
        if len(slices) > 1:  # built as shards: the attempts of a shard that does not rerun are not rebuilt
            current = _current_shards(req, prefix, workdir, records, tasks_file, plans_file, shard_size, slices,
                                      extra.recompute)
            slices = [part for index, part in enumerate(slices) if index not in current]
        params_of = _attempt_params(req, tasks_file, plans_file, extra.recompute,
                                    [attempt for part in slices for attempt in part])
        task_rebuilt: set[str] = set()  # the tasks whose preflight reruns: their attempts are prepared again
        for s in of_scope(TASK) if req.execution.preflight is not None else ():
            for segment in reading.task_segments(tasks_file):
                params = [fingerprints.as_param({**preflight.task_param(req, s, tasks_file, plans_file, segment),
                                                 **extra.recompute})]
                if judge(s, prefix, params, files=[layout.task_file(prefix, segment, s)]):
                    task_rebuilt.add(segment)
                    rebuilt.add(s.name)
    except Exception as exc:  # the run would fail at the same place: say so, and predict no further
        state.problem = f"its tasks cannot be loaded and planned now: {type(exc).__name__}: {exc}"
        return
    folders = {key: layout.attempt_folder(prefix, *key) for key in params_of}
    if records and records.any_incomplete():
        marked |= records.incomplete(f for folder in folders.values() for s in of_scope(ATTEMPT)
                                     for f in layout.files_in(folder, s))
    for key, folder in folders.items():
        attempt_rebuilt: set[str] = {TASK_STAGE} if key[0] in task_rebuilt else set()
        for s in of_scope(ATTEMPT):
            if judge(s, folder, [params_of[key][s.name]], attempt_rebuilt):
                attempt_rebuilt.add(s.name)
        rebuilt |= attempt_rebuilt - {TASK_STAGE}
    for s in of_scope(SUMMARY):
        params = [fingerprints.as_param(v) for v in fingerprints.request_params(s, req, extra)]
        if judge(s, prefix, params):
            rebuilt.add(s.name)


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


def _current_shards(req: RunRequest, prefix: str, workdir: Path, records: engine.Records | None, tasks_file: str,
                    plans_file: str, size: int, slices: list[list[tuple[str, int]]],
                    recompute: dict[str, str]) -> set[int]:
    """The shards the next run does not rerun: their record (shard.json) is there, not marked incomplete,
    and holds the params the shard rule computes now (``fingerprints.shard_param`` and ``shards.generation``).
    Their inner runs do not start, so none of their attempts' files is rebuilt, whatever its own record says."""
    if not records:
        return set()
    outputs = [layout.file_in(layout.shard_folder(prefix, index), fingerprints.SHARD_STAGE)
               for index in range(len(slices))]
    marked = records.incomplete(outputs) if records.any_incomplete() else set()
    versions = fingerprints.component_versions(req)
    run = workdir / prefix
    current = set()
    for index, (out, part) in enumerate(zip(outputs, slices)):
        record = records.record(out) if out not in marked and (workdir / out).exists() else None
        if record is None or record.params is None:
            continue
        generation = shards.generation(layout.generation_file(run, index),
                                       (layout.attempt_folder(run, segment, attempt) for segment, attempt in part))
        depends = fingerprints.as_param(
            fingerprints.shard_param(req, tasks_file, plans_file, size, index, part, versions, recompute))
        if record.params == records.params_of([depends, generation]):
            current.add(index)
    return current


def _attempt_params(req: RunRequest, tasks_file: str, plans_file: str, recompute: dict[str, str],
                    attempts: list[tuple[str, int]]) -> dict[tuple[str, int], dict[str, str]]:
    """The params of the stages of each of ``attempts`` (task segment, attempt), as the rules compute them."""
    versions = fingerprints.component_versions(req)
    benchmark, harness = reading.benchmark_for(req), reading.harness_for(req)
    digests: dict[str, str] = {}
    table = {}
    plans = reading.plans_for(req, plans_file, attempts)  # plans.json read once, at their places
    for segment, attempt in attempts:
        task = reading.task_by_segment(tasks_file, segment)
        if segment not in digests:
            digests[segment] = reuse.task_fingerprint(task)
        plan = plans[(segment, attempt)]
        values = fingerprints.attempt_params(req, task, plan, versions=versions, benchmark=benchmark,
                                             harness=harness, task_digest=digests[segment])
        table[(segment, attempt)] = {name: fingerprints.as_param({**value, **recompute})
                                     for name, value in values.items()}
    return table


def render(statuses: list[RequestStatus], verbose: bool = False) -> str:
    lines = []
    for s in statuses:
        counts = ", ".join(f"{k} {v}" for k, v in sorted(s.counts.items())) or "no attempts yet"
        lines.append(f"{s.name}  ({s.path})")
        lines.append(f"  attempts: {counts}")
        shown = s.errors if verbose else s.errors[:SHOWN_ERRORS]
        for error in shown:
            stage = f" at {error.stage}" if error.stage else ""
            if error.failure_class in _CLASSES:  # a result.json of an older version names none
                stage += f" [{error.failure_class}]"
            first_line = error.error.strip().splitlines()[0] if error.error.strip() else ""
            lines.append(f"    {error.status}{stage}: {visible(error.task_id)} attempt {error.attempt}: "
                         f"{visible(first_line[:300])}")
        if len(shown) < len(s.errors):
            lines.append(f"    ... and {len(s.errors) - len(shown)} more failed attempt(s) (-v lists them all)")
        lines += [f"  {line}" for line in s.forecast]
        if s.problem:
            lines.append(f"  cannot tell what would rerun: {s.problem}")
        if not s.pending:
            if not s.problem:
                lines.append("  up to date: nothing would rerun")
            continue
        grouped: dict[tuple[str, str], list[PendingJob]] = defaultdict(list)
        for job in s.pending:
            grouped[(job.rule, job.reason)].append(job)
        lines.append("  would rerun:")
        order = names()
        for (rule, reason), jobs in sorted(grouped.items(), key=lambda kv: order.index(kv[0][0])):
            lines.append(f"    {stage_of(rule).shown} x{len(jobs)}: {reason}")
            if verbose:
                for job in jobs:
                    lines.append(f"      {job.outputs[0] if job.outputs else rule}")
    return "\n".join(lines)
