"""The preflight stage: each task's reference solution, run before any attempt of the task.

With ``execution.preflight`` on, ``preflight/<task>.json`` says whether the Benchmark's
reference solution passes in the task's own environment and its evaluation environment,
run exactly as the ``oracle`` harness runs it, with the request's network policies. Its
fingerprint is the task and what its environments and evaluation read, never the Model or
the Harness: a new model reruns no preflight. A task whose preflight did not pass (or whose
runs disagree) is quarantined: its attempts open no environment and call no model
(``quarantine``, read by the prepare and run stages).
"""

from __future__ import annotations

import asyncio
import dataclasses
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Final

from agentcompass import layout
from agentcompass._util.aio import run_coroutine
from agentcompass._util.jsonio import read_json
from agentcompass.runtime.base import HarnessContext
from agentcompass.runtime.models import (
    ExecutionPlan,
    FailureClass,
    PreparedTask,
    RunRequest,
    RunResult,
    TaskStatus,
)
from agentcompass.runtime.registry import HARNESSES
from agentcompass.stages import TASK, Stage, of_scope

from . import engine, reading, reuse
from .files import PreflightRecord, PreflightRun
from .fingerprints import AttemptView, as_param, component_versions
from .jobs import TaskJob

ORACLE = "oracle"
FAILED: Final = "preflight_failed"
FLAKY: Final = "preflight_flaky"
# where a quarantined attempt's result.json keeps why (its metadata) and what stage stopped it
QUARANTINE = "quarantine"
STAGE = of_scope(TASK)[0].name


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


def oracle_plan(plan: ExecutionPlan) -> ExecutionPlan:
    """The plan as the preflight runs it: the oracle runs no agent program, so its sessions mount no tool
    of the Harness (and a new tool version reruns no preflight)."""
    if not plan.task_environment.tools:
        return plan
    return dataclasses.replace(plan, task_environment=dataclasses.replace(plan.task_environment, tools=[]))


def _one_run(req: RunRequest, task, plan) -> PreflightRun:
    """One run of the reference: prepared, run by the oracle harness, scored; its failure is its verdict."""
    from .bodies import prepare_in, run_in  # the attempt stages' own session code

    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="agentcompass-preflight-") as scratch:
        folder = Path(scratch)
        try:
            if task.load_error is not None:
                raise ValueError(task.load_error)
            benchmark = reading.benchmark_for(req)
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
    from .bodies import evaluate_in

    try:
        return run_coroutine(evaluate_in(req, plan, task, prepared, output, folder, STAGE))
    except Exception as exc:
        return RunResult(task_id=task.task_id, status=TaskStatus.EVAL_ERROR, error_stage="evaluate",
                         error=f"{type(exc).__name__}: {exc}")


# -- quarantine: what the attempts of a task read of its preflight -----------------------------


def quarantine(preflight_file: str | None) -> dict[str, Any] | None:
    """Why the attempts of the task whose preflight record is ``preflight_file`` do not run
    (``{"reason": ..., "error": ...}``), or None when they do (preflight off, or passed)."""
    if preflight_file is None:
        return None
    record = read_json(preflight_file)
    if record["passed"]:
        return None
    return {"reason": record["reason"], "error": record["error"]}


def quarantined_result(task_id: str, attempt: int, why: dict[str, Any]) -> RunResult:
    """The result of an attempt of a quarantined task: skipped, class ``task``, with the reason."""
    return RunResult(
        task_id=task_id, attempt=attempt, status=TaskStatus.SKIPPED, error_stage=STAGE,
        error=f"quarantined ({why['reason']}): {why['error']}", failure_class=FailureClass.TASK,
        metadata={QUARANTINE: dict(why)},
    )


def quarantine_of(result: dict[str, Any]) -> dict[str, Any] | None:
    """The quarantine a result.json records (its reason and the preflight's error), or None."""
    if result.get("status") != TaskStatus.SKIPPED.value or result.get("error_stage") != STAGE:
        return None
    why = (result.get("metadata") or {}).get(QUARANTINE)
    return why if isinstance(why, dict) else None


# -- the fingerprint ---------------------------------------------------------------------------


def _policy(policy) -> str | None:
    return policy.mode if policy else None


def preflight_param(v: AttemptView, s: Stage) -> dict[str, Any]:
    """What a task's preflight reads: the task, its environments and networks, the plan fields the
    Benchmark prepares and scores with, its reference, the preflight settings; never the Model or Harness."""
    plan = v.plan
    bplan = plan.benchmark_plan
    try:
        reference: Any = reuse.digest(v.benchmark.reference_solution(v.task, bplan))
    except Exception as exc:  # the preflight records the same error: a fix of it reruns the preflight
        reference = f"{type(exc).__name__}: {exc}"
    assert v.req.execution.preflight is not None
    return {
        "stage": s.version, "preflight": v.req.execution.preflight.to_dict(),
        "benchmark": v.versions["benchmark"], "environment": v.versions["environment"],
        "oracle": HARNESSES.get(ORACLE).version, "task": v.task_digest, "reference": reference,
        "plan": reuse.digest({
            "task_environment": oracle_plan(plan).task_environment.to_dict(),
            "evaluation_environment": plan.evaluation_environment.to_dict() if plan.evaluation_environment else None,
            "evaluation_environment_mode": plan.evaluation_environment_mode,
            "networks": [_policy(plan.baseline_network), _policy(plan.run_network), _policy(plan.evaluation_network)],
            "task_timeout": plan.execution.task_timeout,
            "benchmark_plan": bplan.to_dict(),
        }),
    }


class TaskFingerprints:
    """The preflight rule's param, per task: computed from the task and its first attempt's plan."""

    def __init__(self, inv, fingerprints, targets) -> None:
        self.inv = inv
        self.fingerprints = fingerprints
        self.targets = targets
        self._values: dict[tuple[str, str, str], str] = {}

    def param(self, s: Stage) -> Callable:
        return engine.signature_once(lambda wildcards: self.of(s, wildcards))

    def of(self, s: Stage, w) -> str:
        self.inv.begin()
        req = self.inv.request(w)
        key = (req.namespace, req.run_id, w.task)
        value = self._values.get(key)
        if value is None:
            tasks_file, plans_file = self.targets.bulk_files(req)
            value = self._values[key] = as_param({**task_param(req, s, tasks_file, plans_file, w.task),
                                                  **self.fingerprints.recompute(req)})
        return value


def task_param(req: RunRequest, s: Stage, tasks_file: str, plans_file: str, segment: str) -> dict[str, Any]:
    """Stage ``s``'s fingerprint of the task at ``segment`` (what ``agentcompass status`` compares too)."""
    task = reading.task_by_segment(tasks_file, segment)
    plan = reading.plan_for(req, plans_file, segment, 1)
    view = AttemptView(req, task, plan, component_versions(req), reading.benchmark_for(req),
                       reading.harness_for(req), reuse.task_fingerprint(task))
    return s.resolve("fingerprint")(view, s)


def read_prepared_quarantine(prepared: PreparedTask) -> dict[str, Any] | None:
    """The quarantine the prepare stage put in ``prepared`` (its metadata), or None."""
    why = prepared.metadata.get(QUARANTINE)
    return why if isinstance(why, dict) else None
