"""The one entry point of every rule's ``run:`` block, and the one argument each stage's body takes.

A rule's ``run:`` block is ``EVAL.build(rule, wildcards, input, output, params, threads,
resources, log)``, whatever the stage: ``Jobs.build`` finds the stage in the stage table
(``agentcompass.stages``), makes its argument (the class its scope's row names,
``stages.Scope.job``: a ``RequestJob``, ``TaskJob``, ``AttemptJob`` or ``ShardJob``, made from
the rule's files and the scope's wildcards) and calls its body (``pipeline.bodies``). Around
every body:

- a run that is stopping starts nothing (``aio.Stopped``), nor does an attempt once a budget it
  draws from is spent (``agentcompass.spend``);
- each output is recorded as finished just before it appears (``recovery``
  says why), so a kill at any moment loses only unfinished work;
- a failing stage's traceback, scrubbed of the key, goes to its log file;
- temporary files an earlier, interrupted write of its outputs left go before it
  starts (a run that stopped while a job wrote may have dropped the job's
  incomplete markers too, so the recovery of a killed run would not find them);
- an attempt stage says when its attempt starts and finishes (``events``).

A body sees its job alone: the request, the run folder, its files by name, its one writer
(``RequestJob.write``), an attempt's or a task's plan and task, and the invocation's few
services it may use, by name (``Services``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
import traceback
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, cast

from agentcompass._util import aio, jsonio
from agentcompass._util.logs import LOG
from agentcompass.runtime.models import ExecutionPlan, RunRequest, TaskSpec
from agentcompass.runtime.models.codec import Contract
from agentcompass.runtime.models.orchestration import ResolvedRuntimeOptions
from agentcompass.secrets import Scrubber, references
from agentcompass import spend
from agentcompass.stages import BUDGETED_STAGES, LAST_ATTEMPT_STAGE, STARTING_STAGES, Stage, resolve, stage

from . import engine, lifecycle, reading
from .files import write_file

if TYPE_CHECKING:
    from .events import Emitter
    from .resources import Resources
    from .shards import Shards
    from .targets import Targets
    from .workflow import EvaluationWorkflow


@dataclass(frozen=True)
class Services:
    """What of the invocation a body may use beyond its job's files, each by name: one for the invocation.

    A job made without Snakemake (``status`` builds a checkpoint's files in a scratch folder) has none:
    its body then runs with the default runtime options and starts nothing of the invocation's.
    """

    # the invocation's runtime options (``runtime.*``): the shard size, the budget, the call cache's folder
    runtime: ResolvedRuntimeOptions
    # Snakemake's workflow: whether this is the main process, on a cluster, which rules are forced (``engine``)
    snakemake: Any
    # the invocation's targets: the checkpoint hand-off (``bulk_files``), a request's results, a shard's slice
    targets: Targets
    # each request's events.jsonl: a shard announces its attempts and says they are built
    events: Emitter
    # the shard rule's threads (``Shards.job_threads``)
    shards: Shards
    # what a job holds, handed to a shard's inner run (``Resources.claims``)
    resources: Resources


@dataclass
class RequestJob:
    """A request or summary stage's argument: the request, its run folder and the stage's files.

    ``inputs`` and ``outputs`` are the rule's, by name (``outputs["plans"]``); ``services`` are the
    invocation's (None when a body is called without Snakemake, as ``status`` does).
    """

    request: RunRequest
    run: str
    inputs: dict[str, str] = field(default_factory=dict)
    outputs: dict[str, str] = field(default_factory=dict)
    services: Services | None = None
    stage: str = ""

    @classmethod
    def of_rule(cls, request: RunRequest, run: str, inputs: dict[str, str], outputs: dict[str, str],
                services: Services | None, stage_name: str, wildcards: dict[str, str], threads: int = 1,
                resources: Any = None, params: Any = None, log: Any = ()) -> RequestJob:
        """The argument of a job of the rule ``stage_name``, from its files and its scope's wildcards (and
        the rule's threads, resources, params and log files, which a shard's inner run gets)."""
        return cls(request, run, inputs, outputs, services, stage_name)

    @property
    def runtime(self) -> ResolvedRuntimeOptions:
        """The invocation's runtime options (the defaults without Snakemake)."""
        return self.services.runtime if self.services is not None else ResolvedRuntimeOptions()

    def output(self, name: str | None = None) -> str:
        return self.outputs[name] if name else next(iter(self.outputs.values()))

    def write(self, name: str, value: Any, *, secrets: Any = ()) -> None:
        """Write ``value`` (a contract or plain data) as the stage's output ``name``, the one way a body
        writes a file: atomically, as canonical JSON, scrubbed of ``secrets`` (``${VAR}`` references, or
        mappings holding them) and recorded as built just before it appears. An output with a kind (a
        contract's file) is checked against its schema first (``files.write_file``)."""
        kind = stage(self.stage).output(name).kind
        if kind is not None:
            write_file(kind, self.outputs[name], value, secrets)
            return
        payload = value.to_dict() if isinstance(value, Contract) else value
        jsonio.write_text_atomic(self.outputs[name], jsonio.canonical_json(Scrubber(secrets).value(payload)))


@dataclass
class TaskJob(RequestJob):
    """A task stage's argument (``preflight``): also the task's path segment and the request's
    tasks.json and plans.json, of which it reads its task and its first attempt's plan."""

    segment: str = ""
    tasks_file: str = ""
    plans_file: str = ""
    # the attempt whose plan it reads: a task stage reads its first attempt's
    attempt: int = 1

    @classmethod
    def of_rule(cls, request: RunRequest, run: str, inputs: dict[str, str], outputs: dict[str, str],
                services: Services | None, stage_name: str, wildcards: dict[str, str], threads: int = 1,
                resources: Any = None, params: Any = None, log: Any = ()) -> TaskJob:
        assert services is not None  # a task's or an attempt's job runs under Snakemake
        # A job runs after its request's tasks.json and plans.json are written (the DAG
        # orders it so), and reads its own slice of them.
        tasks_file, plans_file = services.targets.bulk_files(request)
        return cls(request, run, inputs, outputs, services, stage_name, segment=wildcards["task"],
                   tasks_file=tasks_file, plans_file=plans_file, **cls._more(wildcards, outputs))

    @staticmethod
    def _more(wildcards: dict[str, str], outputs: dict[str, str]) -> dict[str, Any]:
        return {}

    @cached_property
    def task(self) -> TaskSpec:
        return reading.task_by_segment(self.tasks_file, self.segment)

    @cached_property
    def plan(self) -> ExecutionPlan:
        return reading.plan_for(self.request, self.plans_file, self.segment, self.attempt)

    @cached_property
    def plan_dict(self) -> dict[str, Any]:
        """The plan as plan.json holds it (made once: the secrets and plan.json both read it)."""
        return self.plan.to_dict()

    @cached_property
    def secrets(self) -> list[str]:
        """Every ``${VAR}`` reference the task's or the attempt's runs may resolve: the request's and its
        plan's (a task folder's ``[verifier] env`` and ``[solution] env``, the environment's build args),
        for ``write``'s and ``Scrubber``'s ``secrets``."""
        return request_references(self.request) + [f"${{{name}}}" for name in references(self.plan_dict)]


@dataclass
class AttemptJob(TaskJob):
    """An attempt stage's argument: a task's, for the attempt ``attempt`` (its own plan), and its folder."""

    folder: str = ""

    @staticmethod
    def _more(wildcards: dict[str, str], outputs: dict[str, str]) -> dict[str, Any]:
        return {"attempt": int(wildcards["attempt"]), "folder": str(Path(next(iter(outputs.values()))).parent)}


# RunRequest -> the ${VAR} references in it (every attempt job of a request asks)
_request_references: dict[int, tuple[RunRequest, list[str]]] = {}


def request_references(req: RunRequest) -> list[str]:
    """The ``${VAR}`` references of the request, as references; found once per request."""
    held = _request_references.get(id(req))
    if held is None or held[0] is not req:
        held = _request_references[id(req)] = (req, [f"${{{name}}}" for name in references(req.to_dict())])
    return list(held[1])


@dataclass
class ShardJob(RequestJob):
    """The shard stage's argument: also the slice's index, and the job's threads, resources,
    params and log (its inner Snakemake runs with them)."""

    index: int = 0
    threads: int = 1
    resources: Any = None
    params: Any = None
    log: str = ""

    @classmethod
    def of_rule(cls, request: RunRequest, run: str, inputs: dict[str, str], outputs: dict[str, str],
                services: Services | None, stage_name: str, wildcards: dict[str, str], threads: int = 1,
                resources: Any = None, params: Any = None, log: Any = ()) -> ShardJob:
        return cls(request, run, inputs, outputs, services, stage_name, index=int(wildcards["shard"]),
                   threads=threads, resources=resources, params=params, log=str(log[0]))


class Jobs:
    def __init__(self, pipeline: EvaluationWorkflow) -> None:
        self.pipeline = pipeline
        self.inv = pipeline.inv
        # stage name -> how its job's argument is made: its scope's job class, and the scope's wildcards
        self._makers: dict[str, tuple[Callable[..., RequestJob], tuple[str, ...]]] = {}

    @cached_property
    def services(self) -> Services:
        """The invocation's services, as its bodies see them (made at the first job: Snakemake is bound)."""
        p = self.pipeline
        return Services(p.inv.runtime, p.inv.snakemake, p.targets, p.events, p.shards, p.resources)

    def build(self, rule: str, w, input, output, params, threads, resources, log) -> None:
        """Build one job of the stage ``rule`` (the entry point of every rule's ``run:`` block)."""
        s = stage(rule)
        # the params it records: computed again here, as Snakemake computed them
        values = tuple(getattr(params, name) for name in s.params)
        with self._job(s, w, input, output, values, log) as req:
            job = self._argument(s, req, w, input, output, threads, resources, params, log)
            events = self.pipeline.events
            # the files of the stages of its scope before it, as (stage, path): the last one's is the stage's
            # own input (an attempt's prepare reads its task's preflight file, which no attempt reuses)
            upstream = [(source, job.inputs[name]) for name, source, _ in s.inputs
                        if name in job.inputs and stage(source).scope == s.scope]
            # an attempt starts and finishes with the stages up to its result; a stage after it adds a file
            if isinstance(job, AttemptJob) and s.name in STARTING_STAGES:
                events.attempt_job(req, s.name, job.plan, reused=upstream[-1][1] if upstream else None)
            result = s.resolve("body")(job)
            if isinstance(job, AttemptJob) and s.name == LAST_ATTEMPT_STAGE:
                events.attempt_finished(req, result, upstream, s.name)

    def _argument(self, s: Stage, req: RunRequest, w, input, output, threads, resources, params, log) -> RequestJob:
        """The body's argument: the class its scope's row names (``Scope.job``), from the rule's files
        and the scope's wildcards."""
        made = self._makers.get(s.name)
        if made is None:
            row = s.scope_row
            made = self._makers[s.name] = (cast("type[RequestJob]", resolve(row.job)).of_rule, row.wildcards)
        of_rule, names = made
        inputs = {name: str(value) for name, value in input.items()}
        outputs = {o.name: str(output[i]) for i, o in enumerate(s.outputs)}
        return of_rule(req, str(self.inv.run_path(req)), inputs, outputs, self.services, s.name,
                       {name: getattr(w, name) for name in names}, threads, resources, params, log)

    @contextlib.contextmanager
    def _job(self, s: Stage, w, input, output, params, log):
        reason = aio.stopping()
        if reason is not None:
            raise aio.Stopped(reason)
        for leftover in jsonio.interrupted_writes(*output):
            leftover.unlink(missing_ok=True)
        req = self.inv.request(w)
        if s.name in BUDGETED_STAGES and (req.execution.budget is not None or self.inv.runtime.budget is not None):
            why = spend.over_budget(req.execution.budget, self.inv.run_path(req), self.inv.runtime.budget,
                                    req.metadata.request_name)
            if why is not None:  # no new attempt starts; those in flight finish
                lifecycle.budget_spent(self.inv.snakemake, why)
                raise aio.Stopped(why)
        debug = LOG.isEnabledFor(logging.DEBUG)  # runtime.log_level: debug
        if debug:
            where = " ".join(f"{k}={v}" for k, v in dict(w.items()).items())
            LOG.debug(f"{s.name} {where}: started")
            started = time.monotonic()
        with stage_log(log, s.name, w, req), jsonio.publishing(self._recorder(s.name, input, output, params, log)):
            yield req
        if debug:
            LOG.debug(f"{s.name} {where}: done in {time.monotonic() - started:.3f} s")

    def _recorder(self, rule: str, input, output, params, log):
        workflow = self.inv.snakemake
        records = engine.Records.of(workflow)
        if records is None:
            return lambda path: None
        outputs = {os.path.normpath(str(o)): str(o) for o in output}
        inputs = [str(i) for i in input]
        logs = [str(item) for item in log]
        values = list(params)

        def record(path) -> None:
            named = outputs.get(os.path.normpath(str(path)))
            if named is not None:
                records.write_finished(workflow, rule, named, inputs, logs, values)

        return record


@contextlib.contextmanager
def stage_log(log, stage: str, w, req: RunRequest):
    """Write a failing stage's traceback, scrubbed of the key, to its rule's log file.

    A stage that succeeds writes no log: its timings are in the files it writes,
    and Snakemake removes the log of an earlier failure before it reruns the job.
    """
    try:
        yield
    except BaseException as exc:
        # the request's references and every one this job resolved (the plan's: a task folder's env)
        scrubber = Scrubber([req.to_dict()])
        _scrub_exception(exc, scrubber)  # Snakemake logs the exception it is handed too
        path = Path(log[0])
        path.parent.mkdir(parents=True, exist_ok=True)
        where = " ".join(f"{k}={v}" for k, v in dict(w.items()).items())
        # appended: a shard's log holds its inner run's output, which says what stopped or failed in it
        with open(path, "a") as f:
            if isinstance(exc, aio.Stopped):
                f.write(f"{stage} {where}: stopped before it finished: {exc}\n")
            else:
                f.write(f"{stage} {where}: failed\n" + scrubber.text(traceback.format_exc()))
        raise


def _scrub_exception(exc: BaseException | None, scrubber: Scrubber) -> None:
    """Scrub the text arguments of ``exc`` and of the exceptions it was raised from, in place."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen and scrubber:
        seen.add(id(exc))
        try:
            exc.args = tuple(scrubber.text(a) if isinstance(a, str) else a for a in exc.args)
        except (AttributeError, TypeError):
            pass
        exc = exc.__cause__ or exc.__context__

