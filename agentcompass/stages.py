"""The stages of an evaluation, each declared once.

A stage is one rule of the workflow (``rules/<name>.smk``) and the files it
writes. Its row here says everything the rest of the code needs to know of
it: where its files go (``scope``: once per request, once per attempt, once
per shard, or once per request after every attempt), their names, which
stages' files it is built from, its version (bump it when the stage's
behaviour changes: Snakemake then builds its files again), the resources a
job of it holds, the function that builds it and the function that says
what it reads (its fingerprint, a rule param).

Targets, fingerprints, reuse, shards, resources, events, recovery, the file
schemas, ``agentcompass status`` and ``agentcompass diff`` all read this
table; ``tests/unit/test_stage_table.py`` checks it against the rules, in
both directions. Adding a stage is a rule file, a row here, its body and
its test (docs/development.md, Writing a stage).

This module imports nothing of the package: every part may read it.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from functools import cache
from typing import Any, Callable

# Where a stage's files go, and how many jobs build them.
REQUEST = "request"  # once per request, in its run folder
ATTEMPT = "attempt"  # once per attempt, in attempts/<task>/<n>/
SHARD = "shard"  # once per slice of a large request, in shards/<k>/ (its inner run builds the attempts)
SUMMARY = "summary"  # once per request, from every attempt's files
TASK = "task"  # once per task of a request, in preflight/ (only when execution.preflight asks for it)
SCOPES = (REQUEST, TASK, ATTEMPT, SHARD, SUMMARY)

# What a job may hold while it runs (agentcompass.pipeline.resources).
TASK_SLOT = "task"  # one of execution.task_concurrency, and one of its environment's slots
MODEL = "model"  # a unit of the Model endpoint's cap
JUDGE = "judge"  # a unit of each endpoint the Benchmark calls while it scores


@dataclass(frozen=True)
class Output:
    """One file of a stage: its name in the rule, its path in the stage's folder, and its
    contract (``module:Type``; the file validates against ``schemas/<kind>.schema.json``)."""

    name: str
    file: str
    kind: str | None = None
    contract: str | None = None
    # named when a person is told what the stage writes (``Stage.shown``); not a file written beside its result
    shown: bool = True


@dataclass(frozen=True)
class Stage:
    name: str
    scope: str
    doc: str
    outputs: tuple[Output, ...]
    # the rule's inputs: (its name in the rule, the stage whose file it is, that file's name)
    inputs: tuple[tuple[str, str, str], ...] = ()
    # every stage whose files this one reads (its inputs, and the request's files it reads a slice of)
    built_from: tuple[str, ...] = ()
    # what of the config it reads, in words (``agentcompass diff`` finds the fields themselves)
    reads: str = ""
    version: str = "1"
    # its rule's params, by name: what the stage reads, so a change of it rebuilds the stage's files
    params: tuple[str, ...] = ("depends",)
    claims: tuple[str, ...] = ()
    # ``module:function`` building the stage from its one argument (``pipeline.jobs.RequestJob``,
    # ``AttemptJob`` or ``ShardJob``)
    body: str = ""
    # ``module:function`` of what the stage reads (a pure function of the request, and of the task and
    # its plan for an attempt stage); the rule's params are computed from it
    fingerprint: str = ""
    checkpoint: bool = False
    # a Benchmark parameter, or a BenchmarkPlan field, may say it is read by this stage alone
    reads_benchmark_params: bool = False
    reads_plan_fields: bool = False
    # the texts its rule's run: block was recorded with before it called the one entry point:
    # Snakemake compares a rule's recorded code with its text, and these are the same code
    recorded_code: tuple[str, ...] = field(default=(), repr=False)
    # a task stage's folder in the run folder: its files are named by the task (``{task}``)
    folder: str = ""

    @property
    def files(self) -> tuple[str, ...]:
        return tuple(o.file for o in self.outputs)

    @property
    def shown(self) -> str:
        """Its files as a person names them: ``plans.json and run_info.json``, ``report/index.html``."""
        prefix = f"{self.folder}/" if self.folder else ""
        files = [prefix + o.file.replace("{task}", "<task>") for o in self.outputs
                 if o.shown and not o.file.endswith(".svg")]
        return " and ".join(files)

    def output(self, name: str) -> Output:
        for out in self.outputs:
            if out.name == name:
                return out
        raise KeyError(f"stage {self.name!r} has no output {name!r}")

    def kind(self, name: str | None = None) -> str:
        """The file kind of its output ``name`` (its first when None): the schema it validates against."""
        out = self.output(name) if name else self.outputs[0]
        if out.kind is None:
            raise KeyError(f"stage {self.name!r}: its output {out.name!r} is not a contract's file")
        return out.kind

    def resolve(self, what: str) -> Callable[..., Any]:
        """The function a ``module:function`` column names (imported when first needed)."""
        return resolve(getattr(self, what))


@cache
def resolve(reference: str) -> Callable[..., Any]:
    module, _, name = reference.partition(":")
    return getattr(importlib.import_module(module), name)


_PIPE = "agentcompass.pipeline"

STAGES: tuple[Stage, ...] = (
    Stage(
        "request", REQUEST, "request.json: the complete, redacted RunRequest.",
        outputs=(Output("request", "request.json", "request", "agentcompass.runtime.models:RunRequest"),),
        reads="the whole request but execution.task_concurrency",
        params=("request",),
        body=f"{_PIPE}.bodies:write_request", fingerprint=f"{_PIPE}.fingerprints:request_param",
        recorded_code=("        EVAL.write_request(wildcards, output, log)\n",),
    ),
    Stage(
        "tasks", REQUEST, "tasks.json: the selected TaskSpecs, in the Benchmark's order.",
        outputs=(Output("tasks", "tasks.json", "tasks", f"{_PIPE}.files:TasksFile"),),
        reads="the Benchmark's id, version and the params it reads for its tasks; its task files",
        params=("benchmark",), checkpoint=True, reads_benchmark_params=True,
        body=f"{_PIPE}.bodies:write_tasks", fingerprint=f"{_PIPE}.fingerprints:tasks_param",
        recorded_code=("        EVAL.write_tasks(wildcards, output, log)\n",),
    ),
    Stage(
        "plans", REQUEST,
        "plans.json: every attempt's ExecutionPlan, in bulk (planning is cheap), and run_info.json: "
        "provenance and the resolved_execution_plans audit view.",
        outputs=(Output("plans", "plans.json", "plans", f"{_PIPE}.files:PlansFile"),
                 Output("run_info", "run_info.json", "run_info", f"{_PIPE}.files:RunInfo")),
        inputs=(("tasks", "tasks", "tasks"),), built_from=("tasks",),
        reads="the Benchmark, Harness, Environment and execution settings, the recipes; the Model's id",
        params=("plan", "record"), checkpoint=True,
        body=f"{_PIPE}.bodies:write_plans", fingerprint=f"{_PIPE}.fingerprints:plans_param",
        recorded_code=("        EVAL.write_plans(wildcards, input, output, log)\n",),
    ),
    Stage(
        "preflight", TASK,
        "preflight/<task>.json: the task's reference solution run as the oracle harness runs it, in the "
        "task's environment and its evaluation environment; whether it passed, each run's verdict, and "
        "flaky when they disagree. Only with execution.preflight; a task that did not pass is quarantined.",
        outputs=(Output("preflight", "{task}.json", "preflight", f"{_PIPE}.files:PreflightRecord"),),
        built_from=("tasks", "plans"),
        reads="the task, its environment and evaluation environment, the Benchmark's version and the plan "
              "fields it evaluates with, the network policies, execution.preflight; never the Model or Harness",
        claims=(TASK_SLOT, JUDGE),
        body=f"{_PIPE}.preflight:preflight", fingerprint=f"{_PIPE}.preflight:preflight_param", folder="preflight",
    ),
    Stage(
        "prepare", ATTEMPT, "prepared.json of one attempt: the harness-facing input.",
        outputs=(Output("prepared", "prepared.json", "prepared", "agentcompass.runtime.models:PreparedTask"),),
        built_from=("tasks", "plans"),
        reads="the task, the Benchmark's version and the plan fields it reads to prepare",
        claims=(TASK_SLOT, MODEL), reads_benchmark_params=True, reads_plan_fields=True,
        body=f"{_PIPE}.bodies:prepare", fingerprint=f"{_PIPE}.fingerprints:prepare_param",
        recorded_code=("        EVAL.prepare(wildcards, input, output, log)\n",),
    ),
    Stage(
        "run", ATTEMPT, "output.json of one attempt: the harness's answer, status, usage and timings.",
        outputs=(Output("output", "output.json", "output", "agentcompass.runtime.models:RunResult"),),
        inputs=(("prepared", "prepare", "prepared"),), built_from=("prepare", "tasks", "plans"),
        reads="the Model (not its prices), the Harness and its plan, the run network, retries and timeout",
        claims=(TASK_SLOT, MODEL), reads_benchmark_params=True, reads_plan_fields=True,
        body=f"{_PIPE}.bodies:run", fingerprint=f"{_PIPE}.fingerprints:run_param",
        recorded_code=("        EVAL.run(wildcards, input, output, log)\n",),
    ),
    Stage(
        "evaluate", ATTEMPT, "result.json of one attempt (the scored RunResult) and the plan.json it used.",
        outputs=(Output("result", "result.json", "result", "agentcompass.runtime.models:RunResult"),
                 Output("plan", "plan.json", "plan", "agentcompass.runtime.models:ExecutionPlan", shown=False)),
        inputs=(("prepared", "prepare", "prepared"), ("output", "run", "output")),
        built_from=("run", "prepare", "tasks", "plans"),
        reads="the task, the Benchmark's version, the evaluation environment and the plan fields it scores with",
        claims=(TASK_SLOT, JUDGE), reads_benchmark_params=True, reads_plan_fields=True,
        body=f"{_PIPE}.bodies:evaluate", fingerprint=f"{_PIPE}.fingerprints:evaluate_param",
        recorded_code=("        EVAL.evaluate(wildcards, input, output, log)\n",),
    ),
    Stage(
        "shard", SHARD,
        "shards/<k>/shard.json: one slice of a request of more than runtime.shard_size attempts, "
        "built by an inner Snakemake in this folder (agentcompass.pipeline.shards).",
        outputs=(Output("shard", "shard.json", "shard", f"{_PIPE}.files:ShardRecord"),),
        built_from=("tasks", "plans"),
        reads="every param of its attempts' stages",
        params=("depends", "generation"), claims=(TASK_SLOT, MODEL, JUDGE),
        # its fingerprint digests its attempts' files and versions (fingerprints.AttemptFingerprints.shard)
        body=f"{_PIPE}.bodies:shard",
        recorded_code=("        EVAL.run_shard(wildcards, threads, resources, params, output, log)\n",),
    ),
    Stage(
        "metrics", SUMMARY, "metrics.json: the request's MetricResult and counts by status.",
        outputs=(Output("metrics", "metrics.json", "metrics", "agentcompass.runtime.models:MetricResult"),),
        built_from=("evaluate",),
        reads="every result.json, the Benchmark's version and the params it aggregates with, analyzers, prices",
        version="2", params=("versions",), reads_benchmark_params=True,
        body=f"{_PIPE}.bodies:metrics", fingerprint=f"{_PIPE}.fingerprints:metrics_param",
        recorded_code=("        EVAL.metrics(wildcards, input, output, log)\n",),
    ),
    Stage(
        "report", SUMMARY,
        "report/index.html (+ attempt.html, data/ and the charts beside it): the request's report, "
        "one folder that opens from file:// (agentcompass.report).",
        outputs=(Output("categories", "report/categories.svg"), Output("scores", "report/scores.svg"),
                 Output("errors", "report/errors.svg"), Output("tokens", "report/tokens.svg"),
                 Output("index", "report/index.html")),
        inputs=(("metrics", "metrics", "metrics"), ("request", "request", "request")),
        built_from=("metrics", "request", "evaluate"),
        reads="metrics.json, request.json and every result.json; the report's code (its version)",
        params=("version",),
        body=f"{_PIPE}.bodies:report", fingerprint=f"{_PIPE}.fingerprints:report_param",
        recorded_code=("        EVAL.jobs.report(wildcards, input, output, params, log)\n",),
    ),
)

BY_NAME: dict[str, Stage] = {s.name: s for s in STAGES}
# the rules of the workflow: every stage, and the default target
RULES: tuple[str, ...] = ("all", *BY_NAME)


def stage(name: str) -> Stage:
    try:
        return BY_NAME[name]
    except KeyError:
        raise KeyError(f"no stage {name!r}; the stages are {', '.join(BY_NAME)}") from None


def of_scope(*scopes: str) -> tuple[Stage, ...]:
    return tuple(s for s in STAGES if s.scope in scopes)


def names(*scopes: str) -> tuple[str, ...]:
    return tuple(s.name for s in (of_scope(*scopes) if scopes else STAGES))


ATTEMPT_STAGES: tuple[str, ...] = names(ATTEMPT)
# the stage that finishes an attempt: the one writing its result (kind ``result``), which
# metrics, the report, status and the readers of a run read
LAST_ATTEMPT_STAGE: str = next(s.name for s in of_scope(ATTEMPT) for o in s.outputs if o.kind == "result")
# the attempt stages an attempt may start from in an invocation (its events): those up to its result
STARTING_STAGES: tuple[str, ...] = ATTEMPT_STAGES[: ATTEMPT_STAGES.index(LAST_ATTEMPT_STAGE) + 1]
# the attempt stages that begin an attempt: none of them starts once a budget is spent (agentcompass.spend);
# the stage that finishes it does, for an attempt in flight
BUDGETED_STAGES: tuple[str, ...] = ATTEMPT_STAGES[: ATTEMPT_STAGES.index(LAST_ATTEMPT_STAGE)]
# stages a Benchmark parameter may be marked as read by (``runtime.config.field(stage=...)``)
PARAM_STAGES: tuple[str, ...] = tuple(s.name for s in STAGES if s.reads_benchmark_params)
# stages a BenchmarkPlan field may be marked as read by (``plan_field(stage=...)``)
PLAN_STAGES: tuple[str, ...] = tuple(s.name for s in STAGES if s.reads_plan_fields)
# the contract of every file kind: a <kind>.json validates against schemas/<kind>.schema.json
CONTRACTS: dict[str, str] = {o.kind: o.contract for s in STAGES for o in s.outputs if o.kind and o.contract}


def writer_of(file: str) -> Stage:
    """The stage that writes ``file`` (a name of the stage's folder, e.g. ``output.json``)."""
    for s in STAGES:
        if file in s.files:
            return s
    raise KeyError(f"no stage writes {file!r}")
