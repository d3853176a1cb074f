"""``agentcompass diff`` and ``agentcompass compare``: what differs between plans, and between runs' results."""

from __future__ import annotations

import sys

from agentcompass import compare
from agentcompass._util import display
from agentcompass._util.jsonio import canonical_json, write_text_atomic
from agentcompass.runtime.models.orchestration import EXIT_USAGE

from .common import _print


def cmd_diff(args) -> int:
    from agentcompass import plan_diff  # here: what the other commands need not import

    try:
        found = plan_diff.diff(args.a, args.b)
    except plan_diff.DiffError as exc:
        _print(f"agentcompass diff: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.json:
        sys.stdout.write(display.terminal_json(canonical_json(found.to_json())))
    else:
        _print(plan_diff.render(found, args.verbose))
    return 0


def cmd_compare(args) -> int:
    try:
        found = compare.compare(args.runs, resamples=args.resamples, seed=args.seed,
                                exclude_flagged=args.exclude_flagged, map_tasks=args.map_tasks)
    except compare.CompareError as exc:
        _print(f"agentcompass compare: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.html:
        try:
            page = write_text_atomic(args.html, compare.render_html(found))
        except OSError as exc:
            _print(f"agentcompass compare: cannot write {args.html} ({exc.strerror}). Fix: name a file in a folder "
                  "you can write to", file=sys.stderr)
            return EXIT_USAGE
        _print(f"wrote {page}", file=sys.stderr)
    if args.json:
        sys.stdout.write(display.terminal_json(canonical_json(compare.to_json(found))))
    else:
        _print(compare.render(found))
    return 0


def register(sub) -> None:
    _add_diff_parser(sub)
    _add_compare_parser(sub)


def _add_diff_parser(sub) -> None:
    p = sub.add_parser(
        "diff", help="the plan fields that differ between two plans, attempts or runs, and which files that reruns",
        description="A and B are two plan.json files, two attempt folders or two run folders. Prints the fields "
        "that differ, grouped by the stage that reads them, and which files building A's folder with B's settings "
        "would rebuild, by the reuse rule (docs/reuse.md, Files and reuse). Exit status 0, or 2 when A or B cannot be read.",
    )
    p.add_argument("a", metavar="A", help="plan.json, attempt folder or run folder")
    p.add_argument("b", metavar="B", help="the same kind as A")
    p.add_argument("--verbose", "-v", action="store_true", help="every attempt's differences and reruns")
    p.add_argument("--json", action="store_true", help="one JSON object instead of text")
    p.set_defaults(func=cmd_diff)


def _add_compare_parser(sub) -> None:
    p = sub.add_parser(
        "compare", help="a paired comparison of runs over the same tasks: deltas, intervals, tests, flipped tasks",
        description="Compares each run after the first with the first (B - A), pairing attempts by task id and "
        "attempt number: accuracy (McNemar's exact test) and mean score (paired bootstrap) with 95% intervals "
        "(paired bootstrap over tasks, seeded), the tasks that flipped each way, tokens and cost, and the "
        "request.json keys that differ. A run is a run's folder or a run another tool wrote: an Inspect AI .eval log "
        "(needs the inspect extra), a Harbor job folder (docs/reports.md, Runs of other tools). Exit status 0, or 2 "
        "when a path is not a run or cannot be read, the runs share no attempt, or --exclude-flagged names a run that "
        "was not scanned.",
    )
    p.add_argument("runs", nargs="+", metavar="RUN",
                   help="run folders, results/<namespace>/<run_id>, or imports (an Inspect .eval log, a Harbor job "
                        "folder); the first is A")
    p.add_argument("--json", action="store_true", help="one JSON object instead of the table")
    p.add_argument("--html", metavar="OUT", help="also write a self-contained page to OUT")
    p.add_argument("--resamples", type=int, default=compare.RESAMPLES, help=f"bootstrap resamples (default {compare.RESAMPLES})")
    p.add_argument("--seed", type=int, default=compare.SEED, help=f"bootstrap seed (default {compare.SEED})")
    p.add_argument("--exclude-flagged", action="store_true",
                   help="pair only the attempts no transcript scanner flagged in either run (each run must have been "
                        "run with --scanner); the paired: line counts those left out")
    p.add_argument("--map-tasks", metavar="FILE",
                   help="a JSON or YAML object mapping run A's task ids to the other runs' ({\"A's id\": \"B's id\"}), "
                        "for runs that name the same tasks differently; a task it does not name keeps its id")
    p.set_defaults(func=cmd_compare)
