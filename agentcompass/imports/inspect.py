"""An Inspect AI ``.eval`` log read as a run: ``read_log(path) -> ImportedRun``, with inspect_ai's own reader.

inspect_ai is an optional extra (``pip install 'agentcompass[inspect]'``), imported only when a log is read.
The log is untrusted data, read and never written: it must be a regular file at the name given (a link is not
followed), of at most ``MOST_BYTES``, a whole zip archive whose members unpack to at most ``MOST_UNPACKED``
bytes; all of this is checked before inspect_ai reads a byte of it. Anything else is an ``ImportError_`` that
names the file, never a traceback.

How a sample becomes an attempt (docs/reports.md, "Runs of other tools", says the same):

- the sample's id is the ``task_id`` (as text), its epoch the ``attempt``;
- its score is the first scorer's value: ``C``, ``correct``, ``yes``, ``true`` or True are a score of 1 and
  correct; ``I``, ``incorrect``, ``no``, ``false`` or False a score of 0 and not correct; ``P`` (partial) 0.5 and
  ``N`` (no answer) 0, neither correct; a number is the score, correct when it is 1 or more; a value of another
  kind (a dict of several values) gives no score;
- a sample that ended in an error is a ``run_error``, whose failure class is decided from the types of the
  exceptions its traceback names: a limit (``LimitExceededError``) ``limit``; a sandbox's or Docker's error
  ``infrastructure``; a model API's (openai, anthropic, httpx, tenacity's retries of a model call, inspect's own
  model errors) ``endpoint``; anything else ``harness``;
- a sample that reached a limit (``sample.limit``) without an error is a ``run_error`` of class ``limit``, with
  no score (as an agentcompass attempt that ran out of steps), whatever Inspect scored it;
- a sample with neither an error nor a score is an ``eval_error`` of class ``verifier``;
- a sample the log's dataset lists but the log does not hold (a run stopped early) is ``missing``;
- its ``model_usage`` summed over models: ``input_tokens`` -> ``prompt_tokens``, ``output_tokens`` ->
  ``completion_tokens``; its model events are the ``calls``, their working time summed ``latency_seconds``;
- ``total_time`` -> ``run_seconds``, ``working_time`` -> ``working_seconds`` (no column shows it).
"""

from __future__ import annotations

import os
import re
import stat
import zipfile
from pathlib import Path
from typing import Any

from agentcompass.imports import ImportedAttempt, ImportedRun, ImportError_, shown

SUFFIX = ".eval"
# a log larger than this is refused before it is read (inspect_ai reads a whole log into memory)
MOST_BYTES = 512 * 1024**2
# and one whose members would unpack to more than this (a zip bomb is small)
MOST_UNPACKED = 2 * 1024**3
MOST_MEMBERS = 1_000_000
# what an attempt keeps of an error's message and of an answer (a log may hold megabytes of either)
MOST_ERROR = 4_000
MOST_ANSWER = 10_000
# of a traceback, its end is read for the exceptions' types (the last one raised is at its end)
MOST_TRACEBACK = 64_000
INSTALL = "pip install 'agentcompass[inspect]'"

_TRUE = frozenset({"c", "correct", "yes", "true"})
_FALSE = frozenset({"i", "incorrect", "no", "false"})
_PARTIAL = {"p": 0.5, "n": 0.0}
# a traceback's line that names an exception's type: ``openai.InternalServerError: Error code: 500``
_RAISED = re.compile(r"^([A-Za-z_][\w.]*)(?::|$)", re.M)
_ENDPOINT_MODULES = ("openai.", "anthropic.", "httpx.", "httpcore.", "tenacity.", "google.genai.", "google.api_core.",
                     "mistralai.", "groq.", "botocore.", "aiohttp.", "inspect_ai.model.")
_ENDPOINT_TYPES = frozenset({"APIError", "APIStatusError", "APIConnectionError", "APITimeoutError", "RateLimitError",
                             "InternalServerError", "ServiceUnavailableError", "RetryError", "ModelAPIError"})


def is_log(path: Path) -> bool:
    """Whether ``path`` is named as an Inspect log (``*.eval``): nothing is read (``read_log`` refuses what it is
    not: a link, a folder, a file that is not a log)."""
    return os.fsencode(path).endswith(SUFFIX.encode())


def read_log(path: str | os.PathLike) -> ImportedRun:
    """The run an Inspect ``.eval`` log records, its samples as attempts (the module's docstring says how)."""
    path = Path(path)
    name = shown(path)
    _check_file(path, name)
    try:
        from inspect_ai.log import read_eval_log  # the optional extra, imported for a log only
    except ImportError:
        raise ImportError_(f"{name}: reading an Inspect log needs inspect_ai, which is not installed. "
                           f"Fix: {INSTALL}") from None
    try:
        log = read_eval_log(os.fspath(path))
    except Exception as exc:  # noqa: BLE001 - whatever inspect_ai raises on a log it cannot read
        raise ImportError_(f"{name} cannot be read as an Inspect log ({type(exc).__name__}: "
                           f"{_first_line(str(exc))}). Fix: name a whole .eval log Inspect wrote") from None
    try:
        return _run(path, log)
    except (AttributeError, TypeError, ValueError) as exc:
        raise ImportError_(f"{name} is not an Inspect log agentcompass understands ({type(exc).__name__}: "
                           f"{_first_line(str(exc))}). Fix: name a .eval log of inspect_ai 0.3") from None


def _check_file(path: Path, name: str) -> None:
    """Refuses what is not a whole log at this very name, before anything reads it (``ImportError_``)."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        raise ImportError_(f"{name} does not exist. Fix: name an Inspect .eval log") from None
    except OSError as exc:
        raise ImportError_(f"{name} cannot be looked at ({exc.strerror}). Fix: name an Inspect .eval log you can "
                           f"read") from None
    if stat.S_ISLNK(info.st_mode):
        raise ImportError_(f"{name} is a symbolic link, which an import never follows (it may point out of what "
                           f"you named). Fix: name the log itself")
    if not stat.S_ISREG(info.st_mode):
        kind = "a folder" if stat.S_ISDIR(info.st_mode) else "a special file"
        raise ImportError_(f"{name} is {kind}, not an Inspect log. Fix: name an Inspect .eval log (a file)")
    if info.st_size > MOST_BYTES:
        raise ImportError_(f"{name} is {info.st_size:,} bytes, more than the {MOST_BYTES:,} an imported log may "
                           f"be. Fix: import a smaller log (inspect log dump, or a run of fewer samples)")
    try:
        with zipfile.ZipFile(path) as archive:
            members = archive.infolist()
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as exc:
        raise ImportError_(f"{name} is not a whole .eval log (a zip archive): it is cut short or something else "
                           f"({_first_line(str(exc))}). Fix: name a whole log Inspect wrote") from None
    if len(members) > MOST_MEMBERS or sum(m.file_size for m in members) > MOST_UNPACKED:
        raise ImportError_(f"{name} would unpack to more than {MOST_UNPACKED:,} bytes (or {MOST_MEMBERS:,} "
                           f"files). Fix: import a smaller log")


def _first_line(text: str, most: int = 300) -> str:
    lines = text.strip().splitlines()
    return shown(lines[0][:most]) if lines else "no message"


def _run(path: Path, log: Any) -> ImportedRun:
    spec = log.eval
    samples = list(log.samples or ())
    attempts = [_attempt(sample) for sample in samples]
    epochs = int(getattr(spec.config, "epochs", None) or 1)
    listed = [str(i) for i in (getattr(spec.dataset, "sample_ids", None) or ())]
    held = {(a.task_id, a.attempt) for a in attempts}
    categories = {a.task_id: a.category for a in attempts}
    # what the dataset lists and the log does not hold: a run stopped before it, or samples not kept
    attempts += [ImportedAttempt(task_id, n, "missing", category=categories.get(task_id))
                 for task_id in listed for n in range(1, epochs + 1) if (task_id, n) not in held]
    solver = spec.solver or "+".join(step.solver for step in (log.plan.steps if log.plan else ())) or "inspect"
    return ImportedRun(
        source="inspect", path=path, run_id=str(spec.eval_id), benchmark=str(spec.task), harness=str(solver),
        model=str(spec.model), attempts=tuple(sorted(attempts, key=lambda a: (a.task_id, a.attempt))),
        details={"status": str(log.status), "created": str(spec.created), "task_version": str(spec.task_version),
                 "inspect_run_id": str(spec.run_id), "packages": {str(k): str(v) for k, v in
                                                                  (spec.packages or {}).items()},
                 "error": None if log.error is None else _first_line(log.error.message)})


def _attempt(sample: Any) -> ImportedAttempt:
    task_id, epoch = str(sample.id), int(sample.epoch)
    metadata = sample.metadata if isinstance(sample.metadata, dict) else {}
    category = metadata.get("category") if isinstance(metadata.get("category"), str) else None
    usage = _usage(sample)
    timings = {key: float(value) for key, value in (("run_seconds", sample.total_time),
                                                    ("working_seconds", sample.working_time)) if value is not None}
    common: dict[str, Any] = {"category": category, "usage": usage, "timings": timings}
    if sample.error is not None:
        message = sample.error.message or ""
        return ImportedAttempt(task_id, epoch, "run_error", error=message[:MOST_ERROR], error_stage="run",
                               failure_class=failure_class(sample.error.traceback or message), **common)
    if sample.limit is not None:
        return ImportedAttempt(task_id, epoch, "run_error", error=f"limit reached: {sample.limit.type} "
                               f"({sample.limit.limit})", error_stage="run", failure_class="limit", **common)
    scores = sample.scores or {}
    if not scores:
        return ImportedAttempt(task_id, epoch, "eval_error", error="Inspect recorded no score for it",
                               error_stage="evaluate", failure_class="verifier", **common)
    first = next(iter(scores.values()))
    score, correct = score_of(first.value)
    answer = first.answer[:MOST_ANSWER] if isinstance(first.answer, str) else None
    return ImportedAttempt(task_id, epoch, "completed", score=score, correct=correct, answer=answer, **common)


def score_of(value: Any) -> tuple[float | None, bool | None]:
    """(score, correct) of a scorer's value, as the module's docstring says."""
    if isinstance(value, bool):
        return float(value), value
    if isinstance(value, (int, float)):
        return float(value), value >= 1
    if isinstance(value, str):
        word = value.strip().lower()
        if word in _TRUE:
            return 1.0, True
        if word in _FALSE:
            return 0.0, False
        if word in _PARTIAL:
            return _PARTIAL[word], False
        try:
            number = float(word)
        except ValueError:
            return None, None
        return number, number >= 1
    return None, None


def failure_class(traceback: str) -> str:
    """The failure class of a sample's error, from the types of the exceptions its traceback names (the
    module's docstring says which)."""
    raised = _RAISED.findall(traceback[-MOST_TRACEBACK:])
    if any(t.rsplit(".", 1)[-1] == "LimitExceededError" for t in raised):
        return "limit"
    if any("sandbox" in t.lower() or t.startswith("docker.") for t in raised):
        return "infrastructure"
    if any(t.startswith(_ENDPOINT_MODULES) or t.rsplit(".", 1)[-1] in _ENDPOINT_TYPES for t in raised):
        return "endpoint"
    return "harness"


def _usage(sample: Any) -> dict[str, Any]:
    models = sample.model_usage or {}
    usage: dict[str, Any] = {}
    if models:
        usage["prompt_tokens"] = sum(int(u.input_tokens or 0) for u in models.values())
        usage["completion_tokens"] = sum(int(u.output_tokens or 0) for u in models.values())
    calls = [e for e in sample.events or () if getattr(e, "event", None) == "model"]
    if calls:
        usage["calls"] = len(calls)
        usage["latency_seconds"] = round(sum(float(getattr(e, "working_time", None) or 0) for e in calls), 6)
    return usage
