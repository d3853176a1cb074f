"""The results layout: the one place that turns ids into paths.

::

    <results_dir>/<namespace>/<run_id>/          a request's run folder
        request.json tasks.json plans.json run_info.json metrics.json events.jsonl
        plans.index                               where each plan is in plans.json (derived, rebuilt if stale)
        logs/<stage>.log                          a failed request or summary stage's traceback
        report/index.html ...                     the report
        reports/<analyzer>/                       each analyzer's files
        attempts/<task>/<n>/                      one attempt: each attempt stage's files,
            <stage>.log trajectory.jsonl workspace/ final_workspace/ outputs/
        shards/<k>/shard.json shard.log generation   one slice of a sharded request
        preflight/<task>.json <task>.log          each task's preflight (with execution.preflight)

``<task>`` is the task id as one path segment (``task_segment``). The file
names are the stages' (``agentcompass.stages``); the rules build their paths
from the patterns here. Paths are plain strings where tens of thousands are
made per run (``pathlib`` costs ten times more).
"""

from __future__ import annotations

import hashlib
import string
import urllib.parse
from pathlib import Path

from typing import Iterable

from agentcompass.stages import LAST_ATTEMPT_STAGE, Stage, sole, stage

MAX_SEGMENT_BYTES = 200
# a namespace, a run id (a request's name by default): one path segment each, whole, so the
# files and temporary files written beside and inside them stay within a file name's 255 bytes
MAX_NAME_CHARS = 240

ATTEMPTS = "attempts"
SHARDS = "shards"
# the stage that runs each task's reference solution, and quarantines a task that fails it
PREFLIGHT_RECORD = "preflight"
PREFLIGHTS = stage(PREFLIGHT_RECORD).folder  # preflight/
LOGS = "logs"
REPORT = "report"
ANALYZER_REPORTS = "reports"
EVENTS = "events.jsonl"
# beside plans.json: where each plan is in it, and each shard's digest (agentcompass.pipeline.plan_index)
PLAN_INDEX = "plans.index"
# in a shard's folder: the generation it was last built for (agentcompass.pipeline.shards)
GENERATION = "generation"
# in an attempt's folder
TRAJECTORY = "trajectory.jsonl"
WORKSPACE = "workspace"  # the prepared workspace
FINAL_WORKSPACE = "final_workspace"  # the agent's workspace as the run left it, for evaluation in the task environment
OUTPUTS = "outputs"  # the files the task declares as its outputs

# The rules' path patterns (Snakemake wildcards), below a results folder.
RUN_PATTERN = "{ns}/{run_id}"


def _name(which: str | Stage) -> Stage:
    return which if isinstance(which, Stage) else stage(which)


def folder_pattern(which: str | Stage) -> str:
    """A stage's folder below the run folder, its wildcards unfilled: its scope's folder
    (``attempts/{task}/{attempt}``, a task stage's own ``preflight``; "" for the run folder itself)."""
    s = _name(which)
    return s.scope_row.folder_of(s)


def pattern_of(which: str | Stage) -> str:
    """A stage's folder as its rule names it, below a results folder (``{ns}/{run_id}/shards/{shard}``)."""
    folder = folder_pattern(which)
    return f"{RUN_PATTERN}/{folder}" if folder else RUN_PATTERN


ATTEMPT_PATTERN = pattern_of(LAST_ATTEMPT_STAGE)
SHARD_PATTERN = pattern_of(sole(slices_attempts=True))
# the folder of the preflight's files: one file per task, named by its segment
PREFLIGHT_PATTERN = pattern_of(PREFLIGHT_RECORD)


def task_segment(task_id: str) -> str:
    """A task id as one path segment: percent-encoded, cut and hashed past 200 bytes."""
    segment = urllib.parse.quote(task_id, safe="")
    if segment in (".", ".."):
        segment = segment.replace(".", "%2E")
    if len(segment.encode()) > MAX_SEGMENT_BYTES:
        digest = hashlib.sha256(task_id.encode()).hexdigest()[:16]
        head = segment[: MAX_SEGMENT_BYTES - len(digest) - 1]
        # never cut inside a %XX escape
        cut = head.rfind("%")
        if cut >= len(head) - 2:
            head = head[:cut]
        segment = f"{head}~{digest}"
    return segment


def run_dir(results_dir: str | Path, namespace: str, run_id: str) -> Path:
    return Path(results_dir) / namespace / run_id


def attempt_dir(results_dir: str | Path, namespace: str, run_id: str, task_id: str, attempt: int) -> Path:
    return Path(attempt_folder(run_dir(results_dir, namespace, run_id), task_segment(task_id), attempt))


def attempt_folder(run: str | Path, segment: str, attempt: int) -> str:
    """An attempt's folder in the run folder ``run``, from its task's path segment."""
    return f"{run}/{ATTEMPTS}/{segment}/{attempt}"


def shard_folder(run: str | Path, index: int) -> str:
    return f"{run}/{SHARDS}/{index}"


def preflight_folder(run: str | Path) -> str:
    return f"{run}/{PREFLIGHTS}"


def task_file(run: str | Path, segment: str, which: str | Stage) -> str:
    """A task stage's file of the task whose path segment is ``segment`` (``preflight/<task>.json``)."""
    s = _name(which)
    assert s.scope_row.per_task, f"{s.name} is built per {s.scope}"
    return f"{run}/{folder_pattern(s)}/{s.outputs[0].file.format(task=segment)}"


def generation_file(run: str | Path, index: int) -> str:
    return f"{shard_folder(run, index)}/{GENERATION}"


def file_in(folder: str | Path, which: str | Stage, output: str | None = None) -> str:
    """A stage's file (its first, or the one named ``output``) in its folder ``folder``."""
    s = _name(which)
    return f"{folder}/{(s.output(output) if output else s.outputs[0]).file}"


def files_in(folder: str | Path, which: str | Stage) -> list[str]:
    """Every file of a stage in its folder ``folder``."""
    return [f"{folder}/{o.file}" for o in _name(which).outputs]


def run_file(run: str | Path, which: str | Stage, output: str | None = None) -> str:
    """A request or summary stage's file in the run folder ``run``."""
    s = _name(which)
    assert s.scope_row.per_request, f"{s.name} is built per {s.scope}"
    return file_in(run, s, output)


def attempt_file(run: str | Path, segment: str, attempt: int, which: str | Stage, output: str | None = None) -> str:
    return file_in(attempt_folder(run, segment, attempt), which, output)


def files_of(run: str | Path, stages: Iterable[Stage], instances: Iterable[tuple]) -> list[str]:
    """Every file of ``stages`` (of one scope) in the run folder ``run``, instance by instance: each
    instance is its scope's wildcards' values, in their order (an attempt's ``(segment, n)``; ``()``
    for the run folder's own stages). On the hot path (every attempt's files): an instance's folder is
    made once, then its files' names are appended, as fast as an f-string of each."""
    escaped = str(run).replace("%", "%%")
    stages = list(stages)
    folders = {_template(escaped, s, folder_pattern(s)) for s in stages}
    names = [o.file for s in stages for o in s.outputs]
    if len(folders) == 1 and not any("{" in name for name in names):  # one folder, the same names in each
        (folder, order), = folders
        if order is None:
            return [f + name for f in [folder % values + "/" for values in instances] for name in names]
    templates = [_template(escaped, s, f"{folder_pattern(s)}/{o.file}") for s in stages for o in s.outputs]
    return [t % (values if order is None else tuple(values[i] for i in order))
            for values in instances for t, order in templates]


def _template(run: str, s: Stage, path: str) -> tuple[str, tuple[int, ...] | None]:
    """A path below the run folder with ``s``'s scope's wildcards as ``%s`` (``run/attempts/%s/%s``), and
    the order of the wildcards' values it takes (None: the scope's own order)."""
    path = path.strip("/").replace("%", "%%")
    wildcards = s.scope_row.wildcards
    order = tuple(wildcards.index(name) for _, name, _, _ in string.Formatter().parse(path) if name is not None)
    below = path.format(**{w: "%s" for w in wildcards})
    return f"{run}/{below}" if below else run, None if order == tuple(range(len(wildcards))) else order


def log_file(folder: str | Path, which: str | Stage) -> str:
    """Where a failing job of a stage writes its traceback, given the stage's folder: its scope's
    ``log`` (a task stage's beside its file, ``{task}.log``; a request stage's in ``logs/``)."""
    s = _name(which)
    row = s.scope_row
    return f"{folder}/{row.log.format(stage=s.name, **{w: f'{{{w}}}' for w in row.wildcards})}"


def stage_logs(stages: Iterable[Stage]) -> tuple[str, ...]:
    """The log files ``stages`` write in their folder (an attempt's: ``run.log``...)."""
    return tuple(Path(log_file(".", s)).name for s in stages)


def is_attempt_folder(path: Path) -> bool:
    """Whether ``path`` is ``<run>/attempts/<task>/<n>`` of a run folder holding a request."""
    return (path.name.isdigit() and path.parent.parent.name == ATTEMPTS
            and Path(request_file(path.parent.parent.parent)).exists())


# -- the files a reader opens by what they hold (agentcompass.results, status, diff, the report) --
# The stages that write them, by name: the one place outside the stage table that names them.
REQUEST_RECORD = "request"  # request.json: the request a run folder is built for
TASK_LIST = "tasks"  # tasks.json: the request's tasks, whose attempts the folder holds
PLAN_LIST = "plans"  # plans.json: every attempt's plan
METRICS = "metrics"  # metrics.json: the request's figures, once every attempt is done


def request_file(run: str | Path) -> str:
    return run_file(run, REQUEST_RECORD)


def tasks_file(run: str | Path) -> str:
    return run_file(run, TASK_LIST)


def plans_file(run: str | Path) -> str:
    return run_file(run, PLAN_LIST)


def plan_index_file(run: str | Path) -> str:
    """The index of the plans file of the run folder ``run`` (not a stage's output: derived data)."""
    return f"{run}/{PLAN_INDEX}"


def metrics_file(run: str | Path) -> str:
    return run_file(run, METRICS)


def result_file(folder: str | Path) -> str:
    """An attempt's result (its last stage's first file) in the attempt's folder ``folder``."""
    return file_in(folder, LAST_ATTEMPT_STAGE)


def plan_file(folder: str | Path) -> str:
    """The plan an attempt was evaluated with, in its folder (written beside its result)."""
    return file_in(folder, LAST_ATTEMPT_STAGE, "plan")
