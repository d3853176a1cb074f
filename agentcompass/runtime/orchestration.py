"""Resolve a run config into ordered, complete RunRequests: the one place that builds them."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any, Callable

from .base import BaseBenchmark, BaseEnvironment, BaseHarness, HarnessFreeBenchmark
from .config.fields import ConfigError
from .config.loader import RunConfig, config_error, deep_merge
from .dependencies import missing_dependencies
from .models import (
    BenchmarkSpec,
    ContractError,
    EnvironmentSpec,
    ExecutionSpec,
    HarnessSpec,
    ModelSpec,
    Orchestration,
    OutputSpec,
    ResolvedRuntimeOptions,
    RunMetadata,
    RunRequest,
    RunRuntimeSpec,
    ScannerSpec,
)
from .models.codec import from_dict
from .recipes import build_run_recipe_registry
from .registry import ANALYZERS, BENCHMARKS, ENVIRONMENTS, HARNESSES, SCANNERS
from agentcompass.layout import MAX_NAME_CHARS

from .models.request import BASE_URL_FIX, base_url_problem
from agentcompass.secrets import references, resolve_secret

_PHASE_FIELDS = ("baseline_network", "run_network", "evaluation_network")


def _component(ref: Any) -> tuple[str | None, dict[str, Any]]:
    """A component reference (``id`` or ``{id, params}``) as (id, params)."""
    if ref is None:
        return None, {}
    if isinstance(ref, str):
        return ref, {}
    return ref.get("id"), dict(ref.get("params") or {})


def _environment(ref: Any) -> dict[str, Any]:
    if ref is None:
        return {}
    if isinstance(ref, str):
        return {"id": ref}
    out = dict(ref)
    for phase in _PHASE_FIELDS:
        if isinstance(out.get(phase), str):
            out[phase] = {"mode": out[phase]}
    return out


def _params(config: dict, table: str, cid: str, *layers: tuple[str | None, dict]) -> dict:
    """Component params: table entry -> each layer whose id matches (or is unset)."""
    params = dict(config.get(table, {}).get(cid) or {})
    for layer_id, layer_params in layers:
        if layer_id in (None, cid):
            params = deep_merge(params, layer_params)
    return params


def _slug(value: str) -> str:
    """A request name made of ids: path-safe, and cut (with a hash of the whole) to fit a folder name."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", value).strip("-.") or "run"
    if len(slug) > MAX_NAME_CHARS:
        digest = hashlib.sha256(value.encode("utf-8", "surrogateescape")).hexdigest()[:12]
        slug = f"{slug[:MAX_NAME_CHARS - 13].rstrip('-.')}-{digest}"
    return slug


def resolve_orchestration(
    config: RunConfig,
    *,
    task_concurrency: int | None = None,
    runtime_overrides: dict[str, Any] | None = None,
) -> Orchestration:
    """Every named request of ``config``, complete and validated, in declaration order.

    Component ids are checked against the registries as they are: load the components
    first (``agentcompass.plugins.load_components``), as the command, the SDK and the
    workflow do."""
    if not any(BENCHMARKS):
        raise ConfigError("no benchmark is registered: the components were not loaded. "
                          "Fix: call agentcompass.plugins.load_components() before resolve_orchestration")
    data = config.data
    requests = data.get("requests") or {}
    if not requests:
        raise config_error(
            config.source_of(()), ("requests",), "no requests are declared",
            "add 'requests: {NAME: {benchmark: ..., harness: ..., model: {id: ...}}}'",
        )
    defaults = data.get("defaults") or {}
    built = [
        _build_request(config, name, body or {}, defaults)
        for name, body in requests.items()
    ]
    runtime = resolve_runtime(config, runtime_overrides)
    concurrency = next(
        (
            value
            for value in (task_concurrency, data.get("task_concurrency"), (data.get("execution") or {}).get("task_concurrency"))
            if value is not None
        ),
        None,
    )
    if concurrency is not None and (isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1):
        raise ConfigError(f"task_concurrency must be a positive integer, got {concurrency!r}. Fix: pass a number of at least 1")
    if runtime.cache is not None:  # the command line's --cache, over every request's own
        for req in built:
            req.execution.cache = runtime.cache
    try:
        return Orchestration.from_requests(built, runtime, concurrency)
    except ContractError as exc:
        raise config_error(
            config.source_of(("requests",)), ("requests",), str(exc),
            "give one of them its own output.run_id or output.namespace",
        ) from None


def resolve_runtime(config: RunConfig, runtime_overrides: dict[str, Any] | None = None) -> ResolvedRuntimeOptions:
    """The config's ``runtime`` settings, validated (what a command that runs no request reads: ``cache``)."""
    runtime_data = {k: v for k, v in (config.data.get("runtime") or {}).items() if k != "reuse"}
    runtime_data = _shorthands(deep_merge(runtime_data, runtime_overrides or {}))  # its cache: on|off
    try:
        return from_dict(ResolvedRuntimeOptions, runtime_data, "runtime")
    except ContractError as exc:
        raise config_error(config.source_of(("runtime",)), ("runtime",), str(exc), "see schemas/config.schema.yaml") from None


def _build_request(config: RunConfig, name: str, body: dict, defaults: dict) -> RunRequest:
    data = config.data
    where = ("requests", name)

    def fail(field: str, problem: str, fix: str) -> ConfigError:
        path = where + (field,)
        source = config.source_of(path) if field in body else config.source_of(where)
        return config_error(source, path, problem, fix)

    # Components, each validated against its registry.
    ids = {}
    for field, registry, table in (
        ("benchmark", BENCHMARKS, "benchmarks"),
        ("harness", HARNESSES, "harnesses"),
    ):
        cid, _ = _component(body.get(field))
        default_id, _ = _component(defaults.get(field))
        cid = cid or default_id
        if not cid:
            raise fail(field, f"no {field} is selected", f"set '{field}: ID' (see 'agentcompass list {field}')")
        if not (field == "harness" and cid == "none") and cid not in registry:
            raise fail(field, f"unknown {field} id {cid!r}", f"use one of: {', '.join(registry)} (see 'agentcompass list {field}')")
        ids[field] = cid
    benchmark = BenchmarkSpec(
        id=ids["benchmark"],
        params=_params(data, "benchmarks", ids["benchmark"], _component(defaults.get("benchmark")), _component(body.get("benchmark"))),
    )
    harness = HarnessSpec(
        id=ids["harness"],
        params=_params(data, "harnesses", ids["harness"], _component(defaults.get("harness")), _component(body.get("harness"))),
    )
    env_default = _environment(defaults.get("environment"))
    env_body = _environment(body.get("environment"))
    env_id = env_body.get("id") or env_default.get("id") or "host_process"
    if env_id not in ENVIRONMENTS:
        raise fail("environment", f"unknown environment id {env_id!r}", f"use one of: {', '.join(ENVIRONMENTS)} (see 'agentcompass list environment')")
    env_fields = deep_merge(
        {k: v for k, v in env_default.items() if k not in ("id", "params")},
        {k: v for k, v in env_body.items() if k not in ("id", "params")},
    )
    env_params = _params(
        data, "environments", env_id,
        (env_default.get("id"), env_default.get("params") or {}),
        (env_id, env_body.get("params") or {}),
    )
    try:
        environment = from_dict(EnvironmentSpec, {"id": env_id, "params": env_params, **env_fields}, f"requests.{name}.environment")
        model = from_dict(ModelSpec, deep_merge(defaults.get("model") or {}, body.get("model") or {}), f"requests.{name}.model")
        execution = from_dict(
            ExecutionSpec,
            _shorthands(deep_merge(deep_merge(data.get("execution") or {}, defaults.get("execution") or {}),
                                            body.get("execution") or {})),
            f"requests.{name}.execution",
        )
        runtime_fields = {}
        if "reuse" in (data.get("runtime") or {}):
            runtime_fields["reuse"] = data["runtime"]["reuse"]
        runtime = from_dict(
            RunRuntimeSpec,
            deep_merge(deep_merge(runtime_fields, defaults.get("runtime") or {}), body.get("runtime") or {}),
            f"requests.{name}.runtime",
        )
        output = from_dict(OutputSpec, deep_merge(defaults.get("output") or {}, body.get("output") or {}), f"requests.{name}.output")
        metadata = RunMetadata(
            request_name=name,
            config_paths=config.config_paths,
            recipe_dirs=[str(Path(d).resolve()) for d in data.get("recipe_dirs") or []],
        )
        req = RunRequest(
            model=model, benchmark=benchmark, harness=harness, environment=environment,
            execution=execution, runtime=runtime, output=output, metadata=metadata,
            scanners=_scanners(body.get("scanners", defaults.get("scanners")), fail),
        )
    except ContractError as exc:
        raise config_error(config.source_of(where), where, str(exc), "correct the value (see schemas/config.schema.yaml)") from None
    _check_compatibility(config, name, req, fail)
    return req


def _scanners(refs: Any, fail: Callable[[str, str, str], ConfigError]) -> list[ScannerSpec] | None:
    """The request's ``scanners`` (each an id or ``{id, params}``), each checked against the registry and its
    params built; None (no scan stage) when there are none."""
    if not refs:
        return None
    specs = []
    for ref in refs:
        cid, params = _component(ref)
        if not cid or cid not in SCANNERS:
            raise fail("scanners", f"unknown scanner id {cid!r}",
                       f"use ids from: {', '.join(SCANNERS) or 'none'} (see 'agentcompass list scanner')")
        scanner = SCANNERS.get(cid)()
        try:
            scanner.build_config(params)
        except (ConfigError, ContractError) as exc:
            raise fail("scanners", str(exc), f"see 'agentcompass config docs scanner {cid}'") from None
        specs.append(ScannerSpec(id=cid, params=params))
    return specs


def _scanner_models(spec: ScannerSpec) -> list[ModelSpec]:
    """The Models the scanner ``spec`` selects calls (its params were built by ``_scanners``)."""
    scanner = SCANNERS.get(spec.id)()
    return scanner.models(scanner.build_config(spec.params))


def _shorthands(execution: dict) -> dict:
    """``preflight: oracle`` is ``preflight: {mode: oracle}``; ``cache: on`` and ``cache: off``, which YAML
    reads as true and false, are the modes they name."""
    if isinstance(execution.get("preflight"), str):
        execution = {**execution, "preflight": {"mode": execution["preflight"]}}
    if isinstance(execution.get("cache"), bool):
        execution = {**execution, "cache": "on" if execution["cache"] else "off"}
    return execution


def _check_compatibility(config: RunConfig, name: str, req: RunRequest, fail) -> None:
    """Build every component config now, so a bad parameter fails before any job runs."""
    benchmark = BENCHMARKS.get(req.benchmark.id)()
    if not re.match(r"^[A-Za-z0-9][A-Za-z0-9._-]*$", name) and req.output.run_id is None:
        raise fail("output", f"request name {name!r} is not path-safe", "rename the request or set output.run_id")
    if len(name) > MAX_NAME_CHARS and req.output.run_id is None:
        raise fail("output", f"request name {name[:40]!r}... is {len(name)} characters long, and it names the run's "
                             f"folder, which may have at most {MAX_NAME_CHARS}",
                   "rename the request, or set output.run_id (--run-id) to a shorter name")
    try:
        benchmark_config = benchmark.build_config(req)
    except (ConfigError, ContractError) as exc:
        raise _param_error(config, name, "benchmark", "benchmarks", req.benchmark.id, exc, fail)
    _check_dependencies("benchmark", benchmark, benchmark_config, fail)
    if req.harness.is_none:
        if not isinstance(benchmark, HarnessFreeBenchmark):
            raise fail("harness", f"harness 'none' needs a harness-free benchmark, and {req.benchmark.id!r} is not one", "select a harness (see 'agentcompass list harness')")
        needs_model = True
    else:
        harness = HARNESSES.get(req.harness.id)()
        try:
            harness_config = harness.build_config(req)
        except (ConfigError, ContractError) as exc:
            raise _param_error(config, name, "harness", "harnesses", req.harness.id, exc, fail)
        _check_dependencies("harness", harness, harness_config, fail)
        needs_model = harness.requires_model
        if needs_model and not req.model.is_none and req.model.protocol not in harness.model_protocols:
            raise fail("model", f"harness {req.harness.id!r} calls its Model in {' or '.join(harness.model_protocols)}, "
                                f"and model.protocol is {req.model.protocol!r}",
                       f"give a Model that speaks {harness.model_protocols[0]} (model.protocol: "
                       f"{harness.model_protocols[0]}), or a harness whose agent speaks {req.model.protocol}")
    if req.execution.preflight is not None and (
            req.harness.is_none or type(benchmark).reference_solution is BaseBenchmark.reference_solution):
        raise fail("execution", f"execution.preflight runs each task's reference solution, and benchmark "
                                f"{req.benchmark.id!r} has none (it does not define reference_solution"
                                f"{', and runs without a harness' if req.harness.is_none else ''})",
                   "leave execution.preflight unset for this benchmark, or give it a reference solution")
    if needs_model and req.model.is_none:
        raise fail("model", f"harness {req.harness.id!r} needs a model, but model.id is 'none'", "set model: {id: MODEL, base_url: URL, api_key: ${VAR}}")
    if needs_model and not req.model.base_url:
        caller = f"harness {req.harness.id!r}" if not req.harness.is_none else f"benchmark {req.benchmark.id!r}"
        raise fail(
            "model", f"{caller} calls the model {req.model.id!r}, but model.base_url is not set",
            "set model.base_url to its OpenAI-compatible endpoint, e.g. 'base_url: http://127.0.0.1:8000/v1' "
            "(--base-url on the command line)",
        )
    judges = benchmark.evaluation_models(req)
    for model in [*([req.model] if req.harness.is_none and needs_model else []), *judges]:
        if model.protocol != "openai_chat":
            caller = "its judge" if model in judges else "the model it calls itself"
            raise fail("benchmark" if model in judges else "model",
                       f"benchmark {req.benchmark.id!r} calls {caller} {model.id!r} in chat completions, and its "
                       f"protocol is {model.protocol!r}", "give that Model protocol: openai_chat")
    # the Models the request's scanners call (the judge scanner's): checked as the Benchmark's judges are
    scanning = [m for spec in req.scanners or () for m in _scanner_models(spec)]
    for model in scanning:
        if model.protocol != "openai_chat":
            raise fail("scanners", f"a scanner calls its judge {model.id!r} in chat completions, and its protocol "
                                   f"is {model.protocol!r}", "give that Model protocol: openai_chat")
    for where, model in (("model", req.model), *(("benchmark", m) for m in judges),
                         *(("scanners", m) for m in scanning)):
        if model.base_url and references(model.base_url):
            problem = base_url_problem(resolve_secret(model.base_url))
            if problem:
                raise fail(where, f"model.base_url {model.base_url!r}, with its ${{VAR}} references resolved "
                                  f"(their values are not shown): {problem}", BASE_URL_FIX)
    recipes = build_run_recipe_registry(req)
    for field, known in (("enabled_recipes", recipes), ("analyzers", ANALYZERS)):
        unknown = [i for i in getattr(req.execution, field) if i not in known]
        if unknown:
            raise fail(
                "execution", f"execution.{field} names unknown id(s) {unknown}",
                f"use ids from: {', '.join(known) or 'none'} (see 'agentcompass list {known.kind}')",
            )
    environment = ENVIRONMENTS.get(req.environment.id)()
    try:
        environment_config = environment.build_config(req.environment)
    except (ConfigError, ContractError) as exc:
        raise _param_error(config, name, "environment", "environments", req.environment.id, exc, fail)
    _check_dependencies("environment", environment, environment_config, fail)
    try:
        for phase in ("baseline", "run", "evaluation"):
            policy = getattr(req.environment, f"{phase}_network")
            if policy is not None:
                environment.resolve_network_policy(policy, phase)
    except (ConfigError, ContractError, ValueError) as exc:
        raise fail("environment", str(exc), "see 'agentcompass config docs environment " + req.environment.id + "'")


def _check_dependencies(
    kind: str, component: BaseBenchmark | BaseHarness | BaseEnvironment, built: Any, fail: Callable[[str, str, str], ConfigError],
) -> None:
    """A selected component whose optional package is missing fails here, naming the pip command."""
    missing = missing_dependencies(component.required_dependencies(built))
    if missing:
        modules = ", ".join(name for spec in missing for name in spec.missing())
        extras = ", ".join(repr(spec.extra) for spec in missing)
        raise fail(
            kind, f"{kind} {component.id!r} imports {modules} (optional extra {extras}), which is not installed",
            " and ".join(spec.pip for spec in missing) + " (in the Python that runs agentcompass)",
        )


def _param_error(config: RunConfig, name: str, kind: str, table: str, cid: str, exc: Exception, fail) -> ConfigError:
    """Blame the layer that set the bad parameter: the component table or the request."""
    fix = f"correct or remove it (see 'agentcompass config docs {kind} {cid}')"
    for key in getattr(exc, "names", []):
        in_request = config.data["requests"][name].get(kind)
        if isinstance(in_request, dict) and key in (in_request.get("params") or {}):
            path = ("requests", name, kind, "params", key)
            return config_error(config.source_of(path), path, str(exc), fix)
        in_table = (table, cid, key)
        if key in (config.data.get(table, {}).get(cid) or {}):
            return config_error(config.source_of(in_table), in_table, str(exc), fix)
    return fail(kind, str(exc), fix)


def single_request_layer(
    benchmark: str,
    harness: str,
    model: str,
    *,
    environment: str | None = None,
    benchmark_params: dict | None = None,
    harness_params: dict | None = None,
    environment_params: dict | None = None,
    base_url: str | None = None,
    api_key_env: str | None = None,
    model_params: dict | None = None,
    execution: dict | None = None,
    output: dict | None = None,
    reuse: bool | None = None,
    name: str | None = None,
    scanners: list | None = None,
) -> dict[str, Any]:
    """The one-request config layer that ``agentcompass run B H M`` and the SDK hand to Snakemake.

    Component params from explicit arguments override the selected config table
    entries; the Model comes from explicit arguments only.
    """
    name = name or _slug(f"{benchmark}-{harness}-{model}")
    model_fields = {
        key: value
        for key, value in (
            ("base_url", base_url),
            ("api_key", f"${{{api_key_env}}}" if api_key_env else None),
            ("params", model_params or None),
        )
        if value is not None
    }
    request: dict[str, Any] = {
        "benchmark": {"id": benchmark, "params": dict(benchmark_params or {})},
        "harness": {"id": harness, "params": dict(harness_params or {})},
        "model": {"id": model, **model_fields},
    }
    if environment or environment_params:
        request["environment"] = {"id": environment or "host_process", "params": dict(environment_params or {})}
    if execution:
        request["execution"] = {k: v for k, v in execution.items() if v is not None}
    if output:
        request["output"] = {k: v for k, v in output.items() if v is not None}
    if reuse is not None:
        request["runtime"] = {"reuse": reuse}
    if scanners:
        request["scanners"] = list(scanners)
    return {"requests": {name: request}}
