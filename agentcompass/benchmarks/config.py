"""Benchmark config base, where the Benchmark guide imports it from."""

from agentcompass.runtime.config.benchmark import RuntimeBenchmarkConfig

__all__ = ["RuntimeBenchmarkConfig"]
