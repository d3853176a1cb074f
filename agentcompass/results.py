"""Results as data: every attempt of one or more runs, one row each, as a pandas DataFrame.

    from agentcompass import results
    frame = results.load("results/default/my-eval")          # one run
    frame = results.load("results")                           # every run under a results root
    frame.groupby("category").score.mean()

A row is one attempt the run's ``tasks.json`` lists; an attempt that has not
finished yet has status ``missing`` and no score. The columns are ``COLUMNS``.

``summary(rows, pricing)`` is what metrics.json's ``summary`` holds, computed
from the same rows: the metrics stage, ``agentcompass runs`` and the report
count attempts one way.
"""

from __future__ import annotations

import datetime
import json
import math
import os
import re
import stat
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping

from agentcompass import imports, layout, spend
from agentcompass.spend import cost_usd, dollars  # noqa: F401 (cost_usd: the one price rule, read from here too)
from agentcompass._util import trees
from agentcompass._util.display import visible
from agentcompass.layout import task_segment
from agentcompass.runtime.models import Orchestration, OrchestrationResult, RequestOutcome
from agentcompass.runtime.models.result import FailureClass, TaskStatus
from agentcompass.stages import ONLY_ENV, sole, where

# identity, what was run, the verdict, what it cost, how long it took, where it ran
COLUMNS = [
    "namespace", "run_id", "request", "benchmark", "harness", "model", "environment",
    "task_id", "attempt", "category", "status", "score", "correct", "error", "error_stage", "failure_class",
    "left_out", "flagged", "flags", "retries_used",
    "calls", "retries", "prompt_tokens", "completion_tokens", "latency_seconds", "cost_usd",
    "cached_calls", "cached_prompt_tokens", "cached_completion_tokens", "saved_usd",
    "run_seconds", "evaluate_seconds", "host", "slurm_job_id", "attempt_dir",
]
MISSING = "missing"
_USAGE = ("calls", "retries", "prompt_tokens", "completion_tokens", "latency_seconds")
# what the call cache answered (agentcompass.callcache): 0 when a result names none
_CACHED = ("cached_calls", "cached_prompt_tokens", "cached_completion_tokens")
_TIMINGS = ("run_seconds", "evaluate_seconds")
_ERROR_STATUSES = frozenset(s.value for s in TaskStatus if s.is_error)
# a class no version wrote (a result.json edited by hand) is not counted: metrics.json names only these
_FAILURE_CLASSES = frozenset(c.value for c in FailureClass)
# pass@k is reported for these k (and for the attempts per task), those the attempts allow
PASS_AT_K = (1, 2, 5, 10, 20, 50, 100)
# dollars are rounded to a billionth (as spend.cost_usd rounds them): no float noise such as 0.0005700000000000001
COST_DIGITS = 9
# the two-sided 95% quantile of the standard normal distribution
Z95 = 1.959963984540054
# what the stages write in an attempt folder (each file by its output's name: ``prepared``...), read by
# ``attempt``; any other file there is the attempt's own evidence (a harness's log, a verifier's output)
ATTEMPT_FILES = {o.file: o.name for s in where(in_shards=True) for o in s.outputs}
STAGE_LOGS = layout.stage_logs(where(in_shards=True))
TRAJECTORY = layout.TRAJECTORY
# an attempt's scan.json (the scan stage's file: its transcript scanners' findings)
SCAN_FILE = next(o.file for s in where(in_shards=True) for o in s.outputs if o.kind == "scan")
# the stage whose record (shards/<k>/shard.json) says a slice of a large request is built
SHARD_STAGE = sole(slices_attempts=True)


@dataclass(frozen=True)
class Run:
    """One run's folder (``results/<namespace>/<run_id>/``) and what its request.json says; or a run another tool
    wrote (``imported``: an Inspect log, a Harbor job folder), with the request ``imports.request_of`` stands in."""

    path: Path
    request: dict[str, Any]
    # a run of another tool: its attempts are its rows; it has no metrics.json, tasks.json nor attempt folders
    imported: imports.ImportedRun | None = None

    @property
    def namespace(self) -> str:
        return self.request.get("output", {}).get("namespace") or self.path.parent.name

    @property
    def run_id(self) -> str:
        return self.request.get("output", {}).get("run_id") or self.path.name

    @property
    def name(self) -> str:
        return self.request.get("metadata", {}).get("request_name") or self.run_id

    def component(self, kind: str) -> str:
        return (self.request.get(kind) or {}).get("id", "")

    def metrics(self) -> dict[str, Any] | None:
        """metrics.json as written, or None before the run's metrics stage has written it (and for an import)."""
        if self.imported is not None:
            return None
        metrics_file = Path(layout.metrics_file(self.path))
        return _read(metrics_file) if metrics_file.exists() else None

    @property
    def per_task(self) -> int:
        """Attempts per task."""
        return int((self.request.get("execution") or {}).get("attempts") or 1)

    def attempts(self) -> list[tuple[dict, int, Path]]:
        """(task, attempt, attempt folder) of every attempt tasks.json lists, in its order; none of an import."""
        if self.imported is not None:
            return []
        return attempt_folders(self.path, self.per_task)


def attempt_folders(run_path: Path, per_task: int) -> list[tuple[dict, int, Path]]:
    """(task, attempt, attempt folder) of every attempt the run's tasks.json lists, ``per_task`` of each task."""
    tasks_file = Path(layout.tasks_file(run_path))
    if not tasks_file.exists():
        return []
    tasks = _read(tasks_file)["tasks"]
    return [(task, n, Path(layout.attempt_folder(run_path, task_segment(task["task_id"]), n)))
            for task in tasks for n in range(1, per_task + 1)]


def read_json(path: str | Path) -> Any:
    """A JSON file of a run's folder, read as agentcompass wrote it: a regular file, never through a link
    (a link, a FIFO or a device in its place is a ValueError, and nothing of it is read)."""
    try:
        text = trees.read_bytes(path).decode("utf-8")
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise ValueError(f"{path} is not a file agentcompass wrote (a link or a special file is in its place: "
                         f"{exc.strerror}). Fix: delete it; the same run command builds it again") from None
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path} is not UTF-8 text ({exc}). Fix: delete it; the same run command "
                         f"builds it again") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        # agentcompass writes whole files by rename: this one was edited or cut by something else
        raise ValueError(f"{path} is not valid JSON ({exc}). Fix: delete it; the same run command "
                         f"builds it again") from None


_read = read_json


def open_run(path: str | Path) -> Run:
    """The run in ``path``: a folder holding request.json, or a run another tool wrote (``imports.is_import``: an
    Inspect ``.eval`` log, a Harbor job folder), read by its reader (``imports.ImportError_``, a ValueError naming
    it, when it cannot be)."""
    path = Path(path)
    request_file = Path(layout.request_file(path))
    if not os.path.lexists(request_file) and imports.is_import(path):
        return open_import(path)
    if not request_file.exists():
        raise FileNotFoundError(f"{path} holds no request.json: it is not a run's folder "
                                f"(results/<namespace>/<run_id>/). Fix: name a run's folder or a results root")
    return Run(path, _read(request_file))


def open_import(path: str | Path) -> Run:
    """The run another tool wrote at ``path`` (``imports.read_import``), as a run every view reads."""
    imported = imports.read_import(path)
    return Run(Path(path), imports.request_of(imported), imported)


def find_runs(*paths: str | Path) -> list[Run]:
    """The runs in ``paths``: each a run's folder, a run another tool wrote (``open_run``), or a folder under
    which runs are looked for. Imports are named, never looked for: a results root's are not found."""
    runs: list[Run] = []
    for path in paths:
        path = Path(path)
        if Path(layout.request_file(path)).exists():
            runs.append(open_run(path))
            continue
        if imports.is_import(path):
            runs.append(open_import(path))
            continue
        if not path.is_dir():
            raise FileNotFoundError(f"{path} does not exist. Fix: name a run's folder or a results root "
                                    f"(default: results)")
        request = Path(layout.request_file(".")).name
        runs += [open_run(p.parent) for p in sorted(path.glob(f"*/*/{request}"))]
        runs += [open_run(p.parent) for p in sorted(path.glob(f"*/{request}"))]
    return runs


def rows(run: Run, results: Mapping[tuple[str, int], dict] | None = None,
         scans: Mapping[tuple[str, int], dict | None] | None = None) -> Iterator[dict[str, Any]]:
    """One dict per attempt of ``run``, with the keys of ``COLUMNS``.

    ``results`` (result.json objects by task id and attempt) stands for the
    files when the caller has read them already: the metrics stage has.
    ``scans`` (scan.json objects, or None, by task id and attempt: ``scans_of``)
    stands for the scan files the same way. An import's rows are its attempts (``imported_rows``).
    """
    if run.imported is not None:
        yield from imported_rows(run)
        return
    pricing = (run.request.get("model") or {}).get("pricing")
    base = {
        "namespace": run.namespace, "run_id": run.run_id, "request": run.name,
        "benchmark": run.component("benchmark"), "harness": run.component("harness"),
        "model": (run.request.get("model") or {}).get("id", ""), "environment": run.component("environment"),
    }
    is_scanned = scanned(run.request)
    for task, attempt, folder in run.attempts():
        row = {**base, "task_id": task["task_id"], "attempt": attempt, "category": task.get("category"),
               "attempt_dir": str(folder)}
        if results is not None:
            result = results.get((task["task_id"], attempt))
        else:
            result_file = Path(layout.result_file(folder))
            result = _read(result_file) if result_file.exists() else None
        if scans is not None:
            scan = scans.get((task["task_id"], attempt))
        else:  # a scan.json left by scanners since removed from the request is not this request's
            scan = read_scan(folder) if is_scanned else None
        row.update(flag_columns(scan))
        if result is None:
            row.update({"status": MISSING, "retries_used": 0})
        else:
            usage, timings, where = result.get("usage") or {}, result.get("timings") or {}, result.get("provenance") or {}
            row.update({
                "status": result["status"], "score": result.get("score"), "correct": result.get("correct"),
                "error": result.get("error"), "error_stage": result.get("error_stage"),
                "failure_class": result.get("failure_class"),  # absent from result.json of older versions
                "left_out": left_out(result),
                "retries_used": result.get("retries_used", 0),
                **{key: usage.get(key) for key in _USAGE},
                **{key: usage.get(key) or 0 for key in _CACHED},
                **{key: timings.get(key) for key in _TIMINGS},
                **paid_and_saved(usage, pricing),
                "host": where.get("host"), "slurm_job_id": where.get("slurm_job_id"),
            })
        yield {column: row.get(column) for column in COLUMNS}


def imported_rows(run: Run) -> Iterator[dict[str, Any]]:
    """The rows (``rows``) of a run another tool wrote: one per attempt its reader found, with the keys of
    ``COLUMNS``. Never scanned (``flagged``, ``flags`` None), left out only for an infrastructure failure
    (``left_out``), priced by no model.pricing: its cost is the one the source gives (``usage["cost_usd"]``:
    Harbor's), else none; with no attempt folder."""
    assert run.imported is not None
    base = {"namespace": run.namespace, "run_id": run.run_id, "request": run.name,
            "benchmark": run.component("benchmark"), "harness": run.component("harness"),
            "model": run.component("model"), "environment": run.component("environment")}
    for found in run.imported.attempts:
        row: dict[str, Any] = {**base, "task_id": found.task_id, "attempt": found.attempt, "category": found.category,
                               "status": found.status, "flagged": None, "flags": None, "retries_used": 0}
        if found.status != MISSING:
            row.update({"score": found.score, "correct": found.correct, "error": found.error,
                        "error_stage": found.error_stage, "failure_class": found.failure_class,
                        **{key: found.usage.get(key) for key in _USAGE},
                        **{key: found.usage.get(key) or 0 for key in _CACHED},
                        **{key: found.timings.get(key) for key in _TIMINGS},
                        **paid_and_saved(found.usage, None)})
            paid = found.usage.get("cost_usd")  # what the source says was paid (Harbor's agent result), as it says
            if isinstance(paid, (int, float)) and not isinstance(paid, bool):
                row["cost_usd"] = round(float(paid), COST_DIGITS)
            row["left_out"] = left_out(row)
        yield {column: row.get(column) for column in COLUMNS}


def read_scan(folder: str | Path) -> dict[str, Any] | None:
    """The attempt's scan.json (the scan stage's: what its transcript scanners found), or None when it has
    none (no scanner was selected, or the stage has not run). A scan.json that cannot be read is a ValueError
    naming it (``read_json``)."""
    path = Path(folder) / SCAN_FILE
    try:
        return _read(path)
    except FileNotFoundError:
        return None


def flag_columns(scan: Mapping[str, Any] | None) -> dict[str, Any]:
    """An attempt's ``flagged`` and ``flags`` columns from its scan.json: whether any scanner flagged it, and
    the ids of those that did, joined by ``;`` (both None when it was not scanned). Every figure of flags
    (metrics.json, the report, ``runs``, ``compare``) is counted from these two columns."""
    if scan is None:
        return {"flagged": None, "flags": None}
    flagging = [f.get("id", "") for f in scan.get("scanners") or () if isinstance(f, Mapping) and f.get("flagged")]
    return {"flagged": bool(flagging), "flags": ";".join(flagging)}


def scans_of(run: Run) -> dict[tuple[str, int], dict[str, Any] | None]:
    """Every attempt's scan.json (``read_scan``: None for one without), by task id and attempt; none of a
    request that names no scanner (a scan.json left by scanners since removed is not its)."""
    if not scanned(run.request):
        return {}
    return {(task["task_id"], n): read_scan(folder) for task, n, folder in run.attempts()}


def scanned(request: Mapping[str, Any]) -> bool:
    """Whether a request (request.json as a dict) names transcript scanners: only then has it flags to count."""
    return bool(request.get("scanners"))


def flag_counts(table: Iterable[dict[str, Any]], scans: Mapping[tuple[str, int], Mapping[str, Any] | None]
                ) -> dict[str, Any]:
    """What the scanners flagged over rows (``rows``): the one count of flags that metrics.json, the run's last
    line, ``runs`` and ``compare`` show (``FlagFigures`` without ``unflagged``).

    Over the finished attempts but the quarantined ones (which ran nothing), as ``counts`` are: ``scanned``
    (those with a scan.json), ``flagged`` (those a scanner flagged), ``scanners`` (by scanner id: its
    ``category``, the attempts it ``flagged`` and the ``errors``, those it could not scan) and ``categories``
    (by category: the attempts a scanner of it flagged, each once). What was flagged is counted from the rows'
    ``flagged`` and ``flags`` columns (``flag_columns``); the scanners' categories and errors, which no
    column holds, from ``scans`` (scan.json objects by task id and attempt, ``scans_of``).
    """
    found: dict[str, dict[str, Any]] = {}
    categories: Counter = Counter()
    attempts = flagged = 0
    for row in table:
        if row["status"] == MISSING or row["flagged"] is None or left_out(row) == QUARANTINED:
            continue
        attempts += 1
        flagged += row["flagged"] is True
        scan = scans.get((row["task_id"], row["attempt"])) or {}
        for finding in scan.get("scanners") or ():
            if isinstance(finding, Mapping):
                entry = found.setdefault(str(finding.get("id", "")),
                                         {"category": str(finding.get("category") or ""), "flagged": 0, "errors": 0})
                entry["errors"] += finding.get("error") is not None
        ids = [i for i in (row["flags"] or "").split(";") if i]
        for scanner_id in ids:
            found.setdefault(scanner_id, {"category": "", "flagged": 0, "errors": 0})["flagged"] += 1
        categories.update({found[i]["category"] for i in ids})
    return {"scanned": attempts, "flagged": flagged, "scanners": found, "categories": dict(sorted(categories.items()))}


def flag_figures(table: Iterable[dict[str, Any]], scans: Mapping[tuple[str, int], Mapping[str, Any] | None],
                 pricing: Mapping[str, float] | None,
                 aggregate: Callable[[list[dict[str, Any]]], Mapping[str, Any]]) -> dict[str, Any]:
    """metrics.json's ``flags`` (``FlagFigures``): ``flag_counts``, and ``unflagged``, the figures over the
    attempts no scanner flagged: the Benchmark's own ``metrics`` (``aggregate``, given those rows, returns
    them) and the ``summary`` (``summary``). The figures over every attempt, flagged ones included, are
    metrics.json's ``metrics`` and ``summary``, never changed by a flag."""
    table = list(table)
    unflagged = [row for row in table if row["flagged"] is False]
    return {**flag_counts(table, scans),
            "unflagged": {"metrics": dict(aggregate(unflagged)), "summary": summary(unflagged, pricing)}}


def flags_line(flags: Mapping[str, Any] | None) -> str:
    """What the scanners flagged, as the run's last line says it: ``1 flagged (gave_up 1, network 0)``, then
    ``; scanner errors: network 2`` when a scanner could not scan an attempt; '' without flags."""
    if not isinstance(flags, Mapping) or not isinstance(flags.get("flagged"), int):
        return ""
    scanners = flags.get("scanners") or {}
    each = ", ".join(f"{visible(str(i))} {(s or {}).get('flagged', 0)}" for i, s in scanners.items())
    line = f"{flags['flagged']} flagged" + (f" ({each})" if each else "")
    errors = ", ".join(f"{visible(str(i))} {s['errors']}" for i, s in scanners.items() if (s or {}).get("errors"))
    return line + (f"; scanner errors: {errors}" if errors else "")


def summarized_flags(run: Run) -> dict[str, Any] | None:
    """metrics.json's ``flags`` when they are of the files on disk: its summary is (``summarized``) and no
    attempt's scan.json was written after it (a scan.json is written by rename, as every file here). None
    otherwise, and for a metrics.json without flags. Each scan file is looked at, not read."""
    if summarized(run) is None:
        return None
    flags = (run.metrics() or {}).get("flags")
    if not isinstance(flags, dict) or not isinstance(flags.get("flagged"), int):
        return None
    try:
        built = os.stat(layout.metrics_file(run.path)).st_mtime_ns
        if any(os.stat(folder / SCAN_FILE).st_mtime_ns > built for _, _, folder in run.attempts()):
            return None
    except FileNotFoundError:
        return None
    return flags


def to_frame(table: Iterable[dict[str, Any]]):
    """Rows (``rows``) as a pandas DataFrame with the columns ``COLUMNS``, in order."""
    import pandas as pd  # imported when asked for: it costs a second

    return pd.DataFrame(list(table), columns=COLUMNS)


def load(*paths: str | Path):
    """Every attempt of the runs in ``paths`` (run folders or results roots; default ``results``)."""
    runs = find_runs(*(paths or ("results",)))
    return to_frame(row for run in runs for row in rows(run))


# --- each request's outcome: what a run returns (``agentcompass.sdk``) and its last event -----------


def run_folders(orchestration: Orchestration, workdir: str | Path | None = None) -> list[Path]:
    """The run folder of each request of ``orchestration``, in declaration order."""
    return [layout.run_dir(Path(workdir or Path.cwd()) / orchestration.runtime.results_dir,
                           run.request.namespace, run.request.run_id) for run in orchestration.runs]


def outcomes(orchestration: Orchestration, ok: bool, workdir: str | Path | None = None, *,
             dry_run: bool = False, reason: str | None = None, targets: bool = False) -> OrchestrationResult:
    """Each request's terminal state, in declaration order.

    A request's metrics are read only when the run finished (every target
    current): a run that stopped never reports an older metrics.json. A run
    that ended well (``ok``) without a request's metrics.json built less than
    the request: ``partial``, with ``targets`` (files named on Snakemake's
    command line) or options that left its last files out. ``reason`` says
    why a run that did not end well stopped (``lifecycle.end_reason``).

    Read from the request's summaries, so that the end of a run of 100,000
    attempts opens a few files: the errors by kind from metrics.json's
    ``summary``, what a stopped request finished from its shards' records
    (``finished_attempts``). Only a metrics.json of a version before the
    summary makes the failed attempts' result.json files be read.
    """
    result = []
    # in the workflow's own directory (the end of a run), its files are named as it names them
    here = workdir is None or Path(workdir).resolve() == Path.cwd().resolve()
    for run, run_path in zip(orchestration.runs, run_folders(orchestration, workdir)):
        req = run.request
        segments = task_segments(layout.run_dir(orchestration.runtime.results_dir, req.namespace, req.run_id)
                                 if here else run_path)
        per_task = req.execution.attempts
        outcome = RequestOutcome(name=run.name, key=run.key, state="planned", results_dir=str(run_path),
                                 total=len(segments) * per_task)
        if dry_run:
            result.append(outcome)
            continue
        metrics_file = Path(layout.metrics_file(run_path))
        if ok and metrics_file.exists():
            data = read_json(metrics_file)
            outcome.counts, outcome.metrics = data["counts"], data["metrics"]
            outcome.scored_on = data.get("scored_on")
            if isinstance(data.get("flags"), dict):  # only a request with scanners has them
                outcome.flags = {k: v for k, v in data["flags"].items() if k != "unflagged"}
            outcome.done = sum(outcome.counts.values())
            failed = sum(n for status, n in outcome.counts.items() if TaskStatus(status).is_error)
            if failed:
                outcome.state = "completed_with_errors"
                summarized = summarized_errors(data, failed)
                outcome.errors = summarized if summarized is not None else \
                    error_kinds(run_path, segments, per_task)
            else:
                outcome.state = "completed"
        else:
            outcome.done = finished_attempts(run_path, segments, per_task, orchestration.runtime.shard_size)
            if ok and targets:
                outcome.state = "partial"
                outcome.reason = "only the files named on the command line were asked for"
            elif ok:  # no job failed, and its last files were not built: Snakemake was asked for less
                outcome.state = "partial"
                outcome.reason = ("only each task's preflight was asked for" if os.environ.get(ONLY_ENV) else
                                  "Snakemake ended without error but did not build its metrics.json: its options "
                                  "(--until, --omit-from, --allowed-rules...) asked for part of it")
            else:
                why = spend.over_budget(req.execution.budget, run_path, orchestration.runtime.budget,
                                        req.metadata.request_name)
                if why is not None:  # a budget it draws from ran out: what was not started waits for more
                    waiting = outcome.total - outcome.done
                    outcome.state = "budget_spent"
                    outcome.reason = (f"{why}; {waiting:,} attempt{'s' if waiting != 1 else ''} wait. Fix: raise the "
                                      "budget and run the same command: it goes on where it stopped")
                else:
                    outcome.state = "stopped"
                    outcome.reason = reason or "Snakemake ended with an error; its output above says which"
        result.append(outcome)
    return OrchestrationResult(outcomes=result)


def task_segments(run_path: Path) -> list[str]:
    """The path segment of every task the run's tasks.json lists, in order; none before it is written.

    Read through the workflow's cache of tasks.json (by path, as written, and
    version): at the end of a run this process has decoded it already, and
    100,000 tasks take a second or two to decode.
    """
    from agentcompass.pipeline import reading  # what a run has imported already; a reader need not

    path = layout.tasks_file(run_path)
    try:
        regular = stat.S_ISREG(os.lstat(path).st_mode)
    except FileNotFoundError:
        return []
    if not regular:
        read_json(path)  # raises, saying what is in its place and how to fix it
    return reading.task_segments(path)


def summarized_errors(metrics: Mapping[str, Any], failed: int) -> dict[str, int] | None:
    """metrics.json's failed attempts by kind (its ``summary``), the most frequent first; None when it
    holds none that add up to its ``failed`` attempts (a metrics.json of a version before the summary)."""
    overall = (metrics.get("summary") or {}).get("overall") or {}
    errors = overall.get("errors")
    if not isinstance(errors, dict) or sum(errors.values()) != failed:
        return None
    return dict(errors)


def error_kinds(run_path: Path, segments: list[str], per_task: int) -> dict[str, int]:
    """The failed attempts by kind, from every result.json of the run (the most frequent first)."""
    kinds: Counter = Counter()
    for segment in segments:
        for n in range(1, per_task + 1):
            try:
                found = read_json(layout.result_file(layout.attempt_folder(run_path, segment, n)))
            except FileNotFoundError:
                continue
            if TaskStatus(found["status"]).is_error:
                kinds[error_kind(found["status"], found.get("error"))] += 1
    return dict(kinds.most_common())


def finished_attempts(run_path: Path, segments: list[str], per_task: int, shard_size: int) -> int:
    """How many of the run's attempts have a result.json.

    A request is built in slices of ``shard_size`` attempts (or fewer, on a
    cluster); a slice whose shard record (shards/<k>/shard.json) names that same
    slice counts as the record says: the record is written once every attempt of
    the slice has its result, and removed before its shard job runs again. The
    attempts of every other slice are looked for one by one.
    """
    done = 0
    for index, part in enumerate(attempt_slices(segments, per_task, shard_size)):
        if shard_size and recorded_slice(run_path, index, part) is not None:
            done += len(part)
        else:
            done += sum(1 for segment, n in part
                        if os.path.exists(layout.result_file(layout.attempt_folder(run_path, segment, n))))
    return done


def attempt_slices(segments: list[str], per_task: int, shard_size: int) -> list[list[tuple[str, int]]]:
    """The (task segment, attempt) of every attempt, in the slices of ``shard_size`` a sharded request is
    built in (shard k builds the k-th); all in one slice when ``shard_size`` is 0."""
    attempts = [(segment, n) for segment in segments for n in range(1, per_task + 1)]
    size = shard_size or len(attempts) or 1
    return [attempts[i:i + size] for i in range(0, len(attempts), size)]


def recorded_slice(run_path: str | Path, index: int, part: list[tuple[str, int]]) -> dict[str, Any] | None:
    """Shard ``index``'s record when it records the slice ``part`` (its attempts, as ``attempt_slices``
    gives them): not one of another task list or shard size."""
    record = shard_record(run_path, index)
    if record is None or not part:
        return None
    (first, n), (last, m) = part[0], part[-1]
    recorded = (record.get("attempts"), record.get("first"), record.get("last"))
    return record if recorded == (len(part), f"{first}/{n}", f"{last}/{m}") else None


def shard_record(run_path: str | Path, index: int) -> dict[str, Any] | None:
    """shards/<index>/shard.json of the run, or None when there is none (or something else in its place)."""
    try:
        record = read_json(layout.file_in(layout.shard_folder(run_path, index), SHARD_STAGE))
    except (FileNotFoundError, ValueError):
        return None
    return record if isinstance(record, dict) else None


# --- the summary: what metrics.json's ``summary`` holds -----------------------------------


# a hexadecimal id (a digest, a container's id: 8 digits or more, one a number), which differs between likes
_HEX_ID = re.compile(r"\b(?=[0-9a-f]*\d)[0-9a-f]{8,}\b")


def error_kind(status: Any, error: str | None) -> str:
    """An attempt's error, grouped with its likes: the status and the error's first line, hexadecimal ids
    (``_HEX_ID``) as H and numbers as N."""
    lines = (error or "").strip().splitlines()
    text = re.sub(r"\d+(?:\.\d+)?", "N", _HEX_ID.sub("H", lines[0] if lines else "no message"))
    return f"{getattr(status, 'value', status)}: {text[:100]}"


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased estimator 1 - C(n-c, k) / C(n, k) of the chance that k of n samples hold a correct one."""
    if n - c < k:
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def wilson_interval(successes: int, n: int, z: float = Z95) -> list[float] | None:
    """The Wilson score interval of a proportion, [low, high] to 6 decimals; None for no trials.

    Unlike the normal approximation it stays inside [0, 1] and is not empty at
    0 or n successes, which small runs hit often.
    """
    if n <= 0:
        return None
    p = successes / n
    denominator = 1 + z * z / n
    center = (p + z * z / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denominator
    # the bounds are exact at 0 and n successes; rounding drops float noise such as 5e-17 there
    low = 0.0 if successes == 0 else round(center - half, 6)
    high = 1.0 if successes == n else round(center + half, 6)
    return [low, high]


def percentile(ordered: list[float], q: float) -> float:
    """The q-quantile (0..1) of sorted values, interpolating linearly between the nearest ranks."""
    position = (len(ordered) - 1) * q
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def spread(values: Iterable[float]) -> dict[str, float] | None:
    """Mean, p50 and p95 of ``values`` (rounded to the microsecond); None when there are none."""
    ordered = sorted(values)
    if not ordered:
        return None
    return {"mean": round(sum(ordered) / len(ordered), 6),
            "p50": round(percentile(ordered, 0.5), 6), "p95": round(percentile(ordered, 0.95), 6)}


def paid_and_saved(usage: Mapping[str, Any], pricing: Mapping[str, float] | None) -> dict[str, float | None]:
    """``cost_usd``, what the calls sent cost (the tokens less those answered from the call cache), and
    ``saved_usd``, what the cached ones would have: the one place a usage becomes dollars."""
    cached_prompt = usage.get("cached_prompt_tokens") or 0
    cached_completion = usage.get("cached_completion_tokens") or 0
    return {"cost_usd": cost_usd((usage.get("prompt_tokens") or 0) - cached_prompt,
                                 (usage.get("completion_tokens") or 0) - cached_completion, pricing),
            "saved_usd": cost_usd(cached_prompt, cached_completion, pricing)}


def cached_note(stats: Mapping[str, Any] | None) -> str:
    """What the call cache answered, as every view says it: ``12 calls from the cache (saved $0.0040)``;
    '' when it answered none."""
    calls = (stats or {}).get("cached_calls") or 0
    if not isinstance(calls, int) or calls <= 0:
        return ""
    saved = (stats or {}).get("saved_usd")
    note = f" (saved {dollars(saved)})" if isinstance(saved, (int, float)) else ""
    return f"{calls:,} call{'s' if calls != 1 else ''} from the cache{note}"


def cost_figures(cost: float | None, ran: int, solved: int) -> dict[str, float | None]:
    """What one attempt and one solved task cost: ``cost_per_attempt_usd``, ``cost`` (``cost_usd``) over the
    ``ran`` attempts that ran (every attempt with a result but a quarantined one, which ran nothing), and
    ``cost_per_solved_usd``, ``cost`` over the ``solved`` correct attempts; each None without prices or
    without an attempt to divide by. The one place these are computed (``stats``, ``with_cost_figures``)."""

    def per(n: int) -> float | None:
        return None if cost is None or n <= 0 else round(cost / n, COST_DIGITS)

    return {"cost_per_attempt_usd": per(ran), "cost_per_solved_usd": per(solved)}


def with_cost_figures(stats: Mapping[str, Any]) -> dict[str, Any]:
    """``stats`` (``MetricStats`` as a dict) with ``cost_figures``: a summary of a version before them
    gets them from its own ``cost_usd``, ``attempts`` (quarantined ones are not in a summary) and correct
    attempts (``accuracy`` x ``counted``, a whole number); one that has them is returned as it is."""
    stats = dict(stats)
    if "cost_per_solved_usd" in stats:
        return stats
    accuracy, counted, attempts = stats.get("accuracy"), stats.get("counted"), stats.get("attempts")
    solved = round(accuracy * counted) if isinstance(accuracy, (int, float)) and isinstance(counted, int) else 0
    return {**stats, **cost_figures(stats.get("cost_usd"), attempts if isinstance(attempts, int) else 0, solved)}


# --- the denominator: the attempts every figure is over (docs/reports.md, "What the figures are over") ---

INFRASTRUCTURE = FailureClass.INFRASTRUCTURE.value
QUARANTINED = "quarantined"
# the error_stage of an attempt quarantined by preflight (agentcompass.pipeline.preflight): that stage's name
QUARANTINE_STAGE = layout.PREFLIGHT_RECORD
# the error of a quarantined attempt: ``quarantined (<reason>): <the preflight's error>``
_QUARANTINE_ERROR = re.compile(r"quarantined \((\w+)\): (.*)", re.S)


def left_out(record: Mapping[str, Any]) -> str | None:
    """Why an attempt counts in no figure, or None when it counts: ``quarantined`` (skipped: its task did
    not pass preflight) or ``infrastructure`` (failed for the machine, not the model or the agent).

    ``record`` is a result.json object or a row of ``rows``. Every figure (the Benchmark's metrics,
    the summary's accuracy and pass@k, the run's last line, the report, ``runs``, ``compare``) is over
    the attempts this leaves in, and says so (``scored_on``, ``denominator_line``).
    """
    status = record.get("status")
    if status == TaskStatus.SKIPPED.value and record.get("error_stage") == QUARANTINE_STAGE:
        return QUARANTINED
    if status in _ERROR_STATUSES and record.get("failure_class") == INFRASTRUCTURE:
        return INFRASTRUCTURE
    return None


def _quarantine(record: Mapping[str, Any]) -> dict[str, Any]:
    """A quarantined task's reason and the preflight's error, from its result.json or (a row) its error."""
    why = (record.get("metadata") or {}).get("quarantine")
    if isinstance(why, dict) and "reason" in why:
        return {"task_id": record["task_id"], "reason": why["reason"], "error": why.get("error")}
    match = _QUARANTINE_ERROR.fullmatch(record.get("error") or "")
    return {"task_id": record["task_id"], "reason": match[1] if match else "preflight_failed",
            "error": match[2] if match else record.get("error")}


def scored_on(records: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """What every figure of these attempts (result.json objects or rows) is over: metrics.json's
    ``scored_on`` (``ScoredOn``). Attempts not finished (``missing``) are not counted."""
    tasks: set[str] = set()
    scored: set[str] = set()
    quarantined: dict[str, dict[str, Any]] = {}
    attempts = counted = infrastructure = skipped = 0
    for record in records:
        if record.get("status") == MISSING:
            continue
        attempts += 1
        tasks.add(record["task_id"])
        why = left_out(record)
        if why is None:
            counted += 1
            scored.add(record["task_id"])
            skipped += record.get("status") == TaskStatus.SKIPPED.value
        elif why == INFRASTRUCTURE:
            infrastructure += 1
        else:
            quarantined.setdefault(record["task_id"], _quarantine(record))
    return {"tasks": len(tasks), "scored": len(scored), "attempts": attempts, "counted": counted,
            "infrastructure": infrastructure, "quarantined": [quarantined[t] for t in sorted(quarantined)],
            "skipped": skipped}


def denominator_line(scored: Mapping[str, Any]) -> str:
    """What the figures are over, as the run's last line, the report and docs/reports.md say it:
    ``on 3 of 4 tasks; 1 infrastructure`` (one attempt per task), ``on 4 of 4 tasks (7 of 8 attempts);
    1 infrastructure``, ``on 3 of 5 tasks; 2 quarantined: a (preflight_failed), b (preflight_flaky)``."""
    line = f"on {scored['scored']} of {scored['tasks']} tasks"
    attempts, counted = scored.get("attempts"), scored.get("counted")  # absent from metrics.json of older versions
    if attempts is not None and counted is not None and counted != attempts != scored["tasks"]:
        line += f" ({counted} of {attempts} attempts)"  # several per task, some left out
    if scored.get("infrastructure"):
        line += f"; {scored['infrastructure']} infrastructure"
    quarantined = scored.get("quarantined") or []
    if quarantined:
        line += f"; {len(quarantined)} quarantined: " + ", ".join(
            f"{visible(q['task_id'])} ({visible(q['reason'])})" for q in quarantined)
    return line


def _pass_at_k(table: list[dict[str, Any]]) -> dict[str, float]:
    samples: dict[str, list[bool]] = {}
    for row in table:
        samples.setdefault(row["task_id"], []).append(row["correct"] is True)
    fewest = min((len(s) for s in samples.values()), default=0)
    return {
        str(k): sum(pass_at_k(len(s), sum(s), k) for s in samples.values()) / len(samples)
        for k in sorted({*PASS_AT_K, fewest}) if 1 <= k <= fewest
    }


def stats(table: Iterable[dict[str, Any]], pricing: Mapping[str, float] | None = None) -> dict[str, Any]:
    """The summary of rows (``rows``) of finished attempts: the fields of ``MetricStats``.

    Counts, errors, usage and time are of every attempt; accuracy and pass@k of those ``left_out``
    leaves in, where a failed attempt is wrong (as in the Benchmark's own metrics).
    """
    table = [row for row in table if row["status"] != MISSING]
    counted = [row for row in table if left_out(row) is None]
    counts: dict[str, int] = {}
    errors: dict[str, int] = {}
    failures: dict[str, int] = {}
    for row in table:
        counts[row["status"]] = counts.get(row["status"], 0) + 1
        if row["status"] in _ERROR_STATUSES:
            kind = error_kind(row["status"], row["error"])
            errors[kind] = errors.get(kind, 0) + 1
        if row["failure_class"] in _FAILURE_CLASSES and row["status"] != TaskStatus.COMPLETED.value:
            failures[row["failure_class"]] = failures.get(row["failure_class"], 0) + 1
    right = sum(1 for row in counted if row["correct"] is True)
    ran = sum(1 for row in table if left_out(row) != QUARANTINED)  # a quarantined attempt ran nothing
    prompt = sum(row["prompt_tokens"] or 0 for row in table)
    completion = sum(row["completion_tokens"] or 0 for row in table)
    cached = {key: int(sum(row.get(key) or 0 for row in table)) for key in _CACHED}
    paid = paid_and_saved({"prompt_tokens": prompt, "completion_tokens": completion, **cached}, pricing)
    if pricing is None:  # no prices: the cost the attempts' source reported, when it did (an import's: Harbor's)
        reported = [row["cost_usd"] for row in table if row.get("cost_usd") is not None]
        if reported:
            paid["cost_usd"] = round(sum(reported), COST_DIGITS)
    walls = [(row["run_seconds"] or 0) + (row["evaluate_seconds"] or 0) for row in table
             if row["run_seconds"] is not None or row["evaluate_seconds"] is not None]
    return {
        "attempts": len(table),
        "counts": dict(sorted(counts.items())),
        # the most frequent first, as the run's summary line lists them
        "errors": dict(sorted(errors.items(), key=lambda item: (-item[1], item[0]))),
        "failures": {cls.value: failures[cls.value] for cls in FailureClass if cls.value in failures},
        "counted": len(counted),
        "accuracy": right / len(counted) if counted else None,
        "accuracy_ci95": wilson_interval(right, len(counted)),
        "pass_at_k": _pass_at_k(counted),
        "calls": int(sum(row["calls"] or 0 for row in table)),
        "prompt_tokens": int(round(prompt)),
        "completion_tokens": int(round(completion)),
        "latency_seconds": spread(row["latency_seconds"] for row in table
                                  if row["latency_seconds"] is not None and (row["calls"] or 0) > 0),
        "wall_seconds": spread(walls),
        **paid,
        **cost_figures(paid["cost_usd"], ran, right),
        **cached,
    }


def summary(table: Iterable[dict[str, Any]], pricing: Mapping[str, float] | None = None) -> dict[str, Any]:
    """``stats`` of every finished attempt, and of those of each task category: metrics.json's ``summary``."""
    table = list(table)
    by_category: dict[str, list[dict[str, Any]]] = {}
    for row in table:
        if row["category"] is not None:
            by_category.setdefault(str(row["category"]), []).append(row)
    return {"overall": stats(table, pricing),
            "by_category": {category: stats(part, pricing) for category, part in sorted(by_category.items())}}


# --- one line per run: ``agentcompass runs`` -----------------------------------------------


def last_change(path: Path) -> float | None:
    """The newest modification time (seconds since the epoch) of the files under ``path``."""
    newest = None
    try:
        for entry, fd in trees.walk(path, most_depth=WALK_DEPTH):
            if entry.kind == "dir":
                continue
            try:
                name = os.path.basename(entry.path)
                stamp = os.stat(name, dir_fd=fd, follow_symlinks=False).st_mtime
            except OSError:  # a file replaced while we walk: its new version is counted when seen
                continue
            newest = stamp if newest is None else max(newest, stamp)
    except OSError:  # the folder itself is gone (or a link)
        pass
    return newest


def imported_change(path: Path) -> float | None:
    """When an import last changed: its log's modification time, or its folder's newest file's (``last_change``);
    never through a link."""
    try:
        info = os.lstat(path)
    except OSError:
        return None
    return last_change(path) if stat.S_ISDIR(info.st_mode) else info.st_mtime


def overview(run: Run) -> dict[str, Any]:
    """What ``agentcompass runs`` shows of one run: who ran what, how far it got, how it scored, what it cost."""
    # a scanned run whose metrics.json is not of its files: its rows are read once, for both figures
    flags = summarized_flags(run) if scanned(run.request) else None
    scans = scans_of(run) if scanned(run.request) and flags is None else None
    table = None if scans is None else list(rows(run, scans=scans))
    finished, total, scored = current_stats(run, table)
    if table is not None and scans is not None:
        flags = flag_counts(table, scans)
    changed = imported_change(run.path) if run.imported is not None else last_change(run.path)
    return {
        "namespace": run.namespace, "run_id": run.run_id, "request": run.name, "path": str(run.path),
        "benchmark": run.component("benchmark"), "harness": run.component("harness"),
        "model": (run.request.get("model") or {}).get("id", ""),
        "attempts_done": finished["attempts"], "attempts_total": total,
        "errors": sum(finished["errors"].values()),
        # a metrics.json of a version before the classes has none: its result files name none either
        "failures": dict(finished.get("failures") or {}),
        "accuracy": finished["accuracy"], "cost_usd": finished["cost_usd"],
        "cost_per_attempt_usd": finished["cost_per_attempt_usd"], "cost_per_solved_usd": finished["cost_per_solved_usd"],
        "cached_calls": finished.get("cached_calls") or 0, "saved_usd": finished.get("saved_usd"),
        # what the accuracy is over: the tasks and attempts counted, and those left out
        "scored_on": _scored_on(scored),
        # attempts a transcript scanner flagged, and by scanner id; null for a run whose request names none
        "flagged": None if flags is None else flags["flagged"],
        "flagged_by": None if flags is None else {i: (s or {}).get("flagged", 0)
                                                   for i, s in (flags.get("scanners") or {}).items()},
        "last_change": None if changed is None else
        datetime.datetime.fromtimestamp(changed, datetime.timezone.utc).astimezone().isoformat(timespec="seconds"),
    }


def current_stats(run: Run, table: list[dict[str, Any]] | None = None) -> tuple[dict[str, Any], int | None, Any]:
    """The run's ``stats`` over its finished attempts (``with_cost_figures``), the attempts its tasks.json lists
    (None before it is written) and its ``scored_on``: metrics.json's when it is of the result files on disk
    (``summarized``), else computed from them (``table``, its ``rows`` when the caller has them). What
    ``runs`` and ``compare`` show of a whole run."""
    current = summarized(run)
    if current is not None:
        return with_cost_figures(current[0]), current[1], (run.metrics() or {}).get("scored_on")
    table = list(rows(run)) if table is None else table
    # unknown until tasks.json is written (an import's rows are every attempt it lists, finished or not)
    total = len(table) if run.imported is not None or Path(layout.tasks_file(run.path)).exists() else None
    return stats(table, (run.request.get("model") or {}).get("pricing")), total, scored_on(table)


def _scored_on(scored: Any) -> dict[str, Any] | None:
    if not isinstance(scored, dict):
        return None
    return {"tasks": scored.get("tasks"), "scored": scored.get("scored"), "attempts": scored.get("attempts"),
            "counted": scored.get("counted"), "infrastructure": scored.get("infrastructure") or 0,
            "quarantined": len(scored.get("quarantined") or [])}


def summarized(run: Run) -> tuple[dict[str, Any], int] | None:
    """metrics.json's summary of every attempt (``stats``), and the attempts tasks.json lists, when that
    summary is of the result files on disk: each attempt has its result.json, and none was written after
    metrics.json (every file here is written by rename: its time says when it was built). None otherwise:
    a run that has not finished or has changed since, or a metrics.json of a version before the summary.

    Each result file is looked at, not read: ``agentcompass runs`` over 100,000 attempts. An import has none.
    """
    if run.imported is not None:
        return None
    try:
        built = os.stat(layout.metrics_file(run.path)).st_mtime_ns
        tasks = _read(layout.tasks_file(run.path))["tasks"]
    except FileNotFoundError:
        return None
    for task in tasks:
        segment = task_segment(task["task_id"])
        for n in range(1, run.per_task + 1):
            try:
                if os.stat(layout.result_file(layout.attempt_folder(run.path, segment, n))).st_mtime_ns > built:
                    return None
            except FileNotFoundError:
                return None
    metrics = run.metrics() or {}
    overall = (metrics.get("summary") or {}).get("overall")
    total = len(tasks) * run.per_task
    # a metrics.json of a version before the one denominator (no ``counted``) is computed again from the files
    if not isinstance(overall, dict) or overall.get("attempts") != total or "counted" not in overall:
        return None
    return (overall, total) if "counted" in (metrics.get("scored_on") or {}) else None


def attempt(folder: str | Path, *, text_limit: int | None = None) -> dict[str, Any]:
    """Everything one attempt folder holds, parsed.

    ``prepared``, ``output``, ``result``, ``plan``: the stage files (``None`` when
    missing); ``trajectory``: its events in order (a line that is not JSON is kept
    as ``{"unparsed": line}``); ``logs``: each stage log present; ``files``: every
    other file of the folder and its subfolders (not the workspace, the agent's
    working copy), as text. ``text_limit`` keeps the last that many bytes of each
    log and file: a traceback or a test's verdict is at the end.

    Nothing outside the folder is read: a link is shown as a link (its target as
    text), a FIFO, socket or device by its kind, never opened; names are shown as
    ``trees.shown`` writes them (bytes that are not UTF-8 and control characters
    escaped); folders deeper than ``WALK_DEPTH`` are left out, with a note.
    """
    # plain strings and one directory listing: a report reads 10,000 of these
    folder = os.fspath(folder)
    record: dict[str, Any] = {**{key: None for key in ATTEMPT_FILES.values()},
                              "trajectory": [], "logs": {}, "files": {}}
    for name, text in _attempt_files(folder, text_limit):
        if name in ATTEMPT_FILES and text is None:
            record[ATTEMPT_FILES[name]] = read_json(os.path.join(folder, name))
        elif name == TRAJECTORY and text is None:
            data = trees.read_bytes(os.path.join(folder, name)).decode("utf-8", "replace")
            for line in data.splitlines():
                if line.strip():
                    try:
                        record["trajectory"].append(json.loads(line))
                    except ValueError:
                        record["trajectory"].append({"unparsed": line})
        else:
            record["logs" if name in STAGE_LOGS else "files"][name] = text if text is not None else \
                _text_tail(os.path.join(folder, name), text_limit)
    return record


_WORKSPACE = os.fsencode(layout.WORKSPACE)
# how deep the folders of an attempt are read (an agent's workspace can be thousands of levels deep)
WALK_DEPTH = 32


def _attempt_files(folder: str, text_limit: int | None, most: int = 200) -> list[tuple[str, str | None]]:
    """(name relative to the folder, shown with ``trees.shown``; None or the text to show) of its files
    and its subfolders' files, in name order; not the workspace nor hidden files (interrupted writes).

    None: a regular file at a plain name, read by path by the caller (a stage file, a log). Anything
    else gets its text here: a file whose name had to be escaped, read through its folder's descriptor;
    a link, a special file, a folder too deep, described and never opened.
    """
    found: list[tuple[str, str | None]] = []
    try:
        for entry, fd in trees.walk(folder, most_depth=WALK_DEPTH, prune=_not_shown):
            parts = entry.path.split(b"/")
            if parts[-1].startswith(b"."):
                continue
            name = trees.shown(entry.path)
            if entry.kind == "dir":
                if entry.cut:
                    found.append((name + "/", f"[a folder {WALK_DEPTH} levels down: what it holds is left out]"))
                continue
            if entry.kind == "link":
                target = trees.shown(entry.target or b"")
                found.append((name, f"[a symbolic link to {target}: not followed]"))
            elif entry.kind != "file":
                found.append((name, f"[{trees.SPECIAL_KINDS[entry.kind]}: not read]"))
            elif name == os.fsdecode(entry.path) and len(parts) == 1:
                found.append((name, None))
            else:
                found.append((name, _tail_of(parts[-1], fd, text_limit)))
            if len(found) >= most:
                break
    except OSError:  # the folder is gone, or is not a folder
        return []
    return sorted(found)


def _not_shown(path: bytes) -> bool:
    """A folder ``attempt`` does not read: the prepared workspace, a hidden folder."""
    return path == _WORKSPACE or path.rsplit(b"/", 1)[-1].startswith(b".")


def _tail_of(name: bytes, dir_fd: int, limit: int | None) -> str:
    try:
        fd = trees.open_file(name, dir_fd)
    except OSError as exc:
        return f"[could not be read: {exc.strerror}]"
    with os.fdopen(fd, "rb") as handle:
        return _tail(handle, os.fstat(fd).st_size, limit)


def _text_tail(path: str, limit: int | None) -> str:
    try:
        fd = trees.open_file(path)
    except OSError as exc:
        return f"[could not be read: {exc.strerror}]"
    with os.fdopen(fd, "rb") as handle:
        return _tail(handle, os.fstat(fd).st_size, limit)


def _tail(handle, size: int, limit: int | None) -> str:
    if limit is not None and size > limit:
        handle.seek(size - limit)
        data = handle.read(limit)
        if b"\0" in data[:8192]:
            return f"[a binary file of {size} bytes]"
        return f"[the first {size - limit} of {size} bytes are left out]\n" + data.decode("utf-8", "replace")
    data = handle.read(limit) if limit is not None else handle.read()
    if b"\0" in data[:8192]:
        return f"[a binary file of {size} bytes]"
    return data.decode("utf-8", "replace")
