"""``task_environment_hints``: a task's own environment needs, applied under the user's choices.

A task may say what its sandbox needs in ``TaskSpec.metadata["environment"]``
(for example ``{"params": {"memory": "2g"}, "run_network": "none"}``, as
Harbor's ``task.toml`` does). This Recipe copies those hints into the plan
wherever the user left the value unset: explicit request values always win.
"""

from __future__ import annotations

from typing import cast

from agentcompass.runtime import RECIPES, BaseRecipe, ExecutionPlan, NetworkPolicy, RunRequest, TaskSpec
from agentcompass.runtime.models.request import NetworkMode

HINT_KEY = "environment"


@RECIPES.register()
class TaskEnvironmentHints(BaseRecipe):
    """Applies a task's declared environment params and network hints where the user set none."""

    id = "task_environment_hints"

    def matches(self, req: RunRequest, task: TaskSpec, plan: ExecutionPlan) -> bool:
        return isinstance(task.metadata.get(HINT_KEY), dict) and bool(task.metadata[HINT_KEY])

    def apply(self, plan: ExecutionPlan, req: RunRequest, task: TaskSpec) -> ExecutionPlan:
        hints = task.metadata[HINT_KEY]
        adapted = plan.copy()
        for key, value in (hints.get("params") or {}).items():
            if key not in req.environment.params:
                adapted.task_environment.params[key] = value
        for phase in ("baseline", "run", "evaluation"):
            hint = hints.get(f"{phase}_network")
            field = f"{phase}_network"
            if hint is not None and getattr(req.environment, field) is None:
                mode = cast(NetworkMode, hint if isinstance(hint, str) else hint.get("mode"))
                setattr(adapted, field, NetworkPolicy(mode=mode))  # a bad mode is refused by NetworkPolicy
        return adapted
