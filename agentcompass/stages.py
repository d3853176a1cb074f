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

# Where a stage's files go, and how many jobs build them (a ``Scope`` row each, below).
REQUEST = "request"  # once per request, in its run folder
ATTEMPT = "attempt"  # once per attempt, in attempts/<task>/<n>/
SHARD = "shard"  # once per slice of a large request, in shards/<k>/ (its inner run builds the attempts)
SUMMARY = "summary"  # once per request, from every attempt's files
TASK = "task"  # once per task of a request, in the stage's folder (preflight/<task>.json)

# What a job may hold while it runs (agentcompass.pipeline.resources).
TASK_SLOT = "task"  # one of execution.task_concurrency, and one of its environment's slots
MODEL = "model"  # a unit of the Model endpoint's cap
JUDGE = "judge"  # a unit of each endpoint the Benchmark calls while it scores

# Set to "preflight" (by ``agentcompass check``): an invocation builds the request stages and each task's
# preflight, and no attempt (the workflow's targets; a request's outcome says so).
ONLY_ENV = "AGENTCOMPASS_ONLY_PREFLIGHT"


@dataclass(frozen=True)
class Scope:
    """Where the stages of a scope put their files, how many jobs build them, and what a job of them is.

    Each scope is declared once, here: the layout, the targets, the workflow, the jobs, ``status``
    and ``diff`` loop over these rows and never branch on a scope's name.
    """

    name: str
    doc: str
    # its folder below the run folder, a pattern of its wildcards ("" is the run folder itself);
    # ``{folder}`` is the stage's own ``folder`` column (a task stage's: ``preflight``)
    folder: str
    # the wildcards of its rules besides the request's (``ns`` and ``run_id``), in the folder's order
    wildcards: tuple[str, ...]
    # a failing job's log, in its folder: ``{stage}`` is the stage's name
    log: str
    # ``module:Class`` of the one argument its stages' bodies take (``agentcompass.pipeline.jobs``)
    job: str
    # one instance per request: its files are the run folder's
    per_request: bool = False
    # its stages are built after every attempt's last stage (from every attempt's files)
    after_attempts: bool = False
    # the scope whose slices stand for the attempts in a large request (an inner Snakemake builds each)
    slices_attempts: bool = False
    # built by a shard's inner run (a slice's own jobs); every other scope is the outer run's
    in_shards: bool = False
    # one instance per task: its files are named by the task, in the stage's own folder (``Stage.folder``)
    per_task: bool = False
    # the method of ``pipeline.targets.Targets`` listing a request's instances of the scope (their wildcards)
    instances: str = ""
    # the method of ``pipeline.workflow.EvaluationWorkflow`` making a stage's rule params
    params: str = ""

    @property
    def before_attempts(self) -> bool:
        """Its stages are built before any attempt's, and from none (``agentcompass check`` builds them alone)."""
        return not (self.in_shards or self.slices_attempts or self.after_attempts)

    @property
    def stages(self) -> tuple["Stage", ...]:
        """Its stages, in the stage table's order."""
        return of_scope(self.name)

    def folder_of(self, stage: "Stage") -> str:
        """The pattern of ``stage``'s folder below the run folder (its wildcards unfilled)."""
        return self.folder.format(folder=stage.folder, task="{task}", attempt="{attempt}", shard="{shard}")


_JOBS = "agentcompass.pipeline.jobs"

SCOPE_ROWS: tuple[Scope, ...] = (
    Scope(REQUEST, "once per request, in its run folder", "", (), "logs/{stage}.log", f"{_JOBS}:RequestJob",
          per_request=True, instances="run_instance", params="request_params"),
    Scope(TASK, "once per task of a request, in the stage's folder (preflight/<task>.json)", "{folder}", ("task",),
          "{task}.log", f"{_JOBS}:TaskJob", per_task=True, instances="task_instances", params="task_params_of"),
    Scope(ATTEMPT, "once per attempt, in attempts/<task>/<n>/", "attempts/{task}/{attempt}", ("task", "attempt"),
          "{stage}.log", f"{_JOBS}:AttemptJob", in_shards=True, instances="attempt_instances",
          params="attempt_params_of"),
    Scope(SHARD, "once per slice of a large request, in shards/<k>/; its inner run builds the slice's attempts",
          "shards/{shard}", ("shard",), "{stage}.log", f"{_JOBS}:ShardJob", slices_attempts=True,
          instances="shard_instances", params="shard_params"),
    Scope(SUMMARY, "once per request, from every attempt's files, in its run folder", "", (), "logs/{stage}.log",
          f"{_JOBS}:RequestJob", per_request=True, after_attempts=True, instances="run_instance",
          params="request_params"),
)
SCOPES: tuple[str, ...] = tuple(s.name for s in SCOPE_ROWS)
SCOPE_BY_NAME: dict[str, Scope] = {s.name: s for s in SCOPE_ROWS}


def scope(name: str) -> Scope:
    try:
        return SCOPE_BY_NAME[name]
    except KeyError:
        raise KeyError(f"no scope {name!r}; the scopes are {', '.join(SCOPE_BY_NAME)}") from None


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
    # ``module:function`` building the stage from its one argument (its scope's ``job``): the function
    # is in its scope's module of ``agentcompass.pipeline.bodies``
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
    # the request setting (a dotted path, ``execution.preflight``) without which the stage is not built:
    # it then has no files, and is no input of the stages after it; "" when it is always built
    when: str = ""

    def inputs_for(self, request: Any) -> tuple[tuple[str, str, str], ...]:
        """Its inputs built for ``request``: those of a stage with a ``when`` setting only with it set."""
        return tuple(i for i in self.inputs if BY_NAME[i[1]].built_for(request))

    def conditional_inputs(self) -> tuple[tuple[str, str, str], ...]:
        """Its inputs that exist only with a setting on (their stage's ``when``): the rule asks for them
        through a function (``unpack(EVAL.targets.inputs_of(...))``), not as a path."""
        return tuple(i for i in self.inputs if BY_NAME[i[1]].when)

    def rebuilt_from(self) -> tuple[str, ...]:
        """The stages whose files, when rebuilt, rebuild this stage's (Snakemake reruns a job whose input
        is newer): its rule's inputs; for a stage without any in the table (metrics), the stages it is
        built from that are built per instance (every attempt's). A stage is not rebuilt with the
        request's files it reads a slice of: its params say whether its slice changed."""
        if self.inputs:
            return tuple(dict.fromkeys(source for _, source, _ in self.inputs))
        return tuple(name for name in self.built_from if not BY_NAME[name].scope_row.per_request)

    @property
    def scope_row(self) -> Scope:
        return SCOPE_BY_NAME[self.scope]

    def built_for(self, request: Any) -> bool:
        """Whether the stage is built for ``request`` (a ``RunRequest``): always, or with its ``when`` setting set."""
        return self.setting(request) is not None

    def setting(self, request: Any) -> Any:
        """The value of its ``when`` setting in ``request`` (the request itself for a stage always built)."""
        value = request
        for part in self.when.split(".") if self.when else ():
            value = getattr(value, part)
        return value

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
# a stage's body is in the module of its scope (``agentcompass.pipeline.bodies.<scope>``)
_BODIES = f"{_PIPE}.bodies"

STAGES: tuple[Stage, ...] = (
    Stage(
        "request", REQUEST, "request.json: the complete, redacted RunRequest.",
        outputs=(Output("request", "request.json", "request", "agentcompass.runtime.models:RunRequest"),),
        reads="the whole request but execution.task_concurrency",
        params=("request",),
        body=f"{_BODIES}.request:write_request", fingerprint=f"{_PIPE}.fingerprints:request_param",
        recorded_code=("        EVAL.write_request(wildcards, output, log)\n",),
    ),
    Stage(
        "tasks", REQUEST, "tasks.json: the selected TaskSpecs, in the Benchmark's order.",
        outputs=(Output("tasks", "tasks.json", "tasks", f"{_PIPE}.files:TasksFile"),),
        reads="the Benchmark's id, version and the params it reads for its tasks; its task files",
        params=("benchmark",), checkpoint=True, reads_benchmark_params=True,
        body=f"{_BODIES}.request:write_tasks", fingerprint=f"{_PIPE}.fingerprints:tasks_param",
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
        body=f"{_BODIES}.request:write_plans", fingerprint=f"{_PIPE}.fingerprints:plans_param",
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
        body=f"{_BODIES}.task:preflight", fingerprint=f"{_PIPE}.preflight:preflight_param", folder="preflight",
        when="execution.preflight",
    ),
    Stage(
        "prepare", ATTEMPT, "prepared.json of one attempt: the harness-facing input.",
        outputs=(Output("prepared", "prepared.json", "prepared", "agentcompass.runtime.models:PreparedTask"),),
        # its task's preflight file: only with execution.preflight (the preflight row's ``when``)
        inputs=(("preflight", "preflight", "preflight"),), built_from=("preflight", "tasks", "plans"),
        reads="the task, the Benchmark's version and the plan fields it reads to prepare",
        claims=(TASK_SLOT, MODEL), reads_benchmark_params=True, reads_plan_fields=True,
        body=f"{_BODIES}.attempt:prepare", fingerprint=f"{_PIPE}.fingerprints:prepare_param",
        recorded_code=("        EVAL.prepare(wildcards, input, output, log)\n",),
    ),
    Stage(
        "run", ATTEMPT, "output.json of one attempt: the harness's answer, status, usage and timings.",
        outputs=(Output("output", "output.json", "output", "agentcompass.runtime.models:RunResult"),),
        inputs=(("prepared", "prepare", "prepared"),), built_from=("prepare", "tasks", "plans"),
        reads="the Model (not its prices), the Harness and its plan, the run network, retries and timeout",
        claims=(TASK_SLOT, MODEL), reads_benchmark_params=True, reads_plan_fields=True,
        body=f"{_BODIES}.attempt:run", fingerprint=f"{_PIPE}.fingerprints:run_param",
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
        body=f"{_BODIES}.attempt:evaluate", fingerprint=f"{_PIPE}.fingerprints:evaluate_param",
        recorded_code=("        EVAL.evaluate(wildcards, input, output, log)\n",),
    ),
    Stage(
        "scan", ATTEMPT,
        "scan.json of one attempt: what each selected transcript scanner found in its trajectory and result "
        "(flagged or not, the category, the evidence, a confidence), beside its score, never changing it. "
        "Only with scanners.",
        outputs=(Output("scan", "scan.json", "scan", "agentcompass.runtime.models:ScanRecord"),),
        inputs=(("result", "evaluate", "result"),), built_from=("evaluate", "run", "tasks"),
        reads="result.json, the attempt's trajectory.jsonl, its task; the scanners selected, their versions and params",
        body=f"{_BODIES}.attempt:scan", fingerprint=f"{_PIPE}.fingerprints:scan_param",
        when="scanners",
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
        body=f"{_BODIES}.shard:shard",
        recorded_code=("        EVAL.run_shard(wildcards, threads, resources, params, output, log)\n",),
    ),
    Stage(
        "metrics", SUMMARY, "metrics.json: the request's MetricResult and counts by status.",
        outputs=(Output("metrics", "metrics.json", "metrics", "agentcompass.runtime.models:MetricResult"),),
        built_from=("evaluate",),
        reads="every result.json, the Benchmark's version and the params it aggregates with, analyzers, prices",
        version="2", params=("versions",), reads_benchmark_params=True,
        body=f"{_BODIES}.summary:metrics", fingerprint=f"{_PIPE}.fingerprints:metrics_param",
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
        body=f"{_BODIES}.summary:report", fingerprint=f"{_PIPE}.fingerprints:report_param",
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


def where(**columns: Any) -> tuple[Stage, ...]:
    """The stages whose scope row has these columns' values, in the table's order: ``where(in_shards=True)``
    (an attempt's stages), ``where(per_request=True, after_attempts=False)``."""
    return tuple(s for s in STAGES if all(getattr(s.scope_row, k) == v for k, v in columns.items()))


def sole(**columns: Any) -> Stage:
    """The one stage whose scope row has these columns' values (``sole(slices_attempts=True)``: the shard)."""
    found = where(**columns)
    if len(found) != 1:
        raise KeyError(f"{len(found)} stages have the scope columns {columns}, not one")
    return found[0]


def names(*scopes: str) -> tuple[str, ...]:
    return tuple(s.name for s in (of_scope(*scopes) if scopes else STAGES))


# each scope's stages, by the scope's name, in the table's order
STAGES_OF: dict[str, tuple[Stage, ...]] = {row.name: of_scope(row.name) for row in SCOPE_ROWS}
ATTEMPT_STAGES: tuple[str, ...] = names(ATTEMPT)
# the stage that begins an attempt (``prepare``): a failure there is retried from it
FIRST_ATTEMPT_STAGE: str = ATTEMPT_STAGES[0]
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
