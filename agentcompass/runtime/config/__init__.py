"""Run config: component parameters, loading, merging and resolution."""

from .fields import (
    ComponentConfig,
    ConfigError,
    ParameterError,
    build_component_config,
    config_field,
    describe_config,
    parse_bool,
    parse_int,
    plan_field,
)
from .benchmark import RuntimeBenchmarkConfig
from .loader import (
    ConfigLayer,
    RunConfig,
    deep_merge,
    env_ref,
    find_project_config,
    load_run_config,
    user_config_path,
)

__all__ = [
    "ComponentConfig", "ConfigError", "ParameterError", "RuntimeBenchmarkConfig", "ConfigLayer", "RunConfig", "build_component_config",
    "config_field", "deep_merge", "describe_config", "env_ref", "find_project_config",
    "load_run_config", "parse_bool", "parse_int", "plan_field", "user_config_path",
]
