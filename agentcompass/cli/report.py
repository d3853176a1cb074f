"""``agentcompass report``: rebuild each run's report from its files, without Snakemake."""

from __future__ import annotations

import sys

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
    imported = [run for run in runs if run.imported is not None]
    if imported:  # the report is written into the run's folder, and nothing is ever written into an import
        _print(f"agentcompass report: {shown(imported[0].path)} is a run another tool wrote: the report "
              "is written into a run's own folder, and an import is never written to. Fix: agentcompass compare, "
              "runs or export read it", file=sys.stderr)
        return EXIT_USAGE
    try:
        # a run still building its files would write the same folder: wait for it, as a second run would
        held = locks.acquire_all(run.path for run in runs)
    except locks.RunHeldError as exc:
        _print(f"agentcompass: {exc}", file=sys.stderr)
        return EXIT_LOCKED
    try:
        for run in runs:
            try:
                _print(report.build(run.path))
            except (OSError, ValueError, KeyError) as exc:
                _print(f"agentcompass report: {run.path}: a file of this run cannot be read ({type(exc).__name__}: "
                      f"{exc}). Fix: run its request again, which rebuilds the files that are not valid",
                      file=sys.stderr)
                return 1
    finally:
        for folder in held:
            locks.release(folder)
    return 0


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
    p.set_defaults(func=cmd_report)
