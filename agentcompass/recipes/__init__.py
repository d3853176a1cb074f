"""Built-in Recipes, applied in registration order."""

from .task_environment_hints import TaskEnvironmentHints

__all__ = ["TaskEnvironmentHints"]
