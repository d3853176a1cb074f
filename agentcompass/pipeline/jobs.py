"""The one entry point of every rule's ``run:`` block, and the one argument each stage's body takes.

A rule's ``run:`` block is ``EVAL.build(rule, wildcards, input, output, params, threads,
resources, log)``, whatever the stage: ``Jobs.build`` finds the stage in the stage table
(``agentcompass.stages``), makes its argument (a ``RequestJob``, an ``AttemptJob`` or a
``ShardJob``: the request and the stage's files, by name) and calls its body. Around
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
from typing import TYPE_CHECKING, Any

from agentcompass._util import aio, jsonio
from agentcompass._util.logs import LOG
from agentcompass.runtime.models import ExecutionPlan, RunRequest, TaskSpec
from agentcompass.secrets import Scrubber, references
from agentcompass import spend
from agentcompass.stages import (ATTEMPT, BUDGETED_STAGES, LAST_ATTEMPT_STAGE, SHARD, STARTING_STAGES, TASK, Stage,
                                  stage)

from . import engine, lifecycle, reading
from .files import write_file

if TYPE_CHECKING:
    from .workflow import EvaluationWorkflow


@dataclass
class RequestJob:
    """A request or summary stage's argument: the request, its run folder and the stage's files.

    ``inputs`` and ``outputs`` are the rule's, by name (``outputs["plans"]``); ``pipeline`` is the
    workflow the job runs in (None when a body is called without Snakemake, as ``status`` does).
    """

    request: RunRequest
    run: str
    inputs: dict[str, str] = field(default_factory=dict)
    outputs: dict[str, str] = field(default_factory=dict)
    pipeline: EvaluationWorkflow | None = None
    stage: str = ""

    def output(self, name: str | None = None) -> str:
        return self.outputs[name] if name else next(iter(self.outputs.values()))

    def write(self, name: str, value: Any, **options: Any) -> None:
        """Write ``value`` as the stage's output ``name``: validated against its contract, scrubbed
        of secrets and recorded as it appears (``files.write_file``)."""
        write_file(stage(self.stage).kind(name), self.outputs[name], value, **options)


@dataclass
class AttemptJob(RequestJob):
    """An attempt stage's argument: also the attempt, its folder and the request's tasks.json and
    plans.json, of which it reads its own slice (its task and plan, decoded once)."""

    segment: str = ""
    attempt: int = 0
    folder: str = ""
    tasks_file: str = ""
    plans_file: str = ""

    @cached_property
    def plan(self) -> ExecutionPlan:
        return reading.plan_for(self.request, self.plans_file, self.segment, self.attempt)

    @cached_property
    def task(self) -> TaskSpec:
        return reading.task_by_segment(self.tasks_file, self.segment)

    @cached_property
    def plan_dict(self) -> dict[str, Any]:
        """The plan as plan.json holds it (made once: the secrets and plan.json both read it)."""
        return self.plan.to_dict()

    @cached_property
    def secrets(self) -> list[str]:
        """Every ``${VAR}`` reference the attempt may resolve: the request's and its plan's (a task
        folder's ``[verifier] env`` and ``[solution] env``, the environment's build args), for
        ``write_file``'s and ``Scrubber``'s ``secrets``."""
        return request_references(self.request) + [f"${{{name}}}" for name in references(self.plan_dict)]


# RunRequest -> the ${VAR} references in it (every attempt job of a request asks)
_request_references: dict[int, tuple[RunRequest, list[str]]] = {}


def request_references(req: RunRequest) -> list[str]:
    """The ``${VAR}`` references of the request, as references; found once per request."""
    held = _request_references.get(id(req))
    if held is None or held[0] is not req:
        held = _request_references[id(req)] = (req, [f"${{{name}}}" for name in references(req.to_dict())])
    return list(held[1])


@dataclass
class TaskJob(RequestJob):
    """A task stage's argument (``preflight``): also the task's path segment and the request's
    tasks.json and plans.json, of which it reads its task and its first attempt's plan."""

    segment: str = ""
    tasks_file: str = ""
    plans_file: str = ""

    @cached_property
    def task(self) -> TaskSpec:
        return reading.task_by_segment(self.tasks_file, self.segment)

    @cached_property
    def plan(self) -> ExecutionPlan:
        return reading.plan_for(self.request, self.plans_file, self.segment, 1)

    @cached_property
    def secrets(self) -> list[str]:
        """The ``${VAR}`` references the task's runs may resolve (the request's and its plan's)."""
        return request_references(self.request) + [f"${{{name}}}" for name in references(self.plan.to_dict())]


@dataclass
class ShardJob(RequestJob):
    """The shard stage's argument: also the slice's index, and the job's threads, resources,
    params and log (its inner Snakemake runs with them)."""

    index: int = 0
    threads: int = 1
    resources: Any = None
    params: Any = None
    log: str = ""


class Jobs:
    def __init__(self, pipeline: EvaluationWorkflow) -> None:
        self.pipeline = pipeline
        self.inv = pipeline.inv

    def build(self, rule: str, w, input, output, params, threads, resources, log) -> None:
        """Build one job of the stage ``rule`` (the entry point of every rule's ``run:`` block)."""
        s = stage(rule)
        # the params it records: computed again here, as Snakemake computed them
        values = tuple(getattr(params, name) for name in s.params)
        with self._job(s, w, input, output, values, log) as req:
            job = self._argument(s, req, w, input, output, threads, resources, params, log)
            events = self.pipeline.events
            # the files of the stages before it, as (stage, path): the last one's is the stage's own input
            upstream = [(source, job.inputs[name]) for name, source, _ in s.inputs]
            # an attempt starts and finishes with the stages up to its result; a stage after it adds a file
            if isinstance(job, AttemptJob) and s.name in STARTING_STAGES:
                events.attempt_job(req, s.name, job.plan, reused=upstream[-1][1] if upstream else None)
            result = s.resolve("body")(job)
            if isinstance(job, AttemptJob) and s.name == LAST_ATTEMPT_STAGE:
                events.attempt_finished(req, result, upstream, s.name)

    def _argument(self, s: Stage, req: RunRequest, w, input, output, threads, resources, params, log):
        run = str(self.inv.run_path(req))
        inputs = {name: str(value) for name, value in input.items()}
        outputs = {o.name: str(output[i]) for i, o in enumerate(s.outputs)}
        if s.scope == ATTEMPT:
            # A job runs after its request's tasks.json and plans.json are written (the DAG
            # orders it so), and reads its own slice of them.
            tasks_file, plans_file = self.pipeline.targets.bulk_files(req)
            return AttemptJob(req, run, inputs, outputs, self.pipeline, s.name, segment=w.task, attempt=int(w.attempt),
                              folder=str(Path(outputs[s.outputs[0].name]).parent),
                              tasks_file=tasks_file, plans_file=plans_file)
        if s.scope == TASK:
            tasks_file, plans_file = self.pipeline.targets.bulk_files(req)
            return TaskJob(req, run, inputs, outputs, self.pipeline, s.name, segment=w.task,
                           tasks_file=tasks_file, plans_file=plans_file)
        if s.scope == SHARD:
            return ShardJob(req, run, inputs, outputs, self.pipeline, s.name, index=int(w.shard), threads=threads,
                            resources=resources, params=params, log=str(log[0]))
        return RequestJob(req, run, inputs, outputs, self.pipeline, s.name)

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

