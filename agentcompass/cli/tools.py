"""``agentcompass tools``: install agent programs into the tool cache, list what it holds."""

from __future__ import annotations

import sys
import time

from agentcompass import tools
from agentcompass.errors import InfrastructureError
from agentcompass.runtime.models.orchestration import EXIT_USAGE

from .common import _print

EXIT_FAILED = 1


def cmd_install(args) -> int:
    root = tools.tool_cache_root()
    try:
        recipes = [tools.resolve(given) for given in args.keys]  # an unknown one fails before any download
    except tools.ToolError as exc:
        _print(f"agentcompass tools: {exc}", file=sys.stderr)
        return EXIT_USAGE
    for recipe in recipes:
        started = time.monotonic()
        present = tools.installed(recipe.key, root=root) is not None
        try:
            folder = tools.install(recipe.key, root=root)
        except (InfrastructureError, OSError) as exc:
            _print(f"agentcompass tools: {recipe.key}: {exc}", file=sys.stderr)
            return EXIT_FAILED
        how = "already installed" if present else f"installed in {time.monotonic() - started:.1f} s"
        _print(f"{recipe.key}: {how}: {folder}")
    return 0


def cmd_list(args) -> int:
    root = tools.tool_cache_root()
    _print("known tools (name, pinned version, program):")
    for recipe in tools.TOOLS.values():
        needs = f" (needs {', '.join(recipe.needs)})" if recipe.needs else ""
        _print(f"  {recipe.name:<12} {recipe.version:<10} {recipe.program}{needs}")
    keys = tools.installed_keys(root)
    _print(f"installed in {root}:" if keys else f"nothing installed in {root}")
    for key in keys:
        _print(f"  {key:<24} {tools.folder_size(root / key) / 1e6:8.1f} MB")
    return 0


def register(sub) -> None:
    p = sub.add_parser(
        "tools",
        help="install agent programs (Claude Code, Codex, ...) into the tool cache, list it",
        description="The tool cache holds each agent program once per version, read-only, in "
        "$AGENTCOMPASS_TOOL_CACHE (else $XDG_CACHE_HOME/agentcompass/tools, else ~/.cache/agentcompass/tools); "
        "environments mount it into their sandboxes. Packages come from $npm_config_registry (else "
        "https://registry.npmjs.org).",
    )
    tools_sub = p.add_subparsers(dest="tools_command", required=True)
    install = tools_sub.add_parser("install", help="install tools (KEY: name@version; NAME: its pinned version)")
    install.add_argument("keys", nargs="+", metavar="KEY|NAME")
    install.set_defaults(func=cmd_install)
    listing = tools_sub.add_parser("list", help="the known tools and the installed keys with their sizes")
    listing.set_defaults(func=cmd_list)
