"""What is done, what failed, and what would rerun and why.

``agentcompass status`` reads the result files for the counts, and compares
the params the rules would compute now with those Snakemake recorded for
each file, so the answer is the one the next run acts on.
"""

from __future__ import annotations

import ast
import base64
import json
import tempfile
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

from agentcompass.paths import task_segment
from agentcompass.runtime.models import Orchestration, RunRequest, TaskStatus

# Which file each rule writes, to say "output.json would rerun" rather than "rule run".
RULE_FILES = {
    "request": "request.json", "tasks": "tasks.json", "plans": "plans.json and run_info.json",
    "prepare": "prepared.json", "run": "output.json", "evaluate": "result.json", "metrics": "metrics.json",
}


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


def attempt_results(run_path: Path, req: RunRequest) -> list[tuple[str, int, Path]]:
    """(task id, attempt, result.json path) of every attempt the request's tasks.json lists."""
    tasks_file = run_path / "tasks.json"
    if not tasks_file.exists():
        return []
    tasks = json.loads(tasks_file.read_text())["tasks"]
    return [
        (t["task_id"], attempt, run_path / "attempts" / task_segment(t["task_id"]) / str(attempt) / "result.json")
        for t in tasks
        for attempt in range(1, req.execution.attempts + 1)
    ]


def status_counts(run_path: Path, req: RunRequest) -> Counter:
    counts: Counter = Counter()
    for _, _, path in attempt_results(run_path, req):
        counts[json.loads(path.read_text())["status"] if path.exists() else "missing"] += 1
    return counts


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
        status = TaskStatus(json.loads(path.read_text())["status"])
        if status == TaskStatus.EVAL_ERROR:
            targets.append(str(path))
        elif status.is_error:
            targets.append(str(path.parent / "output.json"))
    return targets


def _merged(params: list[str]) -> dict | None:
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


def _changed_keys(before: list[str], now: list[str]) -> str:
    old, new = _merged(before), _merged(now)
    if old is None or new is None:
        return "params changed"
    keys = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
    return f"params changed: {', '.join(keys)}"


class _Metadata:
    """Snakemake's record of each output: the params it was built with, and incomplete markers."""

    def __init__(self, workdir: Path) -> None:
        self.root = workdir / ".snakemake"
        self.workdir = workdir

    def _key(self, path: Path) -> str:
        return base64.b64encode(str(path.relative_to(self.workdir)).encode()).decode()

    def params(self, path: Path) -> list[str] | None:
        record = self.root / "metadata" / self._key(path)
        if not record.exists():
            return None
        return sorted(ast.literal_eval(p) for p in json.loads(record.read_text()).get("params") or [])

    def incomplete(self, path: Path) -> bool:
        return (self.root / "incomplete" / self._key(path)).exists()


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

    workdir = workdir.resolve()
    meta = _Metadata(workdir)
    wf = EvaluationWorkflow(orchestration)
    base = workdir / orchestration.runtime.results_dir
    statuses = []
    with tempfile.TemporaryDirectory(prefix="agentcompass-status-") as scratch:
        tasks_files, plans_files = {}, {}
        wf.bind(SimpleNamespace(tasks=_Checkpoint(tasks_files), plans=_Checkpoint(plans_files)))
        for index, run in enumerate(orchestration.runs):
            req = run.request
            key = (req.namespace, req.run_id)
            path = base / req.namespace / req.run_id
            state = RequestStatus(run.name, path, status_counts(path, req))
            statuses.append(state)
            w = SimpleNamespace(ns=req.namespace, run_id=req.run_id)

            def judge(rule: str, out: Path, now: str | tuple[str, ...], upstream: bool = False) -> bool:
                now = sorted([now] if isinstance(now, str) else now)
                if not out.exists():
                    reason = "missing"
                elif meta.incomplete(out):
                    reason = "incomplete (a run was killed)"
                else:
                    before = meta.params(out)
                    if before is not None and before != now:
                        reason = _changed_keys(before, now)
                    elif upstream:
                        reason = "upstream file reruns"
                    else:
                        return False
                state.pending.append(PendingJob(rule, [str(out.relative_to(workdir))], reason))
                return True

            judge("request", path / "request.json", wf.params.request(w))
            tasks_file = path / "tasks.json"
            if judge("tasks", tasks_file, wf.params.tasks(w)):
                tasks_file = Path(scratch) / f"{index}-tasks.json"
                stages.write_tasks(req, tasks_file)
            plans_file = path / "plans.json"
            plans_params = (wf.params.plans(w), wf.params.run_info(w))
            tasks_rebuilt = tasks_file != path / "tasks.json"
            if judge("plans", plans_file, plans_params, upstream=tasks_rebuilt):
                plans_file = Path(scratch) / f"{index}-plans.json"
                stages.write_plans(req, tasks_file, plans_file)
            else:
                judge("plans", path / "run_info.json", plans_params, upstream=tasks_rebuilt)
            tasks_files[key], plans_files[key] = tasks_file, plans_file
            any_result = False
            for task in stages.read_tasks(tasks_file):
                for attempt in range(1, req.execution.attempts + 1):
                    segment = task_segment(task.task_id)
                    a = SimpleNamespace(ns=req.namespace, run_id=req.run_id, task=segment, attempt=str(attempt))
                    folder = path / "attempts" / segment / str(attempt)
                    prepared = judge("prepare", folder / "prepared.json", wf.attempt_params.prepare(a))
                    output = judge("run", folder / "output.json", wf.attempt_params.run(a), upstream=prepared)
                    result = judge("evaluate", folder / "result.json", wf.attempt_params.evaluate(a), upstream=output)
                    any_result = any_result or result
            judge("metrics", path / "metrics.json", wf.params.metrics(w), upstream=any_result)
    return statuses


def render(statuses: list[RequestStatus], verbose: bool = False) -> str:
    lines = []
    for s in statuses:
        counts = ", ".join(f"{k} {v}" for k, v in sorted(s.counts.items())) or "no attempts yet"
        lines.append(f"{s.name}  ({s.path})")
        lines.append(f"  attempts: {counts}")
        if not s.pending:
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
