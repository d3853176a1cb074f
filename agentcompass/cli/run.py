"""``agentcompass run``: build the requests through Snakemake and print each one's outcome."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from agentcompass import callcache, forecast, layout, results, sdk
from agentcompass._util import display
from agentcompass.pipeline import progress
from agentcompass.pipeline import locks
from agentcompass.runtime.config import ConfigError
from agentcompass.runtime.models.orchestration import EXIT_BUDGET, EXIT_FLAGGED, EXIT_LOCKED, EXIT_OK, EXIT_STOPPED

from .common import _add_selection, _cores, _layer, _print, _resolve


def _outcome_line(outcome) -> str:
    metrics = ", ".join(f"{k} {v}" for k, v in sorted(outcome.metrics.items()))
    if outcome.state == "planned":
        return f"{outcome.name}: dry run: nothing was built"
    if outcome.state == "partial":
        return (f"{outcome.name}: built what was asked ({outcome.reason}); {outcome.done} of "
                f"{outcome.total or '?'} attempts done -> {outcome.results_dir}")
    if outcome.state == "stopped":
        return (f"{outcome.name}: stopped before it finished ({outcome.reason}): {outcome.done} of "
                f"{outcome.total or '?'} attempts done; run the same command again to continue -> {outcome.results_dir}")
    if outcome.state == "budget_spent":  # the reason says what was paid, how many wait, and the fix
        return (f"{outcome.name}: budget spent: {outcome.done} of {outcome.total or '?'} attempts done; "
                f"{outcome.reason} -> {outcome.results_dir}")
    total = sum(outcome.counts.values())
    # what the attempts cost, as metrics.json's summary has it (a field it lacks is not shown)
    try:
        summary = json.loads(Path(layout.metrics_file(outcome.results_dir)).read_text()).get("summary")
    except (OSError, ValueError, AttributeError):
        summary = None
    usage = progress.usage_summary(summary.get("overall") if isinstance(summary, dict) else None)
    usage = f"; {usage}" if usage else ""
    if outcome.scored_on:  # what the metrics are over: the tasks counted, and those left out (results.left_out)
        metrics += f" {results.denominator_line(outcome.scored_on)}"
    if outcome.flags:  # beside the metrics, which count every attempt: what the transcript scanners flagged
        metrics += f"; {results.flags_line(outcome.flags)}"
    if outcome.state == "completed_with_errors":
        failed = sum(outcome.errors.values())
        kinds = "; ".join(f"{display.visible(kind)} x{n}" for kind, n in outcome.errors.items())
        return (f"{outcome.name}: completed with errors: {failed} of {total} attempts failed ({kinds}); "
                f"{metrics}{usage} -> {layout.metrics_file(outcome.results_dir)}")
    return f"{outcome.name}: completed: {total} attempts; {metrics}{usage} -> {layout.metrics_file(outcome.results_dir)}"


def _print_forecast(told: forecast.Forecast, file=None) -> None:
    """A request's forecast (``Forecast.lines``), its first line after the request's name."""
    first, *rest = told.lines()
    _print(f"{told.name}: {first}", file=file)
    for line in rest:
        _print(f"  {line}", file=file)


def _build(orchestration, layer, args, extra: list[str], quiet: bool = False) -> int:
    """Run the workflow, print each request's outcome (``quiet``: only when it stopped before finishing), and
    return the exit status (docs/reuse.md, Exit status)."""
    argv = sdk.snakemake_argv(layer, args.config or [], args.cores, extra)
    try:
        result = sdk.build(orchestration, argv)
    except locks.RunHeldError as exc:
        _print(f"agentcompass: {exc}", file=sys.stderr)
        return EXIT_LOCKED
    if not quiet or result.exit_status in (EXIT_STOPPED, EXIT_BUDGET):
        for outcome in result.outcomes:
            _print(_outcome_line(outcome))
    if any(outcome.state == "planned" for outcome in result.outcomes):  # Snakemake's dry run (-- -n)
        for told in forecast.forecasts(orchestration, Path.cwd()):
            _print_forecast(told)
    flagged = {o.name: o.flags["flagged"] for o in result.outcomes if o.flags and o.flags.get("flagged")}
    if result.exit_status == EXIT_OK and getattr(args, "fail_on_flag", False) and flagged:
        if not quiet:  # a run's own failure (1, 3, 5) wins: this is said only of a run that otherwise ended well
            each = ", ".join(f"{display.visible(name)} {n}" for name, n in flagged.items())
            _print(f"flagged: {sum(flagged.values())} attempt(s) flagged by a transcript scanner ({each}); "
                   f"--fail-on-flag: exit status {EXIT_FLAGGED}")
        return EXIT_FLAGGED
    return result.exit_status


def check_fail_on_flag(args, orchestration) -> None:
    """``--fail-on-flag`` needs a request with scanners (nothing else can be flagged): a ConfigError, before
    any job, when none of ``orchestration``'s requests names one."""
    if getattr(args, "fail_on_flag", False) and not any(run.request.scanners for run in orchestration.runs):
        raise ConfigError("--fail-on-flag: no request names a transcript scanner, so no attempt can be flagged. "
                          "Fix: add --scanner ID (agentcompass list scanner) or scanners: in the config, or drop "
                          "--fail-on-flag")


def add_fail_on_flag(p) -> None:
    """The ``--fail-on-flag`` option of ``run`` and ``retry``."""
    p.add_argument("--fail-on-flag", action="store_true",
                   help=f"exit with status {EXIT_FLAGGED} when the run otherwise ends with 0 and a transcript scanner "
                        "flagged an attempt (needs --scanner; a failed or stopped run keeps its own status)")


def cmd_run(args) -> int:
    layer = _layer(args)
    if args.cache is not None:  # process-wide: over every request's execution.cache
        layer = {**(layer or {}), "runtime": {**(layer or {}).get("runtime", {}), "cache": args.cache}}
    orchestration = _resolve(args, layer)
    check_fail_on_flag(args, orchestration)
    if args.dry_run:
        # what would run and spend: planned as status plans, in a scratch folder; no model is called
        told = forecast.forecasts(orchestration, Path.cwd())
        _print(json.dumps([{"name": r.name, "request": r.request.to_dict(), "forecast": f.to_dict()}
                           for r, f in zip(orchestration.runs, told)], indent=2, sort_keys=True))
        for f in told:  # the same in words, beside the data
            _print_forecast(f, file=sys.stderr)
        return 0
    return _build(orchestration, layer, args, args.snakemake_args)


def register(sub) -> None:
    p = sub.add_parser(
        "run",
        help="evaluate MODEL with HARNESS on BENCHMARK (or the requests of --config files) through Snakemake",
        description="Builds the config and runs it through the Snakemake workflow. "
        "Arguments after '--' go to Snakemake (e.g. -- --profile profiles/slurm).",
    )
    _add_selection(p)
    p.add_argument("--cores", default="2", type=_cores, help="jobs at once (attempts wait on I/O: more than the CPUs is fine)")
    p.add_argument("--dry-run", "-n", action="store_true", help="print the complete resolved requests and what they would spend "
                   "(the attempts that would run, their tokens and cost: docs/spend.md); call no model")
    p.add_argument("--cache", nargs="?", const="on", choices=callcache.MODES, metavar="MODE",
                   help="the call cache for every request (execution.cache): on (the default of --cache), refresh, "
                        "replay or off")
    p.add_argument("--no-cache", dest="cache", action="store_const", const="off",
                   help="no call cache for any request (--cache off)")
    add_fail_on_flag(p)
    p.set_defaults(func=cmd_run)
