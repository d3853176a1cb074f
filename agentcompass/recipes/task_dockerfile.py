"""``task_dockerfile``: a task that brings its own Dockerfile runs in the image built from it.

A task may carry its sandbox as a Dockerfile, as a Harbor task folder does
(``environment/Dockerfile``). It says so in ``TaskSpec.metadata["environment"]
["docker"]``: ``dockerfile`` and ``context`` (paths), ``image`` (the tag to
build, named after a digest of the context so each version of the environment
is its own image; alone, an image already on the engine), and optionally
``memory`` and ``cpus``. On the ``docker``
provider this Recipe puts them into the plan's environment params. The user's
explicit choices win: a request that names an ``image`` or a ``dockerfile``
runs that and this Recipe does not apply; ``memory``/``cpus`` the request
sets stay as given.
"""

from __future__ import annotations

from agentcompass.runtime import RECIPES, BaseRecipe, ExecutionPlan, RunRequest, TaskSpec

BUILD_KEYS = ("dockerfile", "context", "image")
LIMIT_KEYS = ("memory", "cpus")


def docker_hints(task: TaskSpec) -> dict:
    environment = task.metadata.get("environment")
    hints = environment.get("docker") if isinstance(environment, dict) else None
    return hints if isinstance(hints, dict) else {}


@RECIPES.register()
class TaskDockerfile(BaseRecipe):
    """On docker, builds the task's own Dockerfile unless the user named an image or Dockerfile."""

    id = "task_dockerfile"

    def matches(self, req: RunRequest, task: TaskSpec, plan: ExecutionPlan) -> bool:
        user_image = any(req.environment.params.get(key) for key in ("image", "dockerfile"))
        hints = docker_hints(task)
        return plan.task_environment.id == "docker" and bool(hints.get("dockerfile") or hints.get("image")) and not user_image

    def apply(self, plan: ExecutionPlan, req: RunRequest, task: TaskSpec) -> ExecutionPlan:
        hints = docker_hints(task)
        adapted = plan.copy()
        params = adapted.task_environment.params
        params.update({key: hints[key] for key in BUILD_KEYS if hints.get(key)})
        params.update({
            key: hints[key] for key in LIMIT_KEYS if hints.get(key) is not None and key not in req.environment.params
        })
        return adapted
