"""Results as data: every attempt of one or more runs, one row each, as a pandas DataFrame.

    from agentcompass import results
    frame = results.load("results/default/my-eval")          # one run
    frame = results.load("results")                           # every run under a results root
    frame.groupby("category").score.mean()

A row is one attempt the run's ``tasks.json`` lists; an attempt that has not
finished yet has status ``missing`` and no score. The columns are ``COLUMNS``.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from agentcompass.paths import task_segment

# identity, what was run, the verdict, what it cost, how long it took, where it ran
COLUMNS = [
    "namespace", "run_id", "request", "benchmark", "harness", "model", "environment",
    "task_id", "attempt", "category", "status", "score", "correct", "error", "error_stage", "retries_used",
    "calls", "retries", "prompt_tokens", "completion_tokens", "latency_seconds",
    "run_seconds", "evaluate_seconds", "host", "slurm_job_id", "attempt_dir",
]
MISSING = "missing"
_USAGE = ("calls", "retries", "prompt_tokens", "completion_tokens", "latency_seconds")
_TIMINGS = ("run_seconds", "evaluate_seconds")
# what the stages write in an attempt folder, read by ``attempt``; any other file there is the
# attempt's own evidence (a harness's log, a verifier's output)
ATTEMPT_JSON = ("prepared.json", "output.json", "result.json", "plan.json")
STAGE_LOGS = ("prepare.log", "run.log", "evaluate.log")
TRAJECTORY = "trajectory.jsonl"


@dataclass(frozen=True)
class Run:
    """One run's folder (``results/<namespace>/<run_id>/``) and what its request.json says."""

    path: Path
    request: dict[str, Any]

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

    def attempts(self) -> list[tuple[dict, int, Path]]:
        """(task, attempt, attempt folder) of every attempt tasks.json lists, in its order."""
        tasks_file = self.path / "tasks.json"
        if not tasks_file.exists():
            return []
        tasks = json.loads(tasks_file.read_text())["tasks"]
        per_task = int((self.request.get("execution") or {}).get("attempts") or 1)
        return [(task, n, self.path / "attempts" / task_segment(task["task_id"]) / str(n))
                for task in tasks for n in range(1, per_task + 1)]


def open_run(path: str | Path) -> Run:
    """The run in ``path`` (a folder holding request.json)."""
    path = Path(path)
    request_file = path / "request.json"
    if not request_file.exists():
        raise FileNotFoundError(f"{path} holds no request.json: it is not a run's folder "
                                f"(results/<namespace>/<run_id>/). Fix: name a run's folder or a results root")
    return Run(path, json.loads(request_file.read_text()))


def find_runs(*paths: str | Path) -> list[Run]:
    """The runs in ``paths``: each a run's folder, or a folder under which runs are looked for."""
    runs: list[Run] = []
    for path in paths:
        path = Path(path)
        if (path / "request.json").exists():
            runs.append(open_run(path))
            continue
        if not path.is_dir():
            raise FileNotFoundError(f"{path} does not exist. Fix: name a run's folder or a results root "
                                    f"(default: results)")
        runs += [open_run(p.parent) for p in sorted(path.glob("*/*/request.json"))]
        runs += [open_run(p.parent) for p in sorted(path.glob("*/request.json"))]
    return runs


def rows(run: Run) -> Iterator[dict[str, Any]]:
    """One dict per attempt of ``run``, with the keys of ``COLUMNS``."""
    base = {
        "namespace": run.namespace, "run_id": run.run_id, "request": run.name,
        "benchmark": run.component("benchmark"), "harness": run.component("harness"),
        "model": (run.request.get("model") or {}).get("id", ""), "environment": run.component("environment"),
    }
    for task, attempt, folder in run.attempts():
        row = {**base, "task_id": task["task_id"], "attempt": attempt, "category": task.get("category"),
               "attempt_dir": str(folder)}
        result_file = folder / "result.json"
        result = json.loads(result_file.read_text()) if result_file.exists() else None
        if result is None:
            row.update({"status": MISSING, "retries_used": 0})
        else:
            usage, timings, where = result.get("usage") or {}, result.get("timings") or {}, result.get("provenance") or {}
            row.update({
                "status": result["status"], "score": result.get("score"), "correct": result.get("correct"),
                "error": result.get("error"), "error_stage": result.get("error_stage"),
                "retries_used": result.get("retries_used", 0),
                **{key: usage.get(key) for key in _USAGE},
                **{key: timings.get(key) for key in _TIMINGS},
                "host": where.get("host"), "slurm_job_id": where.get("slurm_job_id"),
            })
        yield {column: row.get(column) for column in COLUMNS}


def load(*paths: str | Path):
    """Every attempt of the runs in ``paths`` (run folders or results roots; default ``results``)."""
    import pandas as pd

    runs = find_runs(*(paths or ("results",)))
    return pd.DataFrame([row for run in runs for row in rows(run)], columns=COLUMNS)


def error_kind(status: str | None, error: str | None) -> str:
    """An attempt's error, grouped with its likes: the status and the error's first line, numbers as N."""
    lines = (error or "").strip().splitlines()
    text = re.sub(r"\d+(?:\.\d+)?", "N", lines[0] if lines else "no message")
    return f"{status}: {text[:100]}"


def attempt(folder: str | Path, *, text_limit: int | None = None) -> dict[str, Any]:
    """Everything one attempt folder holds, parsed.

    ``prepared``, ``output``, ``result``, ``plan``: the stage files (``None`` when
    missing); ``trajectory``: its events in order (a line that is not JSON is kept
    as ``{"unparsed": line}``); ``logs``: each stage log present; ``files``: every
    other file of the folder and its subfolders (not the workspace, the agent's
    working copy), as text. ``text_limit`` keeps the last that many bytes of each
    log and file: a traceback or a test's verdict is at the end.
    """
    # plain strings and one directory listing: a report reads 10,000 of these
    folder = os.fspath(folder)
    record: dict[str, Any] = {"prepared": None, "output": None, "result": None, "plan": None,
                              "trajectory": [], "logs": {}, "files": {}}
    for name, path in _attempt_files(folder):
        if name in ATTEMPT_JSON:
            with open(path, encoding="utf-8") as handle:
                record[name[:-len(".json")]] = json.load(handle)
        elif name == TRAJECTORY:
            with open(path, encoding="utf-8", errors="replace") as handle:
                for line in handle:
                    if line.strip():
                        try:
                            record["trajectory"].append(json.loads(line))
                        except ValueError:
                            record["trajectory"].append({"unparsed": line.rstrip("\n")})
        else:
            record["logs" if name in STAGE_LOGS else "files"][name] = _text_tail(path, text_limit)
    return record


def _attempt_files(folder: str, most: int = 200) -> list[tuple[str, str]]:
    """(name relative to the folder, path) of its files and its subfolders' files, in name order;
    not the workspace nor hidden files (interrupted writes)."""
    found: list[tuple[str, str]] = []
    pending = [("", folder)]
    while pending and len(found) < most:
        prefix, directory = pending.pop()
        try:
            entries = sorted(os.scandir(directory), key=lambda e: e.name)
        except (FileNotFoundError, NotADirectoryError):
            continue
        for entry in entries:
            if entry.name.startswith("."):
                continue
            if entry.is_dir(follow_symlinks=False):
                if prefix or entry.name != "workspace":
                    pending.append((f"{prefix}{entry.name}/", entry.path))
            elif entry.is_file():
                found.append((prefix + entry.name, entry.path))
    return sorted(found[:most])


def _text_tail(path: str, limit: int | None) -> str:
    size = os.path.getsize(path)
    with open(path, "rb") as handle:
        if limit is not None and size > limit:
            handle.seek(size - limit)
            data = handle.read()
            if b"\0" in data[:8192]:
                return f"[a binary file of {size} bytes]"
            return f"[the first {size - limit} of {size} bytes are left out]\n" + data.decode("utf-8", "replace")
        data = handle.read()
    if b"\0" in data[:8192]:
        return f"[a binary file of {size} bytes]"
    return data.decode("utf-8", "replace")
