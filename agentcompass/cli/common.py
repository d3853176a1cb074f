"""What the commands share: printing, ``K=V`` options, and the arguments that select requests."""

from __future__ import annotations

import argparse

import yaml

from agentcompass import PROJECT_ROOT, sdk

from agentcompass._util import display
from agentcompass.plugins import load_components
from agentcompass.runtime.config import ConfigError, load_run_config
from agentcompass.runtime.orchestration import resolve_orchestration, single_request_layer


# the flag of an argument whose name (its ``dest``) is not the flag's own
FLAG_OF = {"scanners": "scanner"}


def _print(*values, file=None) -> None:
    """``print``, through ``display.terminal_text``: data in a message (a task id, an error, a
    model name) never reaches the terminal as an escape sequence it would obey."""
    print(display.terminal_text(" ".join(map(str, values))), file=file)


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


def _cores(value: str) -> str:
    """``--cores``: a whole number of at least 1, or ``all`` (Snakemake's own two forms)."""
    if value == "all" or (value.isdigit() and int(value) >= 1):
        return value
    raise argparse.ArgumentTypeError(f"must be a whole number of at least 1, or 'all'; got {value!r}")


def _add_selection(p: argparse.ArgumentParser) -> None:
    """The arguments that say which requests: B H M, or config files."""
    p.add_argument("benchmark", nargs="?")
    p.add_argument("harness", nargs="?")
    p.add_argument("model", nargs="?", help="model id sent to the endpoint; 'none' for a harness that needs no model")
    p.add_argument("--config", "-c", action="append", metavar="FILE", help="run config file (repeatable: merged in order, a later file over an earlier one); its requests run when no BENCHMARK HARNESS MODEL is given")
    p.add_argument("--environment", "-e", help="environment id (default host_process)")
    p.add_argument("--benchmark-param", "-b", action="append", metavar="K=V")
    p.add_argument("--harness-param", "-H", action="append", metavar="K=V")
    p.add_argument("--environment-param", "-E", action="append", metavar="K=V")
    p.add_argument("--base-url", help="the model endpoint, e.g. http://127.0.0.1:8000/v1")
    p.add_argument("--api-key-env", metavar="VAR", help="environment variable holding the API key")
    p.add_argument("--model-param", "-m", action="append", metavar="K=V", help="inference param (temperature=0.2)")
    p.add_argument("--attempts", type=int, help="semantic attempts per task")
    p.add_argument("--max-retries", type=int, help="runtime retries after infrastructure faults")
    p.add_argument("--task-timeout", type=float, help="seconds an attempt's run may take")
    p.add_argument("--preflight", type=int, nargs="?", const=1, metavar="RUNS",
                   help="run each task's reference solution RUNS times (default 1) first, and quarantine the tasks it fails on")
    p.add_argument("--scanner", action="append", metavar="ID", dest="scanners",
                   help="a transcript scanner run on each attempt (repeatable; the scan stage writes scan.json; "
                        "see 'agentcompass list scanner')")
    p.add_argument("--namespace")
    p.add_argument("--run-id")
    p.add_argument("--results-dir")
    p.add_argument("--no-reuse", action="store_true", help="recompute every file of this request")
    p.add_argument("snakemake_args", nargs="*", help=argparse.SUPPRESS)


def _layer(args) -> dict | None:
    """The command line's config layer: one request for B H M, else only runtime overrides."""
    sdk.no_config_among(getattr(args, "snakemake_args", None) or [])
    layer: dict = {}
    request_flags = [f for f in ("environment", "benchmark_param", "harness_param", "environment_param", "base_url",
                                 "api_key_env", "model_param", "attempts", "max_retries", "task_timeout", "preflight",
                                 "scanners", "namespace", "run_id") if getattr(args, f, None)]
    if not args.benchmark and (request_flags or args.no_reuse):
        flags = ", ".join("--" + FLAG_OF.get(f, f).replace("_", "-")
                          for f in request_flags + (["no_reuse"] if args.no_reuse else []))
        raise ConfigError(f"the command line: {flags} build a request, which needs BENCHMARK HARNESS MODEL. "
                          "Fix: give them, or put these settings in the --config file")
    if args.benchmark:
        if not (args.harness and args.model):
            raise ConfigError("the command line: give all of BENCHMARK HARNESS MODEL, or none with --config FILE. "
                              "Fix: agentcompass run example_exact_match oracle none")
        layer = single_request_layer(
            args.benchmark,
            args.harness,
            args.model,
            environment=args.environment,
            benchmark_params=_key_values(args.benchmark_param, "--benchmark-param"),
            harness_params=_key_values(args.harness_param, "--harness-param"),
            environment_params=_key_values(args.environment_param, "--environment-param"),
            base_url=args.base_url,
            api_key_env=args.api_key_env,
            model_params=_key_values(args.model_param, "--model-param"),
            execution={"attempts": args.attempts, "max_retries": args.max_retries, "task_timeout": args.task_timeout,
                       "preflight": {"mode": "oracle", "runs": args.preflight} if getattr(args, "preflight", None) else None},
            output={"namespace": args.namespace, "run_id": args.run_id},
            reuse=False if args.no_reuse else None,
            scanners=getattr(args, "scanners", None),
        )
    if getattr(args, "results_dir", None):
        layer["runtime"] = {"results_dir": args.results_dir}
    return layer or None


def _resolve(args, layer):
    load_components()
    config = load_run_config(args.config or [], layer, overrides_source="the command line",
                             project_fallback=PROJECT_ROOT / "configs" / "config.yaml")
    return resolve_orchestration(config)
