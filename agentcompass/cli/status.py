"""``agentcompass status`` and ``agentcompass retry``: the requests' attempts by status, and rerunning the failed ones."""

from __future__ import annotations

import sys
from pathlib import Path

from agentcompass import forecast, layout, results, spend, status
from agentcompass.plugins import load_components
from agentcompass.runtime.config import ConfigError
from agentcompass.runtime.models import FailureClass
from agentcompass.runtime.models.orchestration import EXIT_LOCKED, EXIT_STOPPED
from agentcompass.runtime.registry import REGISTRIES

from .common import _add_selection, _cores, _layer, _print, _resolve
from .run import _build, add_fail_on_flag, check_fail_on_flag


def cmd_status(args) -> int:
    if args.snakemake_args:
        _print(f"agentcompass status: unexpected argument(s) {' '.join(args.snakemake_args)}: status takes "
              "BENCHMARK HARNESS MODEL and the options of 'run', and runs no Snakemake", file=sys.stderr)
        return 2
    load_components()
    if args.benchmark and not (args.harness or args.model) and args.benchmark not in REGISTRIES["benchmark"] \
            and Path(args.benchmark).is_dir():
        # 'status RESULTS_DIR' of earlier versions: a lone folder that is no benchmark id is still read so
        if args.results_dir:
            raise ConfigError(f"the command line: {args.benchmark!r} and --results-dir {args.results_dir!r} both "
                              "name the results folder. Fix: give --results-dir only")
        _print(f"agentcompass status: reading {args.benchmark} as --results-dir {args.benchmark} "
              "(a results folder as the first argument is deprecated)", file=sys.stderr)
        args.results_dir, args.benchmark = args.benchmark, None
    layer = _layer(args)
    orchestration = _resolve(args, layer)
    statuses = status.predict(orchestration, Path.cwd())
    folders = results.run_folders(orchestration, Path.cwd())
    for state, told, run, folder in zip(statuses, forecast.of_statuses(orchestration, statuses, Path.cwd()),
                                        orchestration.runs, folders):
        state.forecast = told.lines() + spend.budget_lines(run.request.execution.budget, folder)
    _print(status.render(statuses, verbose=args.verbose))
    return 0


def failure_classes(text: str | None) -> frozenset[FailureClass] | None:
    """``--only``'s comma-separated failure classes (None: every failed attempt); an unknown one is a ConfigError."""
    if text is None:
        return None
    names = [name.strip() for name in text.split(",") if name.strip()]
    valid = [cls.value for cls in FailureClass]
    unknown = [name for name in names if name not in valid]
    if unknown or not names:
        what = f"unknown failure class(es) {', '.join(map(repr, unknown))}" if unknown else "no failure class"
        raise ConfigError(f"retry --only {text!r}: {what}. Fix: name one or more of {', '.join(valid)}, "
                          "separated by commas (docs/benchmarks.md, 'Why attempts fail')")
    return frozenset(FailureClass(name) for name in names)


def cmd_retry(args) -> int:
    only = failure_classes(args.only)  # before anything is resolved or run
    layer = _layer(args)
    orchestration = _resolve(args, layer)
    check_fail_on_flag(args, orchestration)
    base = orchestration.runtime.results_dir

    def run_dir(run) -> Path:
        return layout.run_dir(base, run.request.namespace, run.request.run_id)

    targets = [
        t for run in orchestration.runs
        for t in status.failed_attempt_targets(run_dir(run), run.request, orchestration.runtime.shard_size, only)
    ]
    classes = "" if only is None else " of class " + ", ".join(c.value for c in FailureClass if c in only)
    if only is not None and FailureClass.TASK in only:
        _print("attempts quarantined by preflight (skipped, class task) are not retried: they run by themselves "
               "once their task's preflight passes (fix the task, check it with `agentcompass check`, run again)")
    if not targets:
        _print(f"no attempt{classes} holds an error status: nothing to retry")
        return 0
    _print(f"retrying {len(targets)} failed attempt(s){classes}")
    # the attempt files to force are known from the requests' task lists and plans: those of a task edited
    # since (a Dockerfile fixed) are rebuilt first, as a run would, before any attempt is forced
    lists = [f for run in orchestration.runs for f in (layout.tasks_file(run_dir(run)), layout.plans_file(run_dir(run)))]
    code = _build(orchestration, layer, args, [*args.snakemake_args, *lists], quiet=True)
    if code in (EXIT_STOPPED, EXIT_LOCKED):
        return code
    # the caller's arguments first: --forcerun takes every argument up to the next option
    return _build(orchestration, layer, args, [*args.snakemake_args, "--forcerun", *targets])


def register(sub) -> None:
    p = sub.add_parser(
        "status", help="counts by status per request, and which files would rerun and why",
        description="Takes the same BENCHMARK HARNESS MODEL (or --config files) and options as 'run', and "
        "reports on the requests that 'run' would build: their attempts by status, the failed ones, and which "
        "files the next run rebuilds and why. The results folder is --results-dir (default: runtime.results_dir).",
    )
    _add_selection(p)
    p.add_argument("--verbose", "-v", action="store_true", help="list every file that would rerun and every failed attempt")
    p.set_defaults(func=cmd_status)

    p = sub.add_parser("retry", help="rerun only the attempts whose result.json holds an error status")
    _add_selection(p)
    p.add_argument("--only", metavar="CLASS,...", help="retry only the failed attempts of these failure classes ("
                   + ", ".join(c.value for c in FailureClass) + "); default: every failed attempt")
    p.add_argument("--cores", default="2", type=_cores)
    add_fail_on_flag(p)
    p.set_defaults(func=cmd_retry)
