"""What the result files say: each request's attempts by status, the failed ones, and the files
``agentcompass retry`` forces so that exactly the failed attempts rerun.

A sharded request's slice whose shard record is current is counted from that record: its
attempts' result files are not read.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from agentcompass import layout, results
from agentcompass.pipeline import reading, shards
from agentcompass.results import read_json
from agentcompass.runtime.models import FailureClass, RunRequest, TaskStatus
from agentcompass.stages import FIRST_ATTEMPT_STAGE, LAST_ATTEMPT_STAGE
from agentcompass.stages import stage as stage_of


@dataclass
class FailedAttempt:
    task_id: str
    attempt: int
    status: str
    stage: str | None
    error: str
    failure_class: str | None = None  # None in result.json files of older versions


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
        elif attempt.stage == FIRST_ATTEMPT_STAGE:  # the stage that failed, as the rules name it
            targets.append(layout.file_in(os.path.dirname(path), FIRST_ATTEMPT_STAGE))
        else:
            targets.append(layout.file_in(os.path.dirname(path), answer_stage, answer))
    return targets
