"""The one place that turns contract dataclasses into JSON values and back.

Every contract is a plain ``dataclasses.dataclass``. Its type hints are the
single source of truth for three things: validation on construction
(``check_fields``), the JSON round-trip (``to_json_value`` / ``from_json_value``)
and the JSON Schema of the files the pipeline writes (``json_schema``).
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import types
import typing
from typing import Any, Callable, Union, get_args, get_origin

from agentcompass.errors import ContractError

JSON_SCALARS = (str, int, float, bool, type(None))
# A field whose metadata holds this key is left out of the JSON while it is empty: a field added so,
# with an empty default, keeps every value written before it existed (and each digest of one) as it was.
OMIT_EMPTY = "omit_empty"


@functools.lru_cache(maxsize=None)
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


@functools.lru_cache(maxsize=None)
def contract_fields(cls: type) -> tuple[tuple[dataclasses.Field, Any], ...]:
    hints = _hints(cls)
    return tuple((f, hints[f.name]) for f in dataclasses.fields(cls) if f.init)


@functools.lru_cache(maxsize=None)
def _has_float(tp: Any) -> bool:
    if tp is float:
        return True
    return any(_has_float(a) for a in get_args(tp))


def _is_union(tp: Any) -> bool:
    return get_origin(tp) in (Union, types.UnionType)


def _type_name(tp: Any) -> str:
    if tp is Any:
        return "any value"
    if _is_union(tp):
        return " or ".join(_type_name(a) for a in get_args(tp))
    origin = get_origin(tp)
    if origin is not None:
        return f"{origin.__name__}[{', '.join(_type_name(a) for a in get_args(tp))}]"
    if tp is type(None):
        return "null"
    return getattr(tp, "__name__", str(tp))


def _always(value: Any) -> bool:
    return True


@functools.lru_cache(maxsize=None)
def _checker(tp: Any) -> Callable[[Any], bool]:
    """A predicate for the type hint ``tp``, built once per hint: contracts are checked on every construction."""
    if tp is Any:
        return _always
    if _is_union(tp):
        checks = tuple(_checker(a) for a in get_args(tp))
        return lambda v: any(check(v) for check in checks)
    if tp is type(None):
        return lambda v: v is None
    origin = get_origin(tp)
    if origin is typing.Literal:
        allowed = get_args(tp)
        return lambda v: v in allowed
    if origin in (list, tuple):
        args = get_args(tp)
        inner = _checker(args[0]) if args else _always
        return lambda v: isinstance(v, (list, tuple)) and all(inner(x) for x in v)
    if origin is dict:
        args = get_args(tp)
        key_check, val_check = (_checker(args[0]), _checker(args[1])) if args else (_always, _always)
        return lambda v: isinstance(v, dict) and all(key_check(k) and val_check(x) for k, x in v.items())
    if tp is float:
        return lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)
    if tp is int:
        return lambda v: isinstance(v, int) and not isinstance(v, bool)
    if isinstance(tp, type):
        return lambda v: isinstance(v, tp)
    return _always


def coerce_floats(value: Any, tp: Any) -> Any:
    """Integers given where the type says float become floats, so JSON is stable over round trips."""
    if tp is float:
        return float(value) if isinstance(value, int) and not isinstance(value, bool) else value
    if _is_union(tp):
        args = [a for a in get_args(tp) if a is not type(None)]
        if float in args and int not in args:
            return coerce_floats(value, float)
        return value
    origin = get_origin(tp)
    if origin is dict and isinstance(value, dict):
        item_types = get_args(tp)
        if item_types:
            return {k: coerce_floats(v, item_types[1]) for k, v in value.items()}
    if origin in (list, tuple) and isinstance(value, list):
        item_types = get_args(tp)
        if item_types:
            return [coerce_floats(v, item_types[0]) for v in value]
    return value


@functools.lru_cache(maxsize=None)
def _field_checks(cls: type) -> tuple[tuple[str, Any, Callable[[Any], bool]], ...]:
    return tuple((f.name, tp, _checker(tp)) for f, tp in contract_fields(cls))


def check_fields(obj: Any) -> None:
    """Raise ``ContractError`` naming the first field whose value has the wrong type."""
    cls: type = type(obj)
    for name, tp, check in _field_checks(cls):
        value = getattr(obj, name)
        if not check(value):
            raise ContractError(f"{cls.__name__}.{name} must be {_type_name(tp)}, got {value!r}")


def to_json_value(value: Any) -> Any:
    """Turn a contract (or any nesting of contracts, enums, lists, dicts) into JSON values."""
    if isinstance(value, JSON_SCALARS):
        return value
    if isinstance(value, enum.Enum):
        return value.value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_json_value(getattr(value, f.name)) for f in dataclasses.fields(value)
                if not (f.metadata.get(OMIT_EMPTY) and not getattr(value, f.name))}
    if isinstance(value, dict):
        return {str(k): to_json_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_json_value(v) for v in value]
    raise ContractError(f"{type(value).__name__} value {value!r} cannot be written as JSON")


def from_json_value(tp: Any, data: Any, where: str = "") -> Any:
    """Build a value of type ``tp`` from JSON values, or raise ``ContractError`` naming ``where``."""
    return _decoder(tp)(data, where or getattr(tp, "__name__", "value"))


def _identity(data: Any, label: str) -> Any:
    return data


@functools.lru_cache(maxsize=None)
def _decoder(tp: Any) -> Callable[[Any, str], Any]:
    """A JSON-to-value function for the type hint ``tp``, built once per hint.

    Reading plans.json decodes every attempt's plan at each parse; walking the
    type hints afresh for every value made that the larger part of a no-op rerun.
    """
    if tp is Any:
        return _identity
    if _is_union(tp):
        options = tuple(_decoder(a) for a in get_args(tp) if a is not type(None))
        nullable = type(None) in get_args(tp)

        def union(data, label):
            if data is None and nullable:
                return None
            if len(options) == 1:  # X | None: X's own error says what is wrong
                return options[0](data, label)
            for option in options:
                try:
                    return option(data, label)
                except (ContractError, TypeError):
                    continue
            raise ContractError(f"{label}: {data!r} is not {_type_name(tp)}")

        return union
    origin = get_origin(tp)
    if origin in (list, tuple):
        args = get_args(tp)
        inner = _decoder(args[0]) if args else _identity

        def sequence(data, label):
            if not isinstance(data, list):
                raise ContractError(f"{label} must be a list, got {data!r}")
            return [inner(v, f"{label}[{i}]") for i, v in enumerate(data)]

        return sequence
    if origin is dict:
        args = get_args(tp)
        inner = _decoder(args[1]) if args else _identity

        def mapping(data, label):
            if not isinstance(data, dict):
                raise ContractError(f"{label} must be a mapping, got {data!r}")
            return {k: inner(v, f"{label}.{k}") for k, v in data.items()}

        return mapping
    if origin is typing.Literal:
        allowed = get_args(tp)

        def literal(data, label):
            if data not in allowed:
                raise ContractError(f"{label} must be one of {list(allowed)}, got {data!r}")
            return data

        return literal
    if isinstance(tp, type) and issubclass(tp, enum.Enum):

        def member(data, label):
            try:
                return tp(data)
            except ValueError:
                allowed = [m.value for m in tp]
                raise ContractError(f"{label} must be one of {allowed}, got {data!r}") from None

        return member
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return lambda data, label: from_dict(tp, data, label)
    check = _checker(tp)

    def scalar(data, label):
        if not check(data):
            raise ContractError(f"{label} must be {_type_name(tp)}, got {data!r}")
        if tp is float and isinstance(data, int):
            return float(data)
        return data

    return scalar


@functools.lru_cache(maxsize=None)
def _field_decoders(cls: type) -> dict[str, Callable[[Any, str], Any]]:
    return {f.name: _decoder(tp) for f, tp in contract_fields(cls)}


def from_dict(
    cls: type, data: Any, where: str = "", field_types: dict[str, Any] | None = None
) -> Any:
    """Build the dataclass ``cls`` from a mapping; unknown keys are an error.

    ``field_types`` narrows declared field types, for extension points such as
    an ``ExecutionPlan`` whose ``benchmark_plan`` is a Benchmark's own subclass.
    """
    label = where or cls.__name__
    if isinstance(data, cls):
        return data
    if not isinstance(data, dict):
        raise ContractError(f"{label} must be a mapping, got {data!r}")
    decoders = _field_decoders(cls)
    if field_types:
        decoders = {**decoders, **{name: _decoder(tp) for name, tp in field_types.items()}}
    unknown = [k for k in data if k not in decoders]
    if unknown:
        raise ContractError(
            f"{label} has unknown field(s) {sorted(unknown)}; known fields: {sorted(decoders)}"
        )
    kwargs = {name: decoders[name](value, f"{label}.{name}") for name, value in data.items()}
    try:
        return cls(**kwargs)
    except TypeError as exc:
        raise ContractError(f"{label}: {exc}") from None


@functools.lru_cache(maxsize=None)
def _float_fields(cls: type) -> tuple[tuple[str, Any], ...]:
    return tuple((f.name, tp) for f, tp in contract_fields(cls) if _has_float(tp))


class Contract:
    """Mixin for contract dataclasses: validation on construction and the JSON round-trip."""

    def __post_init__(self) -> None:
        cls: type = type(self)
        for name, tp in _float_fields(cls):
            value = getattr(self, name)
            coerced = coerce_floats(value, tp)
            if coerced is not value:
                setattr(self, name, coerced)
        check_fields(self)

    def to_dict(self) -> dict[str, Any]:
        return to_json_value(self)

    @classmethod
    def from_dict(cls, data: Any):
        return from_dict(cls, data)


# --- JSON Schema ---------------------------------------------------------------


def json_schema(tp: Any, defs: dict[str, Any], open_classes: frozenset[type] = frozenset()) -> dict:
    """The JSON Schema of a type hint; dataclasses become ``$defs`` entries.

    Dataclasses in ``open_classes`` are extension points (a Benchmark's own
    ``BenchmarkPlan`` subclass adds fields): their base fields are required and
    further properties are allowed. Every other object is closed.
    """
    if tp is Any:
        return {}
    if _is_union(tp):
        options = [json_schema(a, defs, open_classes) for a in get_args(tp)]
        return {"anyOf": options}
    if tp is type(None):
        return {"type": "null"}
    if tp is bool:
        return {"type": "boolean"}
    if tp is int:
        return {"type": "integer"}
    if tp is float:
        return {"type": "number"}
    if tp is str:
        return {"type": "string"}
    origin = get_origin(tp)
    if origin in (list, tuple):
        args = get_args(tp)
        return {"type": "array", "items": json_schema(args[0] if args else Any, defs, open_classes)}
    if origin is dict:
        args = get_args(tp)
        return {
            "type": "object",
            "additionalProperties": json_schema(args[1] if args else Any, defs, open_classes),
        }
    if origin is typing.Literal:
        return {"enum": list(get_args(tp))}
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return {"enum": [m.value for m in tp]}
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        name = tp.__name__
        if name not in defs:
            defs[name] = {}  # placeholder against recursion
            props = {}
            required = []
            for f, ftp in contract_fields(tp):
                schema = json_schema(ftp, defs, open_classes)
                desc = f.metadata.get("description")
                if desc:
                    schema = {**schema, "description": desc}
                props[f.name] = schema
                if not f.metadata.get(OMIT_EMPTY):
                    required.append(f.name)
            defs[name] = {
                "type": "object",
                "description": (tp.__doc__ or name).strip().splitlines()[0],
                "properties": props,
                "required": required,
                "additionalProperties": tp in open_classes,
            }
        return {"$ref": f"#/$defs/{name}"}
    raise ContractError(f"no JSON Schema for type {tp!r}")
