"""The stages' bodies: each a function of one argument, the job (``jobs.RequestJob``,
``jobs.AttemptJob`` or ``jobs.ShardJob``), writing the stage's files.

The stage table (``agentcompass.stages``) names the body of each stage; its rule calls it
through ``jobs.Jobs.build``. A body can be tested without Snakemake: build its job argument
and call it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import platform
import time
from collections import Counter
from pathlib import Path
from typing import Iterator

import agentcompass
from agentcompass import callcache, layout, spend
from agentcompass._util import aio
from agentcompass import report as report_pages
from agentcompass import results as results_data
from agentcompass._util.aio import run_coroutine
from agentcompass._util.display import visible
from agentcompass._util.jsonio import interrupted_writes, not_unicode, read_json, write_bytes_atomic
from agentcompass.layout import task_segment
from agentcompass._util.logs import LOG
from agentcompass.errors import InfrastructureError
from agentcompass.runtime.base import (
    AFTER_RUN_TIMEOUT,
    EVALUATE_GRACE,
    EnvironmentSession,
    HarnessContext,
    HarnessFreeBenchmark,
    error_result,
    retryable,
)
from agentcompass.runtime import failures
from agentcompass.runtime.limits import LimitsUnavailableError
from agentcompass.runtime.model_client import ATTEMPT_TRAJECTORY, ATTEMPT_USAGE, Usage, counted
from agentcompass.runtime.models import (
    ExecutionPlan,
    FailureClass,
    MetricSummary,
    PreparedTask,
    RunRequest,
    RunResult,
    ScoredOn,
    TaskInput,
    TaskSpec,
    TaskStatus,
)
from agentcompass.runtime.models.codec import from_dict
from agentcompass.runtime.models.orchestration import ResolvedRuntimeOptions
from agentcompass.runtime.planner import Planner
from agentcompass.runtime.recipes import build_run_recipe_registry
from agentcompass.runtime.registry import ANALYZERS
from agentcompass.secrets import Scrubber
from agentcompass.stages import LAST_ATTEMPT_STAGE, stage
from agentcompass._util.trees import remove_tree

from . import engine, forkserver, lifecycle, pacing, plan_index, preflight, provenance, reading, shards
from .engine import WorkflowError
from .files import ComponentVersion, RunInfo, ShardRecord, TasksFile, write_file
from .jobs import AttemptJob, RequestJob, ShardJob
from .reading import benchmark_for, environment_for, harness_for, read_result

# --- secrets ------------------------------------------------------------------


def scrub_attempt_files(attempt_dir: Path, scrubber: Scrubber) -> None:
    """Rewrite the files a harness or Benchmark left at the top of the attempt folder (its trajectory,
    its logs) with every secret value replaced by its reference: JSON lines as values, other text as text.

    The agent's own files (the workspace folders, ``outputs/``) are not rewritten: they are what is
    evaluated. Links are left alone (never followed), and so are the stage's own JSON files, which
    ``write_file`` scrubs as it writes them.
    """
    if not scrubber:
        return
    try:
        entries = list(os.scandir(attempt_dir))
    except FileNotFoundError:
        return
    for entry in entries:
        if not entry.is_file(follow_symlinks=False) or entry.name.endswith((".json", ".tmp")):
            continue
        path = Path(entry.path)
        data = path.read_bytes()
        text = data.decode("utf-8", errors="surrogateescape")
        scrubbed = scrubber.json_lines(text) if entry.name.endswith(".jsonl") else scrubber.text(text)
        if scrubbed != text:  # bytes that are not UTF-8 come back as they were
            write_bytes_atomic(path, scrubbed.encode("utf-8", errors="surrogateescape"))



# --- request, tasks, plans ------------------------------------------------------------


def write_request(job: RequestJob) -> None:
    # the cache mode is what is paid, never what a file holds (a rerun with another mode rebuilds nothing)
    job.write("request", dataclasses.replace(job.request, execution=dataclasses.replace(job.request.execution,
                                                                                          cache=None)))


def write_tasks(job: RequestJob) -> None:
    """tasks.json; the shards' fork server starts while the plans are made, if the request is sharded."""
    req = job.request
    tasks = task_list(req, job.outputs["tasks"])
    pipeline = job.pipeline
    if pipeline is not None and pipeline.targets.shards_for(len(tasks) * req.execution.attempts):
        workflow = pipeline.inv.snakemake
        if workflow is not None and engine.is_main_process(workflow) and not engine.on_cluster(workflow):
            forkserver.start()  # the shards' inner runs fork from it: it imports while the plans are made


def write_plans(job: RequestJob) -> None:
    """plans.json and run_info.json, from the plans in hand: one job, so run_info.json never lags its plans."""
    req = job.request
    shard_size = job.pipeline.inv.runtime.shard_size if job.pipeline is not None else 0
    view = plan_list(req, job.inputs["tasks"], job.outputs["plans"], shard_size=shard_size)
    run_info(req, view, job.outputs["run_info"])
    # every attempt's folder: a shard's generation compares their times with its record
    for segment in reading.task_segments(job.inputs["tasks"]):
        for attempt in range(1, req.execution.attempts + 1):
            os.makedirs(layout.attempt_folder(job.run, segment, attempt), exist_ok=True)


def task_list(req: RunRequest, out: str | Path) -> list[TaskSpec]:
    """Write the request's tasks.json to ``out``; returns the selected TaskSpecs."""
    benchmark = benchmark_for(req)
    tasks = benchmark.select_tasks(benchmark.load_tasks(req), req)
    seen: dict[str, str] = {}
    for task in tasks:
        segment = task_segment(task.task_id)
        if segment in seen:
            raise ValueError(
                f"benchmark {req.benchmark.id!r}: task ids {seen[segment]!r} and {task.task_id!r} "
                "are duplicates (or map to the same path); task ids must be unique"
            )
        seen[segment] = task.task_id
        bad = not_unicode(task.to_dict())
        if bad is not None:  # every file is UTF-8: such a task could be written nowhere
            raise ValueError(
                f"benchmark {req.benchmark.id!r}: task {visible(task.task_id)!r}: its field "
                f"{visible('.'.join(map(str, bad)))!r} holds text that is not valid Unicode (a lone surrogate, "
                "e.g. from a \\ud800 escape or a byte that is not UTF-8); correct the task data"
            )
    write_file(stage(layout.TASK_LIST).kind(), out, TasksFile(req.metadata.request_name, req.benchmark.id, tasks))
    return tasks


def plan_list(req: RunRequest, tasks_path: str | Path, out: str | Path, *, shard_size: int = 0) -> dict[str, dict]:
    """Write the plans of every semantic attempt of every task to ``out``, each made by its own
    ``Planner.plan`` and written as it is made, and the plans' index beside it (``plan_index``: with
    each slice's digest, for slices of ``shard_size``). Returns what run_info.json keeps of them."""
    harness = harness_for(req)
    planner = Planner(
        benchmark_for(req), harness, build_run_recipe_registry(req), environment_for(req.environment.id)
    )
    raw = reading.raw_tasks(tasks_path)
    view: dict[str, dict] = {}

    def plans() -> Iterator[ExecutionPlan]:
        for data in raw.values():  # decoded one at a time: a request's tasks are never all held as TaskSpecs
            task = from_dict(TaskSpec, data, "tasks.json task")
            for attempt in range(1, req.execution.attempts + 1):
                plan = planner.plan(req, task, attempt)
                view.setdefault(plan.task_id, {"attempts": {}})["attempts"][str(plan.attempt)] = plan.audit_view()
                yield plan

    plan_index.write_plans(out, stage(layout.PLAN_LIST).kind("plans"), req.metadata.request_name, plans(),
                           tasks_path=tasks_path, raw_tasks=raw, shard_size=shard_size)
    return view


# --- per attempt ------------------------------------------------------------------


def _label(req: RunRequest, plan: ExecutionPlan, phase: str, who: str | None = None) -> str:
    """A session's name: the run, the task, the attempt (or ``who`` opens it: the preflight) and the phase."""
    return f"{req.run_id}-{task_segment(plan.task_id)}-{who or plan.attempt}-{phase}"


class LazySession(EnvironmentSession):
    """Opens the real session on first use: a stage whose components never touch
    the sandbox (an exact-match scorer, the oracle) pays nothing for it."""

    def __init__(self, opener) -> None:
        self._opener = opener
        self._session: EnvironmentSession | None = None
        self.failed = False

    @property
    def opened(self) -> bool:
        return self._session is not None

    async def _real(self) -> EnvironmentSession:
        if self._session is None:
            self._session = await self._opener()
        return self._session

    @property
    def workdir(self) -> str:
        if self._session is None:
            raise RuntimeError("the session's workdir is known once it is opened; call a method first")
        return self._session.workdir

    @property
    def tools(self) -> dict[str, str]:
        if self._session is None:
            raise RuntimeError("the session's tools are known once it is opened; call a method first")
        return self._session.tools

    @tools.setter
    def tools(self, value: dict[str, str]) -> None:
        raise AttributeError("a lazily opened session's tools are its real session's")

    async def exec(self, cmd, **kwargs):
        return await (await self._real()).exec(cmd, **kwargs)

    async def upload(self, local, remote):
        return await (await self._real()).upload(local, remote)

    async def download(self, remote, local):
        return await (await self._real()).download(remote, local)

    async def read_text(self, path):
        return await (await self._real()).read_text(path)

    async def write_text(self, path, text):
        return await (await self._real()).write_text(path, text)

    async def exists(self, path):
        return await (await self._real()).exists(path)

    async def is_dir(self, path):
        return await (await self._real()).is_dir(path)

    async def endpoint(self, port):
        return await (await self._real()).endpoint(port)

    async def expose_host_socket(self, socket_path):
        return await (await self._real()).expose_host_socket(socket_path)

    async def set_network(self, policy):
        return await (await self._real()).set_network(policy)

    async def end_processes(self):
        return await (await self._real()).end_processes()

    async def exec_and_end(self, cmd, **kwargs):
        return await (await self._real()).exec_and_end(cmd, **kwargs)

    def __getattr__(self, name):
        # provider-specific extras (e.g. a container id) open the session too
        if name.startswith("_"):
            raise AttributeError(name)
        if self._session is None:
            raise AttributeError(f"{name}: open the session first (await any session method)")
        return getattr(self._session, name)

    async def close(self, *, failed: bool = False, retain: str | None = None) -> None:
        if self._session is not None:
            await self._session.close(failed=failed, retain=retain)
            self._session = None


def limits_from_task(req: RunRequest, plan: ExecutionPlan, limits: tuple[str, ...]) -> dict[str, str]:
    """Each of ``limits`` (environment params) that the task set, not the user: its value, and the Recipes that
    put the task's own settings into the plan (``task_dockerfile``: a task folder's memory_mb and cpus)."""
    recipes = ", ".join(plan.applied_recipes) or "none"
    params = plan.task_environment.params
    return {name: f"{params[name]}, put in the plan from the task's own settings by the Recipes {recipes}"
            for name in limits if name not in req.environment.params and params.get(name) is not None}


@contextlib.asynccontextmanager
async def _open(req: RunRequest, plan: ExecutionPlan, phase: str, evaluation: bool = False, who: str | None = None):
    """The phase's session, closed at the end: kept when the request's retention says so.

    A stage marks ``session.failed`` when its attempt failed without raising.
    """
    spec = plan.evaluation_environment if evaluation and plan.evaluation_environment else plan.task_environment
    network = getattr(plan, f"{phase}_network")

    async def opener() -> EnvironmentSession:
        await pacing.before_open()  # runtime.environment_open_rate
        try:
            return await environment_for(spec.id).open(spec, network, _label(req, plan, phase, who))
        except LimitsUnavailableError as exc:
            if spec is not plan.task_environment:
                raise
            raise exc.with_origin(limits_from_task(req, plan, exc.limits), spec.id) from None

    session = LazySession(opener)
    retain = None if plan.execution.retain_environments == "never" else plan.execution.retain_environments
    try:
        yield session
    except BaseException:
        session.failed = True
        raise
    finally:
        closing = session.close(failed=session.failed, retain=retain)
        if aio.stopping() is not None and pacing.close_grace() is not None:
            # the run is stopping: the close gets runtime.cleanup_grace_seconds
            try:
                await asyncio.wait_for(closing, pacing.close_grace())
            except asyncio.TimeoutError:
                LOG.warning(f"the {phase} session of {_label(req, plan, phase, who)} did not close within "
                            f"runtime.cleanup_grace_seconds ({pacing.close_grace()} s); "
                            f"'agentcompass clean' removes what it left")
        else:
            await closing


# The key of a PreparedTask's metadata that says why the task could not be prepared (its image did not
# build, or is missing): the run stage ends the attempt with it.
PREPARE_FAILED = "prepare_failed"


def prepare_failed_result(task_id: str, attempt: int, why: dict) -> RunResult:
    """The result of an attempt whose task could not be prepared: run_error, class infrastructure,
    ``error_stage`` 'prepare' (``retry`` prepares it again)."""
    return RunResult(task_id=task_id, attempt=attempt, status=TaskStatus.RUN_ERROR, error=str(why.get("error")),
                     error_stage="prepare", failure_class=FailureClass.INFRASTRUCTURE,
                     metadata={"failure": {"class": FailureClass.INFRASTRUCTURE.value}})


def prepare(job: AttemptJob) -> None:
    """Write the attempt's PreparedTask (+ the prepared workspace)."""
    req, plan, task = job.request, job.plan, job.task
    saved = Path(job.folder) / layout.WORKSPACE
    remove_tree(saved, ignore_errors=True)
    why = preflight.quarantine(job.inputs.get("preflight"))
    if why is not None:  # its preflight did not pass: no session; the run stage writes why
        job.write("prepared", PreparedTask(task_id=task.task_id, input=TaskInput(prompt=""),
                                           metadata={preflight.QUARANTINE: why}))
        return
    if task.load_error is not None:  # nothing to prepare: the run stage reports the error
        job.write("prepared", PreparedTask(task_id=task.task_id, input=TaskInput(prompt="")))
        return
    try:
        prepared = run_coroutine(prepare_in(req, plan, task, Path(job.folder)))
    except InfrastructureError as exc:
        if retryable(exc):  # e.g. the engine out of reach: the job fails, the next run prepares again
            raise
        # the same on every try (an image that does not build, or is missing): the attempt's failure, which
        # the run stage writes; the run goes on, and `retry` prepares again
        LOG.warning(f"prepare {task.task_id} (attempt {plan.attempt}): {type(exc).__name__}: {exc}")
        failed = PreparedTask(task_id=task.task_id, input=TaskInput(prompt=""), metadata={
            PREPARE_FAILED: {"error": f"{type(exc).__name__}: {exc}"}})
        job.write("prepared", failed, secrets=job.secrets)  # a build log may echo what the build was given
        return
    job.write("prepared", prepared)


async def prepare_in(req: RunRequest, plan: ExecutionPlan, task: TaskSpec, folder: Path,
                     who: str | None = None) -> PreparedTask:
    """Prepare ``task`` in a baseline session; its workspace is saved in ``folder``."""
    async with _open(req, plan, "baseline", who=who) as session:
        prepared = await benchmark_for(req).prepare_task(task, session, req, plan.benchmark_plan)
        if prepared.input.workspace:
            await session.download(prepared.input.workspace, folder / layout.WORKSPACE)
        return prepared


def run(job: AttemptJob) -> None:
    """Run the harness (or harness-free Benchmark) with runtime retries; write output.json."""
    req, plan, task = job.request, job.plan, job.task
    prepared = from_dict(PreparedTask, read_json(job.inputs["prepared"]), job.inputs["prepared"])
    attempt_dir = Path(job.folder)
    trajectory = attempt_dir / layout.TRAJECTORY
    outputs = attempt_dir / layout.OUTPUTS
    final_workspace = attempt_dir / layout.FINAL_WORKSPACE
    benchmark = benchmark_for(req)
    harness = harness_for(req)

    def call(session: EnvironmentSession):
        if harness is None:
            assert isinstance(benchmark, HarnessFreeBenchmark)
            return benchmark.run_task(prepared, session, req, plan)
        reference = benchmark.reference_solution(task, plan.benchmark_plan) if harness.is_oracle else None
        context = HarnessContext(
            attempt=plan.attempt, attempt_dir=attempt_dir, trajectory_path=trajectory,
            reference=reference, timeout=plan.execution.task_timeout,
        )
        return harness.run(prepared, session, req, plan.harness_plan, context)

    # every call of every try (a runtime retry's too), counted as it is made: whatever ends the attempt
    # (an error, its time limit, a harness that raised) its result holds them
    spent = Usage()
    calls = attempt_calls(job, "run")
    limited = attempt_spend(job, "run")

    async def once() -> RunResult:
        ATTEMPT_TRAJECTORY.set(trajectory)  # a ModelClient of this attempt records its calls there
        ATTEMPT_USAGE.set(spent)  # ... and counts them there, as the model gateway does
        callcache.ATTEMPT_CALLS.set(calls)  # ... and both read and keep their replies through it
        spend.ATTEMPT_SPEND.set(limited)  # ... and both keep to its limits and pay into its ledgers
        if calls is not None:
            calls.restart()  # each try of the attempt gets the replies of the first, in order
        return await run_in(req, plan, prepared, attempt_dir, call)

    started = time.monotonic()
    retries = 0
    while True:
        trajectory.unlink(missing_ok=True)  # written by the harness, if it keeps one
        for leftover in interrupted_writes(trajectory):  # of a run of this attempt killed while scrubbing it
            leftover.unlink(missing_ok=True)
        for stale in (outputs, final_workspace):
            remove_tree(stale, ignore_errors=True)  # the agent's tree: any depth, names, modes
        why = preflight.read_prepared_quarantine(prepared)
        if why is not None:  # its preflight did not pass: no sandbox, no model call
            result = preflight.quarantined_result(plan.task_id, plan.attempt, why)
            break
        failed = prepared.metadata.get(PREPARE_FAILED)
        if isinstance(failed, dict):  # its task could not be prepared: no sandbox, no model call
            result = prepare_failed_result(plan.task_id, plan.attempt, failed)
            break
        if task.load_error is not None:  # the task's own error: no sandbox, no model call
            result = RunResult(task_id=task.task_id, status=TaskStatus.RUN_ERROR, error=task.load_error, error_stage="load")
            break
        try:
            result = run_coroutine(once())
            break
        except asyncio.TimeoutError:  # execution.task_timeout: the attempt's time limit
            result = error_result(plan.task_id, plan.attempt, "run", f"timed out after {plan.execution.task_timeout} s")
            result.failure_class = FailureClass.LIMIT
            break
        except Exception as exc:
            if not retryable(exc):
                # the agent's failure is a status
                result = failures.failed(error_result(plan.task_id, plan.attempt, "run", exc), exc, "run")
                break
            if retries < plan.execution.max_retries:
                retries += 1
                continue
            result = failures.failed(error_result(plan.task_id, plan.attempt, "run", exc), exc, "run")
            break
    if calls is not None and calls.misses:  # a replay that met a call it holds no reply for
        result = cache_missed(result, calls.misses[0], "run")
    if limited.reached is not None:  # a call was refused: whatever the harness made of it, the attempt hit a limit
        result = limit_reached(result, limited)
    result = dataclasses.replace(
        failures.classified(result, "run"),
        task_id=plan.task_id,
        attempt=plan.attempt,
        retries_used=retries,
        usage=counted(result.usage, spent),
        timings={**result.timings, "run_seconds": round(time.monotonic() - started, 6)},
        provenance=dict(provenance.here()),
    )
    # before output.json appears: a finished attempt's files are all final
    scrub_attempt_files(attempt_dir, Scrubber(job.secrets))
    job.write("output", result, secrets=job.secrets)


def attempt_calls(job: AttemptJob, stage_name: str) -> callcache.AttemptCalls | None:
    """The call cache as the attempt's ``stage_name`` stage uses it, with the request's mode (None when
    off); its folder is the invocation's (``runtime.cache_dir``, else in the results folder)."""
    mode = callcache.cache_mode(job.request.execution.cache)
    if mode == "off":
        return None
    runtime = job.pipeline.inv.runtime if job.pipeline is not None else ResolvedRuntimeOptions()
    scrubber = Scrubber(job.secrets)
    return callcache.AttemptCalls(callcache.CallStore(callcache.cache_root(runtime.results_dir, runtime.cache_dir)),
                                  mode, job.plan.attempt, stage_name, scrub=scrubber.text if scrubber else None)


def attempt_spend(job: AttemptJob, stage_name: str) -> spend.AttemptSpend:
    """The attempt's ``stage_name`` stage's limits (its plan's ``execution.limits``) and the ledgers it pays
    into, under a budget: its request's, and the invocation's when the run has one (``runtime.budget``)."""
    runtime = job.pipeline.inv.runtime if job.pipeline is not None else ResolvedRuntimeOptions()
    budgeted = job.request.execution.budget is not None or runtime.budget is not None
    ledgers = [spend.request_ledger(job.run)] if budgeted else []
    invocation = spend.invocation_ledger() if runtime.budget is not None else None
    if invocation is not None:
        ledgers.append(invocation)
    pricing = job.request.model.pricing.to_dict() if job.request.model.pricing else None
    return spend.AttemptSpend(job.plan.execution.limits, pricing, ledgers, stage_name)


def limit_reached(result: RunResult, limited: spend.AttemptSpend) -> RunResult:
    """``result`` as an attempt a limit ended (``execution.limits``): an error of the ``limit`` class that keeps
    what the attempt did (its answer, usage, outputs and trajectory); ``metadata.limit`` names the limit."""
    stage_name = limited.stage
    return dataclasses.replace(
        result, status=TaskStatus.RUN_ERROR if stage_name == "run" else TaskStatus.EVAL_ERROR,
        error=limited.reached, error_stage=stage_name, failure_class=FailureClass.LIMIT, correct=None, score=None,
        metadata={**result.metadata, "limit": limited.as_metadata(), "failure": {"class": FailureClass.LIMIT.value}})


def cache_missed(result: RunResult, miss: dict, stage_name: str) -> RunResult:
    """``result`` as the error of a replay that met a call the cache holds no reply for: the miss is the
    attempt's error (its endpoint, the cache, could not answer), named in ``metadata.cache_miss``."""
    return dataclasses.replace(
        result, status=TaskStatus.RUN_ERROR if stage_name == "run" else TaskStatus.EVAL_ERROR,
        error=callcache.miss_message(miss), error_stage=stage_name, failure_class=FailureClass.ENDPOINT,
        metadata={**result.metadata, "cache_miss": miss, "failure": {"class": FailureClass.ENDPOINT.value}})


async def run_in(req: RunRequest, plan: ExecutionPlan, prepared: PreparedTask, folder: Path, call,
                 who: str | None = None) -> RunResult:
    """``call(session)`` (the harness on the prepared task) in a run session with the workspace saved in
    ``folder``; the task's outputs (and its final workspace, for evaluation in the task environment)
    are saved in ``folder`` after it."""
    saved_workspace = folder / layout.WORKSPACE
    async with _open(req, plan, "run", who=who) as session:
        if prepared.input.workspace and saved_workspace.exists():
            await session.upload(saved_workspace, prepared.input.workspace)
        result = await asyncio.wait_for(call(session), plan.execution.task_timeout)
        # what follows waits on the session the agent left (its processes may still run): within a deadline
        async with aio.deadline(AFTER_RUN_TIMEOUT, "the run stage's work after the harness (after_run, copies out)"):
            if not result.status.is_error:  # what the Benchmark takes from the session the agent left
                result = await benchmark_for(req).after_run(prepared, result, session, req, plan.benchmark_plan)
            for name in prepared.output.files:
                if await session.exists(name):
                    await session.download(name, folder / layout.OUTPUTS / name)
            if plan.evaluation_environment_mode == "task" and prepared.input.workspace:
                if await session.exists(prepared.input.workspace):
                    await session.download(prepared.input.workspace, folder / layout.FINAL_WORKSPACE)
        session.failed = result.status.is_error
        return result


def evaluate(job: AttemptJob) -> RunResult:
    """Score the attempt in its evaluation environment; write result.json and the plan it used; return the result.

    Every change of an attempt's plan reruns evaluation (it is the last stage),
    so plan.json is written here and always matches the plans file.
    """
    req, plan = job.request, job.plan
    job.write("plan", job.plan_dict)
    task = job.task
    prepared = from_dict(PreparedTask, read_json(job.inputs["prepared"]), job.inputs["prepared"])
    output = read_result(job.inputs["output"])
    attempt_dir = Path(job.folder)

    if output.status.is_error or output.status == TaskStatus.SKIPPED:
        output = failures.classified(output, "run")  # an output.json of an older version names no class
        job.write("result", output)
        return output

    started = time.monotonic()
    judged = Usage()  # a judge's calls, counted as they are made: kept whatever ends the evaluation
    calls = attempt_calls(job, "evaluate")
    limited = attempt_spend(job, "evaluate")
    try:
        result = run_coroutine(evaluate_in(req, plan, task, prepared, output, attempt_dir, judged=judged,
                                           calls=calls, limited=limited))
    except Exception as exc:
        result = failures.failed(dataclasses.replace(
            output, status=TaskStatus.EVAL_ERROR, error=f"{type(exc).__name__}: {exc}", error_stage="evaluate",
            correct=None, score=None,
        ), exc, "evaluate")
    if calls is not None and calls.misses:
        result = cache_missed(dataclasses.replace(output, correct=None, score=None), calls.misses[0], "evaluate")
    if limited.reached is not None:  # a judge's call was refused: the verdict cannot stand
        result = limit_reached(dataclasses.replace(output, correct=None, score=None), limited)
    result = dataclasses.replace(
        failures.classified(result, "evaluate"), usage=counted(result.usage, judged, "judge_"), timings={**result.timings, "evaluate_seconds": round(time.monotonic() - started, 6)},
        provenance=output.provenance,  # where the run stage ran: scoring never moves it
    )
    scrub_attempt_files(attempt_dir, Scrubber(job.secrets))  # a judge's calls in the trajectory
    job.write("result", result, secrets=job.secrets)
    return result


async def evaluate_in(req: RunRequest, plan: ExecutionPlan, task: TaskSpec, prepared: PreparedTask,
                      output: RunResult, folder: Path, who: str | None = None, judged: Usage | None = None,
                      calls: callcache.AttemptCalls | None = None,
                      limited: spend.AttemptSpend | None = None) -> RunResult:
    """Score ``output`` in an evaluation session, with the files the run saved in ``folder``; the model
    calls made meanwhile (a judge's) count in ``judged``, when given, and go through the call cache's
    ``calls``, within the limits and paid into the ledgers of ``limited``."""
    ATTEMPT_TRAJECTORY.set(folder / layout.TRAJECTORY)  # a judge's calls are lines of the attempt's trajectory
    ATTEMPT_USAGE.set(judged)
    callcache.ATTEMPT_CALLS.set(calls)
    spend.ATTEMPT_SPEND.set(limited)
    benchmark = benchmark_for(req)
    seconds = EVALUATE_GRACE + benchmark.evaluation_seconds(plan.benchmark_plan)
    async with _open(req, plan, "evaluation", evaluation=True, who=who) as session, \
            aio.deadline(seconds, "the evaluate stage (copies in, the Benchmark's evaluate)"):
        # task mode: the workspace as the agent left it; fresh mode: only its declared outputs
        final = folder / layout.FINAL_WORKSPACE
        if plan.evaluation_environment_mode == "task" and prepared.input.workspace and final.exists():
            await session.upload(final, prepared.input.workspace)
        outputs = folder / layout.OUTPUTS
        for name in prepared.output.files:
            if (outputs / name).exists():
                await session.upload(outputs / name, name)
        result = await benchmark.evaluate(task, prepared, output, session, req, plan.benchmark_plan)
        session.failed = result.status.is_error
        return result


# --- per request ------------------------------------------------------------------


def metrics(job: RequestJob) -> None:
    """metrics.json: the Benchmark's own metrics, and the summary every Benchmark gets (results.summary)."""
    assert job.pipeline is not None
    metrics_of(job.request, job.pipeline.targets.results_of(job.request), job.output())


def metrics_of(req: RunRequest, result_paths: list, out) -> None:
    """Write ``out``, the metrics of the results at ``result_paths``.

    Every figure is over the attempts ``results.left_out`` leaves in (no infrastructure failure, no
    quarantined task): the Benchmark's metrics get only those, the summary counts only those in its
    accuracy and pass@k, and ``scored_on`` says what that is (docs/reports.md).
    """
    every = [read_json(p) for p in result_paths]
    results = [from_dict(RunResult, data, str(p)) for data, p in zip(every, result_paths)
               if results_data.left_out(data) is None]
    results.sort(key=lambda r: (r.task_id, r.attempt))
    metric = benchmark_for(req).aggregate_metrics(results, req)
    # counts by status are of every attempt but the quarantined (which ran nothing): an infrastructure failure
    # is a failed attempt of the run (retry --only infrastructure), though no figure counts it
    shown = [data for data in every if results_data.left_out(data) != results_data.QUARANTINED]
    metric.counts = dict(sorted(Counter(data["status"] for data in shown).items()))
    metric.num_attempts, metric.num_tasks = len(shown), len({data["task_id"] for data in shown})
    scored = results_data.scored_on(every)
    metric.scored_on = from_dict(ScoredOn, scored, "metrics scored_on")
    # request.json is not this rule's input, so the run is described by the request in hand
    run = results_data.Run(Path(out).parent, req.to_dict())
    quarantined = {q["task_id"] for q in scored["quarantined"]}
    table = [row for row in results_data.rows(run, {(data["task_id"], data["attempt"]): data for data in every})
             if row["task_id"] not in quarantined]
    pricing = req.model.pricing.to_dict() if req.model.pricing else None
    metric.summary = from_dict(MetricSummary, results_data.summary(table, pricing), "metrics summary")
    write_file(stage(layout.METRICS).kind(), out, metric)
    if req.execution.analyzers:
        frame = results_data.to_frame(table)
        for analyzer_id in req.execution.analyzers:
            ANALYZERS.get(analyzer_id)().analyze(req, frame, Path(out).parent / layout.ANALYZER_REPORTS / analyzer_id)


def run_info(req: RunRequest, view: dict[str, dict], out) -> None:
    """run_info.json: provenance, and ``view``, each plan's audit view by task id and attempt."""
    import snakemake

    harness = harness_for(req)
    environment = environment_for(req.environment.id)
    benchmark = benchmark_for(req)
    info = RunInfo(
        request_name=req.metadata.request_name,
        namespace=req.namespace,
        run_id=req.run_id,
        benchmark=ComponentVersion(benchmark.id, benchmark.version),
        harness=ComponentVersion(req.harness.id, harness.version if harness else "none"),
        environment=ComponentVersion(environment.id, environment.version),
        model_id=req.model.id,
        versions={
            "agentcompass": agentcompass.__version__,
            "snakemake": snakemake.__version__,
            "python": platform.python_version(),
        },
        config_paths=list(req.metadata.config_paths),
        num_tasks=len(view),
        num_attempts=sum(len(task["attempts"]) for task in view.values()),
        resolved_execution_plans=view,
    )
    write_file(stage(layout.PLAN_LIST).kind("run_info"), out, info)


def report(job: RequestJob) -> None:
    report_pages.build(job.run)


# --- per shard ------------------------------------------------------------------------------


def shard(job: ShardJob) -> None:
    """Build one slice with an inner Snakemake; record what it left in shard.json."""
    pipeline = job.pipeline
    assert pipeline is not None
    req, index, targets = job.request, job.index, pipeline.targets
    pipeline.events.announce(req)  # how many attempts its shards build, before the first one starts
    started = time.monotonic()
    attempts = targets.shard_slice(req, index)
    workflow = pipeline.inv.snakemake
    threads = pipeline.shards.job_threads(job.threads)
    argv = shards.inner_argv(workflow, threads, pipeline.resources.claims(job.resources),
                             shards.forced_rules(workflow), targets.attempt_files(req, attempts))
    # on a cluster this job is one SLURM job: its inner run records that job in every output.json
    where = provenance.here()
    # the outer run's invocation, also when this job is a cluster job of its own
    env = shards.inner_env(req.namespace, req.run_id, index, pipeline.events.invocation)
    env[lifecycle.PARENT_ENV] = str(os.getpid())
    if where["slurm_job_id"]:
        env[provenance.JOB_ID_ENV] = where["slurm_job_id"]
    code = shards.run_inner(argv, env, Path(job.log), fork=engine.is_main_process(workflow))
    if code != 0:
        reason = aio.stopping() or spend.over_budget(req.execution.budget, job.run, pipeline.inv.runtime.budget,
                                                     req.metadata.request_name)
        if reason is not None:  # stopped, or it started no more attempts once a budget was spent
            if aio.stopping() is None:
                lifecycle.budget_spent(workflow, reason)
            raise aio.Stopped(reason)
        raise WorkflowError(
            f"shard {index} of request {req.metadata.request_name!r}: its inner Snakemake exited with "
            f"{code}; the jobs that failed are named in {job.log}. Finished attempts are kept: "
            f"run again to retry the rest."
        )
    pipeline.events.shard_built(req, index, attempts)
    counts: dict[str, int] = {}
    last_stage = stage(LAST_ATTEMPT_STAGE)
    for segment, attempt in attempts:
        result = read_json(layout.attempt_file(job.run, segment, attempt, last_stage))
        counts[result["status"]] = counts.get(result["status"], 0) + 1
    first, last = attempts[0], attempts[-1]
    # the generation first: shard.json appearing means the shard is current
    shards.hold(layout.generation_file(job.run, index), int(job.params.generation))
    job.write("shard", ShardRecord(
        request_name=req.metadata.request_name, shard=index, attempts=len(attempts),
        first=f"{first[0]}/{first[1]}", last=f"{last[0]}/{last[1]}", counts=counts,
        host=where["host"], seconds=round(time.monotonic() - started, 3),
        slurm_job_id=where["slurm_job_id"],
    ))
