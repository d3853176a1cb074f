"""``agentcompass compare RUN_A RUN_B [...]``: a paired comparison of runs over the same tasks.

Attempts pair by task id and attempt number; a pair counts when both of its
attempts have finished (a ``result.json``). Every later run is compared with
the first (B - A). Per pair, *pass* is ``correct`` being true (an attempt that
ended in an error fails, as in metrics.json's accuracy) and the *score* is its
score (0 when it has none, as in metrics.json's mean_score).

- Accuracy: McNemar's exact test on the pairs that flipped (two-sided binomial
  test of the flips one way among all flips, p = 0.5).
- Mean score: a paired bootstrap test.
- 95% intervals of both deltas: the percentile paired bootstrap, resampling
  tasks (a task's attempts are drawn together: they share a question), with a
  fixed seed, so the same runs always print the same numbers.
"""

from __future__ import annotations

import html
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentcompass import imports, layout, results
from agentcompass._util import keypaths, trees
from agentcompass._util.display import visible
from agentcompass.errors import AgentCompassError
from agentcompass.runtime.models import FailureClass, TaskStatus

RESAMPLES = 10_000
SEED = 0
# how many bootstrap draws are held in memory at once (resamples x tasks)
_CHUNK_CELLS = 2_000_000
USAGE = ("calls", "prompt_tokens", "completion_tokens")
# what each run cost, beside the score deltas: its results.stats figures, as metrics.json, runs and the report show them
COST = {"cost_usd": "whole run: what was paid", "cost_per_attempt_usd": "whole run: cost over its attempts",
        "cost_per_solved_usd": "whole run: cost over its correct attempts"}
NO_PRICES = "no prices declared"


class CompareError(AgentCompassError, ValueError):
    """Runs that cannot be compared; the message says what, where and the fix."""


# --- statistics ----------------------------------------------------------------------------------


def mcnemar_exact(a_only: int, b_only: int) -> float:
    """Two-sided exact McNemar p-value: of the n = a_only + b_only flipped pairs, is a split this uneven
    likely when each flip goes either way with probability 1/2? p = min(1, 2 P(X <= min) ), X ~ Bin(n, 1/2)."""
    n = a_only + b_only
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(a_only, b_only) + 1))
    return min(1.0, 2 * tail / 2**n)  # integers until the last division: exact for any n


@dataclass
class Bootstrap:
    """The percentile interval and two-sided p-value of each statistic's B - A difference in means."""

    ci95: dict[str, tuple[float, float]]
    p_value: dict[str, float]
    resamples: int
    seed: int


def paired_bootstrap(clusters: list[str], deltas: dict[str, list[float]], resamples: int = RESAMPLES,
                     seed: int = SEED) -> Bootstrap:
    """Resample clusters (tasks) with replacement; each statistic is the mean of its per-pair deltas.

    ``clusters[i]`` is the task of pair i and ``deltas[name][i]`` its B - A value. The p-value is
    that of the null hypothesis "no difference", from the resampled means shifted to centre on 0:
    p = (1 + #{|mean* - mean| >= |mean|}) / (1 + resamples).
    """
    import numpy as np

    order = {c: i for i, c in enumerate(dict.fromkeys(clusters))}
    index = np.fromiter((order[c] for c in clusters), dtype=np.int64, count=len(clusters))
    counts = np.bincount(index, minlength=len(order)).astype(float)
    sums = {name: np.bincount(index, weights=np.asarray(values, dtype=float), minlength=len(order))
            for name, values in deltas.items()}
    observed = {name: float(s.sum() / counts.sum()) for name, s in sums.items()}
    rng = np.random.default_rng(seed)
    draws = {name: np.empty(resamples) for name in deltas}
    step = max(1, _CHUNK_CELLS // len(order))
    for start in range(0, resamples, step):
        picked = rng.integers(0, len(order), size=(min(step, resamples - start), len(order)))
        n = counts[picked].sum(axis=1)
        for name, s in sums.items():
            draws[name][start:start + len(picked)] = s[picked].sum(axis=1) / n
    ci, p = {}, {}
    for name, values in draws.items():
        low, high = np.percentile(values, [2.5, 97.5])
        ci[name] = (float(low), float(high))
        # a tolerance for sums that are equal but for rounding
        extreme = np.abs(values - observed[name]) >= abs(observed[name]) - 1e-12
        p[name] = float((1 + extreme.sum()) / (1 + resamples))
    return Bootstrap(ci, p, resamples, seed)


# --- one run against another --------------------------------------------------------------------------


@dataclass
class RunInfo:
    path: str
    namespace: str
    run_id: str
    benchmark: str
    harness: str
    model: str
    attempts: int
    finished: int

    def to_json(self) -> dict:
        return dict(self.__dict__)


@dataclass
class MetricDelta:
    name: str
    a: float | None
    b: float | None
    delta: float | None
    ci95: tuple[float, float] | None = None
    test: str | None = None
    p_value: float | None = None
    detail: str | None = None
    digits: int = 3  # decimals shown (not in the JSON, which has the value itself)
    dollars: bool = False  # shown as results.dollars writes a sum (not in the JSON either)

    def to_json(self) -> dict:
        return {"name": self.name, "a": self.a, "b": self.b, "delta": self.delta,
                "ci95": list(self.ci95) if self.ci95 else None, "test": self.test, "p_value": self.p_value,
                "detail": self.detail}


@dataclass
class Comparison:
    a: RunInfo
    b: RunInfo
    paired: int
    only_a: list[dict]  # attempts finished in A only, with why B has none
    only_b: list[dict]
    metrics: list[MetricDelta]
    flipped: dict[str, list[dict]]  # "a_only": passed in A only; "b_only": passed in B only
    usage: list[MetricDelta]
    config: list[dict]  # request.json key paths that differ
    method: dict = field(default_factory=dict)
    # paired attempts that did not complete, by failure class, side by side (classes neither side has left out)
    failures: list[MetricDelta] = field(default_factory=list)
    # finished in both, left out (results.left_out): their task was quarantined by preflight in A or B (not
    # scored there), or the attempt failed for the infrastructure in A or B
    quarantined: int = 0
    infrastructure: int = 0
    # what each whole run cost (COST), in dollars; a side without model.pricing has none
    cost: list[MetricDelta] = field(default_factory=list)
    # with --exclude-flagged (else None): pairs counted otherwise that a transcript scanner flagged in A or B, and
    # those with an attempt not scanned (no scan.json yet) in A or B, left out of every figure
    flagged: int | None = None
    unscanned: int | None = None

    def to_json(self) -> dict:
        return {
            "a": self.a.to_json(), "b": self.b.to_json(), "paired": self.paired,
            "only_a": self.only_a, "only_b": self.only_b,
            "metrics": [m.to_json() for m in self.metrics], "flipped": self.flipped,
            "cost": [m.to_json() for m in self.cost],
            "usage": [u.to_json() for u in self.usage], "config": self.config, "method": self.method,
            "failures": [f.to_json() for f in self.failures],
            "quarantined": self.quarantined, "infrastructure": self.infrastructure,
            # only with --exclude-flagged: without it the object is what it was
            **({"flagged": self.flagged, "unscanned": self.unscanned} if self.flagged is not None else {}),
        }


def _open(path: str | Path) -> results.Run:
    path = Path(path)
    if not os.path.lexists(layout.request_file(path)) and imports.is_import(path):
        try:  # a run another tool wrote: an Inspect log, a Harbor job folder
            return results.open_run(path)
        except imports.ImportError_ as exc:
            raise CompareError(str(exc)) from None
    if not path.is_dir():
        raise CompareError(f"{path} does not exist or is not a folder. Fix: name run folders, "
                           f"results/<namespace>/<run_id> (each holds request.json)")
    if not Path(layout.request_file(path)).exists():
        raise CompareError(f"{path} is not a run's folder: it holds no request.json. Fix: name run folders, "
                           f"results/<namespace>/<run_id> (a results root holds several: pick two)")
    try:
        return results.open_run(path)
    except ValueError as exc:
        raise CompareError(f"{layout.request_file(path)} is not a request's JSON ({exc}). "
                           f"Fix: run the request again to rewrite it") from None


def _attempts(run: results.Run) -> dict[tuple[str, int], dict]:
    try:
        return {(row["task_id"], row["attempt"]): row for row in results.rows(run)}
    except (OSError, ValueError, KeyError) as exc:
        raise CompareError(f"{run.path}: its tasks.json or a result.json cannot be read ({type(exc).__name__}: "
                           f"{exc}). Fix: run the request again to rewrite it") from None


def task_map(path: str | Path) -> dict[str, str]:
    """The mapping of run A's task ids to run B's that ``--map-tasks FILE`` names: a JSON or YAML object of
    text to text, no two of A's tasks mapped to one of B's (``CompareError`` naming the file otherwise)."""
    import yaml  # only for --map-tasks

    name = imports.shown(path)
    try:
        text = trees.read_text(path)
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise CompareError(f"--map-tasks {name} cannot be read ({why}; a link is not followed). Fix: name a JSON or "
                           f"YAML file mapping run A's task ids to run B's") from None
    try:
        found = json.loads(text) if str(path).endswith(".json") else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as exc:
        raise CompareError(f"--map-tasks {name} is not valid JSON or YAML ({visible(str(exc).splitlines()[0])}). "
                           f"Fix: write an object, {{\"task id in A\": \"task id in B\"}}") from None
    if not isinstance(found, dict) or not all(isinstance(k, (str, int)) and isinstance(v, (str, int))
                                              for k, v in found.items()):
        raise CompareError(f"--map-tasks {name} is not an object of task ids to task ids. Fix: write an object, "
                           f"{{\"task id in A\": \"task id in B\"}}")
    mapping = {str(k): str(v) for k, v in found.items()}
    twice = sorted({v for v in mapping.values() if list(mapping.values()).count(v) > 1})
    if twice:
        raise CompareError(f"--map-tasks {name} maps several of A's tasks to {visible(twice[0])}: pairs would be "
                           f"ambiguous. Fix: map one task of A to each task of B")
    return mapping


def mapped(rows: dict[tuple[str, int], dict], mapping: dict[str, str], name: str = "") -> dict[tuple[str, int], dict]:
    """Run A's rows by B's task ids (``task_map``): a task the mapping does not name keeps its id. Every task id
    it names must be one of A's, and no task may take the id another keeps (``CompareError``)."""
    ids = {task_id for task_id, _ in rows}
    unknown = sorted(set(mapping) - ids)
    if unknown:
        raise CompareError(f"--map-tasks {name}: {visible(unknown[0])} is not a task of run A"
                           f"{f' ({len(unknown)} such)' if len(unknown) > 1 else ''}. Fix: map run A's task ids "
                           f"(the first run named) to run B's")
    renamed = {(mapping.get(task_id, task_id), n): {**row, "task_id": mapping.get(task_id, task_id)}
               for (task_id, n), row in rows.items()}
    if len(renamed) != len(rows):
        raise CompareError(f"--map-tasks {name} maps a task of A to an id another task of A keeps. Fix: map that "
                           f"task too, or to another id")
    return renamed


def _info(run: results.Run, rows: dict) -> RunInfo:
    return RunInfo(str(run.path), run.namespace, run.run_id, run.component("benchmark"), run.component("harness"),
                   (run.request.get("model") or {}).get("id", ""), len(rows),
                   sum(1 for r in rows.values() if r["status"] != results.MISSING))


def _passed(row: dict) -> bool:
    return row["correct"] is True


def _score(row: dict) -> float:
    return float(row["score"]) if row["score"] is not None else 0.0


def _is_error(row: dict) -> bool:
    try:
        return TaskStatus(row["status"]).is_error
    except ValueError:
        return False


def _failures(pairs: list[tuple[dict, dict]]) -> list[MetricDelta]:
    """Paired attempts by failure class, in the taxonomy's order; a class neither side has is left out."""
    out = []
    for cls in FailureClass:
        a = sum(1 for row, _ in pairs if row["failure_class"] == cls.value)
        b = sum(1 for _, row in pairs if row["failure_class"] == cls.value)
        if a or b:
            out.append(MetricDelta(cls.value, a, b, b - a, detail="paired attempts that failed so"))
    return out


def _unpaired(mine: dict, theirs: dict, other: str) -> list[dict]:
    out = []
    for key, row in mine.items():
        if row["status"] == results.MISSING:
            continue
        there = theirs.get(key)
        if there is None or there["status"] == results.MISSING:
            why = f"not in {other}'s task list" if there is None else f"not finished in {other}"
            out.append({"task_id": key[0], "attempt": key[1], "status": row["status"], "why": why})
    return out


def _costs(run_a: results.Run, rows_a: dict, run_b: results.Run, rows_b: dict) -> list[MetricDelta]:
    """Each run's cost figures (COST) as ``results.current_stats`` reads them (metrics.json's summary when it
    is current, else computed from the result files), and their difference; why a side has none."""
    side_a, side_b = (results.current_stats(run, list(rows.values()))[0]
                      for run, rows in ((run_a, rows_a), (run_b, rows_b)))
    out = []
    for name, what in COST.items():
        a, b = side_a.get(name), side_b.get(name)
        sides = (("A", side_a, a), ("B", side_b, b))
        unpriced = [side for side, stats, _ in sides if stats.get("cost_usd") is None]
        unsolved = [side for side, stats, value in sides if value is None and stats.get("cost_usd") is not None]
        why = [what] + ([f"{NO_PRICES} in {' and '.join(unpriced)} (model.pricing)"] if unpriced else []) + (
            [f"{'no task solved' if name == 'cost_per_solved_usd' else 'no attempt'} in {' and '.join(unsolved)}"]
            if unsolved else [])
        out.append(MetricDelta(name, a, b, _delta(a, b), detail="; ".join(why), dollars=True))
    return out


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _count(total: float) -> float | int:
    # usage holds counts as floats (2.0 tokens): a whole total prints as one
    return int(total) if total.is_integer() else total


def _delta(a, b):
    return None if a is None or b is None else b - a


def compare_pair(run_a: results.Run, run_b: results.Run, resamples: int = RESAMPLES, seed: int = SEED,
                 rows_a: dict | None = None, exclude_flagged: bool = False) -> Comparison:
    rows_a = rows_a if rows_a is not None else _attempts(run_a)
    rows_b = _attempts(run_b)
    finished = [k for k, r in rows_a.items() if r["status"] != results.MISSING
                and k in rows_b and rows_b[k]["status"] != results.MISSING]
    # only attempts counted in both (results.left_out): a task quarantined by preflight or an infrastructure
    # failure on either side is left out, as each run's own metrics leave it out
    why = {k: {rows_a[k]["left_out"], rows_b[k]["left_out"]} - {None} for k in finished}
    keys = [k for k in finished if not why[k]]
    flagged = unscanned = None
    if exclude_flagged:  # and, asked for, those a scanner flagged on either side (the rows' flagged column)
        sides = {k: (rows_a[k]["flagged"], rows_b[k]["flagged"]) for k in keys}
        flagged = sum(1 for k in keys if True in sides[k])
        unscanned = sum(1 for k in keys if True not in sides[k] and None in sides[k])
        keys = [k for k in keys if sides[k] == (False, False)]
    if not keys:
        raise CompareError(f"{run_a.path} and {run_b.path} have no finished attempt in common (pairs are made by "
                           f"task id and attempt number): a paired comparison needs runs over the same tasks. Fix: "
                           f"compare runs of the same benchmark and task selection, once both have results")
    pairs = [(rows_a[k], rows_b[k]) for k in keys]
    pass_a, pass_b = [_passed(a) for a, _ in pairs], [_passed(b) for _, b in pairs]
    score_a, score_b = [_score(a) for a, _ in pairs], [_score(b) for _, b in pairs]
    boot = paired_bootstrap(
        [k[0] for k in keys],
        {"accuracy": [float(b) - float(a) for a, b in zip(pass_a, pass_b)],
         "mean_score": [b - a for a, b in zip(score_a, score_b)]},
        resamples, seed)
    flipped = {
        "a_only": [{"task_id": k[0], "attempt": k[1]} for k, a, b in zip(keys, pass_a, pass_b) if a and not b],
        "b_only": [{"task_id": k[0], "attempt": k[1]} for k, a, b in zip(keys, pass_a, pass_b) if b and not a],
    }
    n_a, n_b = len(flipped["a_only"]), len(flipped["b_only"])
    accuracy_a, accuracy_b = _mean([float(x) for x in pass_a]), _mean([float(x) for x in pass_b])
    mean_a, mean_b = _mean(score_a), _mean(score_b)
    errors_a = sum(1 for a, _ in pairs if _is_error(a))
    errors_b = sum(1 for _, b in pairs if _is_error(b))
    metrics = [
        MetricDelta("accuracy", accuracy_a, accuracy_b, _delta(accuracy_a, accuracy_b), boot.ci95["accuracy"],
                    "McNemar exact", mcnemar_exact(n_a, n_b), f"{n_a} passed in A only, {n_b} in B only"),
        MetricDelta("mean_score", mean_a, mean_b, _delta(mean_a, mean_b), boot.ci95["mean_score"],
                    "paired bootstrap", boot.p_value["mean_score"]),
        MetricDelta("errors", errors_a, errors_b, errors_b - errors_a),
    ]
    usage = []
    for key in USAGE:
        total_a = _count(sum(float(a[key] or 0) for a, _ in pairs))
        total_b = _count(sum(float(b[key] or 0) for _, b in pairs))
        usage.append(MetricDelta(key, total_a, total_b, total_b - total_a, detail="total over the paired attempts"))
    latency_a = _mean([float(a["latency_seconds"]) for a, _ in pairs if a["latency_seconds"] is not None])
    latency_b = _mean([float(b["latency_seconds"]) for _, b in pairs if b["latency_seconds"] is not None])
    usage.append(MetricDelta("latency_seconds", latency_a, latency_b, _delta(latency_a, latency_b),
                             detail="mean model latency per paired attempt"))
    config = [{"path": keypaths.text(path), **keypaths.values_json(a, b)}
              for path, a, b in keypaths.changes(run_a.request, run_b.request)]
    return Comparison(
        _info(run_a, rows_a), _info(run_b, rows_b), len(pairs),
        _unpaired(rows_a, rows_b, "B"), _unpaired(rows_b, rows_a, "A"),
        metrics, flipped, usage, config,
        {"pairs": "task id and attempt number; both attempts finished, neither quarantined by preflight nor "
                   "failed for the infrastructure",
         "pass": "correct is true (an attempt that ended in an error fails, as in metrics.json's accuracy)",
         "score": "score, 0 when it has none (as in metrics.json's mean_score)",
         "accuracy_test": "McNemar's exact test (two-sided binomial test on the flipped pairs)",
         "mean_score_test": "paired bootstrap (two-sided, resampled means centred on 0)",
         "ci95": "percentile paired bootstrap, resampling tasks",
         "resamples": resamples, "seed": seed,
         **({"flags": "pairs a transcript scanner flagged in A or B, or not scanned in either, are left out "
                      "(--exclude-flagged)"} if exclude_flagged else {})},
        failures=_failures([(rows_a[k], rows_b[k]) for k in finished]),
        quarantined=sum(1 for k in finished if results.QUARANTINED in why[k]),
        infrastructure=sum(1 for k in finished if why[k] == {results.INFRASTRUCTURE}),
        cost=_costs(run_a, rows_a, run_b, rows_b),
        flagged=flagged, unscanned=unscanned,
    )


def compare(paths: list[str | Path], resamples: int = RESAMPLES, seed: int = SEED,
            exclude_flagged: bool = False, map_tasks: str | Path | None = None) -> list[Comparison]:
    """Each run after the first compared with the first; with ``exclude_flagged``, over the pairs no transcript
    scanner flagged in either run (every run must have been scanned); with ``map_tasks`` (a file: ``task_map``),
    the first run's tasks paired by the ids it maps them to."""
    if len(paths) < 2:
        raise CompareError("compare needs two runs or more. Fix: agentcompass compare results/<ns>/<run_a> "
                           "results/<ns>/<run_b>")
    if resamples < 1:
        raise CompareError(f"--resamples {resamples}: at least 1 is needed. Fix: leave it out ({RESAMPLES})")
    mapping = task_map(map_tasks) if map_tasks is not None else None
    runs = [_open(p) for p in paths]
    if exclude_flagged:
        # before any attempt is read: each later run is a B
        for label, run in [("A", runs[0]), *(("B", r) for r in runs[1:])]:
            if not results.scanned(run.request):
                raise CompareError(
                    f"--exclude-flagged: run {label} ({visible(str(run.path))}) was not scanned: its request names "
                    f"no transcript scanner, so no attempt of it is known to be unflagged. Fix: run it again with "
                    f"--scanner ID (only its scan stage runs), or drop --exclude-flagged")
    rows_a = _attempts(runs[0])
    if mapping is not None:
        rows_a = mapped(rows_a, mapping, imports.shown(map_tasks or ""))
    return [compare_pair(runs[0], run, resamples, seed, rows_a, exclude_flagged) for run in runs[1:]]


def to_json(comparisons: list[Comparison]) -> dict:
    return {"baseline": comparisons[0].a.to_json(), "comparisons": [c.to_json() for c in comparisons]}


# --- text ----------------------------------------------------------------------------------------------


def _num(value: float | None, signed: bool = False, digits: int = 3) -> str:
    """A count as a whole number, anything else with ``digits`` decimals."""
    if value is None:
        return "n/a"
    if isinstance(value, int):
        return f"{value:+d}" if signed else str(value)
    return f"{value:+.{digits}f}" if signed else f"{value:.{digits}f}"


def _shown(m: MetricDelta, value: float | None, signed: bool = False) -> str:
    """A value of ``m`` as the tables show it: dollars as results.dollars writes them, else ``_num``."""
    if m.dollars:
        return results.dollars(value, "n/a", signed)
    return _num(value, signed, m.digits)


def _p(value: float | None) -> str:
    if value is None:
        return ""
    return f"p={value:.3f}" if value >= 0.001 else "p<0.001"


def _test_text(m: MetricDelta) -> str:
    return " ".join(x for x in (m.test, f"({m.detail})" if m.detail else None) if x)


def _ci(ci: tuple[float, float] | None) -> str:
    return f"[{ci[0]:+.3f}, {ci[1]:+.3f}]" if ci else ""


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    return ["  " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in [header, *rows]]


def _attempt_name(item: dict, attempts: int) -> str:
    return visible(item["task_id"]) if attempts <= 1 else f"{visible(item['task_id'])} #{item['attempt']}"


def _run_line(label: str, info: RunInfo) -> str:
    return (f"{label}: {visible(info.path)} ({visible(info.benchmark)}, {visible(info.harness)}, {visible(info.model)}; "
            f"{info.finished} of {info.attempts} attempts finished)")


SHOWN = 20


def _config_value(item: dict, side: str, width: int | None = 60) -> str:
    return visible(keypaths.value_text(item.get(side, keypaths.ABSENT), width))


def _left_out(c: Comparison) -> str:
    """The pairs finished in both but in no figure, as each run's metrics leave them out (results.left_out)."""
    parts = [f"{n} {why}" for n, why in ((c.infrastructure, "infrastructure (in A or B)"),
                                          (c.quarantined, "quarantined by preflight (in A or B)")) if n]
    if c.flagged is not None:  # asked for (--exclude-flagged): said even when none was
        parts.append(f"{c.flagged} flagged by a scanner (in A or B; --exclude-flagged)")
        if c.unscanned:
            parts.append(f"{c.unscanned} not scanned yet (in A or B)")
    return f"; left out: {', '.join(parts)}" if parts else ""


def render(comparisons: list[Comparison]) -> str:
    lines = [_run_line("A", comparisons[0].a)]
    for c in comparisons:
        per_task = max([a["attempt"] for a in c.flipped["a_only"] + c.flipped["b_only"] + c.only_a + c.only_b] or [1])
        lines += ["", _run_line("B", c.b),
                  f"paired: {c.paired} attempt(s) finished in both (by task id and attempt number); "
                  f"finished in A only: {len(c.only_a)}; in B only: {len(c.only_b)}"
                  + _left_out(c), ""]
        # the cost of each run beside the score deltas: what the difference in score cost
        lines += _table(["metric", "A", "B", "B - A", "95% CI", "test"], [
            [m.name, _shown(m, m.a), _shown(m, m.b), _shown(m, m.delta, signed=True), _ci(m.ci95),
             " ".join(x for x in (m.test, _p(m.p_value), f"({m.detail})" if m.detail else None) if x)]
            for m in [*c.metrics, *c.cost]])
        lines.append("")
        lines += _table(["usage", "A", "B", "B - A", ""], [
            [u.name, _num(u.a, digits=u.digits), _num(u.b, digits=u.digits), _num(u.delta, True, u.digits),
             u.detail or ""] for u in c.usage])
        lines.append("")
        if c.failures:
            lines += _table(["failures by class", "A", "B", "B - A"], [
                [f.name, _num(f.a), _num(f.b), _num(f.delta, signed=True)] for f in c.failures])
            lines.append("")
        for key, title in (("a_only", "passed in A only"), ("b_only", "passed in B only")):
            items = c.flipped[key]
            shown = ", ".join(_attempt_name(i, per_task) for i in items[:SHOWN])
            more = f" and {len(items) - SHOWN} more (--json: all)" if len(items) > SHOWN else ""
            lines.append(f"{title} ({len(items)}): {shown or '-'}{more}")
        for key, title in (("only_a", "unpaired, finished in A only"), ("only_b", "unpaired, finished in B only")):
            items = getattr(c, key)
            if items:
                shown = ", ".join(f"{_attempt_name(i, per_task)} ({visible(i['why'])})" for i in items[:SHOWN])
                more = f" and {len(items) - SHOWN} more (--json: all)" if len(items) > SHOWN else ""
                lines.append(f"{title} ({len(items)}, left out of the statistics): {shown}{more}")
        lines.append("config (request.json, A -> B):" if c.config else "config (request.json): the same")
        for item in c.config:
            lines.append(f"  {visible(item['path'])}: {_config_value(item, 'a')} -> {_config_value(item, 'b')}")
    m = comparisons[0].method
    lines += ["", f"95% CI: percentile paired bootstrap over tasks ({m['resamples']} resamples, seed {m['seed']}); "
                  "pass = correct (an error counts as a fail, as in metrics.json's accuracy)"]
    return "\n".join(lines)


# --- a page -----------------------------------------------------------------------------------------------

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,'Segoe UI',sans-serif;margin:2rem auto;max-width:72rem;
padding:0 1rem;color:#1d2330}
h1{font-size:1.4rem}h2{font-size:1.1rem;margin-top:2rem;border-bottom:1px solid #dde1e8;padding-bottom:.3rem}
table{border-collapse:collapse;margin:.5rem 0}th,td{padding:.3rem .7rem;text-align:left;border-bottom:1px solid #eef0f4}
th{background:#f5f6f9;font-weight:600}td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
code{background:#f5f6f9;padding:0 .25rem;border-radius:3px}.muted{color:#6a7282}
.up{color:#1a7f37}.down{color:#b42318}svg text{font:12px system-ui,sans-serif}
"""


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def _forest(metrics: list[MetricDelta]) -> str:
    """The deltas with their intervals around 0, as an inline SVG (no script, no network)."""
    shown = [(m.name, m.ci95, m.delta) for m in metrics if m.ci95 is not None and m.delta is not None]
    if not shown:
        return ""
    # the axis spans the widest interval, and at least +-0.05 so that a zero difference is not a blur
    bound = max([0.05] + [abs(x) for _, ci95, delta in shown for x in (*ci95, delta)])
    width, left, row = 560, 110, 30
    height = row * len(shown) + 30
    scale = (width - left - 20) / (2 * bound)
    zero = left + bound * scale
    parts = [f'<svg class="forest" role="img" aria-label="B - A with 95% intervals" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}">',
             f'<line x1="{zero:.1f}" y1="5" x2="{zero:.1f}" y2="{height - 20}" stroke="#9aa3b2" '
             f'stroke-dasharray="3 3"/>',
             f'<text x="{zero:.1f}" y="{height - 5}" text-anchor="middle">0</text>',
             f'<text x="{left:.1f}" y="{height - 5}" text-anchor="start">{-bound:+.3f}</text>',
             f'<text x="{width - 20:.1f}" y="{height - 5}" text-anchor="end">{bound:+.3f} (B - A)</text>']
    for i, (name, ci95, delta) in enumerate(shown):
        y = 15 + i * row
        low, high, mid = (left + (v + bound) * scale for v in (*ci95, delta))
        parts += [f'<text x="0" y="{y + 4}">{_e(name)}</text>',
                  f'<line class="ci" x1="{low:.1f}" y1="{y}" x2="{high:.1f}" y2="{y}" stroke="#3558a8" '
                  f'stroke-width="2"/>',
                  f'<circle class="delta" cx="{mid:.1f}" cy="{y}" r="4" fill="#3558a8"><title>{_e(name)}: '
                  f'{delta:+.3f} [{ci95[0]:+.3f}, {ci95[1]:+.3f}]</title></circle>']
    parts.append("</svg>")
    return "".join(parts)


def _html_table(header: list[str], rows: list[list[tuple[str, str]]]) -> str:
    """``rows`` of (text, css class) cells; every text is escaped here."""
    head = "".join(f"<th>{_e(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f'<td class="{cls}">{_e(text)}</td>' for text, cls in r) + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


# metrics where a rise is a change for the worse (coloured red, not green)
_LOWER_IS_BETTER = frozenset({"errors", *COST})


def _sign_class(value: float | None, name: str = "") -> str:
    if not value:
        return "num"
    better = value < 0 if name in _LOWER_IS_BETTER else value > 0
    return "num up" if better else "num down"


def render_html(comparisons: list[Comparison]) -> str:
    base = comparisons[0].a
    out = [f"<h1>Comparison: {_e(base.run_id)} and {len(comparisons)} other run(s)</h1>",
           f'<p class="muted">A: <code>{_e(base.path)}</code> ({_e(base.benchmark)}, {_e(base.harness)}, '
           f'{_e(base.model)})</p>']
    for c in comparisons:
        per_task = max([a["attempt"] for a in c.flipped["a_only"] + c.flipped["b_only"] + c.only_a + c.only_b] or [1])
        out += [f'<section class="comparison"><h2>B: {_e(c.b.run_id)}</h2>',
                f'<p class="muted"><code>{_e(c.b.path)}</code> ({_e(c.b.benchmark)}, {_e(c.b.harness)}, '
                f'{_e(c.b.model)}). {c.paired} attempt(s) paired by task id and attempt number; finished in A only: '
                f'{len(c.only_a)}; in B only: {len(c.only_b)}{_e(_left_out(c))}.</p>',
                _html_table(["metric", "A", "B", "B - A", "95% CI", "test", "p"], [
                    [(m.name, ""), (_shown(m, m.a), "num"), (_shown(m, m.b), "num"),
                     (_shown(m, m.delta, signed=True), _sign_class(m.delta, m.name)), (_ci(m.ci95), "num"),
                     (_test_text(m), ""), (_p(m.p_value), "num")] for m in [*c.metrics, *c.cost]]),
                _forest(c.metrics),
                "<h3>Usage</h3>",
                _html_table(["", "A", "B", "B - A", ""], [
                    [(u.name, ""), (_num(u.a, digits=u.digits), "num"), (_num(u.b, digits=u.digits), "num"),
                     (_num(u.delta, True, u.digits), "num"), (u.detail or "", "muted")] for u in c.usage])]
        if c.failures:
            out += ["<h3>Failures by class</h3>", _html_table(["class", "A", "B", "B - A"], [
                [(f.name, ""), (_num(f.a), "num"), (_num(f.b), "num"), (_num(f.delta, signed=True), "num")]
                for f in c.failures])]
        for key, title in (("a_only", "Passed in A only"), ("b_only", "Passed in B only")):
            items = c.flipped[key]
            out.append(f"<h3>{title} ({len(items)})</h3>")
            out.append("<ul class=\"flipped\">" + "".join(f"<li>{_e(_attempt_name(i, per_task))}</li>" for i in items)
                       + "</ul>" if items else '<p class="muted">none</p>')
        unpaired = [(i, "A") for i in c.only_a] + [(i, "B") for i in c.only_b]
        if unpaired:
            out.append(f"<h3>Unpaired ({len(unpaired)}), left out of the statistics</h3>")
            out.append(_html_table(["attempt", "finished in", "why"], [
                [(_attempt_name(i, per_task), ""), (side, ""), (i["why"], "")] for i, side in unpaired]))
        out.append("<h3>Config (request.json, A &rarr; B)</h3>")
        out.append(_html_table(["key", "A", "B"], [
            [(item["path"], ""), (_config_value(item, "a", None), ""), (_config_value(item, "b", None), "")]
            for item in c.config])
                   if c.config else '<p class="muted">the same</p>')
        out.append("</section>")
    m = comparisons[0].method
    out.append(f'<p class="muted">95% intervals: percentile paired bootstrap over tasks ({m["resamples"]} resamples, '
               f'seed {m["seed"]}); accuracy: McNemar\'s exact test; mean score: paired bootstrap test. '
               f'Pass = correct (an error counts as a fail, as in metrics.json\'s accuracy).</p>')
    title = f"agentcompass compare: {base.run_id}"
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{_e(title)}</title><style>{_CSS}</style></head><body>{''.join(out)}</body></html>\n")
