"""What the Snakefile sees: one object over the parts of the workflow, each a module of its own.

- ``targets``: which files this invocation builds (``targets.Targets``);
- ``params(stage)``: a rule's params, the fingerprint of what its stage reads
  (``fingerprints``);
- ``shards``: the shard rule's inputs, generation and threads (``shards``);
- ``resources``: what a job holds while it runs (``resources``);
- ``build``: the one entry point of every rule's ``run:`` block (``jobs.Jobs.build``);
- ``events``: the progress events of each request's ``events.jsonl`` (``events``).

Config merging happens here once per parse: the layers (user config, project
``configs/config.yaml``, each ``--configfile``, then ``--config``) are read
again from their files so every error names the file and field it came from.

When Snakemake first calls into the workflow to build its DAG, an invocation
that builds files takes the lock of every results folder it builds
(``locks``), sets right what a killed run left half-booked (``recovery``),
and arms its stop (``lifecycle``); a dry run does none of this.
"""

from __future__ import annotations

import gc
import os
import sys
from pathlib import Path
from typing import Any, Callable

import yaml

from agentcompass import callcache, layout, spend

from agentcompass._util import aio, display, logs
from agentcompass._util.importpath import PIP_DEPLOYMENTS, planted, safe_import_path
from agentcompass.plugins import load_components
from agentcompass.runtime.config import ConfigError, load_run_config
from agentcompass.runtime import ratelimit
from agentcompass.runtime.models import Orchestration
from agentcompass.runtime.orchestration import resolve_orchestration

from agentcompass.stages import RULES, STAGES, STAGES_OF, Stage, stage

from . import engine, forkserver, lifecycle, locks, pacing, progress, reading, recovery, shards
from .engine import WorkflowError
from .events import Emitter
from .fingerprints import AttemptFingerprints, Fingerprints, TaskFingerprints
from .invocation import Invocation
from .jobs import Jobs
from .resources import CAPS_ENV, Resources
from .shards import Shards
from .targets import TARGET_ROWS, Targets


# runtime.cache_max_age_days in seconds
DAY_SECONDS = 86400


def command_line_overrides(workflow) -> dict[str, Any]:
    """The ``--config key=value`` overrides, with YAML types.

    Snakemake parses nested ``--config`` values as strings only; the raw
    ``key=value`` arguments are read again so ``attempts: 2`` stays an integer.
    """
    raw = engine.config_args(workflow)
    if isinstance(raw, dict):
        return raw
    return config_overrides(raw)


def config_overrides(raw: list[str]) -> dict[str, Any]:
    """``key=value`` arguments of ``--config`` as a config layer, with YAML types."""
    overrides: dict[str, Any] = {}
    for entry in raw:
        key, _, value = entry.partition("=")
        try:
            overrides[key] = yaml.safe_load(value) if value != "" else None
        except yaml.YAMLError:
            overrides[key] = value
    return overrides


def repeated_config_files(argv: list[str]) -> None:
    """Refuse ``snakemake --configfile a.yaml --configfile b.yaml``: Snakemake keeps only the last of repeated
    flags, so the workflow would never see ``a.yaml`` (and might run the requests of another layer). Only the
    ``snakemake`` command's own arguments are read (``python -m snakemake`` too)."""
    program = Path(argv[0]) if argv else Path()
    if program.name != "snakemake" and program.parts[-2:] != ("snakemake", "__main__.py"):
        return
    flags = [arg for arg in argv[1:] if arg.partition("=")[0] in ("--configfile", "--configfiles")]
    if len(flags) > 1:
        raise ConfigError(f"the command line gives {len(flags)} --configfile flags, and Snakemake keeps only the last "
                          "one's files. Fix: give every file after one flag, in the order they merge: "
                          "--configfile a.yaml b.yaml")


def _params(w, *getters: Callable[[Any], Any]) -> Callable[[], tuple]:
    """A rule's params for the wildcards ``w``, computed only when asked for."""
    return lambda: tuple(get(w) for get in getters)


class EvaluationWorkflow:
    """The resolved orchestration, seen from the Snakefile."""

    def __init__(self, orchestration: Orchestration) -> None:
        self.inv = Invocation(orchestration)
        self.orchestration = orchestration
        self.results_dir = self.inv.results_dir
        self.params_of = Fingerprints(self.inv)
        self.targets = Targets(self.inv, self.params_of)
        self.attempt_params = AttemptFingerprints(self.inv, self.params_of, self.targets)
        self.task_params = TaskFingerprints(self.inv, self.params_of, self.targets)
        self.shards = Shards(self.inv, self.targets)
        self.resources = Resources(self.inv)
        self.events = Emitter(self.inv, self.targets)
        self.jobs = Jobs(self)
        # the one entry point of every rule's run: block: build one job of a stage (``jobs``)
        self.build = self.jobs.build
        self.lifecycle: lifecycle.Lifecycle | None = None
        self._locked: list[Path] = []
        self._param_functions: dict[str, dict[str, Callable]] = {}

    # -- loading ---------------------------------------------------------------

    @classmethod
    def from_snakemake(cls, workflow) -> "EvaluationWorkflow":
        """Load and validate the config of a Snakemake run; exit with a clear error if bad."""
        # before any job starts: no Python process of this run imports from the working folder
        safe_import_path()
        aio.reset()
        lifecycle.note_failures([])
        try:
            found = planted(os.getcwd(), getattr(workflow, "workdir_init", None) or os.getcwd())
            if found:
                raise ConfigError(
                    f"the working folder holds {display.visible(found[0])}"
                    + (f" and {len(found) - 1} more" if len(found) > 1 else "")
                    + f" under {PIP_DEPLOYMENTS}: Snakemake puts that folder on the import path of every job "
                    "it starts, and agentcompass uses no pip deployments; remove the folder (what it holds "
                    "would run in this run's processes)")
            repeated_config_files(sys.argv)
            config = load_run_config(
                engine.config_files(workflow),
                command_line_overrides(workflow),
                project_fallback=Path(workflow.basedir) / "configs" / "config.yaml",
            )
            load_components()
            evaluation = cls(resolve_orchestration(config))
        except ConfigError as exc:
            print(display.terminal_text(f"agentcompass: invalid run config: {exc}"), file=sys.stderr)
            # Raising inside the Snakefile stops Snakemake before any job or file exists;
            # the status is the CLI's for bad input (docs/reuse.md, Exit status).
            raise SystemExit(2) from None
        level = evaluation.inv.runtime.log_level
        logs.configure(level)
        engine.set_console_level(level)
        if shards.inner_shard() and level != "debug":
            engine.drop_job_announcements()  # the shard's log keeps finished jobs and errors
        return evaluation

    def bind(self, checkpoints, workflow=None) -> None:
        """Snakemake's checkpoints, and its workflow: its records, settings and scheduler."""
        self.inv.bind(checkpoints, workflow, self._begin)
        if workflow is not None:
            self.resources.apply_caps()
            # recovery before Snakemake reads the incomplete markers, whatever the targets
            engine.before_markers_are_read(workflow, self.inv.begin)
            engine.accept_periodic_names(RULES)
            engine.accept_recorded_code({s.name: s.recorded_code for s in STAGES})
            engine.record_once()
            # a stage writes its log when it fails; a shard's log is its inner run's output
            engine.leave_missing_logs_missing(s.name for s in STAGES if not s.scope_row.slices_attempts)

    # -- what the rules call ------------------------------------------------------------------

    def params(self, name: str) -> dict[str, Callable]:
        """The params of stage ``name``'s rule (for ``params: **EVAL.params("...")``): what it reads.
        The same functions for every call (the recovery asks for every output's)."""
        made = self._param_functions.get(name)
        if made is None:
            made = self._param_functions[name] = self._make_params(name)
        return made

    def _make_params(self, name: str) -> dict[str, Callable]:
        """Made by the method its scope's row names (``Scope.params``), one of the four below."""
        s = stage(name)
        return getattr(self, s.scope_row.params)(s)

    def request_params(self, s: Stage) -> dict[str, Callable]:
        """A request or summary stage's params: each a fingerprint of what it reads of the request."""
        return {param: self.params_of.param(s, i) for i, param in enumerate(s.params)}

    def task_params_of(self, s: Stage) -> dict[str, Callable]:
        """A task stage's param: what it reads of its task and the task's first plan."""
        return {s.params[0]: self.task_params.param(s)}

    def attempt_params_of(self, s: Stage) -> dict[str, Callable]:
        """An attempt stage's param: computed for every attempt of the request at once."""
        return {s.params[0]: self.attempt_params.param(s)}

    def shard_params(self, s: Stage) -> dict[str, Callable]:
        """The shard's params: what its attempts read, and its generation."""
        return {s.params[0]: self.attempt_params.shard, s.params[1]: self.shards.generation}

    # -- the first call of a DAG build, the start and the end of a run ---------------------

    def _begin(self) -> None:
        """Lock, recover and arm the stop, when this invocation builds files (see the module's docstring)."""
        workflow = self.inv.snakemake
        if not engine.executing(workflow) or not engine.is_main_process(workflow):
            return
        if self.inv.inner is None:
            try:
                self._locked = locks.acquire_all(self.inv.run_path(req) for req in self.inv.requests)
            except locks.RunHeldError as exc:
                raise WorkflowError(str(exc)) from None
        else:
            ns, run_id, index = self.inv.inner
            folder = Path(layout.shard_folder(self.inv.run_path(self.inv.by_key[(ns, run_id)]), index))
            try:
                locks.acquire(folder)
            except locks.RunHeldError as exc:  # a shard left running by a killed run: it stops, then this one goes on
                logs.LOG.info(f"waiting: {exc.folder} is still held by pid "
                              f"{exc.holder.pid if exc.holder else '?'}, which is stopping")
                locks.acquire(folder, wait=True)
            self._locked = [folder]
        engine.leave_directory_unlocked(workflow)
        if not engine.on_cluster(workflow):  # a cluster's scheduler is spared Snakemake's pace
            engine.submit_local_jobs_unthrottled(workflow)
        pacing.configure(self.inv.runtime.environment_open_rate, ".", self.inv.runtime.cleanup_grace_seconds)
        if self.inv.inner is None and self.inv.runtime.budget is not None:  # the invocation's own ledger
            spend.start_invocation_ledger(".", self.events.invocation)
        ratelimit.configure(".")  # model calls in flight per endpoint: shared by every process of the run
        records = engine.Records.of(workflow)
        if records is not None:
            recovery.recover(workflow, records, self._outputs())
        deadline = lifecycle.deadline_from(self.inv.started, self.inv.runtime.deadline_seconds,
                                           inherited=self.inv.inner is not None)
        if deadline is not None and self.inv.inner is None:
            os.environ[lifecycle.DEADLINE_ENV] = repr(deadline)  # inner runs' and cluster jobs' environment
        if self.inv.inner is None:
            self.events.begin()
        if engine.on_cluster(workflow):
            self.resources.hand_down()
        self.lifecycle = lifecycle.Lifecycle(workflow, deadline, self.inv.runtime.cleanup_grace_seconds,
                                             inner=self.inv.inner is not None)

    def _outputs(self) -> list[recovery.Output]:
        """The files this process's jobs write, with their rules' params now (computed only if needed),
        scope by scope in the targets' order: the run folder's first (the attempt files' params are read
        from them). The instances are those of the tasks.json on disk (none past the run folder without it)."""
        outputs: list[recovery.Output] = []
        for req in self.inv.requests:
            if self.inv.inner is not None and not self.inv.is_inner_of(req):
                continue
            run = str(self.inv.run_path(req))
            attempts = self._attempts_on_disk(req, run)
            for row in TARGET_ROWS:
                stages = [s for s in STAGES_OF[row.name] if s.built_for(req)]
                instances = self.targets.instances(req, row, attempts) if stages else []
                files = layout.files_of(run, stages, instances)  # an instance's, then the next one's
                # whose each file of an instance is (its stage's name and place in ``stages``)
                owners = [(s.name, k) for k, s in enumerate(stages) for _ in s.outputs]
                getters = [tuple(self.params(s.name).values()) for s in stages]
                keys = ("ns", "run_id", *row.wildcards)
                for i, values in enumerate(instances):
                    w = _Wildcards(zip(keys, (req.namespace, req.run_id, *map(str, values))))
                    made = [_params(w, *g) for g in getters]
                    outputs += [recovery.Output(path, name, made[k])
                                for (name, k), path in zip(owners, files[i * len(owners):(i + 1) * len(owners)])]
        return outputs

    @staticmethod
    def _attempts_on_disk(req, run: str) -> list[tuple[str, int]]:
        """(task segment, attempt) of every attempt of the tasks.json on disk; none without it."""
        tasks_file = Path(layout.tasks_file(run))
        if not tasks_file.exists():
            return []
        try:
            segments = reading.task_segments(tasks_file)
        except (OSError, ValueError, KeyError):
            return []
        return [(s, a) for s in segments for a in range(1, req.execution.attempts + 1)]

    def start(self) -> None:
        """The jobs are about to start (Snakemake's ``onstart``): events, progress, signals, the deadline."""
        self.events.run_started()
        progress.start(self)
        workflow = self.inv.snakemake
        if workflow is not None and engine.is_main_process(workflow):
            engine.status_checks_at_most(workflow)  # a cluster run sees a finished shard job soon
        if self.lifecycle is not None:
            self.lifecycle.start()

    def run_handlers_as_module(self, workflow) -> None:
        """``start`` and ``finish`` run also when the Snakefile is a module of another."""
        engine.run_handlers_as_module(workflow, self.start, lambda ok: self.finish(ok=ok))

    def finish(self, ok: bool = True) -> None:
        """The run is over (``ok``: every job succeeded): write each request's outcome event, stop the
        progress line and the stop's timers, release the locks, and cancel what would hold the exit
        (the scheduler's re-selection timers), and stop the shards' fork server."""
        if not ok and self.inv.snakemake is not None:
            lifecycle.note_failures(engine.failed_jobs(self.inv.snakemake))
        self.events.run_finished(ok)
        progress.stop()
        if self.lifecycle is not None:
            self.lifecycle.finish()
            self.prune_call_cache()
        if self.inv.inner is None:
            os.environ.pop(lifecycle.DEADLINE_ENV, None)
            os.environ.pop(CAPS_ENV, None)
            self.events.withdraw()
        for folder in self._locked:
            locks.release(folder)
        self._locked = []
        engine.cancel_scheduler_timers()
        forkserver.stop()
        self.freeze_heap()

    def prune_call_cache(self) -> None:
        """Prune the call cache to ``runtime.cache_max_bytes`` and ``runtime.cache_max_age_days`` once the run
        that built files ends, when some request used it: the outer run alone (a shard's inner run and a
        cluster job end inside it, and never prune what the others may still read)."""
        runtime = self.inv.runtime
        if self.inv.inner is not None or (runtime.cache_max_bytes is None and runtime.cache_max_age_days is None):
            return
        if all(callcache.cache_mode(req.execution.cache) == "off" for req in self.inv.requests):
            return
        store = callcache.CallStore(callcache.cache_root(runtime.results_dir, runtime.cache_dir))
        max_age = None if runtime.cache_max_age_days is None else runtime.cache_max_age_days * DAY_SECONDS
        try:
            removed, freed = store.prune(max_bytes=runtime.cache_max_bytes, max_age_seconds=max_age)
        except OSError as exc:  # the run's outcome stands: the next one prunes again
            logs.LOG.warning(f"the call cache {store.root} was not pruned: {exc}")
            return
        if removed:
            logs.LOG.info(f"the call cache {store.root}: pruned {removed} entries ({freed} bytes) used longest ago")

    def parsed(self) -> None:
        """The Snakefile is parsed: its rules exist. Their resource functions' signatures are read
        once (``engine.resources_without_signatures``), and the heap is frozen (``freeze_heap``)."""
        if self.inv.snakemake is not None:
            engine.resources_without_signatures(self.inv.snakemake)
        self.freeze_heap()

    @staticmethod
    def freeze_heap() -> None:
        """Keep the garbage collector off every object alive now (``gc.freeze``).

        Called once the Snakefile is parsed (modules, config, rules: they live
        until exit) and when the run is over. Python's finalization otherwise
        collects over the whole heap again and again as it tears modules down:
        0.8 s at the end of a run of 20 attempts, and of every shard's inner
        run. A process that goes on after Snakemake (``sdk.run_snakemake``)
        unfreezes it.
        """
        gc.freeze()


class _Wildcards(dict):
    """Wildcards as Snakemake passes them to a param function: attributes, and ``items()``."""

    __getattr__ = dict.__getitem__
