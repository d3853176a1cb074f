"""Built-in Recipes, applied in registration order."""

from .task_environment_hints import TaskEnvironmentHints
from .task_dockerfile import TaskDockerfile

__all__ = ["TaskDockerfile", "TaskEnvironmentHints"]
