"""What is done, what failed, and what would rerun and why.

``agentcompass status`` reads the result files for the counts, and compares
the params the rules would compute now with those Snakemake recorded for
each file (read through Snakemake's own code, ``engine.Records``), so the
answer is the one the next run acts on.
"""

from __future__ import annotations

import json
import tempfile
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

from agentcompass._util.display import visible
from agentcompass.layout import task_segment
from agentcompass.pipeline import engine
from agentcompass.results import read_json
from agentcompass.runtime.models import Orchestration, RunRequest, TaskStatus

# Which file each rule writes, to say "output.json would rerun" rather than "rule run".
RULE_FILES = {
    "request": "request.json", "tasks": "tasks.json", "plans": "plans.json and run_info.json",
    "prepare": "prepared.json", "run": "output.json", "evaluate": "result.json", "metrics": "metrics.json",
    "report": "report/index.html",
}
# Failed attempts listed without --verbose.
SHOWN_ERRORS = 5


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


@dataclass
class RequestStatus:
    name: str
    path: Path
    counts: Counter = field(default_factory=Counter)
    pending: list[PendingJob] = field(default_factory=list)
    errors: list[FailedAttempt] = field(default_factory=list)
    # why the rest could not be predicted (the tasks cannot be loaded now), if so
    problem: str | None = None


def attempt_results(run_path: Path, req: RunRequest) -> list[tuple[str, int, Path]]:
    """(task id, attempt, result.json path) of every attempt the request's tasks.json lists."""
    tasks_file = run_path / "tasks.json"
    if not tasks_file.exists():
        return []
    tasks = read_json(tasks_file)["tasks"]
    return [
        (t["task_id"], attempt, run_path / "attempts" / task_segment(t["task_id"]) / str(attempt) / "result.json")
        for t in tasks
        for attempt in range(1, req.execution.attempts + 1)
    ]


def status_counts(run_path: Path, req: RunRequest) -> tuple[Counter, list[FailedAttempt]]:
    """Attempts by the status of their result.json ('missing' when there is none yet), and the failed ones."""
    counts: Counter = Counter()
    errors = []
    for task_id, attempt, path in attempt_results(run_path, req):
        if not path.exists():
            counts["missing"] += 1
            continue
        result = read_json(path)
        counts[result["status"]] += 1
        if TaskStatus(result["status"]).is_error:
            errors.append(FailedAttempt(task_id, attempt, result["status"], result.get("error_stage"),
                                        str(result.get("error") or "")))
    return counts, errors


def failed_attempt_targets(run_path: Path, req: RunRequest) -> list[str]:
    """The files to force so that exactly the failed attempts rerun.

    A run error reruns the harness (``output.json``); an evaluation error only
    the evaluation (``result.json``): the agent's answer is kept. A completed
    attempt, whatever its score, is never among them.
    """
    targets = []
    for _, _, path in attempt_results(run_path, req):
        if not path.exists():
            continue
        status = TaskStatus(read_json(path)["status"])
        if status == TaskStatus.EVAL_ERROR:
            targets.append(str(path))
        elif status.is_error:
            targets.append(str(path.parent / "output.json"))
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


class _Checkpoint:
    def __init__(self, files: dict) -> None:
        self.files = files

    def get(self, ns: str, run_id: str):
        return SimpleNamespace(output=[str(self.files[(ns, run_id)])])


def predict(orchestration: Orchestration, workdir: Path) -> list[RequestStatus]:
    """Which files the next run rebuilds and why, from the params the rules would compute.

    A dry run of Snakemake cannot look past a checkpoint that would rerun; this
    computes the would-be tasks and plans in a scratch directory and asks the
    same param functions the rules use, so a prompt change shows up as
    "prepared.json would rerun" before anything runs.
    """
    from agentcompass.pipeline import stages
    from agentcompass.pipeline.workflow import EvaluationWorkflow

    workdir = workdir.absolute()
    records = engine.Records.open(workdir)
    wf = EvaluationWorkflow(orchestration)
    statuses = []
    with tempfile.TemporaryDirectory(prefix="agentcompass-status-") as scratch:
        tasks_files: dict[tuple[str, str], str | Path] = {}
        plans_files: dict[tuple[str, str], str | Path] = {}
        wf.bind(SimpleNamespace(tasks=_Checkpoint(tasks_files), plans=_Checkpoint(plans_files)))
        for index, run in enumerate(orchestration.runs):
            req = run.request
            key = (req.namespace, req.run_id)
            # Each output named as the workflow names it (the rules' f"{RESULTS}/{ns}/{run_id}/...",
            # results_dir as configured): Snakemake keys its records by that text, relative or absolute.
            prefix = f"{orchestration.runtime.results_dir}/{req.namespace}/{req.run_id}"
            path = workdir / prefix
            counts, errors = status_counts(path, req)
            state = RequestStatus(run.name, Path(prefix), counts, errors=errors)
            statuses.append(state)
            w = SimpleNamespace(ns=req.namespace, run_id=req.run_id)
            marked: set[str] = set()

            def judge(rule: str, out: str, params: str | tuple[str, ...], upstream: bool = False) -> bool:
                now = [params] if isinstance(params, str) else list(params)
                if not (workdir / out).exists():
                    reason = "missing"
                elif out in marked:
                    reason = "incomplete (a run was killed)"
                else:
                    record = records.record(out) if records else None
                    if records and record is not None and record.params is not None \
                            and record.params != records.params_of(now):
                        reason = _changed_keys(record.param_values(), now)
                    elif upstream:
                        reason = "upstream file reruns"
                    else:
                        return False
                state.pending.append(PendingJob(rule, [out], reason))
                return True

            bulk = {name: f"{prefix}/{name}" for name in ("request.json", "tasks.json", "plans.json", "run_info.json", "metrics.json")}
            marked = records.incomplete(bulk.values()) if records else set()
            judge("request", bulk["request.json"], wf.params.request(w))
            tasks_file = path / "tasks.json"
            try:
                if judge("tasks", bulk["tasks.json"], wf.params.tasks(w)):
                    tasks_file = Path(scratch) / f"{index}-tasks.json"
                    stages.write_tasks(req, tasks_file)
                plans_params = (wf.params.plans(w), wf.params.run_info(w))
                tasks_rebuilt = tasks_file != path / "tasks.json"
                plans_file = path / "plans.json"
                if judge("plans", bulk["plans.json"], plans_params, upstream=tasks_rebuilt):
                    plans_file = Path(scratch) / f"{index}-plans.json"
                    stages.write_plans(req, tasks_file, plans_file)
                else:
                    judge("plans", bulk["run_info.json"], plans_params, upstream=tasks_rebuilt)
            except Exception as exc:  # the run would fail at the same place: say so, and predict no further
                state.problem = f"its tasks cannot be loaded and planned now: {type(exc).__name__}: {exc}"
                continue
            tasks_files[key], plans_files[key] = tasks_file, plans_file
            attempts = [
                (segment, attempt, f"{prefix}/attempts/{segment}/{attempt}")
                for segment in (task_segment(task.task_id) for task in stages.read_tasks(tasks_file))
                for attempt in range(1, req.execution.attempts + 1)
            ]
            if records and records.any_incomplete():
                marked |= records.incomplete(f"{folder}/{name}" for _, _, folder in attempts
                                             for name in ("prepared.json", "output.json", "result.json"))
            any_result = False
            for segment, attempt, folder in attempts:
                a = SimpleNamespace(ns=req.namespace, run_id=req.run_id, task=segment, attempt=str(attempt))
                prepared = judge("prepare", f"{folder}/prepared.json", wf.attempt_params.prepare(a))
                output = judge("run", f"{folder}/output.json", wf.attempt_params.run(a), upstream=prepared)
                result = judge("evaluate", f"{folder}/result.json", wf.attempt_params.evaluate(a), upstream=output)
                any_result = any_result or result
            metrics = judge("metrics", bulk["metrics.json"], wf.params.metrics(w), upstream=any_result)
            judge("report", f"{prefix}/report/index.html", wf.params.report(w), upstream=metrics)
    return statuses


def render(statuses: list[RequestStatus], verbose: bool = False) -> str:
    lines = []
    for s in statuses:
        counts = ", ".join(f"{k} {v}" for k, v in sorted(s.counts.items())) or "no attempts yet"
        lines.append(f"{s.name}  ({s.path})")
        lines.append(f"  attempts: {counts}")
        shown = s.errors if verbose else s.errors[:SHOWN_ERRORS]
        for error in shown:
            stage = f" at {error.stage}" if error.stage else ""
            first_line = error.error.strip().splitlines()[0] if error.error.strip() else ""
            lines.append(f"    {error.status}{stage}: {visible(error.task_id)} attempt {error.attempt}: "
                         f"{visible(first_line[:300])}")
        if len(shown) < len(s.errors):
            lines.append(f"    ... and {len(s.errors) - len(shown)} more failed attempt(s) (-v lists them all)")
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
        for (rule, reason), jobs in sorted(grouped.items(), key=lambda kv: list(RULE_FILES).index(kv[0][0]) if kv[0][0] in RULE_FILES else 99):
            lines.append(f"    {RULE_FILES.get(rule, rule)} x{len(jobs)}: {reason}")
            if verbose:
                for job in jobs:
                    lines.append(f"      {job.outputs[0] if job.outputs else rule}")
    return "\n".join(lines)
