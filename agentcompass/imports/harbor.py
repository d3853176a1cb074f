"""A Harbor job folder read as a run: each trial an attempt (docs/reports.md, "Harbor job folders").

A Harbor job folder (``harbor run`` writes it under ``jobs/<job name>/``) holds the job's ``config.json``
(its JobConfig) and ``result.json`` (its JobResult, written without its trial results), and one folder
per trial, each with the trial's ``config.json`` and, once the trial finished, its ``result.json`` (a
TrialResult: task name, agent and model, verifier rewards, exception, token counts, phase timings).

Harbor is never imported (it needs another Python): the JSON files are parsed here, each through
``trees.open_file`` (a regular file, never through a link, never a FIFO or a device) with a size cap, in
folders opened without following a link; nothing is ever written into the folder. What cannot be read
is an ``ImportError_`` naming the file and what is wrong.
"""

from __future__ import annotations

import datetime
import errno
import json
import os
import re
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agentcompass import layout
from agentcompass._util import trees
from agentcompass.imports import ImportedAttempt, ImportedRun, ImportError_
from agentcompass.runtime.models.result import FailureClass, TaskStatus

# Harbor's file names (bytes, as the kernel gives names), not a run's (agentcompass.layout names those)
RESULT = b"result.json"  # the job's JobResult; in a trial's folder, its TrialResult
CONFIG = b"config.json"  # the job's JobConfig; in a trial's folder, its TrialConfig (never read)
TRIAL_MARKS = (b"trial.log", b"verifier")  # what a trial's folder holds and a job's does not
RUN_REQUEST = os.fsencode(os.path.basename(layout.request_file(".")))  # an agentcompass run's folder holds it
MOST_TRIALS = 100_000
MOST_FILE_BYTES = 16 * 1024 * 1024
MOST_TOTAL_BYTES = 1024 * 1024 * 1024  # every file read for one job together
MOST_NAME_CHARS = 256  # a task name or a trial's folder name
MOST_ERROR_CHARS = 2000  # of an exception's message kept as the attempt's error

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC

# Harbor's exception types (harbor/models/trial/error_policy.py groups them for its retries) by the
# project's failure class; a type not named here is matched by _CLASS_PATTERNS, then is the harness's
_CLASS_OF_TYPE: dict[str, FailureClass] = {
    **dict.fromkeys((
        "EnvironmentStartTimeoutError", "SandboxBuildFailedError", "AgentSetupTimeoutError", "HealthcheckError",
        "SandboxLikelyOutOfMemoryError", "MemoryLimitExceededError", "SSHAccessError", "GKEExecStreamClosedError",
        "GKEPodNotFoundError", "RuntimeRequestError", "AddTestsDirError", "DownloadVerifierDirError",
        "CancelledError"), FailureClass.INFRASTRUCTURE),
    **dict.fromkeys((
        "ApiError", "ApiRateLimitError", "ApiInternalServerError", "ApiOverloadedError", "ApiConnectionClosedError",
        "ApiResponseStalledError", "UnknownApiError", "NetworkConnectionError", "ApiConnectionError",
        "ApiUsageLimitError", "RateLimitError", "InternalServerError", "ServiceUnavailableError",
        "APIConnectionError", "APIError", "Timeout", "UnsupportedModelParametersError", "BadRequestError",
        "UnprocessableEntityError", "UnsupportedParamsError", "APIResponseValidationError",
        "AgentAuthenticationError", "ModelNotFoundError", "ApiProviderResourceNotFoundError",
        "AuthenticationError", "PermissionDeniedError", "NotFoundError", "ContentPolicyViolationError"),
        FailureClass.ENDPOINT),
    **dict.fromkeys((
        "AgentTimeoutError", "ContextWindowExceededError", "OutputTokenExceededError", "ContextLengthExceededError",
        "OutputLengthExceededError", "BudgetExceededError"), FailureClass.LIMIT),
    **dict.fromkeys((
        "VerifierTimeoutError", "RewardFileNotFoundError", "RewardFileEmptyError", "VerifierOutputParseError",
        "RegradeError"), FailureClass.VERIFIER),
}
# exception types of environments and agents Harbor's table does not name, by what their name says
_CLASS_PATTERNS: tuple[tuple[re.Pattern[str], FailureClass], ...] = (
    (re.compile(r"Verifier|Reward"), FailureClass.VERIFIER),
    (re.compile(r"Docker|Environment|Sandbox|Container|Compose|Image|Daytona|Modal|E2B", re.I),
     FailureClass.INFRASTRUCTURE),
    (re.compile(r"^Api|API|RateLimit|Overloaded"), FailureClass.ENDPOINT),
    (re.compile(r"Timeout|Exceeded"), FailureClass.LIMIT),
)


def failure_class_of(exception_type: str) -> FailureClass:
    """The project's failure class of a Harbor exception type (docs/reports.md, "Harbor job folders")."""
    if exception_type in _CLASS_OF_TYPE:
        return _CLASS_OF_TYPE[exception_type]
    for pattern, failure_class in _CLASS_PATTERNS:
        if pattern.search(exception_type):
            return failure_class
    return FailureClass.HARNESS


def is_job(path: str | os.PathLike) -> bool:
    """Whether ``path`` is laid out as a Harbor job folder: a folder holding ``config.json`` and ``result.json``,
    and neither an agentcompass run's ``request.json`` nor the ``trial.log`` and ``verifier/`` of a Harbor trial.

    Only names are looked at (nothing is opened): whether the files can be read is ``read_job``'s to say."""
    try:
        # the folder named may be reached through a link (jobs/latest), as read_job reads it
        fd = os.open(os.path.realpath(os.fspath(path)), _DIR_FLAGS)
    except (OSError, ValueError):
        return False
    try:
        present = {name for name in (CONFIG, RESULT, RUN_REQUEST, *TRIAL_MARKS) if _exists(name, fd)}
    finally:
        os.close(fd)
    if not {CONFIG, RESULT} <= present or present & {RUN_REQUEST, *TRIAL_MARKS}:
        return False
    # a trial's folder holds config.json and result.json too: it is the one whose parent is a job
    parent = os.path.dirname(os.path.realpath(os.fspath(path)))
    try:
        fd = os.open(parent, _DIR_FLAGS)
    except OSError:
        return True
    try:
        return not (_exists(CONFIG, fd) and _exists(RESULT, fd) and not _exists(RUN_REQUEST, fd))
    finally:
        os.close(fd)


def _exists(name: bytes, dir_fd: int) -> bool:
    """Whether the folder ``dir_fd`` has an entry ``name`` (of any kind: a link is not followed)."""
    try:
        os.lstat(name, dir_fd=dir_fd)
    except OSError:
        return False
    return True


def read_job(path: str | os.PathLike) -> ImportedRun:
    """The Harbor job folder ``path`` as a run: one attempt per finished trial (``ImportError_`` for what
    cannot be read, naming the file)."""
    given = Path(path)
    try:
        # the folder the user named may be reached through a link (jobs/latest); nothing below it is
        fd = os.open(os.path.realpath(given), _DIR_FLAGS)
    except OSError as exc:
        raise ImportError_(f"{given} is not a Harbor job folder ({exc.strerror}). Fix: name the folder "
                           f"`harbor run` wrote (jobs/<job name>)") from None
    reader = _Reader(given)
    try:
        return reader.job(fd)
    finally:
        os.close(fd)


class _Reader:
    """One read of one job folder: the bytes read so far (for the total cap) and where each file is."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.read = 0

    def where(self, *names: bytes | str) -> str:
        return "/".join([str(self.path), *(trees.shown(name) for name in names)])

    def refuse(self, where: str, what: str, fix: str = "import a job folder as `harbor run` wrote it") -> ImportError_:
        return ImportError_(f"{where}: {what}. Fix: {fix}")

    def json_file(self, dir_fd: int, *names: bytes) -> Any:
        """A JSON file of the folder ``dir_fd`` (``names``: its path below the job folder, the last its
        name there), read whole only when it is a regular file within the caps."""
        where = self.where(*names)
        try:
            fd = trees.open_file(names[-1], dir_fd)
        except FileNotFoundError:
            raise self.refuse(where, "is missing") from None
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.EINVAL, errno.ENXIO, errno.ENOTDIR):
                raise self.refuse(where, f"is not a regular file (a link or a special file is in its place: "
                                         f"{exc.strerror})") from None
            raise self.refuse(where, f"cannot be read ({exc.strerror})", "make it readable") from None
        with os.fdopen(fd, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            if size > MOST_FILE_BYTES:
                raise self.refuse(where, f"is {size} bytes, more than the {MOST_FILE_BYTES} read of one file")
            if self.read + size > MOST_TOTAL_BYTES:
                raise self.refuse(where, f"takes the files read past {MOST_TOTAL_BYTES} bytes in all",
                                  "import a smaller job")
            data = handle.read(MOST_FILE_BYTES + 1)  # the size may have grown since fstat
        if len(data) > MOST_FILE_BYTES:
            raise self.refuse(where, f"is more than the {MOST_FILE_BYTES} bytes read of one file")
        self.read += len(data)
        try:
            return json.loads(data.decode("utf-8"), parse_constant=_no_constant)
        except UnicodeDecodeError as exc:
            raise self.refuse(where, f"is not UTF-8 text ({exc})") from None
        except json.JSONDecodeError as exc:
            raise self.refuse(where, f"is not valid JSON (cut short or edited? {exc})") from None
        except (ValueError, RecursionError) as exc:  # NaN, a number of too many digits, nesting too deep
            raise self.refuse(where, f"is not JSON that can be read ({type(exc).__name__}: "
                                     f"{trees.shown(str(exc))[:200]})") from None

    def job(self, fd: int) -> ImportedRun:
        try:
            entries = dict(trees.entries(fd, most=MOST_TRIALS + 1000))
        except trees.TooManyEntries as exc:
            raise self.refuse(str(self.path), f"has {exc}: more than the {MOST_TRIALS} trials read of one job",
                              "import a smaller job") from None
        except OSError as exc:
            raise self.refuse(str(self.path), f"cannot be listed ({exc.strerror})", "make it readable") from None
        for name in (CONFIG, RESULT):
            if name not in entries:
                raise self.refuse(str(self.path), f"holds no {os.fsdecode(name)}: it is not a Harbor job folder",
                                  "name the folder `harbor run` wrote (jobs/<job name>)")
        config = _object(self.json_file(fd, CONFIG), self.where(CONFIG), self)
        result = _object(self.json_file(fd, RESULT), self.where(RESULT), self)
        trials: list[dict[str, Any]] = []
        unfinished = 0
        for name, kind in sorted(entries.items()):
            if name.startswith(b"."):  # Harbor's own caches (.sources of a regrade), no trials
                continue
            if kind == "link":
                raise self.refuse(self.where(name), "is a symbolic link; a Harbor job folder holds none, and "
                                                    "an import never follows one", "replace the link by the folder")
            if kind != "dir":
                continue
            try:
                text = name.decode("utf-8")
            except UnicodeDecodeError:
                raise self.refuse(self.where(name), "is a folder whose name is not UTF-8, which no Harbor trial "
                                                    "has", "rename or remove it") from None
            if len(text) > MOST_NAME_CHARS or not text.isprintable():
                raise self.refuse(self.where(name), f"is a folder whose name is not a trial's (more than "
                                                    f"{MOST_NAME_CHARS} characters, or characters not printable)",
                                  "rename or remove it")
            if len(trials) >= MOST_TRIALS:
                raise self.refuse(str(self.path), f"holds more than the {MOST_TRIALS} trials read of one job",
                                  "import a smaller job")
            trial = self.trial(fd, name)
            if trial is None:
                unfinished += 1
            else:
                trials.append(trial)
        return self.run(config, result, trials, unfinished)

    def trial(self, job_fd: int, name: bytes) -> dict[str, Any] | None:
        """The trial in the folder ``name``: its result.json's fields this reader uses, checked; None for a
        trial not finished (no result.json yet)."""
        try:
            fd = os.open(name, _DIR_FLAGS, dir_fd=job_fd)
        except OSError as exc:
            raise self.refuse(self.where(name), f"cannot be opened as a folder ({exc.strerror})") from None
        try:
            info = os.lstat(RESULT, dir_fd=fd)
        except FileNotFoundError:
            os.close(fd)
            return None
        except OSError as exc:
            os.close(fd)
            raise self.refuse(self.where(name, RESULT), f"cannot be read ({exc.strerror})") from None
        try:
            if stat.S_ISLNK(info.st_mode):
                raise self.refuse(self.where(name, RESULT), "is a symbolic link; an import never follows "
                                                                    "one", "replace the link by the file")
            data = self.json_file(fd, name, RESULT)
        finally:
            os.close(fd)
        return _trial(_object(data, self.where(name, RESULT), self), self.where(name, RESULT), self)

    def run(self, config: Mapping[str, Any], result: Mapping[str, Any], trials: list[dict[str, Any]],
            unfinished: int) -> ImportedRun:
        pairs = sorted({(t["harness"], t["model"]) for t in trials})
        if len(pairs) > 1:
            shown = ", ".join(f"{h} with {m}" for h, m in pairs[:5])
            raise self.refuse(str(self.path), f"holds the trials of {len(pairs)} agent and model pairs ({shown}); "
                                              f"a run is one agent with one model",
                              "run one job per agent and model (harbor run -a AGENT -m MODEL)")
        harness, model = pairs[0] if pairs else (_text(config, "agents", self), "none")
        datasets = sorted({t["dataset"] for t in trials if t["dataset"]})
        job_name = config.get("job_name") if isinstance(config.get("job_name"), str) else None
        run_id = _name(job_name or self.path.name, self.where(CONFIG) + ": job_name", self)
        # the trials of one task are its attempts, in the order they started (then by the trial's name)
        trials.sort(key=lambda t: (t["task_id"], t["started"], t["trial"]))
        attempts = []
        number = 0
        for index, trial in enumerate(trials):
            number = number + 1 if index and trials[index - 1]["task_id"] == trial["task_id"] else 1
            attempts.append(ImportedAttempt(attempt=number, **trial["attempt"]))
        stats = result.get("stats")
        evals = stats.get("evals") if isinstance(stats, Mapping) else None
        details = {
            "job_id": _plain(result.get("id")), "job_name": job_name,
            "started_at": _plain(result.get("started_at")), "finished_at": _plain(result.get("finished_at")),
            "n_total_trials": _plain(result.get("n_total_trials")), "unfinished_trials": unfinished,
            # Harbor's own metrics of each agent, model and dataset (its mean reward): shown, never computed with
            "metrics": {trees.shown(str(key)[:MOST_NAME_CHARS]): _plain(value.get("metrics"))
                        for key, value in list(evals.items())[:50] if isinstance(value, Mapping)}
            if isinstance(evals, Mapping) else {},
        }
        return ImportedRun(source="harbor", path=self.path, run_id=run_id,
                           benchmark="+".join(datasets) or run_id, harness=harness, model=model,
                           attempts=tuple(attempts), details=details)


def _object(value: Any, where: str, reader: _Reader) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise reader.refuse(where, f"holds {type(value).__name__}, not the JSON object Harbor writes")
    return value


def _field(value: Mapping[str, Any], key: str, kinds: tuple[type, ...], where: str, reader: _Reader) -> Any:
    """``value[key]`` when it is absent, null or of ``kinds`` (a bool is no number)."""
    item = value.get(key)
    if item is None or (isinstance(item, kinds) and not (isinstance(item, bool) and bool not in kinds)):
        return item
    raise reader.refuse(where, f"{key} is {type(item).__name__}, not what Harbor writes there")


def _name(value: Any, where: str, reader: _Reader) -> str:
    """A task's or a job's name, as text that shows as it is and is short enough to pair by."""
    if not isinstance(value, str) or not value.strip():
        raise reader.refuse(where, "is missing or not text")
    if len(value) > MOST_NAME_CHARS or not value.isprintable():
        raise reader.refuse(where, f"is not a name ({trees.shown(value[:80])!s}...: more than {MOST_NAME_CHARS} "
                                   f"characters, or characters not printable)")
    return value


def _text(config: Mapping[str, Any], key: str, reader: _Reader) -> str:
    """The first agent's name of a job's config.json (a job whose trials have not finished)."""
    agents = config.get(key)
    if isinstance(agents, list) and agents and isinstance(agents[0], Mapping) and isinstance(agents[0].get("name"),
                                                                                           str):
        return _name(agents[0]["name"], reader.where(CONFIG) + ": agents[0].name", reader)
    return "unknown"


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is no number Harbor writes")


def _plain(value: Any, depth: int = 0) -> Any:
    """A value of a job's result.json shown as the run's details: JSON scalars and small lists and objects
    (at most 20 items, 4 levels: what is deeper is None)."""
    if isinstance(value, (bool, int, float)) or value is None:
        return value
    if isinstance(value, str):
        return trees.shown(value[:MOST_NAME_CHARS])
    if depth >= 4:
        return None
    if isinstance(value, list):
        return [_plain(item, depth + 1) for item in value[:20]]
    if isinstance(value, Mapping):
        return {trees.shown(str(key)[:MOST_NAME_CHARS]): _plain(item, depth + 1)
                for key, item in list(value.items())[:20]}
    return None


def _seconds(timing: Any, where: str, reader: _Reader) -> float | None:
    """The seconds of a phase's TimingInfo ({started_at, finished_at}), None when either is missing."""
    if timing is None:
        return None
    timing = _object(timing, where, reader)
    started, finished = _time(timing.get("started_at"), where, reader), _time(timing.get("finished_at"), where, reader)
    if started is None or finished is None:
        return None
    return round(max(0.0, finished - started), 6)


def _time(value: Any, where: str, reader: _Reader) -> float | None:
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > 64:
        raise reader.refuse(where, "holds a time that is not an ISO 8601 text")
    try:
        moment = datetime.datetime.fromisoformat(value)
    except ValueError:
        raise reader.refuse(where, f"holds a time that is not ISO 8601 ({trees.shown(value)})") from None
    if moment.tzinfo is None:  # Harbor writes local times without a zone: ordered among themselves
        moment = moment.replace(tzinfo=datetime.timezone.utc)
    return moment.timestamp()


def _rewards(verifier: Any, where: str, reader: _Reader) -> dict[str, float] | None:
    if verifier is None:
        return None
    rewards = _object(verifier, where, reader).get("rewards")
    if rewards is None:
        return None
    if not isinstance(rewards, Mapping) or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in rewards.values()):
        raise reader.refuse(where, "verifier_result.rewards is not an object of numbers")
    return {str(key): float(value) for key, value in rewards.items()}


def score_of(rewards: Mapping[str, float] | None) -> float | None:
    """A trial's score: its ``reward`` when the verifier gave one by that name, else the mean of its rewards;
    None without rewards."""
    if not rewards:
        return None
    if "reward" in rewards:
        return rewards["reward"]
    return sum(rewards.values()) / len(rewards)


def _trial(result: Mapping[str, Any], where: str, reader: _Reader) -> dict[str, Any]:
    """What one TrialResult says, in the project's terms (an ImportedAttempt's fields but its number)."""
    task_id = _name(result.get("task_name"), f"{where}: task_name", reader)
    trial_name = _name(result.get("trial_name"), f"{where}: trial_name", reader)
    agent = _object(result.get("agent_info") or {}, f"{where}: agent_info", reader)
    harness = _name(agent.get("name") or "unknown", f"{where}: agent_info.name", reader)
    model_info = _object(agent.get("model_info") or {}, f"{where}: agent_info.model_info", reader)
    model = "none"
    if model_info.get("name"):
        model = _name(model_info["name"], f"{where}: agent_info.model_info.name", reader)
        provider = _field(model_info, "provider", (str,), f"{where}: agent_info.model_info", reader)
        if provider and "/" not in model:
            model = _name(f"{provider}/{model}", f"{where}: agent_info.model_info", reader)
    dataset = result.get("source")
    dataset = _name(dataset, f"{where}: source", reader) if dataset is not None else None
    steps = _field(result, "step_results", (list,), where, reader) or []
    steps = [_object(step, f"{where}: step_results", reader) for step in steps[:1000]]

    rewards = _rewards(result.get("verifier_result"), where, reader)
    if rewards is None:  # a multi-step trial: the last step the verifier scored
        for step in reversed(steps):
            rewards = _rewards(step.get("verifier_result"), f"{where}: step_results", reader)
            if rewards is not None:
                break
    exceptions = [result.get("exception_info")] + [step.get("exception_info") for step in steps]
    exception = next((_object(e, f"{where}: exception_info", reader) for e in exceptions if e is not None), None)

    usage: dict[str, Any] = {}
    contexts = [result.get("agent_result")] if result.get("agent_result") is not None else \
        [step.get("agent_result") for step in steps if step.get("agent_result") is not None]
    for context in contexts:
        context = _object(context, f"{where}: agent_result", reader)
        for source, target, kind in (("n_input_tokens", "prompt_tokens", int), ("n_output_tokens", "completion_tokens",
                                                                                int), ("cost_usd", "cost_usd", float)):
            value = _field(context, source, (int, float), f"{where}: agent_result", reader)
            if value is not None:
                usage[target] = kind(usage.get(target, 0) + value)
    timings = {}
    for key, phase in (("run_seconds", "agent_execution"), ("evaluate_seconds", "verifier")):
        seconds = _seconds(result.get(phase), f"{where}: {phase}", reader)
        if seconds is not None:
            timings[key] = seconds

    score = score_of(rewards)
    attempt: dict[str, Any] = {"task_id": task_id, "score": score, "usage": usage, "timings": timings}
    if exception is not None:
        exception_type = _name(exception.get("exception_type") or "Exception",
                               f"{where}: exception_info.exception_type", reader)
        message = exception.get("exception_message")
        message = trees.shown(message[:MOST_ERROR_CHARS]) if isinstance(message, str) else ""
        failure_class = failure_class_of(exception_type)
        evaluating = failure_class is FailureClass.VERIFIER
        attempt.update(status=(TaskStatus.EVAL_ERROR if evaluating else TaskStatus.RUN_ERROR).value,
                       correct=False, error=f"{exception_type}: {message}" if message else exception_type,
                       error_stage="evaluate" if evaluating else "run", failure_class=failure_class.value)
    elif score is None:  # finished without an exception, yet no reward: the verifier decided nothing
        attempt.update(status=TaskStatus.EVAL_ERROR.value, correct=None, error="the verifier gave no reward",
                       error_stage="evaluate", failure_class=FailureClass.VERIFIER.value)
    else:
        attempt.update(status=TaskStatus.COMPLETED.value, correct=score >= 1)
    started = _time(result.get("started_at"), f"{where}: started_at", reader)
    return {"task_id": task_id, "trial": trial_name, "started": started if started is not None else float("inf"),
            "harness": harness, "model": model, "dataset": dataset, "attempt": attempt}
