"""``agentcompass cache``: what the call cache holds, and pruning it."""

from __future__ import annotations

import json
import re
import sys
import time
from datetime import datetime, timezone

from agentcompass import PROJECT_ROOT, callcache
from agentcompass.runtime.config import ConfigError, load_run_config
from agentcompass.runtime.models.orchestration import EXIT_USAGE
from agentcompass.runtime.orchestration import resolve_runtime

from .common import _print

ACTIONS = ("show", "prune")
# --max-size's units: powers of 1024, as runtime.cache_max_bytes' default (10 GiB) is
SIZE_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
# --older-than's units, in seconds; a bare number is days (runtime.cache_max_age_days' unit)
AGE_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400, "": 86400}
DAY = 86400
_SIZE = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*([kmgt]?)(?:i?b)?", re.I)
_AGE = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*([smhdw]?)", re.I)


def parse_size(text: str) -> int:
    """``--max-size``: a number of bytes with an optional unit, K, M, G or T (powers of 1024; ``KiB``,
    ``KB`` and ``k`` alike): ``2G``, ``500M``, ``1.5GiB``, ``4096``. A ValueError says what is wrong."""
    match = _SIZE.fullmatch(text.strip())
    if match is None:
        raise ValueError(f"--max-size {text!r}: expected a number of bytes with an optional unit K, M, G or T "
                         "(powers of 1024), such as 2G, 500M or 1.5GiB")
    return int(float(match.group(1)) * SIZE_UNITS[match.group(2).lower()])


def parse_age(text: str) -> float:
    """``--older-than``: a time with a unit, s, m, h, d or w (a bare number is days): ``30d``, ``12h``, ``2w``.
    Seconds; a ValueError says what is wrong."""
    match = _AGE.fullmatch(text.strip())
    if match is None:
        raise ValueError(f"--older-than {text!r}: expected a number with a unit s, m, h, d or w (a bare number "
                         "is days), such as 30d, 12h or 2w")
    return float(match.group(1)) * AGE_UNITS[match.group(2).lower()]


def human_bytes(count: int) -> str:
    """``512 B``, ``1.5 KiB``, ``10.0 GiB``: powers of 1024, one decimal from KiB up."""
    if count < 1024:
        return f"{count} B"
    value = float(count)
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        value /= 1024
        if value < 1024 or unit == "TiB":
            break
    return f"{value:.1f} {unit}"


def human_age(seconds: float) -> str:
    """How long ago, in its largest whole unit: ``40 s``, ``5 min``, ``3 h``, ``12 days``."""
    seconds = max(0.0, seconds)
    for unit, size in (("days", DAY), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{int(seconds // size)} {unit}"
    return f"{int(seconds)} s"


def _when(stamp: float | None, now: float) -> str:
    if stamp is None:
        return "-"
    text = datetime.fromtimestamp(stamp, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    return f"{text} ({human_age(now - stamp)} ago)"


def store_of(args) -> tuple[callcache.CallStore, dict]:
    """The store the arguments name: ``--cache-dir``, else ``runtime.cache_dir``, else ``.call-cache`` in
    ``--results-dir`` (else ``runtime.results_dir``), the config's as ``run`` reads it; and that runtime's
    pruning bounds (``runtime.cache_max_bytes``, ``runtime.cache_max_age_days``)."""
    layer: dict = {}
    if args.results_dir:
        layer["results_dir"] = args.results_dir
    if args.cache_dir:
        layer["cache_dir"] = args.cache_dir
    config = load_run_config(args.config or [], {"runtime": layer} if layer else None,
                             overrides_source="the command line",
                             project_fallback=PROJECT_ROOT / "configs" / "config.yaml")
    runtime = resolve_runtime(config)
    root = callcache.cache_root(runtime.results_dir, runtime.cache_dir)
    return callcache.CallStore(root), {"max_bytes": runtime.cache_max_bytes,
                                       "max_age_days": runtime.cache_max_age_days}


def cmd_cache(args) -> int:
    try:
        max_bytes = None if args.max_size is None else parse_size(args.max_size)
        max_age = None if args.older_than is None else parse_age(args.older_than)
    except ValueError as exc:
        _print(f"agentcompass cache: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.action == "show" and (max_bytes is not None or max_age is not None):
        raise ConfigError("the command line: --max-size and --older-than are prune's. "
                          "Fix: agentcompass cache prune --max-size 2G --older-than 30d")
    store, bounds = store_of(args)
    if store.root.exists() and not store.root.is_dir():
        _print(f"agentcompass cache: {store.root} is not a folder. Fix: give --cache-dir the call cache's folder",
               file=sys.stderr)
        return EXIT_USAGE
    if args.action == "prune":
        return _prune(args, store, bounds, max_bytes, max_age)
    stats = store.stats()
    if args.json:
        _print(json.dumps(stats, indent=2, sort_keys=True))
        return 0
    now = time.time()
    _print(f"folder:  {stats['root']}" + ("" if store.root.is_dir() else " (none yet)"))
    _print(f"entries: {stats['entries']}")
    _print(f"size:    {human_bytes(stats['bytes'])}")
    _print(f"hits:    {stats['hits']}")
    _print(f"oldest:  {_when(stats['oldest'], now)}")
    _print(f"newest:  {_when(stats['newest'], now)}")
    return 0


def _prune(args, store: callcache.CallStore, bounds: dict, max_bytes: int | None,
           max_age: float | None) -> int:
    """Prune to the bounds given, else to the config's (what a run prunes to when it ends)."""
    if max_bytes is None and max_age is None:
        max_bytes = bounds["max_bytes"]
        max_age = None if bounds["max_age_days"] is None else bounds["max_age_days"] * DAY
    if max_bytes is None and max_age is None:
        _print("agentcompass cache prune: no bound: the config sets runtime.cache_max_bytes and "
               "runtime.cache_max_age_days to null. Fix: give --max-size or --older-than", file=sys.stderr)
        return EXIT_USAGE
    removed, freed = store.prune(max_bytes=max_bytes, max_age_seconds=max_age)
    stats = store.stats()
    if args.json:
        _print(json.dumps({"removed": removed, "freed_bytes": freed, "max_bytes": max_bytes,
                           "max_age_seconds": max_age, "kept": stats}, indent=2, sort_keys=True))
        return 0
    limits = [f"at most {human_bytes(max_bytes)}"] if max_bytes is not None else []
    limits += [f"none unused for over {human_age(max_age)}"] if max_age is not None else []
    _print(f"{store.root}: removed {removed} entr{'y' if removed == 1 else 'ies'} ({human_bytes(freed)}) to keep "
           f"{' and '.join(limits)}; {stats['entries']} kept ({human_bytes(stats['bytes'])}, {stats['hits']} hits)")
    return 0


def register(sub) -> None:
    p = sub.add_parser(
        "cache", help="the call cache: its entries, size and hits (show), or prune it",
        description="show (the default): the call cache's folder, its entries, their size, the hits counted, "
        "and the times of the oldest and newest entry (an entry's time is that of its last write or hit). "
        "prune: remove the entries unused for longest until at most --max-size remain, and those unused for "
        "longer than --older-than; with neither, to runtime.cache_max_bytes and runtime.cache_max_age_days, "
        "as a run does when it ends. The folder is --cache-dir, else runtime.cache_dir, else .call-cache in "
        "--results-dir (default: runtime.results_dir).",
    )
    p.add_argument("action", nargs="?", choices=ACTIONS, default="show")
    p.add_argument("--config", "-c", action="append", metavar="FILE",
                   help="run config file whose runtime.results_dir, cache_dir and bounds apply (repeatable)")
    p.add_argument("--results-dir", metavar="DIR", help="the results folder (its .call-cache is the store)")
    p.add_argument("--cache-dir", metavar="DIR", help="the call cache's folder (runtime.cache_dir)")
    p.add_argument("--max-size", metavar="SIZE", help="prune: keep at most this many bytes: 2G, 500M, 1.5GiB")
    p.add_argument("--older-than", metavar="AGE", help="prune: remove entries unused for longer: 30d, 12h, 2w "
                   "(a bare number is days)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_cache)
