"""Built-in Benchmarks. Adding one: a module here plus one import line."""

from .example_exact_match import ExampleExactMatchBenchmark
from .humaneval import HumanEvalBenchmark
from .synthetic import SyntheticBenchmark

__all__ = ["ExampleExactMatchBenchmark", "HumanEvalBenchmark", "SyntheticBenchmark"]
