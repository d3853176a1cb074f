"""The preflight stage's own rules: the quarantine its record puts on a task's attempts, the plan it runs, its fingerprint.

With ``execution.preflight`` on, ``preflight/<task>.json`` says whether the Benchmark's
reference solution passes in the task's own environment and its evaluation environment,
run exactly as the ``oracle`` harness runs it, with the request's network policies. Its
fingerprint is the task and what its environments and evaluation read, never the Model or
the Harness: a new model reruns no preflight. A task whose preflight did not pass (or whose
runs disagree) is quarantined: its attempts open no environment and call no model
(``quarantine``, read by the prepare and run stages). Its body, which runs the reference
solution, is ``bodies.task.preflight``.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Final

from agentcompass._util.jsonio import read_json
from agentcompass.runtime.models import (
    ExecutionPlan,
    FailureClass,
    PreparedTask,
    RunResult,
    TaskStatus,
)
from agentcompass.runtime.registry import HARNESSES
from agentcompass.stages import TASK, Stage, of_scope

from . import reuse
from .fingerprints import AttemptView

ORACLE = "oracle"
FAILED: Final = "preflight_failed"
FLAKY: Final = "preflight_flaky"
# where a quarantined attempt's result.json keeps why (its metadata) and what stage stopped it
QUARANTINE = "quarantine"
STAGE = of_scope(TASK)[0].name


def oracle_plan(plan: ExecutionPlan) -> ExecutionPlan:
    """The plan as the preflight runs it: the oracle runs no agent program, so its sessions mount no tool
    of the Harness (and a new tool version reruns no preflight)."""
    if not plan.task_environment.tools:
        return plan
    return dataclasses.replace(plan, task_environment=dataclasses.replace(plan.task_environment, tools=[]))


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


def read_prepared_quarantine(prepared: PreparedTask) -> dict[str, Any] | None:
    """The quarantine the prepare stage put in ``prepared`` (its metadata), or None."""
    why = prepared.metadata.get(QUARANTINE)
    return why if isinstance(why, dict) else None
