"""An attempt's environment sessions, and the three phases run in them: the attempt stages' and the preflight's.

``prepare_in``, ``run_in`` and ``evaluate_in`` prepare a task in its baseline session, run a harness
(or the oracle) in its run session and score the answer in its evaluation session; the attempt stages'
bodies (``bodies.attempt``) and the preflight's (``bodies.task``) both run them. Each session opens on
first use (``LazySession``) and closes at the end of its phase, kept when the request's retention says so.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

from agentcompass import callcache, layout, spend
from agentcompass._util import aio
from agentcompass._util.logs import LOG
from agentcompass.layout import task_segment
from agentcompass.runtime.base import AFTER_RUN_TIMEOUT, EVALUATE_GRACE, EnvironmentSession
from agentcompass.runtime.limits import LimitsUnavailableError
from agentcompass.runtime.model_client import ATTEMPT_TRAJECTORY, ATTEMPT_USAGE, Usage
from agentcompass.runtime.models import ExecutionPlan, PreparedTask, RunRequest, RunResult, TaskSpec

from . import pacing
from .reading import benchmark_for, environment_for


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




async def prepare_in(req: RunRequest, plan: ExecutionPlan, task: TaskSpec, folder: Path,
                     who: str | None = None) -> PreparedTask:
    """Prepare ``task`` in a baseline session; its workspace is saved in ``folder``."""
    async with _open(req, plan, "baseline", who=who) as session:
        prepared = await benchmark_for(req).prepare_task(task, session, req, plan.benchmark_plan)
        if prepared.input.workspace:
            await session.download(prepared.input.workspace, folder / layout.WORKSPACE)
        return prepared


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
