"""Component parameters: ``config_field`` with descriptions, parsing and documentation."""

from __future__ import annotations

import dataclasses
import json
import functools
import types
import typing
from typing import Any

from agentcompass.errors import ConfigError
from agentcompass.stages import PARAM_STAGES

from ..models.codec import ContractError, _checker, _type_name

_MISSING = dataclasses.MISSING


class ParameterError(ConfigError):
    """A component parameter that is unknown or has a bad value; ``names`` says which."""

    def __init__(self, message: str, names: list[str]) -> None:
        super().__init__(message)
        self.names = names


# the stages a parameter may be marked as read by (agentcompass.stages)
STAGES = PARAM_STAGES


def config_field(
    default: Any = _MISSING, *, description: str, choices: list | None = None, stage: str | None = None
):
    """A dataclass field of a component config, documented by ``agentcompass config docs``.

    ``stage`` names the first pipeline stage that reads the value (for a
    Benchmark: ``tasks`` for loading and selection, ``prepare`` for what the
    harness sees, ``evaluate`` for scoring, ``metrics`` for aggregation).
    Changing the value reruns that stage onward and nothing before it. A field
    without a stage counts as ``tasks``: everything reruns.
    """
    metadata: dict[str, Any] = {"description": description}
    if choices is not None:
        metadata["choices"] = list(choices)
    if stage is not None:
        if stage not in STAGES:
            raise ValueError(f"stage must be one of {STAGES}, got {stage!r}")
        metadata["stage"] = stage
    if isinstance(default, (list, dict, set)):
        value = default
        return dataclasses.field(default_factory=lambda: type(value)(value), metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def plan_field(default: Any = _MISSING, *, stage: str | None = None, description: str = ""):
    """A field of a BenchmarkPlan; ``stage`` ('prepare', 'evaluate', or 'run' for a
    harness-free Benchmark's ``run_task``) says which stage reads it.

    A field read only by ``evaluate`` can change without rerunning preparation
    or the harness: that is what makes regrading exact. Unmarked fields count
    for every stage that reads the plan.
    """
    return config_field(default, description=description, stage=stage)


def parse_bool(value: Any, name: str) -> bool:
    """Accept a bool or the usual spellings of one from YAML or ``--config``."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "yes", "on", "1"):
        return True
    if isinstance(value, str) and value.strip().lower() in ("false", "no", "off", "0"):
        return False
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    raise ParameterError(f"{name} must be true or false, got {value!r}", [name])


def parse_int(value: Any, name: str, minimum: int | None = None) -> int:
    try:
        if isinstance(value, bool):
            raise ValueError
        number = int(value)
        if isinstance(value, float) and number != value:
            raise ValueError
    except (TypeError, ValueError):
        raise ParameterError(f"{name} must be an integer, got {value!r}", [name]) from None
    if minimum is not None and number < minimum:
        raise ParameterError(f"{name} must be at least {minimum}, got {number}", [name])
    return number


def _container(tp: Any) -> type | None:
    """``list`` or ``dict`` when the type hint ``tp`` is one (or one or None), else None."""
    options = typing.get_args(tp) if typing.get_origin(tp) in (typing.Union, types.UnionType) else (tp,)
    for option in options:
        origin = typing.get_origin(option) or option
        if origin in (list, dict):
            return origin
    return None


def _is_text(tp: Any) -> bool:
    options = typing.get_args(tp) if typing.get_origin(tp) in (typing.Union, types.UnionType) else (tp,)
    return str in options


# Every stage builds its components' configs again (a Benchmark's plan, once per task): read each class once.
@functools.lru_cache(maxsize=None)
def _param_hints(config_cls: type) -> dict[str, Any]:
    return typing.get_type_hints(config_cls)


@functools.lru_cache(maxsize=None)
def _has_default(config_cls: type) -> frozenset[str]:
    return frozenset(f.name for f in dataclasses.fields(config_cls)
                     if f.default is not _MISSING or f.default_factory is not _MISSING)


def yaml_list(value: Any) -> str:
    """The YAML list a value given for a list most likely meant: ``'a,b'`` -> ``[a, b]``."""
    if isinstance(value, str):
        return "[" + ", ".join(part.strip() for part in value.split(",") if part.strip()) + "]"
    return f"[{value}]"


def prepare_params(config_cls: type, params: dict[str, Any]) -> dict[str, Any]:
    """Params ready for the config class; a list or mapping given as anything else is refused by name.

    Accepting a string for a list would read ``task_ids: "a,b"`` as one id
    named ``a,b``. A number given for a text parameter becomes its text: YAML
    and ``-H answer=42`` read ``42`` as a number where the user meant the text.
    Null (``-H answer=``, a bare ``answer:``) for a parameter that cannot be
    null means it is not set: its default applies.
    """
    hints, defaults = _param_hints(config_cls), _has_default(config_cls)
    params = dict(params)
    for name, value in list(params.items()):
        hint = hints.get(name)
        if hint is None:
            continue
        if value is None and name in defaults and not _checker(hint)(None):
            del params[name]
            continue
        if _is_text(hint) and isinstance(value, (int, float)) and not isinstance(value, bool):
            params[name] = str(value)
            continue
        kind = _container(hint)
        if kind is None or value is None or isinstance(value, kind):
            continue
        if kind is list:
            form = yaml_list(value)
            raise ParameterError(
                f"{name} must be a list, got {value!r}: write it as a YAML list, '{name}: {form}' "
                f"('{name}={form.replace(' ', '')}' on the command line)", [name],
            )
        raise ParameterError(f"{name} must be a mapping such as {{key: value}}, got {value!r}", [name])
    return params


def check_types(config: Any) -> None:
    """Every parameter, after the config class has read it, has its declared type.

    A class reads the spellings it accepts (``parse_bool``, ``parse_int``);
    anything left of another type (``keep_workspace: maybe``) is refused here
    rather than being used as it is.
    """
    cls: type = type(config)
    hints = _param_hints(cls)
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        if f.init and f.name in hints and not _checker(hints[f.name])(value):
            raise ParameterError(f"{f.name} must be {_type_name(hints[f.name])}, got {value!r}", [f.name])


def build_component_config(config_cls: type, params: dict[str, Any], where: str):
    """Instantiate a component's config dataclass from params, naming unknown keys."""
    names = [f.name for f in dataclasses.fields(config_cls) if f.init]
    unknown = sorted(set(params) - set(names))
    if unknown:
        raise ParameterError(f"{where}: unknown parameter(s) {unknown}; known: {names or 'none'}", unknown)
    try:
        config = config_cls(**prepare_params(config_cls, params))
        check_types(config)
    except (ConfigError, ContractError, TypeError, ValueError) as exc:
        # the names travel on, so the error can blame the file that set the parameter
        raise ParameterError(f"{where}: {exc}", getattr(exc, "names", [])) from None
    for f in dataclasses.fields(config_cls):
        choices = f.metadata.get("choices")
        if choices is not None and getattr(config, f.name) not in choices:
            raise ParameterError(f"{where}: {f.name} must be one of {choices}, got {getattr(config, f.name)!r}", [f.name])
    return config


def describe_config(config_cls: type) -> list[dict[str, Any]]:
    """Each parameter's name, type, default and description, for ``config docs``."""
    hints = typing.get_type_hints(config_cls)
    rows = []
    for f in dataclasses.fields(config_cls):
        if not f.init:
            continue
        if f.default is not _MISSING:
            default = f.default
        elif f.default_factory is not _MISSING:
            default = f.default_factory()
        else:
            default = "(required)"
        rows.append(
            {
                "name": f.name,
                "type": _type_name(hints[f.name]),
                "default": default,
                "description": f.metadata.get("description", ""),
                "choices": f.metadata.get("choices"),
                "stage": f.metadata.get("stage", PARAM_STAGES[0]),
            }
        )
    return rows


def default_text(default: Any) -> str:
    """A parameter's default as ``config docs`` prints it: JSON, or ``(required)``."""
    return default if default == "(required)" else json.dumps(default)


@dataclasses.dataclass(slots=True)
class ComponentConfig:
    """Base of Harness and Environment configs (no parameters by default)."""

    def __post_init__(self) -> None:
        pass
