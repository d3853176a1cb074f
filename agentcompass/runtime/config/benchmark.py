"""``RuntimeBenchmarkConfig``: the parameters every Benchmark accepts."""

from __future__ import annotations

from dataclasses import dataclass

from .fields import ConfigError, config_field, parse_int


@dataclass(slots=True)
class RuntimeBenchmarkConfig:
    """Task selection shared by every Benchmark; subclasses add their own fields."""

    task_ids: list[str] | None = config_field(
        default=None,
        description="Run only these task ids (in the Benchmark's order); null runs all.",
        stage="tasks",
    )
    categories: list[str] | None = config_field(
        default=None,
        description="Run only tasks in these categories; null runs all.",
        stage="tasks",
    )
    limit: int | None = config_field(
        default=None,
        description="Run at most this many tasks, the first ones after id and category selection.",
        stage="tasks",
    )

    def __post_init__(self) -> None:
        for name in ("task_ids", "categories"):
            value = getattr(self, name)
            if value is None:
                continue
            if isinstance(value, str):
                value = [value]
            if not isinstance(value, list) or not all(isinstance(v, (str, int)) for v in value):
                raise ConfigError(f"{name} must be a list of strings, got {value!r}")
            setattr(self, name, [str(v) for v in value])
        if self.limit is not None:
            self.limit = parse_int(self.limit, "limit", minimum=0)
