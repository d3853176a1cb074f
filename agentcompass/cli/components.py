"""``agentcompass list`` and ``agentcompass config docs``: the registered components and their parameters."""

from __future__ import annotations

import sys

from agentcompass.plugins import PluginError, load_components
from agentcompass.runtime.config import describe_config
from agentcompass.runtime.config.fields import default_text
from agentcompass.runtime.models.orchestration import EXIT_USAGE
from agentcompass.runtime.registry import REGISTRIES, UnknownComponentError

from .common import _print

KINDS = list(REGISTRIES)


def cmd_list(args) -> int:
    """Each component of one kind: its id, its package ("built-in" or a plug-in's) and its summary."""
    try:
        load_components()
    except PluginError as exc:
        _print(f"agentcompass: {exc}", file=sys.stderr)
        return EXIT_USAGE
    registry = REGISTRIES[args.kind]
    for cid, cls in registry.items():
        _print(f"{cid:<24} {registry.origin(cid):<16} {cls.summary()}")
    return 0


def cmd_config_docs(args) -> int:
    load_components()
    registry = REGISTRIES[args.kind]
    try:
        cls = registry.get(args.id)
    except UnknownComponentError as exc:
        _print(f"agentcompass: {exc}", file=sys.stderr)
        return 2
    _print(f"{args.kind} {cls.id} (version {cls.version})")
    summary = cls.summary()
    if summary:
        _print(f"  {summary}")
    config_class = getattr(cls, "config_class", None)
    rows = describe_config(config_class) if config_class is not None and args.kind in ("benchmark", "harness", "environment", "scanner") else []
    if not rows:
        _print("\n  (no parameters)")
        return 0
    _print("\nparameters:")
    for row in rows:
        _print(f"  {row['name']}: {row['type']} = {default_text(row['default'])}")
        _print(f"      {row['description']}")
        if row["choices"]:
            _print(f"      one of: {', '.join(map(str, row['choices']))}")
    return 0


def register(sub) -> None:
    p = sub.add_parser("list", help="list registered components of one kind")
    p.add_argument("kind", choices=KINDS)
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("config", help="component configuration")
    config_sub = p.add_subparsers(dest="config_command", required=True)
    d = config_sub.add_parser("docs", help="document a component's parameters")
    d.add_argument("kind", choices=KINDS)
    d.add_argument("id")
    d.set_defaults(func=cmd_config_docs)
