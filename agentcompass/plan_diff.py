"""``agentcompass diff A B``: what differs between two plans, attempts or runs, which stage reads it, what reruns.

A and B are two ``plan.json`` files, two attempt folders
(``results/<ns>/<run_id>/attempts/<task>/<n>/``) or two run folders
(``results/<ns>/<run_id>/``). The question is the one the reuse rule answers
(docs/reuse.md, Files and reuse): if A's folder were built again with B's settings,
which of its files would be rebuilt, and why.

Which stage reads a field is not written down here. Each differing field is
put, alone, into A's request, task or plan, and the stages' params are
computed again with the very functions the rules' params come from
(``agentcompass.pipeline.fingerprints``, built on ``agentcompass.pipeline.reuse``):
the stages whose params move are the ones that read it. What reruns is decided
the same way, from the whole of A's and B's params, so the answer cannot drift
from what Snakemake does.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from agentcompass import layout, results
from agentcompass._util import keypaths
from agentcompass._util.display import visible
from agentcompass.errors import AgentCompassError
from agentcompass.layout import task_segment
from agentcompass.pipeline import fingerprints, reading, reuse
from agentcompass.plugins import load_components
from agentcompass.runtime.models import ExecutionPlan, HarnessPlan, RunRequest, TaskSpec
from agentcompass.runtime.models.request import BenchmarkSpec, EnvironmentSpec, HarnessSpec, ModelSpec
from agentcompass.stages import SCOPE_ROWS, Stage
from agentcompass.stages import stage as stage_of

# The stages in the order their files are built (the scope rows' order, each row's in the stage table's),
# and the files each writes; a shard's record is none of them: its attempts' files are.
_ORDERED: tuple[Stage, ...] = tuple(s for row in SCOPE_ROWS if not row.slices_attempts for s in row.stages)
STAGES = tuple(s.name for s in _ORDERED)
# The files built once per request (the request's record, task list and plans, and its summary files).
BULK: tuple[Stage, ...] = tuple(s for s in _ORDERED if s.scope_row.per_request)
BULK_STAGES = tuple(s.name for s in BULK)
# The files of each attempt: a task's preflight (with execution.preflight) is judged with each of its
# attempts: it reads a part of their plan.
ATTEMPT_SIDE: tuple[Stage, ...] = tuple(s for s in _ORDERED if not s.scope_row.per_request)
ATTEMPT_STAGES = tuple(s.name for s in ATTEMPT_SIDE)
FILES = {name: stage_of(name).shown for name in STAGES}
# An attempt file is built from the one before it (its rule's last input).
BUILT_FROM = {s.name: s.rebuilt_from()[-1] for s in ATTEMPT_SIDE if s.rebuilt_from()}
# Where a run's files go: its folder, never a setting that makes it build anything else.
IDENTITY = (("output", "namespace"), ("output", "run_id"))

REUSE_OFF = "runtime.reuse is false in B: rebuilt every time"
RULE_WORDS = ("a file is rebuilt when something its stage reads changed, "
              "and so is every file built from it; everything else is reused")


class DiffError(AgentCompassError, ValueError):
    """A, B or the pair cannot be compared; the message says what, where and the fix."""


ABSENT = keypaths.ABSENT
Path_ = keypaths.KeyPath


# --- the two sides -----------------------------------------------------------------------------


@dataclass
class Side:
    """A or B: its request (None for a bare plan.json), tasks by id and plans by (task id, attempt)."""

    label: str
    kind: str  # "plan", "attempt" or "run"
    request: dict | None
    tasks: dict[str, dict]
    plans: dict[tuple[str, int], dict]


FIX = ("Fix: name two plan.json files, two attempt folders (results/<namespace>/<run_id>/attempts/<task>/<n>) "
       "or two run folders (results/<namespace>/<run_id>)")


def _read(path: Path, what: str) -> Any:
    try:
        return results.read_json(path)
    except (OSError, ValueError) as exc:
        raise DiffError(f"{path}: cannot read {what} ({exc}). Fix: run the request again to rewrite it") from None


def _plan_key(plan: dict) -> tuple[str, int]:
    return plan["task_id"], int(plan["attempt"])


def _is_plan(data: Any) -> bool:
    return isinstance(data, dict) and {"task_id", "attempt", "benchmark_plan", "harness_plan"} <= set(data)


def _run_files(run: results.Run) -> tuple[dict, dict]:
    tasks_file, plans_file = Path(layout.tasks_file(run.path)), Path(layout.plans_file(run.path))
    for path in (tasks_file, plans_file):
        if not path.exists():
            raise DiffError(f"{run.path} has no {path.name} yet: the run has not planned its attempts. "
                            f"Fix: run the request once (its tasks.json and plans.json come first), "
                            f"or diff plan.json files")
    tasks = {t["task_id"]: t for t in _read(tasks_file, "the task list")["tasks"]}
    plans = {_plan_key(p): p for p in _read(plans_file, "the plans")["plans"]}
    return tasks, plans


def _open_run(path: Path) -> results.Run:
    try:
        return results.open_run(path)
    except ValueError as exc:
        raise DiffError(f"{layout.request_file(path)}: not a request's JSON ({exc}). "
                        f"Fix: run the request again to rewrite it") from None


def kind_of(path: str | Path) -> str:
    """'plan', 'attempt' or 'run': what ``path`` is, by its place and name (its files are read later)."""
    path = Path(path)
    if not path.exists():
        raise DiffError(f"{path} does not exist. {FIX}")
    if path.is_file():
        return "plan"
    if Path(layout.request_file(path)).exists():
        return "run"
    if layout.is_attempt_folder(path):
        return "attempt"
    raise DiffError(f"{path} is not a run, an attempt or a plan: it holds no request.json and is not "
                    f"<run>/attempts/<task>/<n>. {FIX}")


def load_side(path: str | Path) -> Side:
    """A plan.json, an attempt folder or a run folder, read for diffing."""
    path = Path(path)
    kind = kind_of(path)
    if kind == "plan":
        data = _read(path, "a plan")
        if not _is_plan(data):
            raise DiffError(f"{path} is not a plan: it holds no ExecutionPlan (task_id, attempt, benchmark_plan, "
                            f"harness_plan). {FIX}")
        return Side(str(path), "plan", None, {}, {_plan_key(data): data})
    if kind == "run":
        run = _open_run(path)
        tasks, plans = _run_files(run)
        return Side(str(path), "run", run.request, tasks, plans)
    run_path = path.parent.parent.parent
    run = _open_run(run_path)
    tasks, plans = _run_files(run)
    key = next((k for k in plans if task_segment(k[0]) == path.parent.name and k[1] == int(path.name)), None)
    if key is None:
        raise DiffError(f"{path} is an attempt folder its run no longer plans ({layout.plans_file(run_path)} has no "
                        f"attempt {path.name} of task {path.parent.name}). {FIX}")
    # the plan the attempt was built with, when it has been evaluated; else the one it would be built with
    plan_file = Path(layout.plan_file(path))
    plan = _read(plan_file, "the attempt's plan") if plan_file.exists() else plans[key]
    return Side(str(path), "attempt", run.request, {key[0]: tasks[key[0]]} if key[0] in tasks else {}, {key: plan})


# --- computing what each stage reads ---------------------------------------------------------------


@dataclass
class Context:
    """A request decoded, with what the stages' params are computed from."""

    request: RunRequest

    def __post_init__(self) -> None:
        self.benchmark = reading.benchmark_for(self.request)
        self.harness = reading.harness_for(self.request)
        self.versions = fingerprints.component_versions(self.request)
        # one stand-in for every invocation's nonce: equal on both sides, so reuse off
        # twice is no difference here (diff says so on its own), but turning it off is
        self.recompute = fingerprints.recompute_param(self.request, "each invocation")

    def plan(self, raw: dict) -> ExecutionPlan:
        harness_plan = self.harness.plan_class if self.harness else HarnessPlan
        return ExecutionPlan.from_dict(raw, self.benchmark.plan_class, harness_plan)

    def attempt(self, task: TaskSpec, plan: ExecutionPlan) -> dict[str, Any]:
        # a stage the request does not build (a task's preflight without execution.preflight): None (turning
        # its setting on builds it)
        view = fingerprints.AttemptView(self.request, task, plan, self.versions, self.benchmark, self.harness,
                                        reuse.task_fingerprint(task))
        return {s.name: {**s.resolve("fingerprint")(view, s), **self.recompute} if s.built_for(self.request)
                else None for s in ATTEMPT_SIDE}

    def bulk(self, recompute: dict[str, str] | None = None) -> dict[str, Any]:
        """The params of the request's and summary stages, by stage (the Benchmark's task files are not in
        a run's folder: not in them)."""
        extra = fingerprints.Extra(recompute=self.recompute if recompute is None else recompute)
        return {s.name: fingerprints.request_params(s, self.request, extra) for s in BULK}

    def reads_nonce(self) -> set[str]:
        """The request's and summary stages whose params hold the reuse-off nonce: with reuse off,
        they are rebuilt every time (the request's record is not: it is the request as it is)."""
        one, other = (self.bulk(fingerprints.recompute_param(self.request, nonce)) for nonce in ("1", "2"))
        return {name for name in one if not keypaths.same(one[name], other[name])}


def _context(request: dict, where: str) -> Context:
    try:
        return Context(RunRequest.from_dict(request))
    except Exception as exc:  # a request this code cannot read: an unknown component, an old shape
        raise DiffError(f"{where}: its request cannot be read by this version of agentcompass ({exc}). "
                        f"Fix: diff runs made with this version, or their plan.json files") from None


def _placeholder_context(plan: dict, where: str) -> Context:
    """For a bare plan.json: the components it names, and no Model (a plan holds none)."""
    try:
        return Context(RunRequest(
            model=ModelSpec(), benchmark=BenchmarkSpec(id=plan["benchmark_id"]),
            harness=HarnessSpec(id=plan["harness_plan"].get("harness_id", "none")),
            environment=EnvironmentSpec(id=plan["task_environment"]["id"]),
        ))
    except Exception as exc:
        raise DiffError(f"{where}: names components this version of agentcompass does not have ({exc}). "
                        f"Fix: diff plans made with this version") from None


def _task(raw: dict | None, plan: dict) -> TaskSpec:
    # a bare plan.json has no task: both sides get the same stand-in, so no difference comes from it
    return TaskSpec.from_dict(raw) if raw is not None else TaskSpec(task_id=plan["task_id"])


def _moved(base: dict[str, Any], other: dict[str, Any]) -> tuple[str, ...]:
    return tuple(stage for stage in STAGES if stage in base and not keypaths.same(base[stage], other.get(stage)))


# --- the diff ---------------------------------------------------------------------------------------


@dataclass
class Change:
    """One differing field: in request.json, in a task (tasks.json) or in a plan; and the stages that read it."""

    source: str  # "request", "task" or "plan"
    path: Path_
    a: Any
    b: Any
    stages: tuple[str, ...]
    # not decidable alone (A's request with only this field changed is not a request): counted for every stage
    assumed: bool = False

    @property
    def name(self) -> str:
        return keypaths.text(self.path)

    @property
    def values(self) -> tuple[str, str]:
        return keypaths.value_text(self.a, None), keypaths.value_text(self.b, None)

    def to_json(self) -> dict:
        return {"source": self.source, "path": self.name, **keypaths.values_json(self.a, self.b),
                "stages": list(self.stages), "assumed": self.assumed}


@dataclass
class AttemptDiff:
    task_id: str
    attempt: int
    side: str  # "both", "a" (A only) or "b" (B only)
    changes: list[Change] = field(default_factory=list)
    reruns: dict[str, str] = field(default_factory=dict)  # stage -> why
    unbuilt: set[str] = field(default_factory=set)  # the stages B builds none of (preflight off)

    def to_json(self) -> dict:
        return {"task_id": self.task_id, "attempt": self.attempt, "in": self.side,
                "changes": [c.to_json() for c in self.changes],
                "reruns": [{"stage": s, "file": FILES[s], "why": w} for s, w in self.reruns.items()]}


@dataclass
class Diff:
    a: Side
    b: Side
    request_changes: list[Change]
    attempts: list[AttemptDiff]
    bulk_reruns: dict[str, str]  # request-level stage -> why
    notes: list[str]

    @property
    def kind(self) -> str:
        return self.a.kind

    def counts(self) -> dict[str, int]:
        """How many files of each stage rerun: the jobs Snakemake would run, by rule."""
        out: Counter = Counter({stage: 1 for stage in self.bulk_reruns})
        for attempt in self.attempts:
            out.update(attempt.reruns.keys())
        return {stage: out[stage] for stage in STAGES if out[stage]}

    def reasons(self) -> dict[str, Counter]:
        out: dict[str, Counter] = {stage: Counter([why]) for stage, why in self.bulk_reruns.items()}
        for attempt in self.attempts:
            for stage, why in attempt.reruns.items():
                out.setdefault(stage, Counter())[why] += 1
        return {stage: out[stage] for stage in STAGES if stage in out}

    def reused(self) -> dict[str, int]:
        """Files of A that B's settings would keep, by stage."""
        paired = [x for x in self.attempts if x.side == "both"]
        out = {}
        if self.kind == "run":
            for stage in BULK_STAGES:
                if stage not in self.bulk_reruns:
                    out[stage] = 1
        for stage in ATTEMPT_STAGES:
            kept = sum(1 for x in paired if stage not in x.reruns and stage not in x.unbuilt)
            if kept:
                out[stage] = kept
        return {stage: out[stage] for stage in STAGES if stage in out}

    def field_groups(self) -> list[tuple[str | None, list[dict]]]:
        """The differing fields by the first stage that reads them (None: no stage), with counts."""
        rows: dict[tuple[str, Path_], dict] = {}
        for change in self.request_changes:
            rows[("request", change.path)] = {"change": change, "attempts": None, "values": {change.values}}
        for attempt in self.attempts:
            for change in attempt.changes:
                row = rows.setdefault((change.source, change.path), {"change": change, "attempts": 0, "values": set()})
                row["attempts"] += 1
                row["values"].add(change.values)
        groups: dict[str | None, list[dict]] = {}
        for row in rows.values():
            readers = [s for s in row["change"].stages if s != layout.REQUEST_RECORD] or list(row["change"].stages)
            groups.setdefault(readers[0] if readers else None, []).append(row)
        return [(stage, groups[stage]) for stage in (*STAGES, None) if stage in groups]

    def to_json(self) -> dict:
        groups = []
        for stage, rows in self.field_groups():
            groups.append({
                "stage": stage, "file": FILES.get(stage) if stage else None,
                "fields": [{**row["change"].to_json(), "attempts": row["attempts"],
                            "same_values": len(row["values"]) == 1} for row in rows],
            })
        return {
            "kind": self.kind, "a": self.a.label, "b": self.b.label,
            "attempts": {side: sum(1 for x in self.attempts if x.side == side) for side in ("both", "a", "b")},
            "request_changes": [c.to_json() for c in self.request_changes],
            "by_stage": groups,
            "reruns": self.counts(),
            "reasons": {stage: dict(c) for stage, c in self.reasons().items()},
            "reused": self.reused(),
            "per_attempt": [x.to_json() for x in self.attempts if x.changes or x.reruns or x.side != "both"],
            "notes": self.notes,
            "rule": RULE_WORDS,
        }


def _attribute(source: str, changes, base: dict[str, Any], compute: Callable[[Path_, Any], dict[str, Any]],
               cache: dict) -> list[Change]:
    """Each change with the stages whose params move when it alone is made in A (``compute(path, b_value)``)."""
    out = []
    for path, a, b in changes:
        key = (source, path)
        if key not in cache:
            try:
                cache[key] = (_moved(base, compute(path, b)), False)
            except Exception:  # noqa: BLE001 - not valid on its own: counted for every stage it could reach
                cache[key] = (STAGES if source == "request" else ATTEMPT_STAGES, True)
        readers, assumed = cache[key]
        out.append(Change(source, path, a, b, readers, assumed))
    return out


def _why(stage: str, reads: list[Change]) -> str:
    names = list(dict.fromkeys(c.name for c in reads))
    if not names:
        return "what its stage reads changed"
    if len(names) > 3:
        names = [*names[:3], f"{len(names) - 3} more"]
    return f"its stage reads {', '.join(names)}, which changed"


def diff(a: str | Path, b: str | Path) -> Diff:
    """What differs between A and B, which stage reads it, and what B's settings would rebuild in A's folder."""
    load_components()
    kind_a, kind_b = kind_of(a), kind_of(b)
    if kind_a != kind_b:
        raise DiffError(f"{a} is {_article(kind_a)} and {b} is {_article(kind_b)}: diff compares two of a kind. {FIX}")
    side_a, side_b = load_side(a), load_side(b)
    notes: list[str] = []
    if side_a.kind == "plan":
        [plan_a], [plan_b] = side_a.plans.values(), side_b.plans.values()
        ctx_a, ctx_b = _placeholder_context(plan_a, side_a.label), _placeholder_context(plan_b, side_b.label)
        notes.append("a plan.json holds neither the Model nor the task: diff two attempt or run folders to see "
                     "those too (a temperature change, say, is in request.json)")
    else:
        assert side_a.request is not None and side_b.request is not None  # attempt and run sides have one
        request_b = dict(side_b.request)
        for path in IDENTITY:  # B's settings, built in A's folder
            request_b = keypaths.with_value(request_b, path, keypaths.get(side_a.request, path))
        side_b.request = request_b
        ctx_a, ctx_b = _context(side_a.request, side_a.label), _context(side_b.request, side_b.label)
    if side_a.kind == "run":
        pairs = [(k, k) for k in side_a.plans if k in side_b.plans]
    else:  # two attempts are compared whatever their ids: a different task shows as a difference
        pairs = [(next(iter(side_a.plans)), next(iter(side_b.plans)))]
        if pairs[0][0] != pairs[0][1]:
            notes.append(f"A is attempt {pairs[0][0][1]} of task {pairs[0][0][0]!r} and B attempt {pairs[0][1][1]} "
                         f"of task {pairs[0][1][0]!r}: compared as if B's were built in A's place")

    cache: dict = {}
    first = pairs[0] if pairs else None

    def attempt_inputs(side: Side, ctx: Context, key, like=None):
        """The raw and decoded task and plan; decoded once when B's are A's (``like``), as most are."""
        plan_raw, task_raw = side.plans[key], side.tasks.get(key[0])
        if like is not None and keypaths.same(task_raw, like[0]) and keypaths.same(plan_raw, like[1]):
            return like  # the same benchmark and harness ids, so the same plan classes
        return task_raw, plan_raw, _task(task_raw, plan_raw), ctx.plan(plan_raw)

    try:
        base_first = None
        if first is not None:
            _, _, task0, plan0 = attempt_inputs(side_a, ctx_a, first[0])
            base_first = ctx_a.attempt(task0, plan0)

        request_changes: list[Change] = []
        bulk_reruns: dict[str, str] = {}
        if side_a.kind != "plan":
            # an attempt's request fields too: one read only by the plans stage reaches the attempt
            # through its plan, whose fields are listed on their own
            base = {**ctx_a.bulk(), **(base_first or {})}

            def with_request(path, value):
                ctx = Context(RunRequest.from_dict(keypaths.with_value(side_a.request, path, value)))
                return {**ctx.bulk(), **(ctx.attempt(task0, plan0) if first is not None else {})}

            request_changes = _attribute("request", keypaths.changes(side_a.request, side_b.request), base,
                                         with_request, cache)

        attempts: list[AttemptDiff] = []
        reuse_off = side_b.request is not None and not ctx_b.request.runtime.reuse
        for key_a, key_b in pairs:
            inputs_a = attempt_inputs(side_a, ctx_a, key_a)
            task_raw_a, plan_raw_a, task_a, plan_a_ = inputs_a
            task_raw_b, plan_raw_b, task_b, plan_b_ = attempt_inputs(side_b, ctx_b, key_b, like=inputs_a)
            params_a, params_b = ctx_a.attempt(task_a, plan_a_), ctx_b.attempt(task_b, plan_b_)
            def with_plan(path, value):
                return ctx_a.attempt(task_a, ctx_a.plan(keypaths.with_value(plan_raw_a, path, value)))

            def with_task(path, value):
                return ctx_a.attempt(TaskSpec.from_dict(keypaths.with_value(task_raw_a, path, value)), plan_a_)

            changes = _attribute("plan", keypaths.changes(plan_raw_a, plan_raw_b), params_a, with_plan, cache)
            if task_raw_a is not None and task_raw_b is not None:
                changes = _attribute("task", keypaths.changes(task_raw_a, task_raw_b), params_a, with_task,
                                     cache) + changes
            record = AttemptDiff(key_b[0], key_b[1], "both", changes)
            known = request_changes + changes
            for stage in ATTEMPT_STAGES:
                upstream = BUILT_FROM.get(stage)
                if params_b[stage] is None:  # a stage B does not build (preflight off)
                    record.unbuilt.add(stage)
                    continue
                if reuse_off:
                    record.reruns[stage] = REUSE_OFF
                elif not keypaths.same(params_a[stage], params_b[stage]):
                    record.reruns[stage] = _why(stage, [c for c in known if stage in c.stages])
                elif upstream and upstream in record.reruns:
                    record.reruns[stage] = f"built from {FILES[upstream]}, which is rebuilt"
            attempts.append(record)

        if side_a.kind == "run":
            only_a = [k for k in side_a.plans if k not in side_b.plans]
            only_b = [k for k in side_b.plans if k not in side_a.plans]
            attempts += [AttemptDiff(k[0], k[1], "a") for k in only_a]
            built = [s.name for s in ATTEMPT_SIDE if s.built_for(ctx_b.request)]
            attempts += [AttemptDiff(k[0], k[1], "b", reruns={
                s: "a new attempt: A's folder has none such, so it is built" for s in built}) for k in only_b]
            bulk_reruns = _bulk_reruns(side_a, side_b, ctx_a, ctx_b, request_changes, attempts, reuse_off)
            if only_a:
                notes.append(f"{len(only_a)} attempt(s) of A are not in B: B's settings would not build them "
                             f"(their files stay on disk, outside its metrics.json)")
    except DiffError:
        raise
    except Exception as exc:  # noqa: BLE001 - a file this version reads differently: say which, never a traceback
        raise DiffError(f"{side_a.label} and {side_b.label}: their plans cannot be read by this version of "
                        f"agentcompass ({type(exc).__name__}: {exc}). Fix: diff runs made with this version") from None
    return Diff(side_a, side_b, request_changes, attempts, bulk_reruns, notes)


def _bulk_reruns(side_a: Side, side_b: Side, ctx_a: Context, ctx_b: Context, request_changes: list[Change],
                 attempts: list[AttemptDiff], reuse_off: bool) -> dict[str, str]:
    bulk_a, bulk_b = ctx_a.bulk(), ctx_b.bulk()
    rebuilt_every_time = ctx_b.reads_nonce() if reuse_off else set()
    # what the request's task list and plans hold: computed from its settings and the Benchmark's task files
    content = {
        layout.TASK_LIST: (keypaths.same(side_a.tasks, side_b.tasks),
                           "the task lists differ while the request's task settings do not"),
        layout.PLAN_LIST: (keypaths.same(sorted(side_a.plans.items()), sorted(side_b.plans.items())),
                           "the plans differ while the request does not"),
    }
    out: dict[str, str] = {}
    for s in BULK:
        upstream = [name for name in STAGES if name in s.rebuilt_from()]
        if s.name in rebuilt_every_time:
            out[s.name] = REUSE_OFF
        elif not keypaths.same(bulk_a[s.name], bulk_b[s.name]):
            out[s.name] = _why(s.name, [c for c in request_changes if s.name in c.stages])
        elif any(not stage_of(name).scope_row.per_request for name in upstream) \
                and any(x.side != "both" for x in attempts):
            out[s.name] = "the attempts it counts are not the same"
        elif len(upstream) == 1 and (upstream[0] in out or any(upstream[0] in x.reruns for x in attempts)):
            out[s.name] = f"built from {FILES[upstream[0]]}, which is rebuilt"
        elif len(upstream) > 1 and any(name in out for name in upstream):
            out[s.name] = (f"built from {' and '.join(FILES[name] for name in upstream)}, "
                           f"one of which is rewritten")
        elif s.name in content and not content[s.name][0]:
            out[s.name] = f"{content[s.name][1]}: the Benchmark's task files changed"
    return out


def _article(kind: str) -> str:
    return {"plan": "a plan", "attempt": "an attempt folder", "run": "a run folder"}[kind]


# --- text ---------------------------------------------------------------------------------------------


def _stage_title(stage: str | None) -> str:
    if stage is None:
        return "read by no stage (reruns nothing)"
    return f"read by {stage} ({FILES[stage]})"


def render(d: Diff, verbose: bool = False) -> str:
    lines = [f"A: {d.a.label}", f"B: {d.b.label}"]
    both = sum(1 for x in d.attempts if x.side == "both")
    if d.kind == "run":
        only_a = sum(1 for x in d.attempts if x.side == "a")
        only_b = sum(1 for x in d.attempts if x.side == "b")
        lines.append(f"{both} attempt(s) in both, {only_a} only in A, {only_b} only in B "
                     f"(paired by task id and attempt number)")
    groups = d.field_groups()
    if not groups:
        lines += ["", "no field differs."]
    else:
        lines += ["", "Fields that differ, by the stage that reads them:"]
        for stage, rows in groups:
            lines.append(f"  {_stage_title(stage)}")
            for row in rows:
                change = row["change"]
                where = FILES[layout.REQUEST_RECORD] if change.source == "request" else change.source
                if row["attempts"] is not None and d.kind == "run":
                    where += f", {row['attempts']} attempt(s)"
                values = "values differ by attempt (-v)"
                if len(row["values"]) == 1:
                    values = f"{visible(keypaths.value_text(change.a))} -> {visible(keypaths.value_text(change.b))}"
                also = [s for s in change.stages if s not in (stage, layout.REQUEST_RECORD)]
                extra = f"; also read by {', '.join(also)}" if also else ""
                assumed = "; counted for every stage (not decidable alone)" if change.assumed else ""
                lines.append(f"    {visible(change.name)}: {values}  [{where}{extra}{assumed}]")
    counts, reasons = d.counts(), d.reasons()
    lines += ["", f"What reruns when A's folder is built with B's settings ({RULE_WORDS}):"]
    if not counts:
        lines.append("  nothing")
    for stage, n in counts.items():
        whys = reasons[stage]
        if len(whys) == 1:
            lines.append(f"  {FILES[stage]} x{n}: {next(iter(whys))}")
        else:
            lines.append(f"  {FILES[stage]} x{n}:")
            lines += [f"    x{count}: {why}" for why, count in whys.most_common()]
    reused = d.reused()
    if reused:
        lines.append("  reused: " + ", ".join(f"{FILES[s]} x{n}" if s in ATTEMPT_STAGES else FILES[s]
                                            for s, n in reused.items()))
    for note in d.notes:
        lines.append(f"note: {note}")
    if verbose:
        lines += ["", "Per attempt:"]
        shown = [x for x in d.attempts if x.changes or x.reruns or x.side != "both"]
        if not shown:
            lines.append("  no attempt differs")
        for x in shown:
            head = {"both": "", "a": " (only in A)", "b": " (only in B)"}[x.side]
            files = ", ".join(FILES[s] for s in x.reruns) or "nothing reruns"
            lines.append(f"  {visible(x.task_id)} #{x.attempt}{head}: {files}")
            for change in x.changes:
                readers = ", ".join(change.stages) or "no stage"
                lines.append(f"    {change.source} {visible(change.name)}: {visible(change.values[0])} -> "
                             f"{visible(change.values[1])}  "
                             f"[read by {readers}]")
    elif d.kind == "run" and any(x.changes for x in d.attempts):
        lines.append("(-v: every attempt's differences)")
    return "\n".join(lines)
