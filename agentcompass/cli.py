"""The ``agentcompass`` command: list components, document their parameters, run evaluations."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import yaml

from agentcompass import PROJECT_ROOT
from agentcompass.runtime.config import ConfigError, describe_config, load_run_config
from agentcompass.runtime.orchestration import resolve_orchestration, single_request_layer
from agentcompass.runtime.registry import REGISTRIES, UnknownComponentError, load_builtin_components

KINDS = list(REGISTRIES)


def _key_values(pairs: list[str] | None, flag: str) -> dict:
    """``k=v`` pairs with YAML values (``limit=3`` is an int, ``x=[a,b]`` a list)."""
    out = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ConfigError(f"{flag} {pair!r}: expected KEY=VALUE. Fix: write it as {flag} name=value")
        try:
            out[key] = yaml.safe_load(value) if value != "" else None
        except yaml.YAMLError:
            out[key] = value
    return out


def cmd_list(args) -> int:
    load_builtin_components()
    registry = REGISTRIES[args.kind]
    for cid, cls in registry.items():
        print(f"{cid:<24} {cls.summary()}")
    return 0


def cmd_config_docs(args) -> int:
    load_builtin_components()
    registry = REGISTRIES[args.kind]
    try:
        cls = registry.get(args.id)
    except UnknownComponentError as exc:
        print(f"agentcompass: {exc}", file=sys.stderr)
        return 2
    print(f"{args.kind} {cls.id} (version {cls.version})")
    summary = cls.summary()
    if summary:
        print(f"  {summary}")
    config_class = getattr(cls, "config_class", None)
    rows = describe_config(config_class) if config_class is not None and args.kind in ("benchmark", "harness", "environment") else []
    if not rows:
        print("\n  (no parameters)")
        return 0
    print("\nparameters:")
    for row in rows:
        default = json.dumps(row["default"]) if not isinstance(row["default"], str) or row["default"] != "(required)" else row["default"]
        print(f"  {row['name']}: {row['type']} = {default}")
        print(f"      {row['description']}")
        if row["choices"]:
            print(f"      one of: {', '.join(map(str, row['choices']))}")
    return 0


def _snakemake_argv(args, layer: dict) -> list[str]:
    argv = [
        "--snakefile", str(PROJECT_ROOT / "Snakefile"),
        "--directory", str(Path.cwd()),
        "--cores", str(args.cores),
        # JSON is YAML: the Snakefile re-reads these values with their types.
        "--config", *[f"{key}={json.dumps(value)}" for key, value in layer.items()],
    ]
    for path in args.config or []:
        argv.extend(["--configfile", str(path)])
    return argv + list(args.snakemake_args or [])


def run_snakemake(argv: list[str]) -> bool:
    """Drive Snakemake through its own argument handling and API (profiles included)."""
    from snakemake.cli import args_to_api, parse_args

    parser, sm_args = parse_args(argv)
    return bool(args_to_api(sm_args, parser))


def cmd_run(args) -> int:
    layer = single_request_layer(
        args.benchmark,
        args.harness,
        args.model,
        environment=args.environment,
        benchmark_params=_key_values(args.benchmark_param, "--benchmark-param"),
        harness_params=_key_values(args.harness_param, "--harness-param"),
        environment_params=_key_values(args.environment_param, "--environment-param"),
        model_fields={
            k: v for k, v in {
                "base_url": args.base_url,
                "api_key": f"${{{args.api_key_env}}}" if args.api_key_env else None,
                "params": _key_values(args.model_param, "--model-param") or None,
            }.items() if v is not None
        },
        execution={"attempts": args.attempts, "max_retries": args.max_retries, "task_timeout": args.task_timeout},
        output={"namespace": args.namespace, "run_id": args.run_id},
        reuse=False if args.no_reuse else None,
    )
    if args.results_dir:
        layer["runtime"] = {"results_dir": args.results_dir}
    config = load_run_config(args.config or [], layer, overrides_source="the command line")
    orchestration = resolve_orchestration(config)
    if args.dry_run:
        print(json.dumps([{"name": r.name, "request": r.request.to_dict()} for r in orchestration.runs], indent=2, sort_keys=True))
        return 0
    ok = run_snakemake(_snakemake_argv(args, layer))
    results_dir = Path(orchestration.runtime.results_dir)
    for run in orchestration.runs:
        path = results_dir / run.request.namespace / run.request.run_id / "metrics.json"
        if path.exists():
            data = json.loads(path.read_text())
            counts = ", ".join(f"{k} {v}" for k, v in sorted(data["counts"].items()))
            metrics = ", ".join(f"{k} {v}" for k, v in sorted(data["metrics"].items()))
            print(f"{run.name}: {metrics} ({counts}) -> {path}")
    return 0 if ok else 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="agentcompass", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("list", help="list registered components of one kind")
    p.add_argument("kind", choices=KINDS)
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("config", help="component configuration")
    config_sub = p.add_subparsers(dest="config_command", required=True)
    d = config_sub.add_parser("docs", help="document a component's parameters")
    d.add_argument("kind", choices=KINDS)
    d.add_argument("id")
    d.set_defaults(func=cmd_config_docs)

    p = sub.add_parser(
        "run",
        help="evaluate MODEL with HARNESS on BENCHMARK through Snakemake",
        description="Builds a one-request config and runs it through the Snakemake workflow. "
        "Arguments after '--' go to Snakemake (e.g. -- --profile profiles/slurm).",
    )
    p.add_argument("benchmark")
    p.add_argument("harness")
    p.add_argument("model", help="model id sent to the endpoint; 'none' for a harness that needs no model")
    p.add_argument("--environment", "-e", help="environment id (default host_process)")
    p.add_argument("--config", "-c", action="append", metavar="FILE", help="run config file for component params (repeatable)")
    p.add_argument("--benchmark-param", "-b", action="append", metavar="K=V")
    p.add_argument("--harness-param", "-H", action="append", metavar="K=V")
    p.add_argument("--environment-param", "-E", action="append", metavar="K=V")
    p.add_argument("--base-url", help="the model endpoint, e.g. http://127.0.0.1:8000/v1")
    p.add_argument("--api-key-env", metavar="VAR", help="environment variable holding the API key")
    p.add_argument("--model-param", "-m", action="append", metavar="K=V", help="inference param (temperature=0.2)")
    p.add_argument("--attempts", type=int, help="semantic attempts per task")
    p.add_argument("--max-retries", type=int, help="runtime retries after infrastructure faults")
    p.add_argument("--task-timeout", type=float, help="seconds an attempt's run may take")
    p.add_argument("--namespace")
    p.add_argument("--run-id")
    p.add_argument("--results-dir")
    p.add_argument("--no-reuse", action="store_true", help="recompute every file of this request")
    p.add_argument("--cores", default="2", help="jobs at once (attempts wait on I/O: more than the CPUs is fine)")
    p.add_argument("--dry-run", "-n", action="store_true", help="print the complete resolved request; load no tasks")
    p.add_argument("snakemake_args", nargs="*", help=argparse.SUPPRESS)
    p.set_defaults(func=cmd_run)
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
        print(f"agentcompass: invalid run config: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
