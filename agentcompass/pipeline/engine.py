"""Every use of Snakemake beyond its rule language and its command line, in one module.

agentcompass reads and completes Snakemake's own bookkeeping: the record it
keeps of each output (the params, code and input it was built with), its
incomplete markers, its directory lock, the job scheduler's re-selection
timers, the cluster executor's waits between status checks, the jobs its DAG
plans, its global resources, its settings and its console logging. Snakemake
documents none of these as an API. Each use is a function here, and
``tests/unit/test_engine.py`` checks each one against the pinned Snakemake
version, so an upgrade that changes one breaks one loud test, not a run.
"""

from __future__ import annotations

import ast
import asyncio
import inspect
import logging
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

from snakemake.common import FUNC_OVERWRITE_PARAMS_ATTR, overwrite_function_params
from snakemake.exceptions import IncompleteCheckpointException, WorkflowError

__all__ = ["IncompleteCheckpointException", "WorkflowError"]


# -- the workflow's settings ---------------------------------------------------------


def signature_once(fn: Callable) -> Callable:
    """Tell Snakemake the parameters of a callable it calls for every job.

    Snakemake reads the signature of each input, params and resources function
    on every call (``inspect.signature``: 3% of a run's time at a thousand
    attempts) unless the function carries it already.
    """
    overwrite_function_params(fn, inspect.signature(fn).parameters)
    return fn


def resources_without_signatures(workflow) -> int:
    """Tell Snakemake, once, the parameters of every resource function of the workflow's rules;
    how many functions were told.

    Snakemake evaluates each resource of each job (its ``default-resources`` as
    well: ``mem_mb``, ``disk_mb``, ``tmpdir``) through ``Resource.evaluate``, and
    reads two signatures per resource on every call (``inspect.signature`` of the
    method and of the resource's own function): 4% of an attempt job's time.
    Called once the Snakefile's rules exist.
    """
    from snakemake.resources import Resource

    method = Resource.evaluate
    if not hasattr(method, FUNC_OVERWRITE_PARAMS_ATTR):
        # as the bound method's signature reads: (*args, **kwargs)
        overwrite_function_params(method, inspect.signature(method.__get__(object())).parameters)
    told = 0
    for rule in workflow.rules:
        for resource in (rule.resources or {}).values():
            function = getattr(resource, "_evaluator", None)
            if callable(function) and not hasattr(function, FUNC_OVERWRITE_PARAMS_ATTR):
                try:
                    overwrite_function_params(function, inspect.signature(function).parameters)
                except (AttributeError, TypeError, ValueError):  # a builtin or a callable without attributes
                    continue
                told += 1
    return told


def config_files(workflow) -> list[str]:
    """The ``--configfile`` paths of this invocation, in order."""
    return [str(p) for p in workflow.config_settings.configfiles]


def config_args(workflow):
    """The raw ``--config`` arguments (``key=value`` strings), or the parsed mapping."""
    settings = workflow.config_settings
    raw = settings.config_args
    if isinstance(raw, (list, tuple)) and all(isinstance(a, str) and "=" in a for a in raw):
        return list(raw)
    if isinstance(raw, str):
        return [raw]
    return dict(settings.config or {})


def main_snakefile(workflow) -> str:
    return str(workflow.main_snakefile)


def run_handlers_as_module(workflow, start: Callable[[], None], finish: Callable[[bool], None]) -> None:
    """Give ``start`` and ``finish`` to the main workflow when this Snakefile is a module of
    another (``module ...: snakefile:``): Snakemake keeps the ``onstart``, ``onsuccess`` and
    ``onerror`` of the main Snakefile only. Nothing to do when it is the main Snakefile."""
    if workflow.modifier.is_main_snakefile():
        return
    workflow._onstart = lambda log: start()
    workflow._onsuccess = lambda log: finish(True)
    workflow._onerror = lambda log: finish(False)


def is_main_process(workflow) -> bool:
    """False inside a job Snakemake spawned (a cluster job runs one Snakemake per job)."""
    return bool(getattr(workflow, "is_main_process", True))


def on_cluster(workflow) -> bool:
    """Whether this Snakemake submits its jobs to a cluster (``--executor slurm``, say)."""
    return bool(workflow is not None and workflow.non_local_exec)


def executing(workflow) -> bool:
    """Whether this invocation builds files: not a dry run, ``--touch``, or a command that only reads.

    Known once execution starts (the executor is chosen after the Snakefile is
    parsed), so ask from an input, params or resources function.
    """
    return workflow.executor_plugin is not None and not workflow.dryrun and not workflow.touch


@dataclass(frozen=True)
class Forcing:
    """What this invocation forces: ``--forceall``, ``--forcerun`` entries, ``--force`` of targets."""

    forceall: bool
    forcerun: frozenset[str]
    forcetargets: bool


def forcing(workflow) -> Forcing:
    dag = workflow.dag_settings
    return Forcing(bool(dag.forceall), frozenset(str(entry) for entry in dag.forcerun), bool(dag.forcetargets))


def cores(workflow) -> int | None:
    """This invocation's ``--cores``."""
    value = workflow.global_resources.get("_cores")
    value = getattr(value, "value", value)
    return int(value) if value else None


def global_resource(workflow, name: str) -> int | None:
    """A global resource's cap (``--resources name=N``, a profile's ``resources:``), or None."""
    value = workflow.global_resources.get(name)
    value = getattr(value, "value", value)
    return None if value is None else int(value)


def set_global_resource(workflow, name: str, value: int) -> None:
    """Give a global resource a cap, as ``--resources name=value`` would (before the scheduler starts)."""
    workflow.register_resource(name, value)


def rule_resources(workflow, rule_name: str, wildcards, wanted) -> dict[str, Any]:
    """A rule's resources for one job, evaluated as Snakemake evaluates them (default-resources,
    then a profile's set-resources and set-threads; ``_cores`` is its threads). Only ``wanted``
    ones are evaluated: some read the job's input sizes, unknown before it runs."""
    rule = workflow.get_rule(rule_name)
    skip = {name for name in rule.resources.keys() if name not in wanted and name != "_cores"}
    resources = rule.expand_resources(wildcards, [], 1, skip_evaluation=skip)
    return {name: getattr(value, "value", value) for name, value in resources.items()}


def requested_threads(workflow, rule_name: str) -> int | None:
    """The threads ``--set-threads`` (or a profile's ``set-threads``) gives a rule, before
    Snakemake cuts them to the cores it has (inside a cluster job: the job's CPUs)."""
    value = workflow.resource_settings._parsed_overwrite_threads.get(rule_name)
    value = getattr(value, "value", value)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def rule_code(workflow, rule_name: str) -> str | None:
    """The text Snakemake records for a rule's code (its ``code`` rerun trigger)."""
    rule = workflow.get_rule(rule_name)
    return rule.shellcmd if rule.shellcmd is not None else rule.run_func_src


# -- records and incomplete markers ------------------------------------------------------


def _iofile(path: str | Path):
    from snakemake.io import IOFile

    return IOFile(str(path))


def _key(persistence, path: str | Path) -> str:
    return persistence._get_key(_iofile(path))


@dataclass(frozen=True)
class Record:
    """What Snakemake recorded of one output when its job finished."""

    rule: str | None
    params: tuple[str, ...] | None  # sorted, as Snakemake serialises them
    code: str | None
    input: tuple[str, ...] | None

    def param_values(self) -> list[Any] | None:
        """The recorded params as the values they were (Snakemake records each one's ``repr``);
        None when there are none or one is not a plain value."""
        if self.params is None:
            return None
        try:
            return [ast.literal_eval(text) for text in self.params]
        except (ValueError, SyntaxError):
            return None


def _record_of(meta) -> Record | None:
    if meta is None:
        return None
    return Record(
        rule=meta.rule,
        params=None if meta.params is None else tuple(sorted(meta.params)),
        code=meta.code,
        input=None if meta.input is None else tuple(meta.input),
    )


class Records:
    """Snakemake's records of a working directory, read (and completed) through its own persistence code.

    ``Records.of(workflow)`` uses the running workflow's persistence;
    ``Records.open(workdir)`` opens a directory's records for a reader that
    runs no workflow (``agentcompass status``).
    """

    def __init__(self, persistence) -> None:
        self.persistence = persistence

    @classmethod
    def of(cls, workflow) -> "Records | None":
        persistence = getattr(workflow, "persistence", None) if workflow is not None else None
        return None if persistence is None else cls(persistence)

    @classmethod
    def open(cls, workdir: str | Path) -> "Records | None":
        """The records of ``workdir``, or None when no Snakemake ran there. Paths are relative to it."""
        from snakemake.persistence.file import FilePersistence

        root = Path(workdir).absolute() / ".snakemake"
        if not (root / "metadata").is_dir():
            return None
        return cls(FilePersistence(nolock=True, dag=None, path=root))

    def record(self, path: str | Path) -> Record | None:
        """What Snakemake recorded for the output ``path``, named exactly as the workflow names it:
        a relative path (relative to the working directory) or an absolute one, as written."""
        return _record_of(self.persistence.metadata(_iofile(path)))

    def params_of(self, values: Iterable[Any]) -> tuple[str, ...]:
        """``values`` as Snakemake would record them as a job's params: compare with ``Record.params``."""
        return tuple(record_params(self.persistence, values))

    def incomplete(self, paths: Iterable[str | Path]) -> set[str]:
        """Those of ``paths`` that carry Snakemake's incomplete marker (a job that started and did not finish)."""
        by_key = {_key(self.persistence, p): str(p) for p in paths}
        if not by_key:
            return set()
        self.persistence._clear_cache()
        return {by_key[k] for k in self.persistence._filter_incomplete_keys(by_key)}

    def any_incomplete(self) -> bool:
        """Whether any output of this directory is marked incomplete (cheap: the common answer is no)."""
        path = getattr(self.persistence, "_incomplete_path", None)
        if path is None:  # another persistence backend: assume there may be some
            return True
        try:
            with os.scandir(path) as entries:
                return any(True for _ in entries)
        except FileNotFoundError:
            return False

    def unmark(self, path: str | Path) -> None:
        """Drop the incomplete marker of ``path`` (its record stays)."""
        self.persistence._unmark_incomplete(_key(self.persistence, path))

    def write_finished(self, workflow, rule_name: str, output: str, inputs: Iterable[str], log: Iterable[str],
                       params: Iterable[Any]) -> None:
        """Record ``output`` as Snakemake records the output of a finished job.

        A job calls this for each of its outputs just before the output appears
        (it is written by rename): if the process is killed before Snakemake's
        own bookkeeping of the finished job, the record still says what the
        file was built from, and the next run adopts it (``agentcompass.pipeline.recovery``).
        Snakemake then only drops the output's incomplete marker when it books the job
        (``record_once``).
        """
        persistence = self.persistence
        key = _key(persistence, output)
        record = dict(self._template(workflow, rule_name))
        record["input"] = sorted(str(p) for p in inputs)
        record["log"] = sorted(str(p) for p in log)
        record["params"] = record_params(persistence, params)
        record["starttime"] = persistence._get_recorded_starttime(key) or time.time()
        record["endtime"] = time.time()
        record["input_checksums"] = {}
        if hasattr(persistence, "_io_write"):  # the file backend: the record's fields, as _write_record writes them
            persistence._io_write(persistence._metadata_path, record, key)
        else:
            from snakemake.persistence import MetadataRecord

            persistence._write_record(key, MetadataRecord(**record))
        _RECORDED.add(key)

    def _template(self, workflow, rule_name: str) -> dict[str, Any]:
        """The fields of a record that are the same for every output of a rule: made once a rule
        (Snakemake's record is a pydantic model, slow to make and to dump for every output)."""
        key = (id(self.persistence), rule_name)
        template = _TEMPLATES.get(key)
        if template is None:
            from snakemake.persistence import RECORD_FORMAT_VERSION, MetadataRecord

            record = MetadataRecord()
            record.rule = rule_name
            record.code = rule_code(workflow, rule_name)
            record.shellcmd = None
            record.conda_env = None
            record.container_img_url = None
            record.software_stack_hash = self.persistence._software_stack_hash(_NoSoftware)
            record.record_format_version = RECORD_FORMAT_VERSION
            record.incomplete = False
            template = _TEMPLATES[key] = dict(record.items())
        return template


# (persistence, rule) -> the fields of its records that every output shares (``Records._template``)
_TEMPLATES: dict[tuple[int, str], dict[str, Any]] = {}


# the keys of the outputs ``Records.write_finished`` recorded, until Snakemake books their job
_RECORDED: set[str] = set()


def record_once() -> None:
    """Let Snakemake, booking a finished job, keep the records its job wrote of every output
    (``Records.write_finished``) instead of writing each one again.

    Each record is a small file under ``.snakemake/metadata``: written twice, an
    attempt's four outputs cost eight files written and renamed. A job whose
    outputs were not all recorded by it (a rule of another workflow, a job
    that failed before writing) is booked as Snakemake books it. The incomplete
    markers are dropped either way.
    """
    from snakemake.persistence import PersistenceBase

    finished = PersistenceBase.finished
    if getattr(finished, "_agentcompass", False):
        return

    async def finished_once(self, job) -> None:
        keys = [self._get_key(f) for f in job.output]
        if not keys or any(key not in _RECORDED for key in keys):
            return await finished(self, job)
        self._clear_cache()
        for key in keys:
            self._unmark_incomplete(key)
            _RECORDED.discard(key)

    finished_once._agentcompass = True  # type: ignore[attr-defined]
    PersistenceBase.finished = finished_once


def leave_missing_logs_missing(rules: Iterable[str]) -> None:
    """Let the jobs of ``rules`` end without an empty log file: Snakemake creates every log a
    job did not write (``DAG.handle_log``), and a stage writes its log only when it fails,
    so each attempt would leave three empty files. Snakemake still removes the log of an
    earlier failure before it runs the job again.
    """
    from snakemake.dag import DAG

    current = DAG.handle_log
    handle = getattr(current, "__wrapped__", current)  # Snakemake's own
    names = frozenset(rules) | getattr(current, "_agentcompass_rules", frozenset())

    async def handle_log(self, job):
        if job.rule.name in names:
            return None
        return await handle(self, job)

    handle_log._agentcompass_rules = names  # type: ignore[attr-defined]
    handle_log.__wrapped__ = handle  # type: ignore[attr-defined]
    DAG.handle_log = handle_log


_BEFORE_MARKERS = "_agentcompass_before_markers"


def before_markers_are_read(workflow, callback: Callable[[], None]) -> None:
    """Call ``callback`` once the DAG's jobs exist and before Snakemake reads its incomplete
    markers to decide what to build again (``DAG.check_incomplete``).

    A run's recovery (``agentcompass.pipeline.recovery``) drops the markers of
    files a killed run had finished; it must come first, or Snakemake, told to
    rebuild incomplete files (``rerun-incomplete``), builds them again. Most
    runs recover earlier, from the first input function of their DAG (the
    default target's); a run whose targets are files (a shard's inner run)
    calls none of ours before the markers are read.
    """
    from snakemake.dag import DAG

    setattr(workflow, _BEFORE_MARKERS, callback)
    check = DAG.check_incomplete
    if getattr(check, "_agentcompass", False):
        return

    async def check_incomplete(self):
        before = getattr(self.workflow, _BEFORE_MARKERS, None)
        if before is not None:
            before()
        return await check(self)

    check_incomplete._agentcompass = True  # type: ignore[attr-defined]
    DAG.check_incomplete = check_incomplete


def accept_periodic_names(rules: Iterable[str]) -> None:
    """Let the jobs of ``rules`` take wildcard values that end in a repeated run of characters.

    Snakemake refuses a value whose end repeats one substring 20 times or more
    (``nnnn...``, ``task-000...0``), taking it for a rule that feeds on its own
    output. No rule of the workflow reads an output of its own kind, and a
    namespace, a run id or a task id are names the user and the task data
    choose: such a name must run like any other.
    """
    from snakemake.dag import DAG

    current = DAG.check_periodic_wildcards
    check = getattr(current, "__wrapped__", current)  # Snakemake's own
    names = frozenset(rules) | getattr(current, "_agentcompass_rules", frozenset())

    def check_periodic_wildcards(self, job):
        if job.rule.name in names:
            return None
        return check(self, job)

    check_periodic_wildcards._agentcompass_rules = names  # type: ignore[attr-defined]
    check_periodic_wildcards.__wrapped__ = check  # type: ignore[attr-defined]
    DAG.check_periodic_wildcards = check_periodic_wildcards


# rule name -> the texts its recorded code may hold and still be current (``accept_recorded_code``)
_ACCEPTED_CODE: dict[str, frozenset[str]] = {}


def accept_recorded_code(texts: dict[str, Iterable[str]]) -> None:
    """Take the code recorded for a rule's outputs as current when it is one of ``texts[rule]``,
    as when it is the rule's code now.

    Snakemake records the text of a rule's ``run:`` block as the code of each file the rule
    builds, and builds the file again when the text changes (its ``code`` rerun trigger). A
    stage's behaviour is in its body and its version, not in that text: when the block is
    rewritten to call the same body, its earlier texts are the same code, and the files they
    built stay current.
    """
    from snakemake.persistence import PersistenceBase

    for rule, accepted in texts.items():
        _ACCEPTED_CODE[rule] = frozenset(accepted)
    changed = PersistenceBase._code_changed
    if getattr(changed, "_agentcompass", False):
        return

    def _code_changed(self, job, file=None) -> bool:
        if changed(self, job, file=file):
            return self.code(file) not in _ACCEPTED_CODE.get(job.rule.name, ())
        return False

    _code_changed._agentcompass = True  # type: ignore[attr-defined]
    PersistenceBase._code_changed = _code_changed


def code_is_current(workflow, rule_name: str, recorded: str | None) -> bool:
    """Whether ``recorded``, the code of a file's record, is its rule's code now (or one accepted)."""
    return recorded == rule_code(workflow, rule_name) or recorded in _ACCEPTED_CODE.get(rule_name, ())


class _NoSoftware:
    """A job as Snakemake's software-stack hash sees it: no conda env, container or modules (run: rules)."""

    conda_env = None
    container_img_url = None
    env_modules = None


def record_params(persistence, values: Iterable[Any]) -> list[str]:
    """Param values as Snakemake records them (sorted ``repr`` strings)."""
    serialise = persistence._serialize_param
    return sorted(v for v in (serialise(value) for value in values) if isinstance(v, str))


# -- the directory lock ---------------------------------------------------------------------


def leave_directory_unlocked(workflow) -> None:
    """Make this invocation skip Snakemake's own directory lock (as ``--nolock`` does).

    agentcompass holds a lock of its own on every results folder it builds
    (``agentcompass.pipeline.locks``), taken before any job and released by the
    kernel when the process dies. Snakemake's lock is a list of files that a
    killed run leaves behind, which the next run then refuses (``--unlock``).
    """
    persistence = workflow.persistence
    persistence.lock = persistence.noop
    persistence.unlock = persistence.noop


# -- the scheduler -----------------------------------------------------------------------------


def submit_local_jobs_unthrottled(workflow) -> None:
    """Start local jobs as fast as slots free up: no cap on job starts per second.

    Snakemake's --max-jobs-per-timespan (100/1s unless set) is a courtesy to a
    cluster's scheduler. Locally a job is a thread of this process, and the cap
    costs work for nothing: with it on, every job selection arms a
    ``threading.Timer`` (a thread) that selects again a timespan later, and that
    selection, while jobs still wait for a slot, arms another; each selection
    re-weighs every waiting job. Without the cap a selection happens when a job
    finishes or fails, which is when slots free up.
    """
    workflow.scheduling_settings.max_jobs_per_timespan = None


# What Snakemake's JobScheduler arms its re-selection timers from (snakemake 9).
_SCHEDULER_TIMER = "JobScheduler._schedule_reevalutation"


def cancel_scheduler_timers() -> int:
    """Cancel the scheduler's pending re-selection timers; how many were cancelled.

    Snakemake's scheduler arms a ``threading.Timer`` after every job selection
    to select again a second later (its --max-jobs-per-timespan, on for a
    cluster driver: ``submit_local_jobs_unthrottled``), and Python waits for
    those timers at exit: up to a second.
    Only those are cancelled: a process driving Snakemake (the SDK) may have
    timers of its own.
    """
    timers = scheduler_timers()
    for timer in timers:
        timer.cancel()
    return len(timers)


def failed_jobs(workflow) -> list[str]:
    """The rule of each job that failed in this invocation, sorted (its scheduler's record; none before it
    exists, as when Snakemake stops on an error of its own before any job)."""
    scheduler = getattr(workflow, "scheduler", None)
    return sorted(str(job.rule.name) for job in getattr(scheduler, "failed", None) or ())


def scheduler_timers() -> list[threading.Timer]:
    """The scheduler's re-selection timers alive in this process."""
    return [thread for thread in threading.enumerate()
            if isinstance(thread, threading.Timer) and _SCHEDULER_TIMER in getattr(thread.function, "__qualname__", "")]


# -- console logging -------------------------------------------------------------------------

SNAKEMAKE_LOGGER = "snakemake.logging"


def console_handlers() -> list[logging.Handler]:
    """Snakemake's handlers that write to the console (its log file keeps everything)."""
    return [
        handler for handler in logging.getLogger(SNAKEMAKE_LOGGER).handlers
        if handler.get_name() == "DefaultStreamHandler"
        or (isinstance(handler, logging.StreamHandler) and not isinstance(handler, logging.FileHandler))
    ]


def named_targets(workflow) -> bool:
    """Whether files or rules were named on the command line (else the default target is built)."""
    return bool(workflow.dag_settings.targets)


def planned_jobs(workflow) -> list[tuple[str, dict[str, str]]] | None:
    """(rule name, wildcards) of every job this invocation has run or will run, as its DAG stands now;
    None before the DAG exists.

    The DAG grows when a checkpoint finishes; Snakemake adds those jobs while it
    holds its job scheduler's lock, so a reader in another thread (a job, the
    progress line) takes that lock and sees the DAG before or after such an
    update, never halfway through it. Never call this from an input, params or
    resources function: Snakemake may call those while it holds the lock.
    """
    dag = getattr(workflow, "dag", None)
    if dag is None:
        return None
    lock = getattr(getattr(workflow, "scheduler", None), "_lock", None)
    # a DAG update takes seconds at tens of thousands of jobs; past this, read without the lock
    held = lock.acquire(timeout=300) if lock is not None else False
    try:
        for _ in range(100):
            try:
                jobs = list(dag._finished | dag._needrun)
                break
            except RuntimeError:  # a set changed while it was read (only without the lock)
                time.sleep(0.01)
        else:
            return None
    finally:
        if held and lock is not None:
            lock.release()
    return [(job.rule.name, dict(job.wildcards_dict)) for job in jobs]


class _WakingSemaphore(threading.Semaphore):
    """A semaphore whose untimed wait wakes every half second.

    Python runs signal handlers in the main thread only, between two steps of its
    code. Snakemake's main thread waits on its scheduler's semaphore with no
    timeout; when the kernel hands a signal to another thread (it does when the
    main thread already has one pending: a Ctrl-C and, at once, the outer run's
    SIGTERM), nothing wakes the main thread, and the stop waits until a job
    ends, which a cancelled stage waiting on it never does.
    """

    def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool:
        if not blocking or timeout is not None:
            return super().acquire(blocking, timeout)
        while not super().acquire(timeout=0.5):
            pass
        return True

    __enter__ = acquire


def wake_for_signals(workflow) -> None:
    """Let the scheduler's main-thread wait wake up for signals (``_WakingSemaphore``);
    called from the main thread once the scheduler exists (``onstart``)."""
    scheduler = getattr(workflow, "scheduler", None)
    semaphore = getattr(scheduler, "_open_jobs", None)
    if type(semaphore) is threading.Semaphore:
        semaphore.__class__ = _WakingSemaphore


def status_checks_at_most(workflow) -> float | None:
    """Never wait longer between two status checks of the cluster's jobs than
    ``--seconds-between-status-checks`` (Snakemake's setting: 10 s unless a profile sets it);
    the ceiling, or None when this run submits no cluster jobs.

    The SLURM executor plugin replaces that setting with a back-off of its own: 10 s
    more after every check that finds no job finished, up to 180 s. A run's few
    shard jobs mostly run, so its waits grow to 11, 21, 31 s: a shard that ended
    just after a check was seen 15 s later, most of a short run's wall time.
    Called once the scheduler and its executor exist (``onstart``).
    """
    scheduler = getattr(workflow, "scheduler", None)
    executor = getattr(scheduler, "_executor", None)
    if not on_cluster(workflow) or executor is None or not hasattr(executor, "next_seconds_between_status_checks"):
        return None
    ceiling = float(workflow.remote_execution_settings.seconds_between_status_checks)

    async def sleep() -> None:
        await asyncio.sleep(min(ceiling, float(executor.next_seconds_between_status_checks)))

    executor.sleep = sleep
    return ceiling


def keep_going(workflow) -> bool:
    """Let the job scheduler go on past failed jobs (as ``--keep-going`` does): the jobs that depend on none of
    them still run."""
    scheduler = getattr(workflow, "scheduler", None)
    if scheduler is None or not hasattr(scheduler, "keepgoing"):
        return False
    scheduler.keepgoing = True
    return True


def stop_scheduling(workflow) -> bool:
    """Ask the job scheduler to start no new job and end once the running ones are done (as on SIGTERM)."""
    scheduler = getattr(workflow, "scheduler", None)
    if scheduler is None:
        return False
    scheduler.exit_gracefully()
    return True


class _NoJobAnnouncements(logging.Filter):
    """Drops Snakemake's announcement of each job it starts (``JOB_INFO``, ``SHELLCMD``), of each
    batch it starts (``JOB_STARTED``) and selects, and the progress line after each job (``PROGRESS``)."""

    SELECTING = "Select jobs to execute..."

    def __init__(self) -> None:
        super().__init__("agentcompass-no-job-announcements")
        from snakemake_interface_logger_plugins.common import LogEvent

        self.events = frozenset((LogEvent.JOB_INFO, LogEvent.SHELLCMD, LogEvent.JOB_STARTED, LogEvent.PROGRESS))

    def filter(self, record: logging.LogRecord) -> bool:
        return getattr(record, "event", None) not in self.events and record.msg != self.SELECTING


def drop_job_announcements() -> None:
    """Log no block for each job Snakemake starts (rule, input, output, wildcards, reason,
    resources), no line for each selection and batch of jobs and no progress line: what a
    shard's inner run writes to its shard.log for every one of its jobs.

    The lines of finished jobs ("Finished jobid: N (Rule: R)"), the job stats and every
    error stay. A filter on the logger, not on its
    handlers, so a dropped announcement is formatted for none of them: they were about a
    twentieth of an inner run's profile, each formatted and written twice (the console,
    which is the shard's log, and Snakemake's own log file).
    """
    from snakemake.jobs import Job

    logger = logging.getLogger(SNAKEMAKE_LOGGER)
    if not any(isinstance(f, _NoJobAnnouncements) for f in logger.filters):
        logger.addFilter(_NoJobAnnouncements())
    # nor is the announcement made, to be dropped: its files formatted, its record built
    # (a twelfth of an inner run's time once the rest was cut)
    if not getattr(Job.log_info, "_agentcompass", False):
        def log_info(self, *args, **kwargs) -> None:
            return None

        log_info._agentcompass = True  # type: ignore[attr-defined]
        Job.log_info = log_info


def set_console_level(level: str) -> None:
    """Show Snakemake's console messages from ``level`` up ('debug' shows its debug messages too).

    Its log file under ``.snakemake/log/`` keeps what it always keeps.
    """
    numeric = getattr(logging, level.upper())
    if numeric <= logging.DEBUG:
        logging.getLogger(SNAKEMAKE_LOGGER).setLevel(logging.DEBUG)
    for handler in console_handlers():
        handler.setLevel(numeric)
        if numeric <= logging.DEBUG:
            for item in handler.filters:
                if hasattr(item, "verbose"):  # Snakemake's DefaultFilter drops debug records unless verbose
                    item.verbose = True
