"""``agentcompass runs`` and ``agentcompass export``: the runs under a results folder, and their attempts as a table."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from agentcompass import atif, layout, results
from agentcompass._util import display
from agentcompass._util.jsonio import write_text_atomic
from agentcompass.results import dollars
from agentcompass.runtime.models.orchestration import EXIT_USAGE

from .common import _print


def _scored(scored: dict | None) -> str:
    """What the accuracy is over: the tasks scored of those listed (``3/4 tasks``), the attempts counted when
    some of several per task were left out, and what was (``1 infrastructure``, ``2 quarantined``)."""
    if not scored:
        return "-"
    attempts, counted = scored.get("attempts"), scored.get("counted")
    notes = [f"{counted}/{attempts} attempts"] if attempts is not None and counted != attempts != scored["tasks"] else []
    notes += [f"{scored[key]} {key}" for key in ("infrastructure", "quarantined") if scored.get(key)]
    return f"{scored['scored']}/{scored['tasks']} tasks" + (f" ({'; '.join(notes)})" if notes else "")


def _cached(overview: dict) -> str:
    """The calls the call cache answered, and what they would have cost: ``12 ($0.0040)``; '-' for none."""
    calls = overview.get("cached_calls") or 0
    if not calls:
        return "-"
    saved = overview.get("saved_usd")
    return f"{calls}" + ("" if saved is None else f" ({dollars(saved)})")


def _runs_table(overviews: list[dict]) -> str:
    """One aligned line per run, under a header."""
    header = ["namespace", "run id", "benchmark", "harness", "model", "attempts", "errors", "failures by class",
              "accuracy", "scored on", "cost", "cost/solved", "cached", "flagged", "last change"]
    lines = [header]
    for o in overviews:
        total = "?" if o["attempts_total"] is None else str(o["attempts_total"])
        changed = (o["last_change"] or "-").replace("T", " ")[:19]
        lines.append([*map(display.visible, (o["namespace"], o["run_id"], o["benchmark"], o["harness"], o["model"])),
                      f"{o['attempts_done']}/{total}", str(o["errors"]),
                      " ".join(f"{display.visible(str(cls))}={n}" for cls, n in o["failures"].items()) or "-",
                      "-" if o["accuracy"] is None else f"{o['accuracy']:.3f}",
                      _scored(o.get("scored_on")),
                      dollars(o["cost_usd"]), dollars(o.get("cost_per_solved_usd")), _cached(o),
                      "-" if o.get("flagged") is None else str(o["flagged"]), changed])
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(line, widths)).rstrip() for line in lines)


def cmd_runs(args) -> int:
    try:
        overviews = [results.overview(run) for run in results.find_runs(args.results_dir)]
    except (FileNotFoundError, ValueError) as exc:
        _print(f"agentcompass runs: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.json:
        _print(json.dumps(overviews, indent=2, sort_keys=True))
    elif not overviews:
        _print(f"no runs under {args.results_dir} (a run's folder holds request.json)")
    else:
        _print(_runs_table(overviews))
    return 0


EXPORT_FORMATS = ("csv", "parquet", "jsonl", "atif")


def _inside_run(path: Path) -> Path | None:
    """The run folder (a folder holding request.json) that ``path`` is, or is inside, if any."""
    for folder in (path, *path.parents):
        if Path(layout.request_file(folder)).exists():
            return folder
    return None


def _export_atif(args) -> int:
    """One ATIF file per finished attempt of the runs in ``args.run_dirs``, under ``args.output``:
    ``<namespace>/<run_id>/<task segment>/<attempt>.json``."""
    if not args.output:
        _print("agentcompass export: --format atif writes one file per attempt, into a folder. Fix: give "
               "-o FOLDER", file=sys.stderr)
        return EXIT_USAGE
    out = Path(args.output).absolute()
    run = _inside_run(out)
    if run is not None:
        _print(f"agentcompass export: {display.visible(str(out))} is in the run folder {display.visible(str(run))}, "
               "whose files agentcompass alone writes. Fix: give -o a folder outside every run", file=sys.stderr)
        return EXIT_USAGE
    if out.exists() and (not out.is_dir() or any(out.iterdir())) and not args.force:
        _print(f"agentcompass export: {display.visible(str(out))} exists and is not an empty folder. Fix: give -o a "
               "new folder, or --force to write into it (files of the same names are replaced)", file=sys.stderr)
        return EXIT_USAGE
    try:
        runs = results.find_runs(*args.run_dirs)
    except (FileNotFoundError, ValueError) as exc:
        _print(f"agentcompass export: {exc}", file=sys.stderr)
        return EXIT_USAGE
    for found in runs:
        if found.imported is not None:  # another tool's run: its trajectories are its own, and it is never written into
            _print(f"agentcompass export: {display.visible(str(found.path))} is a run of {found.imported.source}, which "
                   "holds no agentcompass trajectory to write as ATIF. Fix: export it as csv, parquet or jsonl "
                   "(its rows), or drop it from the command", file=sys.stderr)
            return EXIT_USAGE
    written = unfinished = 0
    try:
        for found in runs:
            for name, document in atif.run_documents(found):
                if document is None:
                    unfinished += 1
                    continue
                path = out / name
                path.parent.mkdir(parents=True, exist_ok=True)
                write_text_atomic(path, json.dumps(document, ensure_ascii=False, indent=1) + "\n")
                written += 1
    except ValueError as exc:  # a file of a run agentcompass did not write (read_json names it)
        _print(f"agentcompass export: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as exc:
        _print(f"agentcompass export: cannot write under {display.visible(str(out))}: {exc.strerror or exc}. Fix: "
               "choose a folder you can write to", file=sys.stderr)
        return EXIT_USAGE
    not_yet = f"; {unfinished} attempt(s) not finished, not written" if unfinished else ""
    _print(f"{display.visible(str(out))}: {written} ATIF trajectories ({atif.SCHEMA_VERSION}) of {len(runs)} run(s), "
           f"one file per attempt{not_yet}")
    return 0


def cmd_export(args) -> int:
    if args.format == "atif":
        return _export_atif(args)
    if args.format == "parquet":
        if not args.output:
            _print("agentcompass export: parquet is binary and is not written to a terminal. "
                  "Fix: give -o FILE.parquet", file=sys.stderr)
            return EXIT_USAGE
        try:
            import pyarrow  # noqa: F401  (pandas writes parquet through it)
        except ImportError:
            _print("agentcompass export: --format parquet needs pyarrow, which is not installed. "
                  "Fix: pip install pyarrow (or pip install -e '.[parquet]'), or export --format csv or jsonl",
                  file=sys.stderr)
            return EXIT_USAGE
    try:
        frame = results.load(*args.run_dirs)
    except (FileNotFoundError, ValueError) as exc:
        _print(f"agentcompass export: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.format == "csv":
        text = display.csv_text(frame, index=False)  # formula cells prefixed, controls shown
    elif args.format == "jsonl":  # pandas' own to_json writes every / as \/
        records = frame.astype(object).where(frame.notna(), None).to_dict("records")
        text = "".join(display.terminal_json(json.dumps(record, ensure_ascii=False)) + "\n" for record in records)
    if not args.output:
        sys.stdout.write(text)
        return 0
    try:
        if args.format == "parquet":
            Path(args.output).parent.mkdir(parents=True, exist_ok=True)
            frame.to_parquet(args.output, index=False)
        else:
            write_text_atomic(args.output, text)
    except OSError as exc:
        _print(f"agentcompass export: cannot write {args.output}: {exc.strerror or exc}. Fix: choose a file "
              "in a folder you can write to", file=sys.stderr)
        return EXIT_USAGE
    runs = frame.groupby(["namespace", "run_id"]).ngroups if len(frame) else 0
    _print(f"{args.output}: {len(frame)} attempts of {runs} run(s), one row each ({args.format})")
    return 0


def register(sub) -> None:
    _add_runs_parser(sub)
    _add_export_parser(sub)


def _add_runs_parser(sub) -> None:
    p = sub.add_parser(
        "runs", help="every run under a results folder, one line each",
        description="Lists the runs under RESULTS_DIR (default: results): namespace, run id, benchmark, harness, "
        "model, attempts done of all, failed attempts, accuracy and the tasks it is over (infrastructure failures and "
        "quarantined tasks left out), cost and cost per solved task (when the "
        "Model declares model.pricing), the calls the call cache answered, the attempts a transcript scanner "
        "flagged ('-' for a run without scanners) and when a file of the run last changed. RESULTS_DIR may also name one "
        "run another tool wrote (an Inspect .eval log, a Harbor job folder: namespace 'imported'); imports are "
        "listed when named, never found under a results folder.",
    )
    p.add_argument("results_dir", nargs="?", default="results", metavar="RESULTS_DIR",
                   help="a results folder, a run's folder, or an import (default: results)")
    p.add_argument("--json", action="store_true", help="print a JSON list, one object per run")
    p.set_defaults(func=cmd_runs)


def _add_export_parser(sub) -> None:
    p = sub.add_parser(
        "export", help="every attempt of runs as a table (csv, parquet, jsonl) or as ATIF trajectories",
        description="Writes one row per attempt of the runs in RUN_DIR (a run's folder, a results folder: every run "
        "under it, or a run another tool wrote: an Inspect .eval log, a Harbor job folder), with the columns of "
        "agentcompass.results.load. Without -o, csv and jsonl go to standard output. --format atif writes each "
        "finished attempt's trajectory in Harbor's Agent Trajectory Interchange Format "
        f"({atif.SCHEMA_VERSION}) to -o FOLDER/<namespace>/<run_id>/<task>/<attempt>.json.",
    )
    p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR")
    p.add_argument("--format", "-f", choices=EXPORT_FORMATS, default="csv",
                   help="csv (default), parquet (needs pyarrow), jsonl, or atif (one file per attempt, needs -o)")
    p.add_argument("--output", "-o", metavar="FILE", help="write here instead of standard output (a folder for atif)")
    p.add_argument("--force", action="store_true",
                   help="atif: write into an -o folder that is not empty (never into a run folder)")
    p.set_defaults(func=cmd_export)
