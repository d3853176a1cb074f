"""``RunRequest``: the complete input of one run, and its eight sections."""

from __future__ import annotations

import copy
import re
import urllib.parse
from dataclasses import dataclass, field
from typing import Any, Literal

from agentcompass.layout import MAX_NAME_CHARS

from .codec import OMIT_EMPTY, Contract, ContractError

NetworkMode = Literal["public", "none"]
EvaluationMode = Literal["task", "fresh"]
Retention = Literal["never", "on_failure", "always"]

ENV_REF = re.compile(r"^\$\{([A-Za-z_][A-Za-z0-9_]*)\}$")
# http:// or https://, a host, then anything without spaces, or one that starts with a ${VAR}
# reference, resolved and checked by the job that calls the model (the same pattern as config.schema.yaml)
BASE_URL = re.compile(r"^(https?://[^\s/?#]+|\$\{[A-Za-z_][A-Za-z0-9_]*\})[^\s]*$")
SLUG = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
# an HTTP header name (RFC 9110 token), and the names whose value is a credential
HEADER_NAME = re.compile(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]+$")
SECRET_HEADER = re.compile(r"authorization|key|token|secret|password|cookie", re.IGNORECASE)
ANY_REF = re.compile(r"\$\{[A-Za-z_][A-Za-z0-9_]*\}")


def base_url_problem(url: str) -> str | None:
    """What is wrong with an endpoint URL without ``${VAR}`` references, or None: the scheme, the
    host and the port (1 to 65535) are checked as the HTTP client will read them."""
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port  # raises for a port that is no number or out of range
    except ValueError as exc:
        return f"it is not a valid URL ({exc})"
    if parts.scheme not in ("http", "https"):
        return f"its scheme must be http or https, not {parts.scheme!r}"
    if not parts.hostname:
        return "it has no host"
    if port == 0:
        return "its port must be 1 to 65535, not 0"
    if any(ord(c) < 0x21 or ord(c) == 0x7f for c in url):
        return "it holds a space or a control character"
    return None


def _literal_password(url: str) -> bool:
    """Whether ``url`` carries a password that is not a ``${VAR}`` reference."""
    try:
        password = urllib.parse.urlsplit(url).password
    except ValueError:
        return False  # reported as a malformed URL
    return password is not None and password != "" and not ENV_REF.fullmatch(password)


BASE_URL_FIX = "write it as http://HOST:PORT/PATH with a port of 1 to 65535, e.g. http://127.0.0.1:8000/v1"


def _require_slug(value: str, where: str) -> None:
    if not SLUG.match(value):
        raise ContractError(
            f"{where} must be a path-safe name (letters, digits, '.', '_', '-'; "
            f"not starting with '.' or '-'), got {value!r}"
        )
    if len(value) > MAX_NAME_CHARS:
        raise ContractError(
            f"{where} is {len(value)} characters long, and a name of a results folder may have at most "
            f"{MAX_NAME_CHARS}; give a shorter one (it begins {value[:40]!r})"
        )


@dataclass
class NetworkPolicy(Contract):
    """Network access of one phase (baseline, run or evaluation)."""

    mode: NetworkMode = "public"


@dataclass
class ModelPricing(Contract):
    """What the Model's tokens cost, in US dollars per million; read only by the metrics stage."""

    input_per_million: float
    output_per_million: float

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("input_per_million", "output_per_million"):
            value = getattr(self, name)
            if not (0 <= value < float("inf")):
                raise ContractError(f"model.pricing.{name} must be a number of US dollars of at least 0, got {value!r}")


@dataclass
class ModelSpec(Contract):
    """An OpenAI-compatible endpoint. A value in a request, never a registry entry."""

    id: str = "none"
    base_url: str | None = None
    api_key: str | None = None
    # what the endpoint speaks (docs/models.md, "Protocols"): chat completions, Anthropic's Messages API or
    # OpenAI's Responses API; only the harnesses whose agent speaks it (BaseHarness.model_protocols) may call it
    protocol: Literal["openai_chat", "anthropic", "openai_responses"] = "openai_chat"
    params: dict[str, Any] = field(default_factory=dict)
    # extra HTTP headers of every model request; a credential's value holds a ${VAR} reference
    headers: dict[str, str] = field(default_factory=dict)
    key_wrapping: bool = False
    # prices change the cost in metrics.json and nothing else (agentcompass.pipeline.reuse.model_view)
    pricing: ModelPricing | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.id:
            raise ContractError("ModelSpec.id must not be empty (use 'none' for no model)")
        if self.base_url is not None and not BASE_URL.match(self.base_url):
            raise ContractError(
                f"ModelSpec.base_url must be an http:// or https:// URL with a host, such as "
                f"http://127.0.0.1:8000/v1, got {self.base_url!r}"
            )
        if self.base_url is not None and _literal_password(self.base_url):
            raise ContractError(
                "model.base_url holds a password of its own (user:password@host): it would be written into "
                "request.json and every plan; write the password as a reference, user:${VAR}@host, or give "
                "the key as api_key: '${VAR}'"
            )
        problem = None if self.base_url is None or ANY_REF.search(self.base_url) else base_url_problem(self.base_url)
        if problem:
            raise ContractError(f"model.base_url {self.base_url!r}: {problem}; {BASE_URL_FIX}")
        if self.protocol == "anthropic" and self.base_url and self.base_url.rstrip("/").endswith("/v1"):
            raise ContractError(
                f"model.base_url {self.base_url!r} ends in /v1, and an anthropic Model's calls are /v1/messages "
                "under it: give the host alone, such as https://api.anthropic.com"
            )
        if self.api_key is not None and not ENV_REF.match(self.api_key):
            raise ContractError(
                "ModelSpec.api_key must name an environment variable as '${VAR}'; "
                "a literal key would be written into results"
            )
        for name, value in self.headers.items():
            if not HEADER_NAME.match(name):
                raise ContractError(f"ModelSpec.headers: {name!r} is not an HTTP header name")
            if SECRET_HEADER.search(name) and not ANY_REF.search(value):
                raise ContractError(
                    f"ModelSpec.headers.{name} carries a credential, so its value must hold a '${{VAR}}' "
                    f"reference such as 'Bearer ${{MY_TOKEN}}'; a literal one would be written into results"
                )

    @property
    def api_key_env(self) -> str | None:
        """The environment variable holding the key, or None."""
        found = ENV_REF.match(self.api_key) if self.api_key else None
        return found.group(1) if found else None  # a key is a reference: checked on construction

    @property
    def is_none(self) -> bool:
        return self.id == "none"


@dataclass
class BenchmarkSpec(Contract):
    """Benchmark id and its parameters."""

    id: str
    params: dict[str, Any] = field(default_factory=dict)


@dataclass
class HarnessSpec(Contract):
    """Harness id and its parameters; ``id='none'`` selects a harness-free Benchmark."""

    id: str
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def is_none(self) -> bool:
        return self.id == "none"


@dataclass
class EnvironmentSpec(Contract):
    """Environment provider id, provider params, phase network policies, evaluation mode."""

    id: str = "host_process"
    params: dict[str, Any] = field(default_factory=dict)
    baseline_network: NetworkPolicy | None = None
    run_network: NetworkPolicy | None = None
    evaluation_network: NetworkPolicy | None = None
    evaluation_environment_mode: EvaluationMode | None = None
    # the tool keys ("claude-code@2.1.328") the environment installs and mounts read-only at open: the
    # harness's (BaseHarness.tools), set by the planner; left out of a plan while empty
    tools: list[str] = field(default_factory=list, metadata={OMIT_EMPTY: True, "description": (
        "Tool keys (name@version) installed from the tool cache and mounted read-only in the session.")})

    def copy(self) -> "EnvironmentSpec":
        return copy.deepcopy(self)


CacheMode = Literal["off", "on", "refresh", "replay"]


@dataclass
class PreflightSpec(Contract):
    """The preflight stage: each task's reference solution run ``runs`` times before any attempt of it.

    A task whose preflight did not pass (or whose runs disagree) is quarantined: its attempts
    open no environment and call no model.
    """

    mode: Literal["oracle"] = "oracle"
    runs: int = 1

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.runs < 1:
            raise ContractError("PreflightSpec.runs must be at least 1")


# what an attempt's limits and a run's budget count: each name as usage counts it (calls, tokens) or
# results.cost_usd prices it (agentcompass.spend)
LIMIT_NAMES = ("calls", "prompt_tokens", "completion_tokens", "total_tokens", "cost_usd")
BUDGET_NAMES = ("cost_usd", "total_tokens")


def _check_amounts(spec: Contract, where: str, names: tuple[str, ...]) -> None:
    for name in names:
        value = getattr(spec, name)
        if value is None:
            continue
        if isinstance(value, bool) or not (0 < value < float("inf")):
            raise ContractError(f"{where}.{name} must be a number above 0 (or left out: no limit), got {value!r}")


@dataclass
class LimitsSpec(Contract):
    """What one stage of one attempt may spend (agentcompass.spend): a model call past a limit is refused and
    the attempt ends with the ``limit`` class. Counted over every call answered, the call cache's too, so a
    replay makes the same decisions; cost at ``model.pricing``."""

    calls: int | None = field(default=None, metadata={"description": "Model calls answered."})
    prompt_tokens: int | None = field(default=None, metadata={"description": "Prompt (input) tokens."})
    completion_tokens: int | None = field(default=None, metadata={"description": "Completion (output) tokens."})
    total_tokens: int | None = field(default=None, metadata={"description": "Prompt and completion tokens."})
    cost_usd: float | None = field(default=None, metadata={"description": (
        "US dollars at model.pricing (which it needs).")})

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_amounts(self, "execution.limits", LIMIT_NAMES)

    def set(self) -> dict[str, float]:
        """The limits given, by name."""
        return {name: getattr(self, name) for name in LIMIT_NAMES if getattr(self, name) is not None}


@dataclass
class BudgetSpec(Contract):
    """What a run may pay (agentcompass.spend): once it is spent no new attempt starts. Counted over the calls
    sent (never those the call cache answered), from a ledger every process of the run shares."""

    cost_usd: float | None = field(default=None, metadata={"description": (
        "US dollars at model.pricing (which it needs).")})
    total_tokens: int | None = field(default=None, metadata={"description": "Prompt and completion tokens."})

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_amounts(self, "budget", BUDGET_NAMES)
        if self.cost_usd is None and self.total_tokens is None:
            raise ContractError("a budget must give cost_usd, total_tokens or both (leave it out: no budget)")


@dataclass
class ExecutionSpec(Contract):
    """Concurrency, attempts, Recipes, analysis, retention and the runtime retry policy."""

    # attempt jobs at once across the invocation; None: as many as --cores allows
    task_concurrency: int | None = None
    attempts: int = 1
    max_retries: int = 0
    task_timeout: float | None = None
    enabled_recipes: list[str] = field(default_factory=list)
    analyzers: list[str] = field(default_factory=list)
    retain_environments: Retention = "never"
    # None: no preflight stage (the default: the request's jobs and files are as they were without it)
    preflight: PreflightSpec | None = None
    # the call cache's mode (agentcompass.callcache): what is paid, never what a file holds, so it is no param
    # of any file, and plans and request.json leave it out; None is off
    cache: CacheMode | None = field(default=None, metadata={OMIT_EMPTY: True, "description": (
        "The call cache: off, on (read and write), refresh (write only) or replay (read only).")})
    # what each stage of an attempt may spend: part of the attempt's plan (a limit changes what it does)
    limits: LimitsSpec | None = field(default=None, metadata={OMIT_EMPTY: True, "description": (
        "What each stage of an attempt may spend: a call past a limit is refused and the attempt ends with the "
        "limit class.")})
    # what the request may pay, over every run of it: what is paid, never what a file holds (no param)
    budget: BudgetSpec | None = field(default=None, metadata={OMIT_EMPTY: True, "description": (
        "What the request may pay over all its runs; once spent no new attempt starts (exit status 5).")})

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.task_concurrency is not None and self.task_concurrency < 1:
            raise ContractError("ExecutionSpec.task_concurrency must be at least 1 (or unset: as many as --cores allows)")
        if self.attempts < 1:
            raise ContractError("ExecutionSpec.attempts must be at least 1")
        if self.max_retries < 0:
            raise ContractError("ExecutionSpec.max_retries must not be negative")
        if self.task_timeout is not None and not (0 < self.task_timeout < float("inf")):
            raise ContractError("ExecutionSpec.task_timeout must be positive")


@dataclass
class RunRuntimeSpec(Contract):
    """Result reuse for this request: with ``reuse`` off the request recomputes."""

    reuse: bool = True


@dataclass
class OutputSpec(Contract):
    """Where the request's files go: ``results/<namespace>/<run_id>/``."""

    namespace: str = "default"
    run_id: str | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        _require_slug(self.namespace, "output.namespace")
        if self.run_id is not None:
            _require_slug(self.run_id, "output.run_id")


@dataclass
class ScannerSpec(Contract):
    """A transcript scanner selected for a request (the scan stage, scan.json): its id and its parameters."""

    id: str
    params: dict[str, Any] = field(default_factory=dict)


@dataclass
class RunMetadata(Contract):
    """Where the request came from: config files, request name, trusted Recipe dirs."""

    request_name: str = "default"
    config_paths: list[str] = field(default_factory=list)
    recipe_dirs: list[str] = field(default_factory=list)


@dataclass
class RunRequest(Contract):
    """The complete input of one run."""

    model: ModelSpec
    benchmark: BenchmarkSpec
    harness: HarnessSpec
    environment: EnvironmentSpec = field(default_factory=EnvironmentSpec)
    execution: ExecutionSpec = field(default_factory=ExecutionSpec)
    runtime: RunRuntimeSpec = field(default_factory=RunRuntimeSpec)
    output: OutputSpec = field(default_factory=OutputSpec)
    metadata: RunMetadata = field(default_factory=RunMetadata)
    # None (the default): no scan stage, and the request's jobs and files are as they were without it
    scanners: list[ScannerSpec] | None = field(default=None, metadata={OMIT_EMPTY: True, "description": (
        "The transcript scanners each attempt's scan.json holds (the scan stage); unset: no scan stage.")})

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.scanners is not None:
            ids = [s.id for s in self.scanners]
            if not ids:
                raise ContractError("RunRequest.scanners must name at least one scanner (or be left out: no scan)")
            if len(set(ids)) != len(ids):
                raise ContractError(f"RunRequest.scanners names a scanner twice: {ids}")
        for where, spec in (("limits", self.execution.limits), ("budget", self.execution.budget)):
            if spec is not None and spec.cost_usd is not None and self.model.pricing is None:
                raise ContractError(
                    f"execution.{where}.cost_usd counts dollars at the Model's prices, and model {self.model.id!r} "
                    "declares none. Fix: give the model pricing: {input_per_million: ..., output_per_million: ...}, "
                    f"or set execution.{where}.total_tokens instead")

    @property
    def run_id(self) -> str:
        return self.output.run_id or self.metadata.request_name

    @property
    def namespace(self) -> str:
        return self.output.namespace
