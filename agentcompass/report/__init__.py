"""A request's report: ``results/<ns>/<run_id>/report/``, one folder that opens from file://.

    from agentcompass import report
    report.build("results/default/example-oracle")     # -> .../report/index.html

The folder holds:

- ``index.html``: the summary, per-category results, the score distribution,
  errors by kind, cost and tokens, and the attempts table (sorted, filtered and
  paginated in the page, from ``data/attempts.js``);
- ``attempt.html``: one attempt, ``attempt.html#<task segment>/<attempt>``,
  drawn from ``data/attempts/<task segment>.<attempt>.js`` when it is opened;
  ``attempt.html#<task segment>/<attempt>/step/<n>`` opens it at step ``n`` of
  its trajectory (the line of ``trajectory.jsonl``, from 0: the number a
  transcript scanner's evidence names, ``ScanEvidence.step``), highlighted;
- of a scanned run (one whose request names ``scanners``), a "Flagged attempts"
  section in ``index.html`` (``_flags_section``: the attempts scanned and
  flagged, by scanner and category, then each flagged attempt beside its score
  with every piece of evidence linked to its step, the first ``FLAGS_SHOWN``),
  a ``flagged`` column in the attempts table and each attempt's findings at the
  top of its page; a run that was not scanned shows none of them;
- the charts as SVG files (``CHARTS``), also drawn inline in ``index.html``.

Data reaches the pages as ``.js`` files loaded by ``<script>`` tags, the one way
a page opened from file:// can read its neighbours in every browser. Nothing is
loaded from the network. Everything is read through ``agentcompass.results``;
the figures come from ``metrics.json``'s ``summary`` when it matches the
attempts on disk, and are computed from the attempts otherwise (a run that has
not finished, or one written before metrics.json had a summary). Every count of
flags is counted from the rows' ``flagged`` and ``flags`` columns
(``results.flag_columns``); what a finding says (its category, confidence and
evidence) is read from the attempt's scan.json, and is the agent's text: escaped
here, put in with ``textContent`` by the scripts.
"""

from __future__ import annotations

import html
import json
import os
import urllib.parse
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentcompass import layout, results

from agentcompass._util import trees
from agentcompass._util.jsonio import write_text_atomic
from agentcompass.runtime.models import FailureClass, TaskStatus
from agentcompass.runtime.models.scan import EVIDENCE_LIMIT
from agentcompass.stages import stage

from . import charts

# Bump when what the report shows changes: the report rule's param, so Snakemake rebuilds every report.
STAGE = stage("report")  # the report stage (agentcompass.stages), whose files this module writes
VERSION = STAGE.version  # the report stage's version: bump it there
FOLDER = layout.REPORT
# the charts, in the order index.html shows them (each a report() output of the rule), then the page
_FILES = [Path(f).name for f in STAGE.files]
INDEX = _FILES[-1]
CHARTS = tuple(_FILES[:-1])
# of each log and evidence file, the last this many bytes (a traceback, a test's verdict, is at the end)
TEXT_LIMIT = 200_000
# bars of the errors-by-kind chart (the other kinds are summed in one more), twice that of the category charts
MOST_BARS = 15
STATIC = Path(__file__).parent / "static"
ERROR_STATUSES = {status.value for status in TaskStatus if status.is_error}


def folder(run_dir: str | Path) -> Path:
    return Path(run_dir) / FOLDER


def outputs(run_dir: str | Path) -> list[str]:
    """The files of the report the workflow declares (index.html last: it appears last)."""
    return layout.files_in(run_dir, STAGE)


def build(run_dir: str | Path, out: str | Path | None = None) -> Path:
    """Write the report of the run in ``run_dir`` to ``run_dir/report/`` (or to ``out``: how a run another tool
    wrote, which is never written to, gets one); the path of its index.html."""
    run = results.open_run(run_dir)
    out = folder(run.path) if out is None else Path(out)
    rows = list(results.rows(run))
    metrics = None if run.imported is not None else _read_json(Path(layout.metrics_file(run.path)))
    # the figures leave out the quarantined attempts, as metrics.json does (every attempt has its page)
    scored = [r for r in rows if r["left_out"] != results.QUARANTINED]
    summary, scored_on, note = _summary(metrics, rows, (run.request.get("model") or {}).get("pricing"))
    if run.imported is not None:
        note = f"A run {run.imported.source} wrote, imported: the figures are computed from its attempts."
    for leftover in out.glob(".*.tmp"):  # of a build that was killed
        leftover.unlink()
    flags = _Flags()
    table = _attempt_pages(rows, out / "data" / "attempts", flags)
    # Plain writes but for the declared outputs: index.html, written last and by rename, is what
    # says the folder is whole (and a killed build leaves no temporary file the workflow does not know).
    _write(out / "data" / "attempts.js", "window.AC_ATTEMPTS = " + _js(table) + ";\n")
    _write(out / "attempt.html", _attempt_page(run))
    drawn = _charts(summary, scored)
    for name, svg in drawn.items():
        write_text_atomic(out / name, _encodable(svg))
    return write_text_atomic(out / INDEX, _encodable(_index_page(run, rows, metrics, summary, scored_on, note, drawn,
                                                                       flags)))


# -- the figures ---------------------------------------------------------------------------------


def _read_json(path: Path) -> Any:
    try:
        return results.read_json(path)
    except FileNotFoundError:
        return None


def _summary(metrics: dict | None, rows: list[dict], pricing: dict | None) -> tuple[dict, dict, str | None]:
    """metrics.json's summary and ``scored_on`` when metrics.json counts the attempts on disk, else both
    computed from them as the metrics stage computes them (agentcompass.results), and why (a note)."""
    done = [r for r in rows if r["status"] != results.MISSING]
    scored = [r for r in done if r["left_out"] != results.QUARANTINED]  # as metrics.json counts them
    if metrics is None:
        return _computed(scored, pricing), results.scored_on(done), (
            "This run has no metrics.json yet (it has not finished): the figures are computed from the attempts "
            "done so far.")
    if dict(Counter(r["status"] for r in scored)) != {k: v for k, v in metrics.get("counts", {}).items() if v}:
        return _computed(scored, pricing), results.scored_on(done), (
            "metrics.json does not count the attempts on disk (the run has not finished since they changed): the "
            "figures are computed from the attempts.")
    summary, scored_on = metrics.get("summary"), metrics.get("scored_on")
    # a metrics.json of a version before the summary, or before the one denominator: computed again
    if not isinstance(summary, dict) or not isinstance(scored_on, dict) or "counted" not in scored_on \
            or "counted" not in (summary.get("overall") or {}):
        return _computed(scored, pricing), results.scored_on(done), None
    # a summary of a version before the cost figures gets them from its own cost (results.with_cost_figures)
    return ({"overall": results.with_cost_figures(summary.get("overall") or {}),
             "by_category": {k: results.with_cost_figures(v) for k, v in (summary.get("by_category") or {}).items()}},
            scored_on, None)


def _computed(rows: list[dict], pricing: dict | None) -> dict:
    by_category: dict[str, list[dict]] = {}
    for r in rows:
        by_category.setdefault(_category(r["category"]), []).append(r)
    return {"overall": results.stats(rows, pricing),
            "by_category": {k: results.stats(v, pricing) for k, v in sorted(by_category.items())}}


def _category(value: str | None) -> str:
    return "(none)" if value is None else str(value)


# -- the files of the folder -----------------------------------------------------------------------


def _js(payload: Any) -> str:
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":"), default=str)


def _encodable(text: str) -> str:
    """``text`` with any lone surrogate (JSON may hold one: ``"\\ud800"``) written as its escape, which a
    page shows as text and a script reads as the same string."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8", errors="backslashreplace") as handle:
        handle.write(text)


TABLE_COLUMNS = ["task_id", "attempt", "category", "status", "score", "correct", "calls", "tokens",
                 "cost_usd", "cost", "latency_seconds", "seconds", "error", "kind", "flagged", "page"]
# of a scanned run, the flagged attempts index.html lists (the rest are counted, and named by ``agentcompass export``)
FLAGS_SHOWN = 200
# the most pieces of evidence shown of one finding (a scan.json holds at most as many: ``EVIDENCE_LIMIT``)
EVIDENCE_SHOWN = EVIDENCE_LIMIT
# the most characters shown of a text of scan.json (a quote holds at most 200: a file edited by hand may hold more)
FLAG_TEXT_LIMIT = 300
# the line breaks of Python's str.splitlines besides "\n" (results.attempt splits trajectory.jsonl with it; a
# scanner counts its steps by "\n" alone), in UTF-8
_OTHER_BREAKS = (b"\r", b"\x0b", b"\x0c", b"\x1c", b"\x1d", b"\x1e", "\x85".encode(), "\u2028".encode(),
                 "\u2029".encode())


@dataclass
class _Flagged:
    """One flagged attempt as index.html lists it: its row, its page (``segment/attempt``, or None), its
    findings as scan.json holds them and the steps of its trajectory that its page shows (a link goes to one)."""

    row: dict
    page: str | None
    findings: list[dict]
    steps: set[int]


@dataclass
class _Flags:
    """What the attempts' scan.json files say, gathered while their pages are written: each scanner's
    category for each attempt it flagged, how many attempts it could not scan, and the first
    ``FLAGS_SHOWN`` flagged attempts. The counts of attempts scanned and flagged are the rows' (``flagged``)."""

    # (scanner, category) -> the attempts it flagged with that category
    categories: Counter = field(default_factory=Counter)
    # scanner -> the attempts it could not scan (its finding's ``error``); every scanner seen has a key
    errors: dict[str, int] = field(default_factory=dict)
    # scanner -> the category of its first finding (shown for a scanner that flagged nothing)
    kinds: dict[str, str] = field(default_factory=dict)
    shown: list[_Flagged] = field(default_factory=list)


def _findings(scan: Any) -> list[dict]:
    """The findings of a scan.json (what ``results.attempt`` read), each an object; none of a file of another shape."""
    found = scan.get("scanners") if isinstance(scan, dict) else None
    return [f for f in found if isinstance(f, dict)] if isinstance(found, list) else []


def _gather(flags: _Flags, row: dict, record: dict, page: str | None) -> None:
    """Add one attempt's scan.json (``record["scan"]``) to ``flags``; the attempt is flagged when its row says so."""
    findings = _findings(record.get("scan"))
    for finding in findings:
        name = str(finding.get("id"))
        flags.errors[name] = flags.errors.get(name, 0) + (1 if finding.get("error") else 0)
        flags.kinds.setdefault(name, str(finding.get("category") or ""))
    if row["flagged"] is not True:
        return
    flagging = [f for f in findings if f.get("flagged") is True]
    # each scanner the row's flags column names, counted once, under its finding's category
    for name in dict.fromkeys((row["flags"] or "").split(";")):
        finding = next((f for f in flagging if str(f.get("id")) == name), {})
        flags.categories[(name, str(finding.get("category") or ""))] += 1
    if len(flags.shown) < FLAGS_SHOWN:
        steps = record.get("steps") or range(len(record["trajectory"]))
        flags.shown.append(_Flagged(row, page, flagging, set(steps)))


def event_steps(folder: str, events: int) -> list[int] | None:
    """The step of each event ``results.attempt`` read from the attempt's trajectory.jsonl: the line it is on,
    from 0, as a scanner's evidence counts it (``transcript.read_transcript``). None when each is its own index
    (a line per event: nearly always); they differ when a line is blank (no event) or holds a line break of
    Unicode's (``str.splitlines`` makes it two)."""
    if not events:
        return None
    try:
        data = trees.read_bytes(os.path.join(folder, results.TRAJECTORY))
    except OSError:
        return None
    # a search of each break is a fast scan of the bytes; a regular expression over them took three times results.attempt
    if data.count(b"\n") + (0 if data.endswith(b"\n") else 1) == events and not any(b in data for b in _OTHER_BREAKS):
        return None
    lines = data.split(b"\n")
    if lines[-1] == b"":
        lines.pop()
    steps: list[int] = []
    for n, line in enumerate(lines):
        steps += [n] * sum(1 for piece in line.decode("utf-8", "replace").splitlines() if piece.strip())
    # a file rewritten since results.attempt read it: the indexes, as good a guess as any
    return steps if len(steps) == events else None


def attempt_file(segment: str, attempt: int) -> str:
    """The data file of one attempt, in ``data/attempts/``: one folder of files, not one folder per task
    (at 10,000 tasks, making and removing the folders took longer than writing the files)."""
    return f"{segment}.{attempt}.js"


def _attempt_pages(rows: list[dict], data: Path, flags: _Flags) -> dict:
    """Each attempt's data file (``attempt_file``) and the table's rows; what their scan.json files say, in ``flags``."""
    # An earlier build's files go first: writing over a file is 30 times slower than writing a new one
    # (ext4 flushes a file that is truncated and written again), and what is left would be stale.
    if data.is_dir():
        with os.scandir(data) as entries:
            for entry in entries:
                trees.remove_tree(entry.path)
    data.mkdir(parents=True, exist_ok=True)
    table = []
    for row in rows:
        # the task's folder name (results.rows made it with layout.task_segment)
        segment = os.path.basename(os.path.dirname(row["attempt_dir"] or ""))
        page = None
        # an import's attempt has no folder: a row of the table, no page
        record = results.attempt(row["attempt_dir"], text_limit=TEXT_LIMIT) if row["attempt_dir"] else {}
        if any(record.get(k) is not None for k in ("prepared", "output", "result")):
            page = f"{segment}/{row['attempt']}"
            record.update({k: row[k] for k in ("task_id", "attempt", "category", "status")})
            steps = event_steps(row["attempt_dir"], len(record["trajectory"]))
            if steps is not None:
                record["steps"] = steps
            name = attempt_file(segment, row["attempt"])
            with open(os.path.join(data, name), "w", encoding="utf-8", errors="backslashreplace") as handle:
                handle.write("AC_ATTEMPT(" + _js(record) + ");\n")
        if row["flagged"] is not None:
            _gather(flags, row, record, page)
        error = (row["error"] or "").strip().splitlines()
        tokens = (row["prompt_tokens"] or 0) + (row["completion_tokens"] or 0) if row["calls"] is not None else None
        seconds = None
        if row["run_seconds"] is not None or row["evaluate_seconds"] is not None:
            seconds = round((row["run_seconds"] or 0) + (row["evaluate_seconds"] or 0), 4)
        table.append([
            row["task_id"], row["attempt"], row["category"], row["status"], row["score"], row["correct"],
            # cost_usd sorts the column, cost is what it shows (results.dollars, as every view writes it)
            row["calls"], tokens, row["cost_usd"], results.dollars(row["cost_usd"], ""), row["latency_seconds"], seconds, error[0][:300] if error else None,
            results.error_kind(row["status"], row["error"]) if row["status"] in ERROR_STATUSES else None,
            # the scanners that flagged it ("" none; None: not scanned), as the export's flags column
            row["flags"], page,
        ])
    return {"columns": TABLE_COLUMNS, "rows": table}


def _charts(summary: dict, rows: list[dict]) -> dict[str, str]:
    categories = summary.get("by_category") or {}
    bars = []
    for name, stats in sorted(categories.items()):
        accuracy = stats.get("accuracy")
        interval = stats.get("accuracy_ci95")
        text = "none counted" if accuracy is None else f"{accuracy:.3f}"
        bars.append(charts.Bar(name, accuracy or 0.0, f"{text} (n={stats.get('counted', stats.get('attempts', 0))})",
                               interval=tuple(interval) if interval else None))
    category_chart = charts.bars("Accuracy by category" + (" (95% interval)" if any(b.interval for b in bars) else ""),
                                 bars[:MOST_BARS * 2], scale=1.0, empty="no attempt has finished",
                                 chart_id="chart-categories")

    scores = [r["score"] for r in rows if r["status"] != results.MISSING]
    score_chart = charts.columns("Score distribution", _histogram(scores), empty="no attempt has finished",
                                 chart_id="chart-scores", colours={"no score": charts.GREY})

    errors = Counter((summary.get("overall") or {}).get("errors") or {})
    kinds = errors.most_common(MOST_BARS)
    rest = sum(errors.values()) - sum(n for _, n in kinds)
    error_bars = [charts.Bar(kind, n, str(n), colour=charts.RED) for kind, n in kinds]
    if rest:
        error_bars.append(charts.Bar(f"{len(errors) - len(kinds)} other kinds", rest, str(rest), colour=charts.RED))
    error_chart = charts.bars("Errors by kind", error_bars, empty="no errors", chart_id="chart-errors")

    token_bars = [charts.Bar(name, stats.get("prompt_tokens") or 0, _tokens_text(stats),
                             stacked=stats.get("completion_tokens") or 0)
                  for name, stats in sorted(categories.items())]
    token_chart = charts.bars("Tokens by category", [b for b in token_bars if b.value or b.stacked][:MOST_BARS * 2],
                              empty="no model tokens were recorded", chart_id="chart-tokens",
                              legend=[("prompt", charts.BLUE), ("completion", charts.ORANGE)])
    return dict(zip(CHARTS, (category_chart, score_chart, error_chart, token_chart)))


def _tokens_text(stats: dict) -> str:
    text = f"{_count(stats.get('prompt_tokens'))} + {_count(stats.get('completion_tokens'))}"
    cost = stats.get("cost_usd")
    return text if cost is None else f"{text} ({results.dollars(cost)})"


def _histogram(scores: list) -> list[tuple[str, int]]:
    """Counts per score: one column per value when there are few, else ten equal bins."""
    present = [float(s) for s in scores if s is not None]
    missing = len(scores) - len(present)
    columns: list[tuple[str, int]] = []
    values = sorted(set(present))
    if len(values) <= 12:
        counts = Counter(present)
        columns = [(_number(v), counts[v]) for v in values]
    else:
        low, high = min(min(values), 0.0), max(max(values), 1.0)
        width = (high - low) / 10
        bins = [0] * 10
        for v in present:
            bins[min(int((v - low) / width), 9)] += 1
        columns = [(f"{_number(low + i * width)}\u2013{_number(low + (i + 1) * width)}", n) for i, n in enumerate(bins)]
    if missing:
        columns.append(("no score", missing))
    return columns


# -- the pages -----------------------------------------------------------------------------------------


def _number(value: float) -> str:
    return f"{value:.3g}"


def _count(value) -> str:
    return "0" if not value else f"{int(value):,}"


def _esc(value: Any) -> str:
    return html.escape("" if value is None else str(value))


def page(title: str, body: str, script: str = "", data_scripts: tuple[str, ...] = ()) -> str:
    """A whole page: the stylesheet inline, ``data_scripts`` (paths beside it), then ``script`` inline."""
    css = (STATIC / "report.css").read_text()
    loads = "".join(f'<script src="{_esc(src)}"></script>\n' for src in data_scripts)
    return (
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
        # nothing of the network: a report opened offline looks the same
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'self' 'unsafe-inline' file: data:\">\n"
        f"<title>{_esc(title)}</title>\n<style>\n{css}</style>\n</head>\n<body>\n{body}\n{loads}"
        + (f"<script>\n{script}</script>\n" if script else "") + "</body>\n</html>\n"
    )


def _card(label: str, value: str, detail: str = "") -> str:
    detail_html = f'<div class="detail">{_esc(detail)}</div>' if detail else ""
    return f'<div class="card"><div class="label">{_esc(label)}</div><div class="value">{_esc(value)}</div>{detail_html}</div>'


def _fraction(value) -> str:
    return "\u2013" if value is None else f"{value:.3f}"


def _interval(interval) -> str:
    return "" if not interval else f"{interval[0]:.3f}\u2013{interval[1]:.3f}"


def _cost(value) -> str:
    return results.dollars(value, "")


def _cost_detail(stats: dict) -> str:
    """What one attempt and one solved task cost, and what the call cache answered: the cost card's detail."""
    per_solved = stats.get("cost_per_solved_usd")
    parts = [f"{results.dollars(stats.get('cost_per_attempt_usd'))} per attempt",
             f"{results.dollars(per_solved)} per solved task" if per_solved is not None else "no task solved",
             results.cached_note(stats)]
    return "; ".join(p for p in parts if p)


def _seconds(spread: dict | None) -> tuple[str, str]:
    if not spread:
        return "\u2013", ""
    return f"{spread['p50']:.2f} s", f"mean {spread['mean']:.2f} s, p95 {spread['p95']:.2f} s"


def _kv(pairs: list[tuple[str, Any]]) -> str:
    return '<table class="kv">' + "".join(f"<tr><th>{_esc(k)}</th><td>{_esc(v)}</td></tr>" for k, v in pairs) + "</table>"


def _index_page(run: results.Run, rows: list[dict], metrics: dict | None, summary: dict, scored_on: dict,
                note: str | None, drawn: dict[str, str], flags: _Flags | None = None) -> str:
    request = run.request
    overall = summary.get("overall") or {}
    done = sum(1 for r in rows if r["status"] != results.MISSING)
    errors = sum((overall.get("errors") or {}).values())
    interval = overall.get("accuracy_ci95")
    pass_at_k = overall.get("pass_at_k") or {}
    latency, latency_detail = _seconds(overall.get("latency_seconds"))
    wall, wall_detail = _seconds(overall.get("wall_seconds"))
    cost = overall.get("cost_usd")
    model = request.get("model") or {}
    parts = [
        '<header class="top">',
        f"<h1>{_esc(run.name)}</h1>",
        f'<div class="sub">{_esc(run.namespace)}/{_esc(run.run_id)} \u00b7 benchmark {_esc(run.component("benchmark"))}'
        f" \u00b7 harness {_esc(run.component('harness'))} \u00b7 model {_esc(model.get('id', ''))}"
        f" \u00b7 environment {_esc(run.component('environment'))}</div>",
        "</header>\n<main>",
    ]
    if note:
        parts.append(f'<p class="note">{_esc(note)}</p>')
    parts += [
        '<section id="summary"><h2>Summary</h2><div class="cards">',
        _card("attempts done", f"{done} of {len(rows)}"),
        _card("accuracy", _fraction(overall.get("accuracy")),
              f"95% interval {_interval(interval)} (Wilson)" if interval else ""),
        *(_card(f"pass@{k}", _fraction(v)) for k, v in sorted(pass_at_k.items(), key=lambda kv: int(kv[0]))),
        _card("errors", str(errors), ", ".join(f"{k} {v}" for k, v in sorted((overall.get("counts") or {}).items()))),
        _card("model calls", _count(overall.get("calls"))),
        _card("tokens", _count((overall.get("prompt_tokens") or 0) + (overall.get("completion_tokens") or 0)),
              f"{_count(overall.get('prompt_tokens'))} prompt, {_count(overall.get('completion_tokens'))} completion"),
        _card("cost", results.dollars(cost, "\u2013"),
              _cost_detail(overall) if cost is not None else "the Model declares no prices (model.pricing)"),
        _card("model latency per attempt (p50)", latency, latency_detail),
        _card("wall time per attempt (p50)", wall, wall_detail),
        "</div>",
    ]
    # what every figure is over, and what was left out (infrastructure failures, quarantined tasks)
    parts.append(f'<p class="note" id="scored-on">Accuracy, pass@k and the benchmark metrics are scored '
                 f'{_esc(results.denominator_line(scored_on))}.</p>')
    if metrics is not None and not note and metrics.get("metrics"):
        parts.append("<h3>Benchmark metrics (metrics.json)</h3>")
        parts.append(_kv([(k, "\u2013" if v is None else v) for k, v in sorted(metrics["metrics"].items())]))
    parts.append("</section>")
    parts += _flags_section(run, rows, flags or _Flags())

    categories = summary.get("by_category") or {}
    # the four views of the results side by side on a wide screen
    parts.append('<div class="grid">')
    parts += ['<section id="categories"><h2>By category</h2>', drawn["categories.svg"],
              '<table><thead><tr><th>category</th><th class="num">attempts</th><th class="num">accuracy</th>'
              '<th>95% interval</th><th class="num">errors</th><th class="num">calls</th><th class="num">tokens</th>'
              '<th class="num">cost</th></tr></thead><tbody>']
    for name, stats in sorted(categories.items()):
        tokens = (stats.get("prompt_tokens") or 0) + (stats.get("completion_tokens") or 0)
        cells = [_esc(name), stats.get("attempts", 0), _fraction(stats.get("accuracy")),
                 _interval(stats.get("accuracy_ci95")), sum((stats.get("errors") or {}).values()),
                 _count(stats.get("calls")), _count(tokens), _cost(stats.get("cost_usd"))]
        parts.append("<tr>" + "".join(f"<td>{c}</td>" if i in (0, 3) else f'<td class="num">{c}</td>'
                                      for i, c in enumerate(cells)) + "</tr>")
    parts.append("</tbody></table></section>")

    parts += ['<section id="scores"><h2>Score distribution</h2>', drawn["scores.svg"], "</section>"]

    kinds = sorted((overall.get("errors") or {}).items(), key=lambda kv: (-kv[1], kv[0]))
    parts += ['<section id="errors"><h2>Errors by kind</h2>', drawn["errors.svg"]]
    if kinds:
        parts.append('<table><thead><tr><th class="num">attempts</th><th>kind (numbers written N; a click filters '
                     "the table)</th></tr></thead><tbody>")
        parts += [f'<tr><td class="num">{n}</td><td><a href="#attempts" data-kind="{_esc(kind)}">{_esc(kind)}</a></td></tr>'
                  for kind, n in kinds]
        parts.append("</tbody></table>")
    parts.append("</section>")

    parts += _failures_section(overall)

    parts += ['<section id="cost"><h2>Cost and tokens</h2>', drawn["tokens.svg"],
              _kv([("model calls", _count(overall.get("calls"))),
                   ("prompt tokens", _count(overall.get("prompt_tokens"))),
                   ("completion tokens", _count(overall.get("completion_tokens"))),
                   ("cost", results.dollars(cost, "no prices declared (model.pricing)")),
                   ("cost per attempt", results.dollars(overall.get("cost_per_attempt_usd"), "\u2013")),
                   ("cost per solved task", results.dollars(overall.get("cost_per_solved_usd"), "\u2013")),
                   ("answered from the call cache", results.cached_note(overall) or "none"),
                   ("model latency per attempt", latency_detail or "\u2013"),
                   ("wall time per attempt", wall_detail or "\u2013")]),
              "</section>", "</div>"]

    parts += [
        '<section id="attempts-section"><h2>Attempts</h2>',
        '<div class="controls"><input type="search" id="filter" aria-label="filter the attempts" '
        'placeholder="filter: task, category, status or error">'
        '<select id="status-filter" aria-label="status"><option value="">every status</option></select>'
        '<button type="button" id="previous">previous</button><span id="page-info"></span>'
        '<button type="button" id="next">next</button><span id="attempts-info" class="muted"></span></div>',
        '<table id="attempts"><thead><tr></tr></thead><tbody></tbody></table>',
        "</section>",
        "<section id=\"request\"><h2>Request</h2><details><summary>request.json</summary>"
        f"<pre>{_esc(json.dumps(request, indent=2, sort_keys=True))}</pre></details></section>",
        "</main>",
    ]
    return page(f"{run.name}: agentcompass report", "\n".join(parts), (STATIC / "index.js").read_text(),
                data_scripts=("data/attempts.js",))


def attempt_link(page: str, step: int | None = None) -> str:
    """The address of an attempt's page (``page``: ``segment/attempt``), at ``step`` of its trajectory when given:
    the segment encoded as the table's script encodes it (``encodeURIComponent``)."""
    segment, _, attempt = page.rpartition("/")
    link = f"attempt.html#{urllib.parse.quote(segment, safe='')}/{attempt}"
    return link if step is None else f"{link}/step/{step}"


def _flag_text(value: Any, limit: int = FLAG_TEXT_LIMIT) -> str:
    """A value of scan.json as escaped text, at most ``limit`` characters of it."""
    text = "" if value is None else str(value)
    return _esc(text if len(text) <= limit else text[:limit - 1] + "\u2026")


def _step_of(evidence: dict, flagged: _Flagged) -> str:
    """A piece of evidence's step: a link to it on the attempt's page when the page shows that step, else as text
    (no step, or one that is not a whole number of the trajectory: a scan.json edited by hand)."""
    step = evidence.get("step")
    if step is None:
        return '<span class="muted">no step</span>'
    if type(step) is int and step in flagged.steps and flagged.page:
        return f'<a href="{_esc(attempt_link(flagged.page, step))}">step {step}</a>'
    return f'<span class="muted">step {_flag_text(json.dumps(step) if isinstance(step, str) else step, 40)}</span>'


_DOT = " \u00b7 "


def _evidence_list(evidence: Any, flagged: _Flagged) -> str:
    items = []
    for piece in (evidence if isinstance(evidence, list) else [])[:EVIDENCE_SHOWN]:
        if not isinstance(piece, dict):
            continue
        where = [_step_of(piece, flagged)]
        if piece.get("tool"):
            where.append(f"<code>{_flag_text(piece.get('tool'))}</code>")
        if piece.get("file"):
            where.append(f"file <code>{_flag_text(piece.get('file'))}</code>")
        quote = f'<q>{_flag_text(piece.get("quote"))}</q>' if piece.get("quote") else ""
        items.append(f"<li>{_DOT.join(where)}{': ' + quote if quote else ''}</li>")
    return f'<ul class="evidence">{"".join(items)}</ul>' if items else '<span class="muted">no evidence</span>'


def _score(value: Any) -> str:
    """A score as the attempts table writes it (``String`` of the number: 0, 1, 0.5)."""
    if type(value) in (int, float):
        return _esc(int(value) if float(value).is_integer() else value)
    return _flag_text(value, 40)


def _confidence(value: Any) -> str:
    return f"{value:.2f}" if type(value) in (int, float) else _flag_text(value, 40)


def _flags_section(run: results.Run, rows: list[dict], flags: _Flags) -> list[str]:
    """The Flagged attempts of a scanned run: how many attempts were scanned and flagged (the rows' ``flagged``
    column), by scanner and category, then each flagged attempt (the first ``FLAGS_SHOWN``) beside its status
    and score, with each flagging scanner's evidence linked to its step. Nothing for a run that was not scanned."""
    scanned = [r for r in rows if r["flagged"] is not None]
    if not scanned:
        return []
    flagged = [r for r in scanned if r["flagged"] is True]
    parts = ['<section id="flags"><h2>Flagged attempts</h2>',
             f'<p id="flags-count"><strong>{len(flagged)}</strong> of {len(scanned)} attempts scanned were flagged by '
             "a transcript scanner" + (f" ({len(rows) - len(scanned)} not scanned yet)" if len(scanned) < len(rows)
                                       else "") + ". A flag never changes a score: it stands beside it, and each "
             "figure above counts the flagged attempts as it counts the others.</p>"]
    # every scanner of the request (those that flagged nothing too); for each, the attempts its row's flags
    # column names it in, by the category of its finding (a scanner of several categories: a row each)
    names = list(dict.fromkeys([*flags.errors, *(name for name, _ in flags.categories)]))
    parts.append("<h3>By scanner</h3>")
    parts.append('<table id="flags-by-scanner"><thead><tr><th>scanner (a click filters the table)</th><th>category</th>'
                 '<th class="num">attempts flagged</th><th class="num">could not scan</th></tr></thead><tbody>')
    for name in names:
        categories = sorted((c, n) for (s, c), n in flags.categories.items() if s == name) or [(flags.kinds.get(name, ""), 0)]
        for i, (category, n) in enumerate(categories):
            link = f'<a href="#attempts" data-flag="{_esc(name)}">{_esc(name)}</a>' if i == 0 else ""
            errors = flags.errors.get(name, 0) if i == 0 else ""
            parts.append(f'<tr><td>{link}</td><td>{_esc(category)}</td><td class="num">{n}</td>'
                         f'<td class="num">{errors}</td></tr>')
    parts.append("</tbody></table>")
    if flagged:
        parts.append("<h3>The flagged attempts, beside their scores</h3>")
        parts.append('<table id="flagged"><thead><tr><th>task</th><th class="num">attempt</th><th>status</th>'
                     '<th class="num">score</th><th>scanner</th><th>category</th><th class="num">confidence</th>'
                     "<th>evidence (a step opens the attempt there)</th></tr></thead><tbody>")
        for entry in flags.shown:
            row = entry.row
            task = (f'<a href="{_esc(attempt_link(entry.page))}">{_esc(row["task_id"])}</a>' if entry.page
                    else _esc(row["task_id"]))
            findings = entry.findings or [{"id": row["flags"]}]
            for i, finding in enumerate(findings):
                lead = (f'<td rowspan="{len(findings)}">{task}</td><td class="num" rowspan="{len(findings)}">'
                        f'{row["attempt"]}</td><td rowspan="{len(findings)}"><span class="status {_esc(row["status"])}">'
                        f'{_esc(row["status"])}</span></td><td class="num" rowspan="{len(findings)}">'
                        f'{_score(row["score"])}</td>') if i == 0 else ""
                parts.append(f'<tr class="flagged-attempt">{lead}<td>{_flag_text(finding.get("id"))}</td>'
                             f'<td>{_flag_text(finding.get("category"))}</td>'
                             f'<td class="num">{_confidence(finding.get("confidence"))}</td>'
                             f"<td>{_evidence_list(finding.get('evidence'), entry)}</td></tr>")
        parts.append("</tbody></table>")
        if len(flagged) > len(flags.shown):
            parts.append(f'<p class="muted" id="flags-more">and {len(flagged) - len(flags.shown)} more: see '
                         f"<code>agentcompass export {_esc(run.path)}</code>, its <code>flagged</code> and "
                         "<code>flags</code> columns (or the attempts table, filtered to the flagged).</p>")
    parts.append("</section>")
    return parts


def _failures_section(overall: dict) -> list[str]:
    """Why attempts did not complete, by failure class in the taxonomy's order: a chart drawn inline (the
    report's declared files stay those of the stage table) and a table of the counts."""
    found = overall.get("failures") or {}
    counts = [(cls.value, int(found.get(cls.value) or 0)) for cls in FailureClass if found.get(cls.value)]
    chart = charts.bars("Failures by class", [charts.Bar(name, n, str(n), colour=charts.RED) for name, n in counts],
                        empty="no failures", chart_id="chart-failures")
    parts = ['<section id="failures"><h2>Failures by class</h2>', chart]
    if counts:
        parts.append('<table><thead><tr><th>class</th><th class="num">attempts</th></tr></thead><tbody>')
        parts += [f'<tr><td>{_esc(name)}</td><td class="num">{n}</td></tr>' for name, n in counts]
        parts.append("</tbody></table>")
    parts.append('<p class="muted">docs/benchmarks.md, "Why attempts fail": what puts an attempt in each class; '
                 "<code>agentcompass retry --only CLASS,...</code> reruns those.</p></section>")
    return parts


def _attempt_page(run: results.Run) -> str:
    body = (f'<header class="top"><h1>{_esc(run.name)}</h1><div class="sub"><a href="{INDEX}">\u2190 the report</a>'
            f" \u00b7 {_esc(run.namespace)}/{_esc(run.run_id)}</div></header>\n"
            '<main id="attempt"><p class="muted">loading the attempt\u2026</p></main>')
    return page(f"{run.name}: agentcompass report", body, (STATIC / "attempt.js").read_text())
