"""Built-in Recipes, applied in registration order."""

from .task_environment_hints import TaskEnvironmentHints
from .task_dockerfile import TaskDockerfile
from .swebench_verified import SwebenchVerified

__all__ = ["SwebenchVerified", "TaskDockerfile", "TaskEnvironmentHints"]
