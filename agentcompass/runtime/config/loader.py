"""Run config loading: layers, ``deep_merge``, ``${VAR}`` checks, schema validation.

Layers, lowest precedence first: the user config, the nearest project
``configs/config.yaml``, each explicit config file in argument order, then
command-line overrides. Mappings merge by key; a later scalar or list
replaces the earlier value. ``requests`` and ``defaults`` are the one
exception: they are taken whole from the highest layer that declares
``requests``, so a config file that names its own requests runs exactly those.
"""

from __future__ import annotations

import copy
import functools
import json
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import jsonschema
import yaml

from agentcompass import PROJECT_ROOT

from agentcompass._util.display import visible
from agentcompass._util.jsonio import not_unicode
from agentcompass.secrets import references

from .fields import ConfigError, yaml_list

USER_CONFIG_ENV = "AGENTCOMPASS_USER_CONFIG"
PROJECT_CONFIG = Path("configs") / "config.yaml"
SCHEMA_DIR = PROJECT_ROOT / "schemas"

_WHOLE_REF = re.compile(r"^\$\{([A-Za-z_][A-Za-z0-9_]*)\}$")
# Component param tables, flat under a component id.
_COMPONENT_TABLES = ("benchmarks", "harnesses", "environments")
# Fields that only ever hold a reference (the schema requires one): an error never echoes them.
_SECRET_KEY = re.compile(r"(^|_)(api_key|key|token|secret|password)$")
# The keys that travel together from the highest layer that declares requests.
_REQUEST_KEYS = ("requests", "defaults")


def deep_merge(base: Any, override: Any) -> Any:
    """Merge ``override`` into a copy of ``base``: mappings by key, anything else replaced."""
    if isinstance(base, dict) and isinstance(override, dict):
        merged = {k: copy.deepcopy(v) for k, v in base.items()}
        for key, value in override.items():
            merged[key] = deep_merge(base[key], value) if key in base else copy.deepcopy(value)
        return merged
    return copy.deepcopy(override)


def is_secret_key(key: str) -> bool:
    return bool(_SECRET_KEY.search(str(key).lower()))


def env_ref(value: Any) -> str | None:
    """The variable name of a whole-field ``${VAR}`` reference, else None."""
    if isinstance(value, str):
        match = _WHOLE_REF.match(value)
        if match:
            return match.group(1)
    return None


@dataclass
class ConfigLayer:
    """One source of run config: a file path, or a label such as ``--config``."""

    source: str
    data: dict[str, Any]


@dataclass
class RunConfig:
    """The merged run config and the layers it came from (for error messages)."""

    data: dict[str, Any]
    layers: list[ConfigLayer] = field(default_factory=list)

    def source_of(self, path: tuple) -> str:
        """The highest-precedence layer that sets ``path`` (a tuple of keys)."""
        for layer in reversed(self.layers):
            node: Any = layer.data
            found = True
            for key in path:
                if isinstance(node, dict) and key in node:
                    node = node[key]
                else:
                    found = False
                    break
            if found:
                return layer.source
        return self.layers[-1].source if self.layers else "the run config"

    @property
    def config_paths(self) -> list[str]:
        """The config files read, absolute and resolved: a request records them, so the same
        file named two ways (``x.yaml``, ``$PWD/x.yaml``) is the same request."""
        return [str(Path(layer.source).resolve()) for layer in self.layers if Path(layer.source).is_file()]


def dotted(path: tuple | list) -> str:
    return ".".join(str(p) for p in path) if path else "(top level)"


def config_error(source: str, path: tuple | list, problem: str, fix: str) -> ConfigError:
    return ConfigError(f"{source}: field '{dotted(path)}': {problem}. Fix: {fix}")


def _reference_allowed(path: tuple) -> bool:
    """Whether a ``${VAR}`` may stand at ``path``: in the values a job uses, not in what shapes the workflow."""
    if len(path) >= 2 and path[0] in _COMPONENT_TABLES:
        return True  # a component's params, flat under its id
    if path[:1] == ("requests",):
        path = path[2:]
    elif path[:1] == ("defaults",):
        path = path[1:]
    else:
        return False
    if len(path) >= 2 and path[0] in ("benchmark", "harness", "environment"):
        return path[1] == "params"
    if len(path) >= 3 and path[0] == "scanners":  # a scanner's params (the judge scanner's model)
        return path[2] == "params"
    return len(path) >= 2 and path[0] == "model" and path[1] in ("api_key", "base_url", "headers", "params")


def _check_refs(node: Any, source: str, path: tuple = ()) -> None:
    """Check every ``${VAR}`` in a layer: allowed where it stands, its variable set. It stays a reference."""
    if isinstance(node, dict):
        for key, value in node.items():
            _check_refs(value, source, path + (key,))
        return
    if isinstance(node, list):
        for index, value in enumerate(node):
            _check_refs(value, source, path + (index,))
        return
    names = references(node)
    if not names:
        return
    if not _reference_allowed(path):
        raise config_error(
            source, path, f"'{node}' holds a ${{VAR}} reference, but this field steers the workflow itself "
            "and is written as it is",
            "write the value here; ${VAR} references belong in model.api_key, model.base_url, "
            "model.headers, model.params and component params, where the job that uses them resolves them",
        )
    for name in names:
        if name not in os.environ:
            raise config_error(
                source, path, f"environment variable {name} is not set",
                f"export {name}=... before running (it is read by the job that uses this field, "
                "and never written), or remove the reference",
            )
        if not_unicode(os.environ[name]) is not None:
            raise config_error(
                source, path, f"environment variable {name} holds bytes that are not UTF-8 (its value is not shown)",
                f"export {name} again with its value in UTF-8 (check the terminal's encoding with 'locale')",
            )


def _not_json(node: Any, path: tuple = ()) -> tuple[tuple, str] | None:
    """The first value that a JSON file cannot hold as it is, and why (YAML also reads dates, binary
    data and ``.nan``), else None."""
    if isinstance(node, dict):
        for key, value in node.items():
            found = _not_json(value, (*path, key))
            if found:
                return found
        return None
    if isinstance(node, list):
        for index, value in enumerate(node):
            found = _not_json(value, (*path, index))
            if found:
                return found
        return None
    if isinstance(node, float) and not math.isfinite(node):
        return path, f"{node!r} is not a number a JSON file can hold. Fix: give a finite number"
    if node is None or isinstance(node, (str, int, float)):
        return None
    return path, (f"YAML reads this value as {type(node).__name__} ({str(node)[:40]!r}), which a JSON file "
                  "cannot hold. Fix: quote it to give it as text")


def _check_data(data: Any, source: str) -> None:
    """Refuse what no results file can hold, naming its field: a value JSON has no form for, and text
    that is not valid Unicode (every file a run writes is UTF-8)."""
    found = _not_json(data)
    if found is not None:
        where, why = found
        raise ConfigError(f"{source}: field '{dotted(where)}': {why}")
    path = not_unicode(data)
    if path is None:
        return
    on_command_line = not Path(source).is_file()
    fix = ("give the value in UTF-8: a byte that is not UTF-8 reached the command line (check the "
           "terminal's encoding with 'locale')" if on_command_line else
           "save the file as UTF-8 and write the character itself instead of a lone surrogate escape "
           "(\\ud800 to \\udfff stand for no character alone)")
    raise config_error(source, tuple(visible(p) if isinstance(p, str) else p for p in path),
                       "holds text that is not valid Unicode (shown with its escapes)", fix)


# Model params the client cannot honour, and why: it reads one JSON reply and its first choice,
# and sets the call's own fields itself. Refused when the config is read.
UNSUPPORTED_PARAMS: dict[str, str] = {
    "stream": "the client reads one JSON reply, not a stream of events; leave 'stream' out (or set it to false)",
    "n": "the client reads the first choice only, so the others would be paid for and lost; leave 'n' out "
         "(or set it to 1), and sample again with more attempts (execution.attempts) instead",
    "model": "the request's model is model.id; set model.id instead",
    "messages": "the messages are the task's, set by the harness; remove it",
    "tools": "the tools are the task's, set by the harness; remove it",
}


def unsupported_param(name: str, value: Any) -> str | None:
    """Why the client cannot send model param ``name`` with ``value``; None when it can."""
    if name == "stream":
        return None if value is False or value is None else UNSUPPORTED_PARAMS[name]
    if name == "n":
        return None if value == 1 and not isinstance(value, bool) else UNSUPPORTED_PARAMS[name]
    return UNSUPPORTED_PARAMS.get(name)



def check_model_params(config: RunConfig) -> None:
    """Refuse model params the model client cannot honour, naming the file and field."""
    models: list[tuple[tuple[str, ...], Any]] = [(("defaults", "model"), (config.data.get("defaults") or {}).get("model"))]
    models += [(("requests", name, "model"), (request or {}).get("model"))
               for name, request in (config.data.get("requests") or {}).items() if isinstance(request, dict)]
    for where, model in models:
        params = model.get("params") if isinstance(model, dict) else None
        for key, value in (params or {}).items() if isinstance(params, dict) else ():
            why = unsupported_param(str(key), value)
            if why:
                path = (*where, "params", key)
                raise config_error(config.source_of(path), path, f"model param {key!r} cannot be honoured", why)


class _DuplicateKey(Exception):
    def __init__(self, key: Any, line: int, first_line: int) -> None:
        super().__init__(key)
        self.key, self.line, self.first_line = key, line, first_line


class _StrictLoader(yaml.SafeLoader):
    """PyYAML's safe loader, except that a key repeated in one mapping is an error.

    YAML forbids repeated keys, but PyYAML keeps the last one silently: a
    second ``r1:`` under ``requests:`` would replace the first request unseen.
    """

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, int] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue  # '<<' merges keys in; an explicit key may override them
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.get(key)
                except TypeError:  # an unhashable key: PyYAML reports it itself
                    continue
                if first is not None:
                    raise _DuplicateKey(key, key_node.start_mark.line + 1, first)
                seen[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep=deep)


_KINDS = {list: "a list", str: "a string", int: "a number", float: "a number", bool: "true or false"}


def read_layer(path: str | Path) -> ConfigLayer:
    path = Path(path)
    if not_unicode(str(path)) is not None:
        raise ConfigError(f"{visible(str(path))}: the config file's name is not UTF-8, and a request records the "
                          "names of its config files. Fix: rename the file (or a folder on its path) in UTF-8")
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: config file not found. Fix: check the path") from None
    except IsADirectoryError:
        raise ConfigError(f"{path}: is a folder, not a config file. Fix: name the YAML file in it") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not a text file (it is not UTF-8). Fix: give a YAML config file") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot be read ({exc.strerror}). Fix: check the path and its permissions") from None
    try:
        data = yaml.load(text, Loader=_StrictLoader)
    except _DuplicateKey as dup:
        raise ConfigError(
            f"{path}: line {dup.line}: key {dup.key!r} appears twice in the same mapping (first on line "
            f"{dup.first_line}), and YAML would keep only the last one. Fix: keep one {dup.key!r} "
            f"(merge the two, or rename one)"
        ) from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML ({exc}). Fix: correct the syntax") from None
    if data is None:
        raise ConfigError(
            f"{path}: the config file is empty. Fix: add the settings (e.g. 'requests: {{NAME: {{benchmark: ..., "
            f"harness: ..., model: {{id: ...}}}}}}'), or leave the file out"
        )
    return ConfigLayer(str(path), data)


def prepare_layer(layer: ConfigLayer) -> ConfigLayer:
    """Check one layer on its own (so errors name its file) and resolve its references."""
    if not isinstance(layer.data, dict):
        kind = _KINDS.get(type(layer.data), type(layer.data).__name__)
        raise config_error(
            layer.source, (), f"a run config is a mapping of keys, but this one is {kind}",
            "start the file with keys such as 'requests:' (see schemas/config.schema.yaml)",
        )
    if "models" in layer.data:
        raise config_error(
            layer.source, ("models",), "a 'models' section is not allowed: a Model is a value in a request",
            "move each model under 'requests.<name>.model' (or 'defaults.model') as "
            "{id, base_url, api_key: ${VAR}, params}",
        )
    _check_data(layer.data, layer.source)
    _check_refs(layer.data, layer.source)
    return layer


def user_config_path() -> Path | None:
    value = os.environ.get(USER_CONFIG_ENV)
    if value is not None:
        return Path(value) if value else None
    base = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    return base / "agentcompass" / "config.yaml"


def find_project_config(start: Path | None = None, fallback: Path | None = None) -> Path | None:
    """The nearest ``configs/config.yaml`` from ``start`` upward, else ``fallback``."""
    here = (start or Path.cwd()).resolve()
    for directory in (here, *here.parents):
        candidate = directory / PROJECT_CONFIG
        if candidate.is_file():
            return candidate
    return fallback if fallback and fallback.is_file() else None


def merge_layers(layers: list[ConfigLayer]) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for layer in layers:
        data = layer.data
        if "requests" in data:
            for key in _REQUEST_KEYS:
                merged.pop(key, None)
        merged = deep_merge(merged, data)
    return merged


def load_run_config(
    config_paths: Sequence[str | Path] = (),
    overrides: dict[str, Any] | None = None,
    *,
    start: Path | None = None,
    project_fallback: Path | None = None,
    include_user: bool = True,
    include_project: bool = True,
    overrides_source: str = "--config",
) -> RunConfig:
    """Read, check, merge and validate the run config layers."""
    raw: list[ConfigLayer] = []
    if include_user:
        user = user_config_path()
        if user and user.is_file():
            layer = read_layer(user)
            if isinstance(layer.data, dict) and "requests" in layer.data:
                raise config_error(
                    layer.source, ("requests",), "the user config may not declare requests",
                    "keep component params, execution and runtime defaults there, and "
                    "requests in a project or explicit config file",
                )
            raw.append(layer)
    if include_project:
        project = find_project_config(start, project_fallback)
        explicit = {Path(p).resolve() for p in config_paths}
        if project and project.resolve() not in explicit:
            raw.append(read_layer(project))
    raw.extend(read_layer(p) for p in config_paths)
    if overrides:
        raw.append(ConfigLayer(overrides_source, dict(overrides)))
    layers = [prepare_layer(layer) for layer in raw]
    config = RunConfig(merge_layers(layers), layers)
    validate_config(config)
    check_model_params(config)
    return config


@functools.lru_cache(maxsize=None)
def load_schema(name: str) -> dict[str, Any]:
    path = SCHEMA_DIR / name
    text = path.read_text()
    return yaml.safe_load(text) if path.suffix in (".yaml", ".yml") else json.loads(text)


def validate_config(config: RunConfig) -> None:
    """Validate the merged config against ``schemas/config.schema.yaml``."""
    schema = load_schema("config.schema.yaml")
    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(config.data), key=lambda e: (len(e.path), list(map(str, e.path))))
    if not errors:
        return
    error = jsonschema.exceptions.best_match(errors)
    path = tuple(error.absolute_path)
    if error.validator == "additionalProperties":
        extra = sorted(set(error.instance) - set(error.schema.get("properties", {})), key=str)
        known = sorted(error.schema.get("properties", {}))
        path = path + (extra[0],) if extra else path
        raise config_error(
            config.source_of(path), path, f"unknown field {extra[0] if extra else ''!r}".strip(),
            f"remove it or use one of: {', '.join(known)}",
        )
    if error.validator == "required":
        raise config_error(config.source_of(path), path, error.message, "add the missing field")
    if path and is_secret_key(str(path[-1])):
        # jsonschema's message repeats the value: never echo what may be a key
        raise config_error(
            config.source_of(path), path, "must be a whole-field '${VAR}' reference (the value is not shown)",
            "put the key in an environment variable and write '${VAR}'",
        )
    description = error.schema.get("description", "")
    fix = f"expected: {description}" if description else "see schemas/config.schema.yaml"
    if error.validator == "type":
        raise config_error(config.source_of(path), path, *_type_problem(path, error.instance, error.validator_value, fix))
    if error.validator == "maxLength" and isinstance(error.instance, str):
        raise config_error(config.source_of(path), path,
                           f"{error.instance[:40]!r}... is {len(error.instance)} characters long, more than the "
                           f"{error.validator_value} allowed", f"give a shorter value ({description or 'see schemas/config.schema.yaml'})")
    if error.validator == "pattern":
        raise config_error(config.source_of(path), path, f"{error.instance!r} is not of the expected form", fix)
    raise config_error(config.source_of(path), path, error.message, fix)


_JSON_TYPES = {
    "object": "a mapping", "array": "a list", "string": "a string", "integer": "a whole number",
    "number": "a number", "boolean": "true or false", "null": "null",
}


def _describe_value(value: Any) -> str:
    """A YAML value as a user would name it: ``the string '2'``, ``true``, ``a list``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null (nothing)"
    if isinstance(value, str):
        return f"the string {value!r}"
    if isinstance(value, (list, dict)):
        return f"{_JSON_TYPES['array' if isinstance(value, list) else 'object']} {json.dumps(value)[:60]}"
    return repr(value)


def _type_problem(path: tuple, value: Any, expected: Any, fix: str) -> tuple[str, str]:
    """(problem, fix) for a value of the wrong type: the type wanted, and the YAML that gives it."""
    wanted = [expected] if isinstance(expected, str) else list(expected)
    names = " or ".join(_JSON_TYPES.get(t, t) for t in wanted if t != "null")
    problem = f"must be {names}, got {_describe_value(value)}"
    key = str(path[-1]) if path else "value"
    if "array" in wanted and isinstance(value, str):
        return problem, f"write it as a YAML list: '{key}: {yaml_list(value)}'"
    if isinstance(value, str) and ({"integer", "number", "boolean"} & set(wanted)):
        try:
            parsed = yaml.safe_load(value)
        except yaml.YAMLError:
            parsed = None
        checks = {"integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
                  "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
                  "boolean": lambda v: isinstance(v, bool)}
        if any(t in checks and checks[t](parsed) for t in wanted):
            return problem, f"write it without quotes: '{key}: {value.strip()}'"
    return problem, fix
