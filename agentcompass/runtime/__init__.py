"""Public runtime API: contracts, component interfaces, registries, config and planning."""

from .base import (
    BaseAnalyzer,
    BaseBenchmark,
    BaseEnvironment,
    BaseHarness,
    BaseRecipe,
    BaseScanner,
    EnvironmentSession,
    ExecResult,
    HarnessContext,
    HarnessFreeBenchmark,
)
from .config import RuntimeBenchmarkConfig, config_field, deep_merge, load_run_config
from .models import *  # noqa: F401,F403
from .models import __all__ as _models_all
from .orchestration import resolve_orchestration, single_request_layer
from .planner import Planner
from .recipes import build_run_recipe_registry
from .registry import ANALYZERS, BENCHMARKS, ENVIRONMENTS, HARNESSES, RECIPES, SCANNERS, Registry
from .transcript import Action, Transcript, quote, read_transcript

__all__ = [
    *_models_all,
    "ANALYZERS", "BENCHMARKS", "BaseAnalyzer", "BaseBenchmark", "BaseEnvironment", "BaseHarness",
    "Action", "BaseRecipe", "BaseScanner", "ENVIRONMENTS", "EnvironmentSession", "ExecResult", "HARNESSES",
    "HarnessContext", "HarnessFreeBenchmark", "Planner", "RECIPES", "Registry", "SCANNERS", "Transcript",
    "RuntimeBenchmarkConfig", "build_run_recipe_registry", "config_field", "deep_merge",
    "load_run_config", "quote", "read_transcript", "resolve_orchestration", "single_request_layer",
]
