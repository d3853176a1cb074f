"""``agentcompass check``: vet a task set before any model call: each task's preflight, and nothing else."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from agentcompass import layout, sdk
from agentcompass._util import display
from agentcompass._util.jsonio import read_json
from agentcompass.pipeline import locks
from agentcompass.results import task_segments
from agentcompass.runtime.models.orchestration import EXIT_ATTEMPT_ERRORS, EXIT_LOCKED, EXIT_OK, EXIT_STOPPED
from agentcompass.stages import ONLY_ENV

from .common import _add_selection, _cores, _layer, _print, _resolve


def cmd_check(args) -> int:
    args.harness, args.model = "oracle", "none"  # the reference solution needs no model
    args.preflight = args.runs
    layer = _layer(args)
    orchestration = _resolve(args, layer)
    argv = sdk.snakemake_argv(layer, args.config or [], args.cores, args.snakemake_args)
    held = os.environ.get(ONLY_ENV)
    os.environ[ONLY_ENV] = "preflight"  # the workflow's targets: the request's files and each task's preflight
    try:
        result = sdk.build(orchestration, argv)
    except locks.RunHeldError as exc:
        _print(f"agentcompass: {exc}", file=sys.stderr)
        return EXIT_LOCKED
    finally:
        if held is None:
            os.environ.pop(ONLY_ENV, None)
        else:
            os.environ[ONLY_ENV] = held
    status = EXIT_OK
    for outcome in result.outcomes:
        status = max(status, _report(outcome.name, Path(outcome.results_dir)))
    return status


def _report(name: str, run: Path) -> int:
    """Print the broken and flaky tasks of one request, from its preflight files; its exit status."""
    segments = task_segments(run)
    files = [Path(layout.task_file(run, segment, layout.PREFLIGHT_RECORD)) for segment in segments]
    if not segments or not all(f.exists() for f in files):
        _print(f"{name}: the preflight did not finish; Snakemake's output above says why -> {run}")
        return EXIT_STOPPED
    records = [read_json(f) for f in files]
    broken = [r for r in records if not r["passed"] and not r["flaky"]]
    flaky = [r for r in records if r["flaky"]]
    _print(f"{name}: {len(records) - len(broken) - len(flaky)} of {len(records)} tasks pass preflight; "
           f"{len(broken)} broken, {len(flaky)} flaky -> {layout.preflight_folder(run)}")
    for label, group in (("broken", broken), ("flaky", flaky)):
        for r in group:
            verdicts = ", ".join("pass" if run["correct"] is True else "fail" for run in r["runs"])
            _print(f"  {label}: {display.visible(r['task_id'])} ({verdicts}): {display.visible(r['error'] or '')}")
    return EXIT_ATTEMPT_ERRORS if broken or flaky else EXIT_OK


def register(sub) -> None:
    p = sub.add_parser(
        "check",
        help="run only each task's reference solution (the preflight stage, no model) and print the broken and flaky tasks",
        description="Vets BENCHMARK's tasks before any model call: runs each task's preflight (its reference "
        "solution, as 'agentcompass run BENCHMARK oracle none' with execution.preflight) and prints the tasks "
        "whose reference fails (broken) or passes only sometimes (flaky). Exit status 1 when there is one.",
    )
    _add_selection(p)
    p.add_argument("--runs", type=int, default=1, help="runs of each task's reference; tasks whose runs disagree are flaky")
    p.add_argument("--cores", default="2", type=_cores, help="jobs at once")
    p.set_defaults(func=cmd_check)
