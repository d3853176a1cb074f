"""The ``agentcompass`` command: list components, document their parameters, run evaluations."""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

import yaml

from agentcompass import PROJECT_ROOT, display, sdk, status
from agentcompass.jsonio import canonical_json, write_text_atomic
from agentcompass.pipeline import locks
from agentcompass.plugins import PluginError, load_components
from agentcompass.runtime.models.orchestration import EXIT_LOCKED, EXIT_USAGE
from agentcompass.runtime.config import ConfigError, describe_config, load_run_config
from agentcompass.runtime.config.fields import default_text
from agentcompass.runtime.orchestration import resolve_orchestration, single_request_layer
from agentcompass.runtime.registry import REGISTRIES, UnknownComponentError

KINDS = list(REGISTRIES)


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
    rows = describe_config(config_class) if config_class is not None and args.kind in ("benchmark", "harness", "environment") else []
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


def _layer(args) -> dict | None:
    """The command line's config layer: one request for B H M, else only runtime overrides."""
    layer: dict = {}
    request_flags = [f for f in ("environment", "benchmark_param", "harness_param", "environment_param", "base_url",
                                 "api_key_env", "model_param", "attempts", "max_retries", "task_timeout",
                                 "namespace", "run_id") if getattr(args, f, None)]
    if not args.benchmark and (request_flags or args.no_reuse):
        flags = ", ".join("--" + f.replace("_", "-") for f in request_flags + (["no_reuse"] if args.no_reuse else []))
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
            execution={"attempts": args.attempts, "max_retries": args.max_retries, "task_timeout": args.task_timeout},
            output={"namespace": args.namespace, "run_id": args.run_id},
            reuse=False if args.no_reuse else None,
        )
    if getattr(args, "results_dir", None):
        layer["runtime"] = {"results_dir": args.results_dir}
    return layer or None


def _resolve(args, layer):
    load_components()
    config = load_run_config(args.config or [], layer, overrides_source="the command line",
                             project_fallback=PROJECT_ROOT / "configs" / "config.yaml")
    return resolve_orchestration(config)


def _outcome_line(outcome) -> str:
    from agentcompass import progress

    metrics = ", ".join(f"{k} {v}" for k, v in sorted(outcome.metrics.items()))
    if outcome.state == "planned":
        return f"{outcome.name}: dry run: nothing was built"
    if outcome.state == "partial":
        return (f"{outcome.name}: built what was asked ({outcome.reason}); {outcome.done} of "
                f"{outcome.total or '?'} attempts done -> {outcome.results_dir}")
    if outcome.state == "stopped":
        return (f"{outcome.name}: stopped before it finished ({outcome.reason}): {outcome.done} of "
                f"{outcome.total or '?'} attempts done; run the same command again to continue -> {outcome.results_dir}")
    total = sum(outcome.counts.values())
    # what the attempts cost, as metrics.json's summary has it (a field it lacks is not shown)
    try:
        summary = json.loads((Path(outcome.results_dir) / "metrics.json").read_text()).get("summary")
    except (OSError, ValueError, AttributeError):
        summary = None
    usage = progress.usage_summary(summary.get("overall") if isinstance(summary, dict) else None)
    usage = f"; {usage}" if usage else ""
    if outcome.state == "completed_with_errors":
        failed = sum(outcome.errors.values())
        kinds = "; ".join(f"{display.visible(kind)} x{n}" for kind, n in outcome.errors.items())
        return (f"{outcome.name}: completed with errors: {failed} of {total} attempts failed ({kinds}); "
                f"{metrics}{usage} -> {outcome.results_dir}/metrics.json")
    return f"{outcome.name}: completed: {total} attempts; {metrics}{usage} -> {outcome.results_dir}/metrics.json"


def _build(orchestration, layer, args, extra: list[str]) -> int:
    """Run the workflow, print each request's outcome, and return the exit status (docs/reuse.md, Exit status)."""
    argv = sdk.snakemake_argv(layer, args.config or [], args.cores, extra)
    try:
        result = sdk.build(orchestration, argv)
    except locks.RunHeldError as exc:
        _print(f"agentcompass: {exc}", file=sys.stderr)
        return EXIT_LOCKED
    for outcome in result.outcomes:
        _print(_outcome_line(outcome))
    return result.exit_status


def cmd_run(args) -> int:
    layer = _layer(args)
    orchestration = _resolve(args, layer)
    if args.dry_run:
        _print(json.dumps([{"name": r.name, "request": r.request.to_dict()} for r in orchestration.runs], indent=2, sort_keys=True))
        return 0
    return _build(orchestration, layer, args, args.snakemake_args)


def cmd_status(args) -> int:
    if args.snakemake_args:
        _print(f"agentcompass status: unexpected argument(s) {' '.join(args.snakemake_args)}: status takes "
              "BENCHMARK HARNESS MODEL and the options of 'run', and runs no Snakemake", file=sys.stderr)
        return 2
    load_components()
    if args.benchmark and not (args.harness or args.model) and args.benchmark not in REGISTRIES["benchmark"] \
            and Path(args.benchmark).is_dir():
        # 'status RESULTS_DIR' of earlier versions: a lone folder that is no benchmark id is still read so
        if args.results_dir:
            raise ConfigError(f"the command line: {args.benchmark!r} and --results-dir {args.results_dir!r} both "
                              "name the results folder. Fix: give --results-dir only")
        _print(f"agentcompass status: reading {args.benchmark} as --results-dir {args.benchmark} "
              "(a results folder as the first argument is deprecated)", file=sys.stderr)
        args.results_dir, args.benchmark = args.benchmark, None
    layer = _layer(args)
    orchestration = _resolve(args, layer)
    _print(status.render(status.predict(orchestration, Path.cwd()), verbose=args.verbose))
    return 0


def cmd_retry(args) -> int:
    layer = _layer(args)
    orchestration = _resolve(args, layer)
    base = Path(orchestration.runtime.results_dir)
    targets = [
        t for run in orchestration.runs
        for t in status.failed_attempt_targets(base / run.request.namespace / run.request.run_id, run.request)
    ]
    if not targets:
        _print("no attempt holds an error status: nothing to retry")
        return 0
    _print(f"retrying {len(targets)} failed attempt(s)")
    # the caller's arguments first: --forcerun takes every argument up to the next option
    return _build(orchestration, layer, args, [*args.snakemake_args, "--forcerun", *targets])


def _add_selection(p: argparse.ArgumentParser) -> None:
    """The arguments that say which requests: B H M, or config files."""
    p.add_argument("benchmark", nargs="?")
    p.add_argument("harness", nargs="?")
    p.add_argument("model", nargs="?", help="model id sent to the endpoint; 'none' for a harness that needs no model")
    p.add_argument("--config", "-c", action="append", metavar="FILE", help="run config file (repeatable); its requests run when no BENCHMARK HARNESS MODEL is given")
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
    p.add_argument("--namespace")
    p.add_argument("--run-id")
    p.add_argument("--results-dir")
    p.add_argument("--no-reuse", action="store_true", help="recompute every file of this request")
    p.add_argument("snakemake_args", nargs="*", help=argparse.SUPPRESS)


def cmd_clean(args) -> int:
    from agentcompass.environments.leftovers import clean

    report = clean(args.run, include_live=args.all, dry_run=args.dry_run)
    for note in report.notes:
        _print(f"agentcompass clean: {note}", file=sys.stderr)
    removed = report.processes + report.workspaces + report.containers
    for line in removed:
        _print(f"{'would remove' if args.dry_run else 'removed'} {line}")
    if not removed:
        _print("nothing to clean")
    return 0


def _add_clean_parser(sub) -> None:
    p = sub.add_parser(
        "clean",
        help="remove containers and processes that sessions of killed runs left behind",
        description="Finds sessions by their labels (containers) and environment markers (host processes) "
        "and removes those whose agentcompass process is gone.",
    )
    p.add_argument("--run", metavar="RUN_ID", help="only sessions of this run (labels starting 'RUN_ID-')")
    p.add_argument("--all", action="store_true", help="also sessions whose agentcompass process still runs, and containers kept by retention")
    p.add_argument("--dry-run", "-n", action="store_true", help="list what would be removed; remove nothing")
    p.set_defaults(func=cmd_clean)


def _dollars(cost: float | None) -> str:
    """Cents from a dollar up; below, four significant digits (a small run costs a fraction of a cent)."""
    if cost is None:
        return "-"
    return f"${cost:,.2f}" if cost >= 1 else f"${cost:.4g}"


def _runs_table(overviews: list[dict]) -> str:
    """One aligned line per run, under a header."""
    header = ["namespace", "run id", "benchmark", "harness", "model", "attempts", "errors", "accuracy", "cost",
              "last change"]
    lines = [header]
    for o in overviews:
        total = "?" if o["attempts_total"] is None else str(o["attempts_total"])
        changed = (o["last_change"] or "-").replace("T", " ")[:19]
        lines.append([*map(display.visible, (o["namespace"], o["run_id"], o["benchmark"], o["harness"], o["model"])),
                      f"{o['attempts_done']}/{total}", str(o["errors"]),
                      "-" if o["accuracy"] is None else f"{o['accuracy']:.3f}",
                      _dollars(o["cost_usd"]), changed])
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(line, widths)).rstrip() for line in lines)


def cmd_runs(args) -> int:
    from agentcompass import results

    try:
        overviews = [results.overview(run) for run in results.find_runs(args.results_dir)]
    except (FileNotFoundError, ValueError) as exc:
        _print(f"agentcompass runs: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.json:
        _print(json.dumps(overviews, indent=2, sort_keys=True))
    elif not overviews:
        _print(f"no runs under {args.results_dir} (a run's folder holds request.json)")
    else:
        _print(_runs_table(overviews))
    return 0


def _add_runs_parser(sub) -> None:
    p = sub.add_parser(
        "runs", help="every run under a results folder, one line each",
        description="Lists the runs under RESULTS_DIR (default: results): namespace, run id, benchmark, harness, "
        "model, attempts done of all, failed attempts, accuracy (over attempts with a verdict), cost (when the "
        "Model declares model.pricing) and when a file of the run last changed.",
    )
    p.add_argument("results_dir", nargs="?", default="results", metavar="RESULTS_DIR")
    p.add_argument("--json", action="store_true", help="print a JSON list, one object per run")
    p.set_defaults(func=cmd_runs)


EXPORT_FORMATS = ("csv", "parquet", "jsonl")


def cmd_export(args) -> int:
    from agentcompass import results
    from agentcompass.jsonio import write_text_atomic

    if args.format == "parquet":
        if not args.output:
            _print("agentcompass export: parquet is binary and is not written to a terminal. "
                  "Fix: give -o FILE.parquet", file=sys.stderr)
            return EXIT_USAGE
        try:
            import pyarrow  # noqa: F401  (pandas writes parquet through it)
        except ImportError:
            _print("agentcompass export: --format parquet needs pyarrow, which is not installed. "
                  "Fix: pip install pyarrow (or pip install -e '.[parquet]'), or export --format csv or jsonl",
                  file=sys.stderr)
            return EXIT_USAGE
    try:
        frame = results.load(*args.run_dirs)
    except (FileNotFoundError, ValueError) as exc:
        _print(f"agentcompass export: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.format == "csv":
        text = display.csv_text(frame, index=False)  # formula cells prefixed, controls shown
    elif args.format == "jsonl":  # pandas' own to_json writes every / as \/
        records = frame.astype(object).where(frame.notna(), None).to_dict("records")
        text = "".join(display.terminal_json(json.dumps(record, ensure_ascii=False)) + "\n" for record in records)
    if not args.output:
        sys.stdout.write(text)
        return 0
    try:
        if args.format == "parquet":
            Path(args.output).parent.mkdir(parents=True, exist_ok=True)
            frame.to_parquet(args.output, index=False)
        else:
            write_text_atomic(args.output, text)
    except OSError as exc:
        _print(f"agentcompass export: cannot write {args.output}: {exc.strerror or exc}. Fix: choose a file "
              "in a folder you can write to", file=sys.stderr)
        return EXIT_USAGE
    runs = frame.groupby(["namespace", "run_id"]).ngroups if len(frame) else 0
    _print(f"{args.output}: {len(frame)} attempts of {runs} run(s), one row each ({args.format})")
    return 0


def _add_export_parser(sub) -> None:
    p = sub.add_parser(
        "export", help="every attempt of runs as a table: csv, parquet or jsonl",
        description="Writes one row per attempt of the runs in RUN_DIR (a run's folder, or a results folder: "
        "every run under it), with the columns of agentcompass.results.load. Without -o, csv and jsonl go to "
        "standard output.",
    )
    p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR")
    p.add_argument("--format", "-f", choices=EXPORT_FORMATS, default="csv", help="csv (default), parquet (needs pyarrow) or jsonl")
    p.add_argument("--output", "-o", metavar="FILE", help="write here instead of standard output")
    p.set_defaults(func=cmd_export)


def cmd_diff(args) -> int:
    from agentcompass import plan_diff

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
    from agentcompass import compare

    try:
        found = compare.compare(args.runs, resamples=args.resamples, seed=args.seed)
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


def _add_compare_parser(sub) -> None:
    from agentcompass.compare import RESAMPLES, SEED

    p = sub.add_parser(
        "compare", help="a paired comparison of runs over the same tasks: deltas, intervals, tests, flipped tasks",
        description="Compares each run after the first with the first (B - A), pairing attempts by task id and "
        "attempt number: accuracy (McNemar's exact test) and mean score (paired bootstrap) with 95% intervals "
        "(paired bootstrap over tasks, seeded), the tasks that flipped each way, tokens and cost, and the "
        "request.json keys that differ. Exit status 0, or 2 when a path is not a run or the runs share no attempt.",
    )
    p.add_argument("runs", nargs="+", metavar="RUN", help="run folders, results/<namespace>/<run_id>; the first is A")
    p.add_argument("--json", action="store_true", help="one JSON object instead of the table")
    p.add_argument("--html", metavar="OUT", help="also write a self-contained page to OUT")
    p.add_argument("--resamples", type=int, default=RESAMPLES, help=f"bootstrap resamples (default {RESAMPLES})")
    p.add_argument("--seed", type=int, default=SEED, help=f"bootstrap seed (default {SEED})")
    p.set_defaults(func=cmd_compare)


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
def cmd_report(args) -> int:
    from agentcompass import report, results

    try:
        runs = results.find_runs(*(args.run_dirs or ["results"]))
    except FileNotFoundError as exc:
        _print(f"agentcompass report: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if not runs:
        _print(f"agentcompass report: no run found in {' '.join(args.run_dirs or ['results'])} (a run's folder holds "
              "request.json). Fix: name a run's folder, results/<namespace>/<run_id>, or the results root it is in",
              file=sys.stderr)
        return EXIT_USAGE
    try:
        # a run still building its files would write the same folder: wait for it, as a second run would
        held = locks.acquire_all(run.path for run in runs)
    except locks.RunHeldError as exc:
        _print(f"agentcompass: {exc}", file=sys.stderr)
        return EXIT_LOCKED
    try:
        for run in runs:
            try:
                _print(report.build(run.path))
            except (OSError, ValueError, KeyError) as exc:
                _print(f"agentcompass report: {run.path}: a file of this run cannot be read ({type(exc).__name__}: "
                      f"{exc}). Fix: run its request again, which rebuilds the files that are not valid",
                      file=sys.stderr)
                return 1
    finally:
        for folder in held:
            locks.release(folder)
    return 0


def _add_report_parser(sub) -> None:
    p = sub.add_parser(
        "report",
        help="rebuild the report of each run (results/<ns>/<run_id>/report/index.html) and print its path",
        description="Builds each run's report from the files on disk, without Snakemake, so it also works on a run "
        "that stopped (its figures then count the attempts done so far). The workflow builds the same report "
        "after metrics.json.",
    )
    p.add_argument("run_dirs", nargs="*", metavar="RUN_DIR",
                   help="a run's folder, or a results root holding runs (default: results)")
    p.set_defaults(func=cmd_report)


# `agentcompass init`'s Snakefile: the installed workflow as a Snakemake module
MODULE_SNAKEFILE = """\
# The agentcompass workflow as a Snakemake module: `snakemake --cores 2` in this folder
# builds the requests of configs/config.yaml into results/, as `agentcompass run` does.
# Add rules of your own below; the module's rules keep their names. Declare no onstart,
# onsuccess or onerror here: they would replace the workflow's (its events, its stops).
from agentcompass import PROJECT_ROOT


module agentcompass:
    snakefile:
        str(PROJECT_ROOT / "Snakefile")
    config:
        config


use rule * from agentcompass
"""


def _init_files() -> dict[str, Path]:
    """What ``init`` writes (relative path -> the shipped file or folder it copies)."""
    return {"configs/config.yaml": PROJECT_ROOT / "configs" / "config.yaml", "profiles": PROJECT_ROOT / "profiles"}


def cmd_init(args) -> int:
    target = Path(args.directory)
    if target.exists() and not target.is_dir():
        _print(f"agentcompass init: {target} is a file. Fix: name a new or existing folder", file=sys.stderr)
        return EXIT_USAGE
    written = [*_init_files(), "Snakefile"]
    present = [name for name in written if (target / name).exists()]
    if present:
        _print(f"agentcompass init: {target} already holds {', '.join(present)}; nothing was written. "
              "Fix: choose another folder, or move these away", file=sys.stderr)
        return EXIT_USAGE
    for name, source in _init_files().items():
        dest = target / name
        dest.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, dest)
        else:
            shutil.copyfile(source, dest)
    write_text_atomic(target / "Snakefile", MODULE_SNAKEFILE)
    _print(f"wrote {', '.join(str(target / name) for name in written)}\n"
          f"next: cd {target} && agentcompass run   (or: snakemake --cores 2)")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="agentcompass", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser(
        "init", help="write a starter project: configs/config.yaml, profiles/ and a Snakefile using the workflow",
        description="Writes DIRECTORY/configs/config.yaml (the example request: 'agentcompass run' there builds "
        "it), DIRECTORY/profiles/ (Snakemake profiles to copy or pass with -- --profile) and DIRECTORY/Snakefile "
        "(the workflow as a Snakemake module, for 'snakemake' and rules of your own). Writes nothing when one "
        "of them exists.",
    )
    p.add_argument("directory", nargs="?", default=".", metavar="DIRECTORY", help="the project folder (default: .)")
    p.set_defaults(func=cmd_init)

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
        help="evaluate MODEL with HARNESS on BENCHMARK (or the requests of --config files) through Snakemake",
        description="Builds the config and runs it through the Snakemake workflow. "
        "Arguments after '--' go to Snakemake (e.g. -- --profile profiles/slurm).",
    )
    _add_selection(p)
    p.add_argument("--cores", default="2", type=_cores, help="jobs at once (attempts wait on I/O: more than the CPUs is fine)")
    p.add_argument("--dry-run", "-n", action="store_true", help="print the complete resolved requests; load no tasks")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser(
        "status", help="counts by status per request, and which files would rerun and why",
        description="Takes the same BENCHMARK HARNESS MODEL (or --config files) and options as 'run', and "
        "reports on the requests that 'run' would build: their attempts by status, the failed ones, and which "
        "files the next run rebuilds and why. The results folder is --results-dir (default: runtime.results_dir).",
    )
    _add_selection(p)
    p.add_argument("--verbose", "-v", action="store_true", help="list every file that would rerun and every failed attempt")
    p.set_defaults(func=cmd_status)

    p = sub.add_parser("retry", help="rerun only the attempts whose result.json holds an error status")
    _add_selection(p)
    p.add_argument("--cores", default="2", type=_cores)
    p.set_defaults(func=cmd_retry)
    _add_clean_parser(sub)
    _add_runs_parser(sub)
    _add_export_parser(sub)
    _add_diff_parser(sub)
    _add_compare_parser(sub)
    _add_report_parser(sub)
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


if __name__ == "__main__":
    sys.exit(main())
