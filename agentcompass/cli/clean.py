"""``agentcompass clean``: remove what sessions of killed runs left behind, each registered Environment
provider its own (``BaseEnvironment.clean_leftovers``)."""

from __future__ import annotations

import sys

from agentcompass.plugins import PluginError, load_plugins

from .common import _print


def cmd_clean(args) -> int:
    # imported when the command runs, not with every command's parser: the environments package (which
    # registers the built-in providers on import) takes some 60 ms
    from agentcompass.environments.leftovers import clean

    try:
        load_plugins()  # a plug-in's providers remove their own sessions' leftovers too
    except PluginError as exc:
        _print(f"agentcompass clean: {exc}", file=sys.stderr)  # the other providers' are still removed
    report = clean(args.run, include_live=args.all, dry_run=args.dry_run)
    for note in report.notes:
        _print(f"agentcompass clean: {note}", file=sys.stderr)
    removed = report.processes + report.workspaces + report.containers + report.folders
    for line in removed:
        _print(f"{'would remove' if args.dry_run else 'removed'} {line}")
    if not removed:
        _print("nothing to clean")
    return 0


def register(sub) -> None:
    p = sub.add_parser(
        "clean",
        help="remove containers, processes, workspaces and sandbox folders that sessions of killed runs left behind",
        description="Finds sessions by their labels (containers), environment markers (host processes) and "
        "records (workspaces, sandbox folders) and removes those whose agentcompass process is gone.",
    )
    p.add_argument("--run", metavar="RUN_ID", help="only sessions of this run (labels starting 'RUN_ID-')")
    p.add_argument("--all", action="store_true", help="also sessions whose agentcompass process still runs, and containers kept by retention")
    p.add_argument("--dry-run", "-n", action="store_true", help="list what would be removed; remove nothing")
    p.set_defaults(func=cmd_clean)
