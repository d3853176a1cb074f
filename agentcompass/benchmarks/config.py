"""Benchmark config base: what a Benchmark's config class derives from (``agentcompass.benchmarks.config``)."""

from agentcompass.runtime.config.benchmark import RuntimeBenchmarkConfig

__all__ = ["RuntimeBenchmarkConfig"]
