"""``agentcompass report``: rebuild each run's report from its files, without Snakemake."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from agentcompass import results
from agentcompass.imports import shown
from agentcompass.pipeline import locks
from agentcompass.runtime.models.orchestration import EXIT_LOCKED, EXIT_USAGE

from .common import _print


def cmd_report(args) -> int:
    from agentcompass import report  # here: what the other commands need not import (the charts)

    try:
        runs = results.find_runs(*(args.run_dirs or ["results"]))
    except (FileNotFoundError, ValueError) as exc:  # ValueError: an import that cannot be read
        _print(f"agentcompass report: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if not runs:
        _print(f"agentcompass report: no run found in {' '.join(args.run_dirs or ['results'])} (a run's folder holds "
              "request.json). Fix: name a run's folder, results/<namespace>/<run_id>, or the results root it is in",
              file=sys.stderr)
        return EXIT_USAGE
    if args.out is not None and len(runs) != 1:
        _print(f"agentcompass report: --out is the folder of one run's report, and {len(runs)} runs were found. "
              "Fix: name one run", file=sys.stderr)
        return EXIT_USAGE
    imported = [run for run in runs if run.imported is not None]
    # a run another tool wrote is never written to: its report goes to a folder the user names, out of it
    if imported and (args.out is None or _within(args.out, imported[0].path)):
        name = shown(imported[0].path)
        _print(f"agentcompass report: {name} is a run another tool wrote, which is never written to: its report "
              f"goes to a folder you name, outside it. Fix: agentcompass report {name} --out DIR", file=sys.stderr)
        return EXIT_USAGE
    try:
        # a run still building its files would write the same folder: wait for it, as a second run would
        held = locks.acquire_all(run.path for run in runs if run.imported is None)
    except locks.RunHeldError as exc:
        _print(f"agentcompass: {exc}", file=sys.stderr)
        return EXIT_LOCKED
    try:
        for run in runs:
            try:
                _print(report.build(run.path, args.out))
            except (OSError, ValueError, KeyError) as exc:
                _print(f"agentcompass report: {run.path}: a file of this run cannot be read ({type(exc).__name__}: "
                      f"{exc}). Fix: run its request again, which rebuilds the files that are not valid",
                      file=sys.stderr)
                return 1
    finally:
        for folder in held:
            locks.release(folder)
    return 0


def _within(out: str, path: Path) -> bool:
    """Whether the folder ``out`` is ``path`` or in it (links resolved)."""
    found, where = os.path.realpath(out), os.path.realpath(path)
    return os.path.commonpath([found, where]) == where


def register(sub) -> None:
    p = sub.add_parser(
        "report",
        help="rebuild the report of each run (results/<ns>/<run_id>/report/index.html) and print its path",
        description="Builds each run's report from the files on disk, without Snakemake, so it also works on a run "
        "that stopped (its figures then count the attempts done so far). The workflow builds the same report "
        "after metrics.json.",
    )
    p.add_argument("run_dirs", nargs="*", metavar="RUN_DIR",
                   help="a run's folder, or a results root holding runs (default: results)")
    p.add_argument("--out", metavar="DIR",
                   help="write the one run's report to DIR instead of its folder's report/; a run another tool "
                        "wrote (an Inspect .eval log, a Harbor job folder), which is never written to, needs it")
    p.set_defaults(func=cmd_report)
