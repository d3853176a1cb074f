"""The body of a task's stage (scope ``task``): the preflight, each task's reference solution run as the
``oracle`` harness runs it, in the attempt stages' own sessions (``pipeline.sessions``), before any
attempt of the task; what the attempts read of its record is ``pipeline.preflight``'s."""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path

from agentcompass import layout
from agentcompass._util.aio import run_coroutine
from agentcompass.runtime.base import HarnessContext
from agentcompass.runtime.models import PreparedTask, RunRequest, RunResult, TaskStatus
from agentcompass.runtime.registry import HARNESSES

from ..files import PreflightRecord, PreflightRun
from ..jobs import TaskJob
from ..preflight import FAILED, FLAKY, ORACLE, STAGE, oracle_plan
from ..reading import benchmark_for
from ..sessions import evaluate_in, prepare_in, run_in


def preflight(job: TaskJob) -> None:
    """Run the task's reference solution ``execution.preflight.runs`` times; write its record."""
    req, task = job.request, job.task
    spec = req.execution.preflight
    assert spec is not None  # the stage's files are targets only with preflight on
    plan = oracle_plan(job.plan)  # its first attempt's: its sessions are named apart from the attempts' (who=STAGE)
    started = time.monotonic()
    runs = [_one_run(req, task, plan) for _ in range(spec.runs)]
    verdicts = {run.status == TaskStatus.COMPLETED and run.correct is True for run in runs}
    passed, flaky = verdicts == {True}, len(verdicts) > 1
    first_error = next((run.error for run in runs if run.error), None)
    if first_error is None and not passed:
        wrong = next(run for run in runs if run.correct is not True)
        first_error = f"the reference solution was scored correct={wrong.correct}, score={wrong.score}"
    job.write("preflight", PreflightRecord(
        task_id=task.task_id, mode=spec.mode, passed=passed, flaky=flaky,
        reason=None if passed else FLAKY if flaky else FAILED,
        correct=runs[0].correct, score=runs[0].score, error=None if passed else first_error,
        runs=runs, seconds=round(time.monotonic() - started, 6),
    ), secrets=job.secrets)


def _one_run(req: RunRequest, task, plan) -> PreflightRun:
    """One run of the reference: prepared, run by the oracle harness, scored; its failure is its verdict."""
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="agentcompass-preflight-") as scratch:
        folder = Path(scratch)
        try:
            if task.load_error is not None:
                raise ValueError(task.load_error)
            benchmark = benchmark_for(req)
            reference = benchmark.reference_solution(task, plan.benchmark_plan)
            oracle = HARNESSES.get(ORACLE)()
            prepared = run_coroutine(prepare_in(req, plan, task, folder, STAGE))
            context = HarnessContext(attempt=plan.attempt, attempt_dir=folder, trajectory_path=folder / layout.TRAJECTORY,
                                     reference=reference, timeout=plan.execution.task_timeout)
            output = run_coroutine(run_in(req, plan, prepared, folder,
                                          lambda session: oracle.run(prepared, session, req, plan.harness_plan, context), STAGE))
            result = output if output.status.is_error else _evaluated(req, plan, task, prepared, output, folder)
        except asyncio.TimeoutError:
            result = RunResult(task_id=task.task_id, status=TaskStatus.RUN_ERROR, error_stage="run",
                               error=f"timed out after {plan.execution.task_timeout} s")
        except Exception as exc:
            result = RunResult(task_id=task.task_id, status=TaskStatus.RUN_ERROR, error_stage=STAGE,
                               error=f"{type(exc).__name__}: {exc}")
    return PreflightRun(status=result.status, correct=result.correct, score=result.score, error=result.error,
                        error_stage=result.error_stage, seconds=round(time.monotonic() - started, 6))


def _evaluated(req: RunRequest, plan, task, prepared: PreparedTask, output: RunResult, folder: Path) -> RunResult:
    """The oracle's answer scored as the evaluate stage scores it: a verifier that raises is an eval_error."""
    try:
        return run_coroutine(evaluate_in(req, plan, task, prepared, output, folder, STAGE))
    except Exception as exc:
        return RunResult(task_id=task.task_id, status=TaskStatus.EVAL_ERROR, error_stage="evaluate",
                         error=f"{type(exc).__name__}: {exc}")
