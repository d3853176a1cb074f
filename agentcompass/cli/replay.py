"""``agentcompass replay``: rebuild a finished run from its call cache alone, and say whether it reproduced."""

from __future__ import annotations

import sys
from pathlib import Path

from agentcompass import callcache, replay, sdk
from agentcompass.layout import run_dir
from agentcompass.pipeline import locks
from agentcompass.runtime.models.orchestration import EXIT_ATTEMPT_ERRORS, EXIT_LOCKED, EXIT_OK, EXIT_STOPPED, EXIT_USAGE

from .common import _cores, _print


def cmd_replay(args) -> int:
    folder = Path(args.run).resolve()
    try:
        req = replay.replay_request(folder)
    except replay.ReplayError as exc:
        _print(f"agentcompass replay: {exc}", file=sys.stderr)
        return EXIT_USAGE
    results_dir = folder.parent.parent
    cache_dir = Path(args.cache_dir).resolve() if args.cache_dir else callcache.cache_root(results_dir)
    if not cache_dir.is_dir():
        _print(f"agentcompass replay: the call cache {cache_dir} does not exist: replay answers every model call "
               "from it. Fix: give the cache the run used (--cache-dir, its runtime.cache_dir)", file=sys.stderr)
        return EXIT_USAGE
    layer = sdk.request_layer(req)
    layer["runtime"] = {"results_dir": str(results_dir), "cache_dir": str(cache_dir), "cache": "replay"}
    try:
        result = sdk.execute(layer, cores=args.cores, snakemake_args=args.snakemake_args,
                             overrides_source="agentcompass replay")
    except locks.RunHeldError as exc:
        _print(f"agentcompass: {exc}", file=sys.stderr)
        return EXIT_LOCKED
    if result.exit_status == EXIT_STOPPED:
        _print(f"agentcompass replay: the replay stopped before it finished ({result.outcomes[0].reason})")
        return EXIT_STOPPED
    target = run_dir(results_dir, req.namespace, req.run_id)
    summary = replay.summarize(folder, target)
    replay.write_summary(summary, target)
    for line in replay.summary_lines(summary):
        _print(line)
    return EXIT_OK if summary["reproduced_all"] else EXIT_ATTEMPT_ERRORS


def register(sub) -> None:
    p = sub.add_parser(
        "replay",
        help="rebuild a finished run from its call cache alone (no endpoint) and say whether every attempt reproduced",
        description="Builds the run's request again into RUN-replay beside it, every model call answered from the "
        "call cache (execution.cache: replay), then compares each attempt with the original: reproduced, diverged "
        "(with the first call that differed and why) or missing entries. Writes replay.json in the replay's folder. "
        "Exit status 0 when every attempt reproduced, 1 when one did not. Arguments after '--' go to Snakemake.",
    )
    p.add_argument("run", metavar="RUN", help="the run's folder: results/<namespace>/<run_id>")
    p.add_argument("--cache-dir", help="the call cache the run used (default: .call-cache in its results folder)")
    p.add_argument("--cores", default="2", type=_cores, help="jobs at once")
    p.add_argument("snakemake_args", nargs="*", help="arguments for Snakemake (after '--')")
    p.set_defaults(func=cmd_replay)
