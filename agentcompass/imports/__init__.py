"""Runs made by other tools, read as agentcompass runs: an Inspect AI ``.eval`` log, a Harbor job folder.

An import is untrusted data, read and never written: each reader turns what it finds into an
``ImportedRun`` (below), which ``agentcompass.results`` shows as a run like any other (its rows, for
``compare``, ``runs``, ``report`` and ``export``). Each reader bounds what it reads (sizes, counts,
depth), never follows a link out of what it was given, and refuses what it cannot read with an
``ImportError_`` naming the file and what is wrong, never a traceback.
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentcompass._util import trees
from agentcompass.errors import AgentCompassError


class ImportError_(AgentCompassError, ValueError):
    """An import that cannot be read: the message names the file, what is wrong and how to fix it."""


@dataclass(frozen=True)
class ImportedAttempt:
    """One attempt of an imported run, in the project's terms (docs/reports.md says how each source maps).

    ``status`` is a ``TaskStatus`` value (``completed``, ``run_error``, ``eval_error``); ``failure_class`` a
    ``FailureClass`` value or None; ``usage`` holds the keys of a result's usage (``calls``,
    ``prompt_tokens``, ``completion_tokens``, ``latency_seconds``) that the source gives; ``timings`` the
    keys ``run_seconds`` and ``evaluate_seconds`` it gives."""

    task_id: str
    attempt: int  # from 1 (an Inspect epoch, a Harbor trial of the task)
    status: str
    score: float | None = None
    correct: bool | None = None
    error: str | None = None
    error_stage: str | None = None
    failure_class: str | None = None
    category: str | None = None
    answer: Any = None
    usage: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ImportedRun:
    """A run read from another tool's files: where it came from, who ran what, and its attempts."""

    source: str  # "inspect" or "harbor"
    path: Path  # the log file or the job folder, as given
    run_id: str
    benchmark: str  # the task set (Inspect's task name, Harbor's dataset)
    harness: str  # the agent (Inspect's solver, Harbor's agent)
    model: str
    attempts: tuple[ImportedAttempt, ...] = ()
    # what else the source says of the run, shown but never computed with (its own metrics, its version)
    details: dict[str, Any] = field(default_factory=dict)


# The readers, each in its own module, by name: (module, ``is_<kind>(path) -> bool``, ``read(path) -> ImportedRun``).
# Imported by name when a path is looked at (importlib), so that a reader whose module is absent (not written yet,
# or an optional one) is simply not asked, and what a reader needs (inspect_ai) is imported only for an import.
READERS: tuple[tuple[str, str, str], ...] = (
    ("agentcompass.imports.inspect", "is_log", "read_log"),
    ("agentcompass.imports.harbor", "is_job", "read_job"),
)
# the synthesized request's output.namespace: where ``runs`` and ``compare`` show an import
NAMESPACE = "imported"


def _reader(path: Path) -> Any:
    """The ``read`` function of the reader whose kind ``path`` is, or None when it is none of them."""
    for module_name, is_kind, read in READERS:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name == module_name:  # that reader is not there: not asked
                continue
            raise
        if getattr(module, is_kind)(path):
            return getattr(module, read)
    return None


def is_import(path: str | os.PathLike) -> bool:
    """Whether ``path`` names another tool's run a reader knows (by its name or its shape, nothing read):
    an Inspect ``.eval`` log, a Harbor job folder. Such a path is an import, read (or refused) by ``read_import``."""
    return _reader(Path(path)) is not None


def read_import(path: str | os.PathLike) -> ImportedRun:
    """The run another tool wrote at ``path``, read by the reader of its kind; ``ImportError_`` naming it when
    no reader knows it or its reader refuses it."""
    path = Path(path)
    read = _reader(path)
    if read is None:
        raise ImportError_(f"{shown(path)} is not a run another tool wrote that agentcompass reads (an Inspect .eval "
                           f"log, a Harbor job folder). Fix: name such a log or folder, or a run's folder")
    return read(path)


def shown(path: str | os.PathLike) -> str:
    """A path as a message shows it: bytes that are not UTF-8 and control characters escaped."""
    return trees.shown(os.fspath(path))


def request_of(run: ImportedRun) -> dict[str, Any]:
    """The request.json an import stands in for, so that every view reads it as a run: ``output`` (namespace
    ``imported``, the run's id), the ids of its benchmark, harness and model, its attempts per task, and
    ``imported`` (where it came from and what else the source says of it; shown, never computed with)."""
    return {
        "output": {"namespace": NAMESPACE, "run_id": run.run_id},
        "metadata": {"request_name": run.run_id},
        "benchmark": {"id": run.benchmark}, "harness": {"id": run.harness}, "model": {"id": run.model},
        "environment": {"id": ""},
        "execution": {"attempts": max((a.attempt for a in run.attempts), default=1)},
        "imported": {"source": run.source, "path": shown(run.path), **run.details},
    }
