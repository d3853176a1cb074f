"""The ``agentcompass`` command: list components, document their parameters, run evaluations."""

from __future__ import annotations

import argparse
import sys

from agentcompass.runtime.config import ConfigError
from agentcompass.runtime.models.orchestration import EXIT_USAGE

from . import cache, check, clean, compare, components, init, replay, report, results, run, status, tools
from .common import _print

# each module adds its own commands, in the order the help lists them
GROUPS = (init, components, run, replay, check, status, clean, cache, tools, results, compare, report)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="agentcompass", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for group in GROUPS:
        group.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, extra = argv[:cut], argv[cut + 1:]
    args = build_parser().parse_args(argv)
    if hasattr(args, "snakemake_args"):
        args.snakemake_args = list(args.snakemake_args or []) + extra
    try:
        return args.func(args)
    except ConfigError as exc:
        _print(f"agentcompass: invalid run config: {exc}", file=sys.stderr)
        return EXIT_USAGE
