"""What the next run would spend, before any call: the attempts it would run and their tokens and cost.

    from agentcompass import forecast, status
    statuses = status.predict(orchestration, Path.cwd())
    for f in forecast.of_statuses(orchestration, statuses, Path.cwd()):
        print("\\n".join(f.lines()))

The attempts that would run are those whose run stage (the one that calls
the Model) ``agentcompass status`` predicts reruns: every attempt without its
files, and those a change reruns. A failed attempt keeps its result.json,
so a plain run does not rerun it (``agentcompass retry`` does): it is named,
not counted.

What one attempt spends is estimated from finished attempts (a result.json
with usage, not left out of the figures): first those of the same request;
with fewer than ``MIN_OWN`` of them, those of the other runs under the
results folder of the same Benchmark, Harness and Model (ids as
``results.rows`` gives them), newest run first. At most ``MOST_READ``
result.json files are read per request, spread evenly over each run's task
list. The range is a 95% prediction interval of the sum of N attempts from
n observed per-attempt values (mean m, standard deviation s):
N*m +/- 1.96*s*sqrt(N + N^2/n), floored at 0 (docs/spend.md, Forecast).
Dollars are the request's own ``model.pricing`` applied to each attempt's
tokens (``results.cost_usd``), with no call answered from the call cache.
"""

from __future__ import annotations

import functools
import math
import os
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from agentcompass import layout, results, status
from agentcompass._util.display import visible
from agentcompass.runtime.models import Orchestration, RunRequest
from agentcompass.stages import LAST_ATTEMPT_STAGE
from agentcompass.stages import stage as stage_of
from agentcompass.status import RequestStatus

# result.json files read per request's forecast, at most
MOST_READ = 2000
# finished attempts of the request itself that are enough to forecast from (two give a spread)
MIN_OWN = 2
# the stage that calls the Model: its output is the answer the last attempt stage scores
CALLING_STAGE = stage_of(LAST_ATTEMPT_STAGE).inputs[-1][1]
# dollars are kept to a billionth, as results.cost_usd keeps them
COST_DIGITS = 9
# runs named in a forecast's source line, at most
SHOWN_RUNS = 3
OWN = "this request"
_KIND = "of the same benchmark, harness and model"
SAME_KIND = f"runs {_KIND}"
NOTHING = f"no finished attempt of this request or of a run {_KIND}: no forecast"


@dataclass
class Range:
    """What N attempts are expected to spend, and the 95% prediction interval around it (None from one value)."""

    expected: float
    low: float | None = None
    high: float | None = None

    def rounded(self, digits: int) -> "Range":
        """The same range to ``digits`` decimals (0: whole tokens; 9: a billionth of a dollar, as ``cost_usd``)."""
        def r(value: float | None) -> float | None:
            return None if value is None else round(value, digits) if digits else float(round(value))
        return Range(round(self.expected, digits) if digits else float(round(self.expected)), r(self.low), r(self.high))


@dataclass
class Forecast:
    """One request's forecast: ``attempts`` that would run (None: they cannot be counted now, ``problem``
    says why), ``failed`` attempts a plain run keeps (``retry`` reruns them), where the estimate comes from
    (``source``: ``OWN``, ``SAME_KIND`` or None, from ``basis`` attempts of ``runs``) and the estimates
    (``cost_usd`` None without ``model.pricing``)."""

    name: str
    attempts: int | None
    failed: int = 0
    source: str | None = None
    basis: int = 0
    runs: list[str] = field(default_factory=list)
    prompt_tokens: Range | None = None
    completion_tokens: Range | None = None
    total_tokens: Range | None = None
    cost_usd: Range | None = None
    problem: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def lines(self) -> list[str]:
        """The forecast as ``agentcompass status`` and a dry run print it, one line each."""
        if self.attempts is None:
            return [f"forecast: cannot count the attempts that would run: {self.problem}"]
        retry = f"; {self.failed} failed attempt(s) not counted (`agentcompass retry` reruns them)" \
            if self.failed else ""
        if self.attempts == 0:
            return [f"forecast: no attempt would run: nothing to spend{retry}"]
        head = f"forecast: {self.attempts} attempt(s) would run{retry}"
        if self.source is None or self.total_tokens is None:
            return [f"{head}; {NOTHING}"]
        runs = ", ".join(visible(r) for r in self.runs[:SHOWN_RUNS])
        if len(self.runs) > SHOWN_RUNS:
            runs += f" and {len(self.runs) - SHOWN_RUNS} more"
        where = f"{self.basis} finished attempt(s) of {OWN}" if self.source == OWN else \
            f"{self.basis} finished attempt(s) of {len(self.runs)} run(s) {_KIND} ({runs})"
        out = [f"{head}; estimated from {where}"]
        assert self.prompt_tokens is not None and self.completion_tokens is not None
        out.append("  tokens " + ", ".join(f"{word} {_shown(r, _count)}" for word, r in (
            ("in", self.prompt_tokens), ("out", self.completion_tokens), ("total", self.total_tokens))))
        if self.cost_usd is not None:
            out.append(f"  cost {_shown(self.cost_usd, results.dollars)} at model.pricing, if the call cache "
                       "answers none of the calls")
        else:
            out.append("  cost: no prices declared (model.pricing): tokens only")
        return out


def _count(value: float) -> str:
    return f"{round(value):,}"


def _shown(r: Range, form) -> str:
    if r.low is None or r.high is None:
        return f"{form(r.expected)} (no range from one attempt)"
    return f"{form(r.expected)} (95% range {form(r.low)} to {form(r.high)})"


def interval(values: list[float], count: int, z: float = results.Z95) -> Range:
    """The expected sum of ``count`` attempts from per-attempt ``values``, and its prediction interval:
    count*m +/- z*s*sqrt(count + count^2/n), floored at 0; no interval from fewer than two values."""
    n = len(values)
    mean = sum(values) / n
    expected = count * mean
    if n < 2:
        return Range(expected)
    half = z * statistics.stdev(values) * math.sqrt(count + count * count / n)
    return Range(expected, max(0.0, expected - half), expected + half)


def would_run(state: RequestStatus) -> tuple[set[str], int]:
    """The attempt folders (as status names them) whose calling stage the next run reruns, and how many
    failed attempts are not among them."""
    folders = {os.path.normpath(os.path.dirname(job.outputs[0])) for job in state.pending
               if job.rule == CALLING_STAGE and job.outputs}
    failed = sum(1 for e in state.errors
                 if os.path.normpath(layout.attempt_folder(state.path, layout.task_segment(e.task_id), e.attempt))
                 not in folders)
    return folders, failed


def _spread(items: list, most: int) -> list:
    """At most ``most`` of ``items``, evenly spaced over them (all when they are fewer)."""
    if len(items) <= most:
        return items
    return [items[i * len(items) // most] for i in range(most)]


def observed(run: results.Run, most: int) -> list[dict[str, Any]]:
    """Rows (``results.rows``) of at most ``most`` finished attempts of ``run`` that spent something to
    count: a result.json with usage, not left out of the figures (quarantined, infrastructure)."""
    try:
        finished = [(task["task_id"], n, folder) for task, n, folder in run.attempts()
                    if os.path.exists(layout.result_file(folder))]
    except (OSError, ValueError, KeyError, TypeError):  # a tasks.json that cannot be read: nothing to learn
        return []
    read: dict[tuple[str, int], dict] = {}
    for task_id, n, folder in _spread(finished, most):
        try:
            read[(task_id, n)] = results.read_json(layout.result_file(folder))
        except (OSError, ValueError):
            continue
    return [row for row in results.rows(run, read)
            if row["status"] != results.MISSING and row["prompt_tokens"] is not None
            and results.left_out(row) is None]


def runs_under(root: Path) -> list[results.Run]:
    """The runs under ``root`` (``results.find_runs``); none when there is no such folder yet, or a
    request.json there cannot be read."""
    try:
        return results.find_runs(root)
    except (OSError, ValueError):
        return []


def _same_kind(runs: list[results.Run], req: RunRequest, own: Path) -> list[results.Run]:
    """Those of ``runs`` of ``req``'s Benchmark, Harness and Model but its own, newest first."""
    kind = (req.benchmark.id, req.harness.id, req.model.id)
    same = [r for r in runs if (r.component("benchmark"), r.component("harness"),
                                (r.request.get("model") or {}).get("id", "")) == kind
            and os.path.realpath(r.path) != os.path.realpath(own)]

    def changed(r: results.Run) -> float:
        try:
            return os.stat(r.path).st_mtime
        except OSError:
            return 0.0
    return sorted(same, key=changed, reverse=True)


def _basis(req: RunRequest, own: Path,
           runs: Callable[[], list[results.Run]]) -> tuple[str | None, list[dict[str, Any]], list[str]]:
    """Where the estimate comes from, its rows, and the runs (namespace/run_id) they are of; ``runs``
    gives the runs under the results folder."""
    mine: list[dict[str, Any]] = []
    if Path(layout.request_file(own)).exists():
        try:
            mine = observed(results.open_run(own), MOST_READ)
        except (OSError, ValueError):
            mine = []
    if len(mine) >= MIN_OWN:
        return OWN, mine, []
    theirs: list[dict[str, Any]] = []
    names: list[str] = []
    for run in _same_kind(runs(), req, own):
        if len(theirs) >= MOST_READ:
            break
        rows = observed(run, MOST_READ - len(theirs))
        if rows:
            theirs += rows
            names.append(f"{run.namespace}/{run.run_id}")
    if len(theirs) > len(mine):
        return SAME_KIND, theirs, names
    return (OWN, mine, []) if mine else (None, [], [])


def of_request(name: str, req: RunRequest, state: RequestStatus, workdir: Path, results_dir: str | Path,
               runs: Callable[[], list[results.Run]] | None = None) -> Forecast:
    """``req``'s forecast, from status's prediction ``state`` of it; ``runs`` gives the runs under the results
    folder (found when asked for, by default)."""
    folders, failed = would_run(state)
    if state.problem and not folders:
        return Forecast(name, None, problem=state.problem)
    forecast = Forecast(name, len(folders), failed)
    if not folders:
        return forecast
    root = Path(workdir) / results_dir
    source, rows, names = _basis(req, layout.run_dir(root, req.namespace, req.run_id),
                                 runs or (lambda: runs_under(root)))
    if source is None:
        return forecast
    pricing = req.model.pricing.to_dict() if req.model.pricing else None
    prompt = [float(row["prompt_tokens"] or 0) for row in rows]
    completion = [float(row["completion_tokens"] or 0) for row in rows]
    count = len(folders)
    forecast.source, forecast.basis, forecast.runs = source, len(rows), names
    forecast.prompt_tokens = interval(prompt, count).rounded(0)
    forecast.completion_tokens = interval(completion, count).rounded(0)
    forecast.total_tokens = interval([p + c for p, c in zip(prompt, completion)], count).rounded(0)
    if pricing is not None:
        costs = [results.cost_usd(p, c, pricing) or 0.0 for p, c in zip(prompt, completion)]
        forecast.cost_usd = interval(costs, count).rounded(COST_DIGITS)
    return forecast


def of_statuses(orchestration: Orchestration, statuses: Iterable[RequestStatus], workdir: Path) -> list[Forecast]:
    """Each request's forecast, from ``status.predict``'s statuses of the same orchestration."""
    root = Path(workdir) / orchestration.runtime.results_dir
    found = functools.cache(lambda: runs_under(root))  # once for every request, when one asks
    return [of_request(run.name, run.request, state, Path(workdir), orchestration.runtime.results_dir, found)
            for run, state in zip(orchestration.runs, statuses)]


def forecasts(orchestration: Orchestration, workdir: str | Path | None = None) -> list[Forecast]:
    """Each request's forecast, in declaration order: what the next ``agentcompass run`` would spend.
    Plans in a scratch folder as ``agentcompass status`` does; calls no model."""
    where = Path(workdir or Path.cwd())
    return of_statuses(orchestration, status.predict(orchestration, where), where)
