"""Built-in Benchmarks. Adding one: a module here plus one import line."""

from .bfcl import BfclBenchmark
from .dataset import DatasetBenchmark
from .example_exact_match import ExampleExactMatchBenchmark
from .humaneval import HumanEvalBenchmark
from .majority_vote import MajorityVoteBenchmark
from .swebench import SwebenchBenchmark
from .synthetic import SyntheticBenchmark
from .task_dir import TaskDirBenchmark

__all__ = [
    "BfclBenchmark", "DatasetBenchmark", "ExampleExactMatchBenchmark", "HumanEvalBenchmark", "MajorityVoteBenchmark",
    "SwebenchBenchmark", "SyntheticBenchmark", "TaskDirBenchmark",
]
