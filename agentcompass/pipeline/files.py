"""The files the pipeline writes, each with its contract type and JSON Schema."""

from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Literal, cast

import fastjsonschema

from agentcompass import PROJECT_ROOT
from agentcompass.errors import AgentCompassError
from agentcompass._util.jsonio import canonical_json, write_text_atomic
from agentcompass.secrets import Scrubber
from agentcompass.layout import PLAN_LIST
from agentcompass.stages import CONTRACTS, STARTING_STAGES, resolve, stage, where
from agentcompass.runtime.models import (
    BenchmarkPlan,
    Contract,
    ExecutionPlan,
    HarnessPlan,
    RequestOutcome,
    TaskSpec,
    TaskStatus,
)
from agentcompass.runtime.models.codec import json_schema

SCHEMA_DIR = PROJECT_ROOT / "schemas"


@dataclass
class TasksFile(Contract):
    """tasks.json: the selected TaskSpecs of one request, in the Benchmark's order."""

    request_name: str
    benchmark_id: str
    tasks: list[TaskSpec]


@dataclass
class PlansFile(Contract):
    """plans.json: every attempt's ExecutionPlan of one request, written in bulk."""

    request_name: str
    plans: list[ExecutionPlan]


@dataclass
class ComponentVersion(Contract):
    """A component id and the version of its behaviour."""

    id: str
    version: str


@dataclass
class RunInfo(Contract):
    """run_info.json: provenance and the resolved_execution_plans audit view."""

    request_name: str
    namespace: str
    run_id: str
    benchmark: ComponentVersion
    harness: ComponentVersion
    environment: ComponentVersion
    model_id: str
    versions: dict[str, str]
    config_paths: list[str]
    num_tasks: int
    num_attempts: int
    resolved_execution_plans: dict[str, dict[str, Any]] = field(default_factory=dict)


@dataclass
class ShardRecord(Contract):
    """shards/<k>/shard.json: one slice of a large request, built by an inner Snakemake."""

    request_name: str
    shard: int
    attempts: int
    first: str  # <task segment>/<attempt> of the slice's first attempt
    last: str
    counts: dict[str, int]  # result statuses of the slice
    host: str
    seconds: float
    slurm_job_id: str | None = None  # the SLURM job that built the slice; None when run locally


@dataclass
class PreflightRun(Contract):
    """One run of a task's reference solution: its verdict as the Benchmark scored it."""

    status: TaskStatus
    correct: bool | None = None
    score: float | None = None
    error: str | None = None
    error_stage: str | None = None
    seconds: float = 0.0


@dataclass
class PreflightRecord(Contract):
    """preflight/<task>.json: whether the task's reference solution passes in its own environments.

    ``passed`` only when every run was scored correct; ``flaky`` when some were and some were not.
    ``reason`` is what the task's attempts are quarantined for (None when it passed).
    """

    task_id: str
    mode: str
    passed: bool
    flaky: bool
    reason: Literal["preflight_failed", "preflight_flaky"] | None
    correct: bool | None  # the first run's verdict
    score: float | None
    error: str | None  # the first error of a run, if one had one
    runs: list[PreflightRun]
    seconds: float


# -- events.jsonl: one line per event (agentcompass.pipeline.events) ------------------------------


@dataclass(kw_only=True)
class Event(Contract):
    """What every event carries: when, which invocation, which process, which request."""

    time: str = field(metadata={"description": "when it happened: ISO 8601, UTC"})
    invocation: str = field(metadata={"description": "the invocation that wrote it: an outer run, its shards' "
                                                     "inner runs and its cluster jobs share one id"})
    host: str
    pid: int = field(metadata={"description": "the process that wrote it"})
    request: str = field(metadata={"description": "the request's name"})
    namespace: str
    run_id: str
    shard: int | None = field(default=None, metadata={
        "description": "the shard whose inner run wrote it (attempts_planned: the shard it counts); "
                       "null for the outer run"})


@dataclass(kw_only=True)
class RequestStarted(Event):
    """request_started: the invocation starts building the request (its first job is about to run)."""

    event: Literal["request_started"] = "request_started"
    benchmark: str
    harness: str
    model: str
    environment: str
    attempts_per_task: int


@dataclass(kw_only=True)
class AttemptsPlanned(Event):
    """attempts_planned: how many attempts this invocation builds (of one shard, when shard is set)."""

    event: Literal["attempts_planned"] = "attempts_planned"
    attempts: int
    exact: bool = field(metadata={"description": "false for the outer run's count of a shard that will run: "
                                                 "all of its slice; the shard's inner run then counts exactly"})


@dataclass(kw_only=True)
class ExecutionPlanResolved(Event):
    """execution_plan_resolved: the plan an attempt is built with, just before its attempt_started."""

    event: Literal["execution_plan_resolved"] = "execution_plan_resolved"
    task_id: str
    attempt: int
    plan: dict[str, Any] = field(metadata={
        "description": "the view of the plan run_info.json keeps: environment ids, the phases' network "
                       "policies, the evaluation environment mode, the applied Recipes"})


# the stages an attempt may start from, as the event's enum (a Literal of the stage table's names; mypy
# takes a Literal of literals only, and sees a str)
if TYPE_CHECKING:
    StartingStage = str
else:
    StartingStage = Literal[STARTING_STAGES]


@dataclass(kw_only=True)
class AttemptStarted(Event):
    """attempt_started: the first stage job of the attempt in this invocation starts."""

    event: Literal["attempt_started"] = "attempt_started"
    task_id: str
    attempt: int
    stage: StartingStage = field(metadata={
        "description": "the stage it starts from: prepare, run (its prepared.json is reused) or evaluate "
                       "(its output.json is reused: a regrade)"})


@dataclass(kw_only=True)
class AttemptFinished(Event):
    """attempt_finished: the attempt's result.json was written."""

    event: Literal["attempt_finished"] = "attempt_finished"
    task_id: str
    attempt: int
    status: TaskStatus
    score: float | None
    correct: bool | None
    error_stage: str | None = field(metadata={"description": "the stage that failed (load, run, evaluate); "
                                                            "null when the attempt completed"})
    stages: list[str] = field(metadata={"description": "the stages this invocation ran for it, in order"})
    usage: dict[str, float] = field(metadata={"description": "result.json's usage: calls, tokens, latency"})


@dataclass(kw_only=True)
class RequestFinished(Event):
    """request_finished: the invocation is over for the request; its outcome as the SDK returns it."""

    event: Literal["request_finished"] = "request_finished"
    outcome: RequestOutcome


EVENT_TYPES: dict[str, type] = {
    cast(str, cls.__dataclass_fields__["event"].default): cls
    for cls in (RequestStarted, AttemptsPlanned, ExecutionPlanResolved, AttemptStarted, AttemptFinished,
                RequestFinished)
}

# kind -> contract type, from the stage table; a file <kind>.json validates against schemas/<kind>.schema.json
FILE_KINDS: dict[str, type] = {kind: cast(type, resolve(contract)) for kind, contract in CONTRACTS.items()}

_OPEN = frozenset({BenchmarkPlan, HarnessPlan})


# kind -> the contract types of one line; each line of a <kind>s.jsonl file validates against
# schemas/<kind>.schema.json (exactly one of the types, told apart by their "event")
LINE_KINDS: dict[str, tuple[type, ...]] = {
    "event": tuple(EVENT_TYPES.values()),
}


def generate_schema(kind: str) -> dict[str, Any]:
    defs: dict[str, Any] = {}
    if kind in LINE_KINDS:
        types = LINE_KINDS[kind]
        root: dict[str, Any] = {"oneOf": [json_schema(t, defs, _OPEN) for t in types]}
        title, source = f"a line of {kind}s.jsonl", ", ".join(t.__name__ for t in types)
    else:
        root = json_schema(FILE_KINDS[kind], defs, _OPEN)
        title, source = f"{kind}.json", FILE_KINDS[kind].__name__
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": f"agentcompass/{kind}.schema.json",
        "title": title,
        "description": f"Generated from the {source} contract by scripts/generate_schemas.py; do not edit.",
        **root,
        "$defs": defs,
    }


def schema_path(kind: str) -> Path:
    return SCHEMA_DIR / f"{kind}.schema.json"


def write_schemas(directory: Path = SCHEMA_DIR) -> list[Path]:
    written = []
    for kind in (*FILE_KINDS, *LINE_KINDS):
        path = directory / f"{kind}.schema.json"
        path.write_text(canonical_json(generate_schema(kind)))
        written.append(path)
    return written


def _no_remote(uri: str):
    raise ValueError(f"schemas/ must not reference remote documents ({uri})")


@functools.lru_cache(maxsize=None)
def validator(kind: str):
    """The schema of ``kind`` compiled to Python code (fastjsonschema): ~20x jsonschema's speed.

    Every job validates what it writes, so this is on the hot path. The
    generated schemas use only draft-07 keywords, and refer to nothing remote.
    """
    schema = {k: v for k, v in json.loads(schema_path(kind).read_text()).items() if k != "$id"}
    schema["$schema"] = "http://json-schema.org/draft-07/schema#"
    return fastjsonschema.compile(schema, handlers={"http": _no_remote, "https": _no_remote})


class FileSchemaError(AgentCompassError, ValueError):
    """A payload that breaks its file's schema: a bug in the component that produced it."""


def validate_payload(kind: str, payload: Any) -> None:
    """Raise ``FileSchemaError`` if ``payload`` breaks the schema of ``kind``."""
    try:
        validator(kind)(payload)
    except fastjsonschema.JsonSchemaValueException as exc:
        raise FileSchemaError(f"{kind}.json would break schemas/{kind}.schema.json: {exc.message}") from None


# Set (to anything but "" or "0") to check every file against its schema as it is written, the
# per-attempt ones too; the test suite does (tests/conftest.py).
VALIDATE_WRITES_ENV = "AGENTCOMPASS_VALIDATE_WRITES"

# The files written once per attempt (prepared.json, output.json, result.json, plan.json) and
# plans.json, which holds one plan per attempt: this package writes them from contracts that
# checked their fields when they were made (``Contract.__post_init__``), so checking each one
# again against its schema, tens of thousands of times a run, is left to the tests. What comes
# from outside (the config, a component's files, a task folder) is checked where it is read.
PER_ATTEMPT_KINDS = frozenset(
    {o.kind for s in where(in_shards=True) for o in s.outputs} | {stage(PLAN_LIST).kind("plans")})


def checks_writes_of(kind: str) -> bool:
    """Whether ``write_file`` checks a file of ``kind`` against its schema."""
    return kind not in PER_ATTEMPT_KINDS or os.environ.get(VALIDATE_WRITES_ENV, "") not in ("", "0")


def write_file(kind: str, path: str | Path, value: Contract | dict, secrets: Iterable[Any] = ()) -> Path:
    """Check a contract against its file schema (``checks_writes_of``), then write it canonically
    and atomically.

    ``secrets`` hold ``${VAR}`` references (strings, or the request and the plan as mappings) whose
    values must not reach the file (a harness may echo a key into an error message): each value, and
    each value this process resolved, is written as its reference. The payload is scrubbed as values,
    before it is serialized, so the file is valid JSON whatever a value's characters.
    """
    payload = value.to_dict() if isinstance(value, Contract) else value
    if checks_writes_of(kind):
        validate_payload(kind, payload)
    return write_text_atomic(path, canonical_json(Scrubber(secrets).value(payload)))
