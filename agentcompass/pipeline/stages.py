"""The stages: each a function of its input files plus the request, writing one file.

Rules in ``rules/*.smk`` call these and nothing else; they can be tested
without Snakemake.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import os
import platform
import time
from pathlib import Path
from typing import Any

import agentcompass
from agentcompass import aio
from agentcompass import results as results_data
from agentcompass.aio import run_coroutine
from agentcompass.display import visible
from agentcompass.jsonio import interrupted_writes, not_unicode, read_json, write_bytes_atomic
from agentcompass.logs import LOG
from agentcompass.paths import task_segment
from agentcompass.runtime.base import (
    BaseBenchmark,
    BaseHarness,
    EnvironmentSession,
    HarnessContext,
    HarnessFreeBenchmark,
    error_result,
    retryable,
)
from agentcompass.runtime.models import (
    ExecutionPlan,
    HarnessPlan,
    MetricSummary,
    PreparedTask,
    RunRequest,
    RunResult,
    TaskInput,
    TaskSpec,
    TaskStatus,
)
from agentcompass.runtime.model_client import ATTEMPT_TRAJECTORY
from agentcompass.runtime.models.codec import from_dict
from agentcompass.runtime.planner import Planner
from agentcompass.runtime.recipes import build_run_recipe_registry
from agentcompass.runtime.registry import ANALYZERS, BENCHMARKS, ENVIRONMENTS, HARNESSES
from agentcompass.secrets import Scrubber
from agentcompass.trees import remove_tree

from . import pacing, provenance
from .files import ComponentVersion, PlansFile, RunInfo, TasksFile, write_file

WORKSPACE_DIR = "workspace"
# the agent's workspace as the run left it, kept for evaluation in the task environment
FINAL_WORKSPACE_DIR = "final_workspace"
OUTPUTS_DIR = "outputs"
TRAJECTORY = "trajectory.jsonl"


# --- secrets ------------------------------------------------------------------


def attempt_secrets(req: RunRequest, plan: ExecutionPlan) -> list[Any]:
    """Every reference an attempt may resolve: the request's and its plan's (a task folder's
    ``[verifier] env`` and ``[solution] env``, the environment's build args)."""
    return [req.to_dict(), plan.to_dict()]


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


# --- components ---------------------------------------------------------------


def benchmark_for(req: RunRequest) -> BaseBenchmark:
    return BENCHMARKS.get(req.benchmark.id)()


def harness_for(req: RunRequest) -> BaseHarness | None:
    return None if req.harness.is_none else HARNESSES.get(req.harness.id)()


def environment_for(env_id: str):
    return ENVIRONMENTS.get(env_id)()


# --- reading files (cached by path and modification) -------------------------------


def file_stamp(path: str | Path) -> tuple[str, int, int]:
    """Path, modification time and size: a file version, for caches."""
    st = os.stat(path)
    return str(path), st.st_mtime_ns, st.st_size


@functools.lru_cache(maxsize=64)
def _raw_tasks(stamp: tuple) -> dict[str, dict]:
    """tasks.json's task objects by path segment, in order, not yet decoded."""
    return {task_segment(t["task_id"]): t for t in read_json(stamp[0])["tasks"]}


@functools.lru_cache(maxsize=64)
def _tasks_cached(stamp: tuple) -> list[TaskSpec]:
    return [from_dict(TaskSpec, t, "tasks.json task") for t in _raw_tasks(stamp).values()]


def read_tasks(path: str | Path) -> list[TaskSpec]:
    return _tasks_cached(file_stamp(path))


def task_segments(path: str | Path) -> list[str]:
    """The path segment of every task, in order, without decoding the tasks."""
    return list(_raw_tasks(file_stamp(path)))


# Decoding is the expensive part of reading a large file: a job (or the slice of
# a shard) decodes the objects it uses, once each.
_decoded: dict[tuple, Any] = {}


def _decode_once(key: tuple, decode):
    value = _decoded.get(key)
    if value is None:
        if len(_decoded) > 200_000:
            _decoded.clear()
        value = _decoded[key] = decode()
    return value


def task_by_segment(path: str | Path, segment: str) -> TaskSpec:
    stamp = file_stamp(path)
    raw = _raw_tasks(stamp).get(segment)
    if raw is None:
        raise KeyError(f"no task with path segment {segment!r} in {path}")
    return _decode_once(("task", stamp, segment), lambda: from_dict(TaskSpec, raw, "tasks.json task"))


@functools.lru_cache(maxsize=64)
def _raw_plans(stamp: tuple) -> dict[tuple[str, int], dict]:
    """plans.json's plan objects by (task segment, attempt), not yet decoded."""
    return {(task_segment(p["task_id"]), p["attempt"]): p for p in read_json(stamp[0])["plans"]}


def raw_tasks(path: str | Path) -> dict[str, dict]:
    return _raw_tasks(file_stamp(path))


def raw_plans(plans_path: str | Path) -> dict[tuple[str, int], dict]:
    return _raw_plans(file_stamp(plans_path))


def plan_for(req: RunRequest, plans_path: str | Path, segment: str, attempt: int) -> ExecutionPlan:
    stamp = file_stamp(plans_path)
    raw = _raw_plans(stamp)[(segment, attempt)]
    bcls, hcls = _plan_classes(req)
    return _decode_once(("plan", stamp, bcls, hcls, segment, attempt), lambda: ExecutionPlan.from_dict(raw, bcls, hcls))


def _plan_classes(req: RunRequest) -> tuple[type, type]:
    harness = harness_for(req)
    return benchmark_for(req).plan_class, (harness.plan_class if harness else HarnessPlan)


def read_result(path: str | Path) -> RunResult:
    return from_dict(RunResult, read_json(path), str(path))


# --- request, tasks, plans ------------------------------------------------------------


def write_request(req: RunRequest, out: str | Path) -> None:
    write_file("request", out, req)


def write_tasks(req: RunRequest, out: str | Path) -> list[TaskSpec]:
    """Write tasks.json; returns the selected TaskSpecs."""
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
    write_file("tasks", out, TasksFile(req.metadata.request_name, req.benchmark.id, tasks))
    return tasks


def write_plans(req: RunRequest, tasks_path: str | Path, out: str | Path) -> None:
    """Plan every semantic attempt of every task; each attempt gets its own ``Planner.plan``."""
    harness = harness_for(req)
    planner = Planner(
        benchmark_for(req), harness, build_run_recipe_registry(req), environment_for(req.environment.id)
    )
    plans = [
        planner.plan(req, task, attempt)
        for task in read_tasks(tasks_path)
        for attempt in range(1, req.execution.attempts + 1)
    ]
    write_file("plans", out, PlansFile(req.metadata.request_name, plans))


# --- per attempt ------------------------------------------------------------------


def _label(req: RunRequest, plan: ExecutionPlan, phase: str) -> str:
    return f"{req.run_id}-{task_segment(plan.task_id)}-{plan.attempt}-{phase}"


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


@contextlib.asynccontextmanager
async def _open(req: RunRequest, plan: ExecutionPlan, phase: str, evaluation: bool = False):
    """The phase's session, closed at the end: kept when the request's retention says so.

    A stage marks ``session.failed`` when its attempt failed without raising.
    """
    spec = plan.evaluation_environment if evaluation and plan.evaluation_environment else plan.task_environment
    network = getattr(plan, f"{phase}_network")

    async def opener() -> EnvironmentSession:
        await pacing.before_open()  # runtime.environment_open_rate
        return await environment_for(spec.id).open(spec, network, _label(req, plan, phase))

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
                LOG.warning(f"the {phase} session of {_label(req, plan, phase)} did not close within "
                            f"runtime.cleanup_grace_seconds ({pacing.close_grace()} s); "
                            f"'agentcompass clean' removes what it left")
        else:
            await closing


def prepare(req: RunRequest, tasks_path, plans_path, segment: str, attempt: int, prepared_out) -> None:
    """Write the attempt's PreparedTask (+ the prepared workspace)."""
    plan = plan_for(req, plans_path, segment, attempt)
    task = task_by_segment(tasks_path, segment)
    attempt_dir = Path(prepared_out).parent
    saved = attempt_dir / WORKSPACE_DIR
    remove_tree(saved, ignore_errors=True)
    if task.load_error is not None:  # nothing to prepare: the run stage reports the error
        write_file("prepared", prepared_out, PreparedTask(task_id=task.task_id, input=TaskInput(prompt="")))
        return
    benchmark = benchmark_for(req)

    async def go() -> PreparedTask:
        async with _open(req, plan, "baseline") as session:
            prepared = await benchmark.prepare_task(task, session, req, plan.benchmark_plan)
            if prepared.input.workspace:
                await session.download(prepared.input.workspace, saved)
            return prepared

    write_file("prepared", prepared_out, run_coroutine(go()))


def run(req: RunRequest, tasks_path, plans_path, prepared_path, segment: str, attempt: int, out) -> None:
    """Run the harness (or harness-free Benchmark) with runtime retries; write output.json."""
    plan = plan_for(req, plans_path, segment, attempt)
    task = task_by_segment(tasks_path, segment)
    prepared = from_dict(PreparedTask, read_json(prepared_path), str(prepared_path))
    attempt_dir = Path(out).parent
    trajectory = attempt_dir / TRAJECTORY
    outputs = attempt_dir / OUTPUTS_DIR
    final_workspace = attempt_dir / FINAL_WORKSPACE_DIR
    benchmark = benchmark_for(req)
    harness = harness_for(req)
    saved_workspace = attempt_dir / WORKSPACE_DIR

    async def once() -> RunResult:
        ATTEMPT_TRAJECTORY.set(trajectory)  # a ModelClient of this attempt records its calls there
        async with _open(req, plan, "run") as session:
            if prepared.input.workspace and saved_workspace.exists():
                await session.upload(saved_workspace, prepared.input.workspace)
            if harness is None:
                assert isinstance(benchmark, HarnessFreeBenchmark)
                coro = benchmark.run_task(prepared, session, req, plan)
            else:
                reference = benchmark.reference_solution(task, plan.benchmark_plan) if harness.is_oracle else None
                context = HarnessContext(
                    attempt=plan.attempt, attempt_dir=attempt_dir, trajectory_path=trajectory,
                    reference=reference, timeout=plan.execution.task_timeout,
                )
                coro = harness.run(prepared, session, req, plan.harness_plan, context)
            result = await asyncio.wait_for(coro, plan.execution.task_timeout)
            for name in prepared.output.files:
                if await session.exists(name):
                    await session.download(name, outputs / name)
            if plan.evaluation_environment_mode == "task" and prepared.input.workspace:
                if await session.exists(prepared.input.workspace):
                    await session.download(prepared.input.workspace, final_workspace)
            session.failed = result.status.is_error
            return result

    started = time.monotonic()
    retries = 0
    while True:
        trajectory.unlink(missing_ok=True)  # written by the harness, if it keeps one
        for leftover in interrupted_writes(trajectory):  # of a run of this attempt killed while scrubbing it
            leftover.unlink(missing_ok=True)
        for stale in (outputs, final_workspace):
            remove_tree(stale, ignore_errors=True)  # the agent's tree: any depth, names, modes
        if task.load_error is not None:  # the task's own error: no sandbox, no model call
            result = RunResult(task_id=task.task_id, status=TaskStatus.RUN_ERROR, error=task.load_error, error_stage="load")
            break
        try:
            result = run_coroutine(once())
            break
        except asyncio.TimeoutError:
            result = error_result(plan.task_id, plan.attempt, "run", f"timed out after {plan.execution.task_timeout} s")
            break
        except Exception as exc:
            if not retryable(exc):
                result = error_result(plan.task_id, plan.attempt, "run", exc)  # the agent's failure is a status
                break
            if retries < plan.execution.max_retries:
                retries += 1
                continue
            result = error_result(plan.task_id, plan.attempt, "run", exc)
            break
    result = dataclasses.replace(
        result,
        task_id=plan.task_id,
        attempt=plan.attempt,
        retries_used=retries,
        timings={**result.timings, "run_seconds": round(time.monotonic() - started, 6)},
        provenance=dict(provenance.here()),
    )
    # before output.json appears: a finished attempt's files are all final
    scrub_attempt_files(attempt_dir, Scrubber(attempt_secrets(req, plan)))
    write_file("output", out, result, secrets=attempt_secrets(req, plan))


def evaluate(
    req: RunRequest, tasks_path, plans_path, prepared_path, output_path, segment: str, attempt: int, out, plan_out
) -> RunResult:
    """Score the attempt in its evaluation environment; write result.json and the plan it used; return the result.

    Every change of an attempt's plan reruns evaluation (it is the last stage),
    so plan.json is written here and always matches the plans file.
    """
    plan = plan_for(req, plans_path, segment, attempt)
    write_file("plan", plan_out, plan)
    task = task_by_segment(tasks_path, segment)
    prepared = from_dict(PreparedTask, read_json(prepared_path), str(prepared_path))
    output = read_result(output_path)
    attempt_dir = Path(out).parent
    benchmark = benchmark_for(req)

    if output.status.is_error or output.status == TaskStatus.SKIPPED:
        write_file("result", out, output)
        return output

    async def go() -> RunResult:
        ATTEMPT_TRAJECTORY.set(attempt_dir / TRAJECTORY)  # a judge's calls are lines of the attempt's trajectory
        async with _open(req, plan, "evaluation", evaluation=True) as session:
            # task mode: the workspace as the agent left it; fresh mode: only its declared outputs
            final = attempt_dir / FINAL_WORKSPACE_DIR
            if plan.evaluation_environment_mode == "task" and prepared.input.workspace and final.exists():
                await session.upload(final, prepared.input.workspace)
            outputs = attempt_dir / OUTPUTS_DIR
            for name in prepared.output.files:
                if (outputs / name).exists():
                    await session.upload(outputs / name, name)
            result = await benchmark.evaluate(task, prepared, output, session, req, plan.benchmark_plan)
            session.failed = result.status.is_error
            return result

    started = time.monotonic()
    try:
        result = run_coroutine(go())
    except Exception as exc:
        result = dataclasses.replace(
            output, status=TaskStatus.EVAL_ERROR, error=f"{type(exc).__name__}: {exc}", error_stage="evaluate",
            correct=None, score=None,
        )
    result = dataclasses.replace(
        result, timings={**result.timings, "evaluate_seconds": round(time.monotonic() - started, 6)},
        provenance=output.provenance,  # where the run stage ran: scoring never moves it
    )
    scrub_attempt_files(attempt_dir, Scrubber(attempt_secrets(req, plan)))  # a judge's calls in the trajectory
    write_file("result", out, result, secrets=attempt_secrets(req, plan))
    return result


# --- per request ------------------------------------------------------------------


def metrics(req: RunRequest, result_paths: list, out) -> None:
    """metrics.json: the Benchmark's own metrics, and the summary every Benchmark gets (results.summary)."""
    raw = [read_json(p) for p in result_paths]
    results = [from_dict(RunResult, data, str(p)) for data, p in zip(raw, result_paths)]
    results.sort(key=lambda r: (r.task_id, r.attempt))
    metric = benchmark_for(req).aggregate_metrics(results, req)
    # request.json is not this rule's input, so the run is described by the request in hand
    run = results_data.Run(Path(out).parent, req.to_dict())
    table = list(results_data.rows(run, {(data["task_id"], data["attempt"]): data for data in raw}))
    pricing = req.model.pricing.to_dict() if req.model.pricing else None
    metric.summary = from_dict(MetricSummary, results_data.summary(table, pricing), "metrics summary")
    write_file("metrics", out, metric)
    if req.execution.analyzers:
        frame = results_data.to_frame(table)
        for analyzer_id in req.execution.analyzers:
            ANALYZERS.get(analyzer_id)().analyze(req, frame, Path(out).parent / "reports" / analyzer_id)


def run_info(req: RunRequest, plans_path, out) -> None:
    import snakemake

    bcls, hcls = _plan_classes(req)
    plans = [ExecutionPlan.from_dict(p, bcls, hcls) for p in read_json(plans_path)["plans"]]
    view: dict[str, dict] = {}
    for plan in plans:
        view.setdefault(plan.task_id, {"attempts": {}})["attempts"][str(plan.attempt)] = plan.audit_view()
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
        num_attempts=len(plans),
        resolved_execution_plans=view,
    )
    write_file("run_info", out, info)
