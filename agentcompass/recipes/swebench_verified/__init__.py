"""``swebench_verified``: a SWE-bench instance runs in its own image, offline, with its time limits.

For the ``swebench`` Benchmark on the ``docker`` provider, at planning time
(nothing is opened, pulled or run): both the task and the evaluation
environment run the instance's image (``image``, the error for a missing
one naming the command that fetches it) with the repository's folder as the
working directory (``workdir``, ``/testbed``); every phase that the user left
unset has no network (``none``: the agent works, and the tests run, offline);
the attempt's time limit (``execution.task_timeout``), when the user set none,
is ``AGENT_TIMEOUT`` (the tests' own limit is the Benchmark's ``eval_timeout``).
Every explicit user choice (an ``image``, a ``workdir``, a phase's network, a
timeout) is kept.
"""

from __future__ import annotations

from agentcompass.runtime import RECIPES, BaseRecipe, ExecutionPlan, NetworkPolicy, RunRequest, TaskSpec

from .common import clone_execution_plan

# the agent's time when the request sets none (SWE-bench's evaluation harness gives the tests 1800 s)
AGENT_TIMEOUT = 3600.0
PHASES = ("baseline", "run", "evaluation")


def _swebench_plan(plan: ExecutionPlan):
    from agentcompass.benchmarks.swebench import SwebenchPlan

    return plan.benchmark_plan if isinstance(plan.benchmark_plan, SwebenchPlan) else None


@RECIPES.register()
class SwebenchVerified(BaseRecipe):
    """On docker, runs a swebench instance in its image at /testbed, offline, under its time limits."""

    id = "swebench_verified"
    benchmarks = ("swebench",)

    def matches(self, req: RunRequest, task: TaskSpec, plan: ExecutionPlan) -> bool:
        return plan.task_environment.id == "docker" and _swebench_plan(plan) is not None

    def apply(self, plan: ExecutionPlan, req: RunRequest, task: TaskSpec) -> ExecutionPlan:
        swebench = _swebench_plan(plan)
        assert swebench is not None
        adapted = clone_execution_plan(plan)
        user = req.environment.params
        for spec in (adapted.task_environment, adapted.evaluation_environment):
            if spec is None:
                continue
            if not user.get("image") and not user.get("dockerfile"):
                spec.params["image"] = swebench.image
                spec.params["missing_image_hint"] = swebench.image_hint
            if not user.get("workdir"):
                spec.params["workdir"] = swebench.workdir
        for phase in PHASES:
            if getattr(req.environment, f"{phase}_network") is None:
                setattr(adapted, f"{phase}_network", NetworkPolicy(mode="none"))
        if req.execution.task_timeout is None and adapted.execution.task_timeout is None:
            adapted.execution.task_timeout = AGENT_TIMEOUT
        return adapted
