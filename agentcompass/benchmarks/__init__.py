"""Built-in Benchmarks. Adding one: a module here plus one import line."""

from .example_exact_match import ExampleExactMatchBenchmark
from .synthetic import SyntheticBenchmark
from .task_dir import TaskDirBenchmark

__all__ = ["ExampleExactMatchBenchmark", "SyntheticBenchmark", "TaskDirBenchmark"]
