"""``RuntimeBenchmarkConfig``: the parameters every Benchmark accepts."""

from __future__ import annotations

from dataclasses import dataclass

from .fields import ParameterError, config_field, parse_int


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
        description="Run at most this many tasks (at least 1), the first ones after id and category selection; "
        "null runs all.",
        stage="tasks",
    )

    def __post_init__(self) -> None:
        for name in ("task_ids", "categories"):
            value = getattr(self, name)
            if value is None:
                continue
            if not isinstance(value, list) or not all(isinstance(v, (str, int)) and not isinstance(v, bool) for v in value):
                raise ParameterError(f"{name} must be a list of strings such as [a, b], got {value!r}", [name])
            setattr(self, name, [str(v) for v in value])
        if self.limit is not None:
            # 0 would select no task at all: a request with nothing to run is a mistake, not a choice
            limit = parse_int(self.limit, "limit")
            if limit < 1:
                raise ParameterError(f"limit must be at least 1, got {limit} (null, the default, runs every task)", ["limit"])
            self.limit = limit
