"""Runs made by other tools, read as agentcompass runs: an Inspect AI ``.eval`` log, a Harbor job folder.

An import is untrusted data, read and never written: each reader turns what it finds into an
``ImportedRun`` (below), which ``agentcompass.results`` shows as a run like any other (its rows, for
``compare``, ``runs``, ``report`` and ``export``). Each reader bounds what it reads (sizes, counts,
depth), never follows a link out of what it was given, and refuses what it cannot read with an
``ImportError_`` naming the file and what is wrong, never a traceback.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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
