"""The Planner: one ExecutionPlan per task attempt, in eight ordered steps."""

from __future__ import annotations

import copy
import dataclasses
from typing import cast

from agentcompass.errors import AgentCompassError
from agentcompass.tools import resolve as resolve_tool

from .base import BaseBenchmark, BaseEnvironment, BaseHarness
from .models import ExecutionPlan, ExecutionSpec, HarnessPlan, NetworkPolicy, RunRequest, TaskSpec
from .models.request import EvaluationMode
from .registry import Registry

PHASES = ("baseline", "run", "evaluation")


class RecipeContractError(AgentCompassError, RuntimeError):
    """A Recipe broke its contract (returned the same object, or not a plan)."""


class Planner:
    """Derives the plan of each semantic attempt; runtime retries reuse it."""

    def __init__(
        self,
        benchmark: BaseBenchmark,
        harness: BaseHarness | None,
        recipes: Registry,
        environment: BaseEnvironment | None = None,
    ) -> None:
        self.benchmark = benchmark
        self.harness = harness
        self.recipes = recipes
        self.environment = environment
        self._recipe_instances = {rid: cls() for rid, cls in recipes.items()}

    def plan(self, req: RunRequest, task: TaskSpec, attempt: int) -> ExecutionPlan:
        if task.load_error is not None:
            return self._unloaded(req, task, attempt)
        # 1. The evaluation mode: request > task hint > Benchmark default.
        mode: EvaluationMode = (  # each is checked against the two modes where it is read
            req.environment.evaluation_environment_mode
            or task.evaluation_environment_mode
            or cast(EvaluationMode, self.benchmark.resolve_evaluation_environment_mode(req))
        )
        # 2. Phase policy inputs: an explicit request policy wins over a task hint.
        policies = {
            phase: copy.deepcopy(
                getattr(req.environment, f"{phase}_network") or getattr(task, f"{phase}_network")
            )
            for phase in PHASES
        }
        # 3. A task-local copy of the request's EnvironmentSpec.
        task_env = req.environment.copy()
        # 4. The Benchmark subplan.
        benchmark_plan = self.benchmark.build_plan(task, req, task_env)
        # 5. The Harness subplan (the base plan for a harness-free Benchmark).
        if self.harness is None:
            harness_plan = HarnessPlan(harness_id="none")
        else:
            harness_plan = self.harness.build_plan(task, req, task_env)
            # the programs it runs, installed and mounted by the environment (an unknown one fails here)
            task_env.tools = [resolve_tool(key).key for key in self.harness.tools(self.harness.build_config(req))]
        plan = ExecutionPlan(
            task_id=task.task_id,
            attempt=attempt,
            benchmark_id=self.benchmark.id,
            task_environment=task_env,
            evaluation_environment=None,
            evaluation_environment_mode=mode,
            baseline_network=policies["baseline"],
            run_network=policies["run"],
            evaluation_network=policies["evaluation"],
            benchmark_plan=benchmark_plan,
            harness_plan=harness_plan,
            execution=_attempt_execution(req),
        )
        # 6. Each allowed, matching Recipe in registry insertion order.
        allowed = set(req.execution.enabled_recipes)
        for recipe_id, recipe in self._recipe_instances.items():
            if allowed and recipe_id not in allowed:
                continue
            if not recipe.may_adapt(req) or not recipe.matches(req, task, plan):
                continue
            adapted = recipe.apply(plan, req, task)
            if not isinstance(adapted, ExecutionPlan) or adapted is plan:
                raise RecipeContractError(
                    f"Recipe {recipe_id!r} must return a copied ExecutionPlan (use plan.copy())"
                )
            adapted.applied_recipes = [*plan.applied_recipes, recipe_id]
            plan = adapted
        # 7. Policies still missing fall back to NetworkPolicy() (public).
        for phase in PHASES:
            if getattr(plan, f"{phase}_network") is None:
                setattr(plan, f"{phase}_network", NetworkPolicy())
            setattr(plan.task_environment, f"{phase}_network", copy.deepcopy(getattr(plan, f"{phase}_network")))
        plan.task_environment.evaluation_environment_mode = plan.evaluation_environment_mode
        # 8. Create or clear the evaluation environment for the final mode.
        if plan.evaluation_environment_mode == "fresh":
            if plan.evaluation_environment is None:
                plan.evaluation_environment = plan.task_environment.copy()
                plan.evaluation_environment.tools = []  # no agent runs there
        else:
            plan.evaluation_environment = None
        if self.environment is not None:
            # the provider checks the params Recipes left, so a bad one fails before any attempt
            for spec in (plan.task_environment, plan.evaluation_environment):
                if spec is not None:
                    self.environment.validate_spec(spec)
            for phase in PHASES:
                policy = getattr(plan, f"{phase}_network")
                setattr(plan, f"{phase}_network", self.environment.resolve_network_policy(policy, phase))
        return plan

    def _unloaded(self, req: RunRequest, task: TaskSpec, attempt: int) -> ExecutionPlan:
        """The plan of a task the Benchmark could not load: the request's settings and nothing of the task.

        Its attempt ends with the load error before anything reads the plan, so
        no Benchmark, Harness, Recipe or Environment code sees the broken task
        (each would fail on it, and fail the whole request's planning).
        """
        return ExecutionPlan(
            task_id=task.task_id,
            attempt=attempt,
            benchmark_id=self.benchmark.id,
            task_environment=req.environment.copy(),
            evaluation_environment=None,
            evaluation_environment_mode=req.environment.evaluation_environment_mode or "task",
            baseline_network=None,
            run_network=None,
            evaluation_network=None,
            benchmark_plan=self.benchmark.plan_class(),
            harness_plan=HarnessPlan(harness_id=self.harness.id if self.harness else "none"),
            execution=_attempt_execution(req),
        )


def _attempt_execution(req: RunRequest) -> ExecutionSpec:
    """The request's execution settings as an attempt's plan holds them: the preflight is the
    request's, run once per task, and never part of an attempt's plan; the cache mode and the budget decide
    what is paid, never what a plan holds."""
    return dataclasses.replace(copy.deepcopy(req.execution), preflight=None, cache=None, budget=None)
