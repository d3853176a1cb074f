"""The Python SDK: the same Snakemake workflow as the CLI, called from Python.

    from agentcompass.sdk import run_evaluation
    result = run_evaluation("example_exact_match", "oracle", "none")
    result.outcomes[0].metrics   # {'accuracy': 1.0, ...}

    run_evaluation(..., on_event=print)   # each progress event (a dict) as the run goes
"""

from __future__ import annotations

import functools
import gc
import inspect
import json
from pathlib import Path
from typing import Any, Callable, Iterable, TypedDict, TypeVar, Unpack, cast

from agentcompass import PROJECT_ROOT

from agentcompass._util import aio, importpath
from agentcompass.pipeline import lifecycle, locks
from agentcompass.pipeline.events import Tail
from agentcompass.plugins import load_components
# the outcome of each request, read from its files: here too, as the SDK always had them
from agentcompass.results import outcomes, run_folders
from agentcompass.runtime.config import ConfigError, load_run_config
from agentcompass.runtime.models import (
    Orchestration,
    OrchestrationResult,
    RequestOutcome,
    RunRequest,
)
from agentcompass.runtime.orchestration import resolve_orchestration, single_request_layer


def run_snakemake(argv: list[str]) -> bool:
    """Drive Snakemake through its own argument handling and API (profiles included)."""
    from snakemake.cli import args_to_api, parse_args

    parser, args = parse_args(argv)
    try:
        # the workflow keeps the working folder off the import path of the run's processes
        # (agentcompass._util.importpath); this process's own settings come back after it
        with importpath.kept():
            return bool(args_to_api(args, parser))
    finally:
        # The workflow freezes the heap at its end, for a quick exit
        # (EvaluationWorkflow.finish); this process goes on.
        gc.unfreeze()


def _parsed(argv: list[str]):
    """Snakemake's arguments, read as Snakemake reads them (``-n``, targets)."""
    from snakemake.cli import parse_args

    return parse_args(argv)[1]


def no_config_among(extra: Iterable[str]) -> list[str]:
    """Snakemake's arguments of the caller, refused when they hold config files or ``--config``: agentcompass
    gives Snakemake the config itself, and Snakemake keeps only the last of a repeated flag."""
    extra = list(extra)
    for arg in extra:
        flag = arg.partition("=")[0]
        if flag in ("--configfile", "--configfiles", "--config"):
            raise ConfigError(
                f"{flag} among Snakemake's arguments: agentcompass gives Snakemake the config itself, and Snakemake "
                "keeps only the last of a repeated flag. Fix: give config files with --config FILE (repeatable, "
                "merged in order) and settings with the options of the command, before '--'")
    return extra


def snakemake_argv(
    layer: dict[str, Any] | None,
    config_paths: Iterable[str | Path] = (),
    cores: int | str = 2,
    extra: Iterable[str] = (),
    workdir: str | Path | None = None,
) -> list[str]:
    """Snakemake's command line for a run: the caller's arguments (``extra``) before the
    config files and ``--config``, which takes every argument after it (``no_config_among``)."""
    extra = no_config_among(extra)
    argv = [
        "--snakefile", str(PROJECT_ROOT / "Snakefile"),
        "--directory", str(Path(workdir or Path.cwd()).resolve()),
        "--cores", str(cores),
        *extra,
    ]
    paths = [str(Path(path).resolve()) for path in config_paths]
    if paths:
        # one flag for all: Snakemake keeps only the last of repeated --configfile flags
        argv += ["--configfile", *paths]
    if layer:
        # JSON is YAML: the Snakefile reads these values back with their types.
        argv += ["--config", *[f"{key}={json.dumps(value)}" for key, value in layer.items()]]
    return argv


def _requests(orchestration: Orchestration) -> tuple:
    """What an orchestration builds: each request by name and fields (not where its config came from), and the
    results folder."""
    return (orchestration.runtime.results_dir,
            [(run.key, run.name, {k: v for k, v in run.request.to_dict().items() if k != "metadata"})
             for run in orchestration.runs])


def same_requests(orchestration: Orchestration, args) -> None:
    """Refuse Snakemake's arguments ``args`` (parsed) when the workflow would read other requests from them than
    ``orchestration``'s: config files or ``--config`` given after ``--``, or by a profile, that the caller's
    config does not hold. The workflow resolves its config from them again, as here, so what runs is what
    was resolved and checked (and what the end of the run reports on)."""
    from agentcompass.pipeline.workflow import config_overrides

    directory = Path(args.directory) if getattr(args, "directory", None) else None
    files = [str(p) for p in args.configfile or []]
    config = load_run_config(files, config_overrides(list(args.config or [])), start=directory,
                             project_fallback=PROJECT_ROOT / "configs" / "config.yaml")
    theirs = resolve_orchestration(config)
    if _requests(theirs) != _requests(orchestration):
        given = ", ".join(run.name for run in orchestration.runs) or "no request"
        read = ", ".join(run.name for run in theirs.runs) or "no request"
        what = f"{read} instead of {given}" if read != given else f"{given} with other settings than the ones given"
        raise ConfigError(
            f"Snakemake's arguments (config files: {', '.join(files) or 'none'}) would build {what}; nothing "
            "was run. Fix: give config files with --config only, not after '--' or in a Snakemake profile")


EventCallback = Callable[[dict], Any]


class RunOptions(TypedDict, total=False):
    """How each entry point runs the workflow: a keyword of each, default ``RUN_DEFAULTS``'s."""

    cores: int | str  # Snakemake's --cores
    dry_run: bool  # resolve and check the config only: each request's outcome is "planned"
    snakemake_args: Iterable[str]  # Snakemake's own arguments (no config files: those go in config_paths)
    workdir: str | Path | None  # the folder the run starts in (default: the current one)
    on_event: EventCallback | None  # called with each progress event of the run (docs/reports.md, Events)


RUN_DEFAULTS: RunOptions = {"cores": 2, "dry_run": False, "snakemake_args": (), "workdir": None, "on_event": None}


class RequestOptions(TypedDict, total=False):
    """The request ``run_evaluation`` builds, beyond its benchmark, harness and model: ``agentcompass run``'s
    options, each unset when None (``runtime.orchestration.single_request_layer``'s keywords, ``namespace``
    and ``run_id`` its ``output``)."""

    environment: str | None
    benchmark_params: dict | None
    harness_params: dict | None
    environment_params: dict | None
    base_url: str | None
    api_key_env: str | None
    model_params: dict | None
    execution: dict | None
    namespace: str | None
    run_id: str | None
    reuse: bool | None
    scanners: list | None


class EvaluationOptions(RequestOptions, RunOptions, total=False):
    """``run_evaluation``'s keywords: the request's and the run's."""


_Entry = TypeVar("_Entry", bound=Callable[..., OrchestrationResult])


def _keywords(options: type) -> Callable[[_Entry], _Entry]:
    """An entry point's ``**options`` (a TypedDict's keys) shown by ``help()`` and ``inspect.signature`` as the
    keywords they are, each with its default (None unless ``RUN_DEFAULTS`` has one), and any other keyword
    refused with a ``TypeError``, as a signature that spelled them out would."""

    def shown(entry: _Entry) -> _Entry:
        given = inspect.signature(entry)
        named = [p for p in given.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
        keywords = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=RUN_DEFAULTS.get(name),
                                      annotation=getattr(kind, "__forward_arg__", kind))
                    for name, kind in options.__annotations__.items()]
        signature = given.replace(parameters=named + keywords)

        @functools.wraps(entry)
        def checked(*args, **kwargs):
            signature.bind(*args, **kwargs)
            return entry(*args, **kwargs)

        checked.__signature__ = signature  # type: ignore[attr-defined]
        return cast(_Entry, checked)

    return shown


def build(orchestration: Orchestration, argv: list[str], workdir: str | Path | None = None,
          on_event: EventCallback | None = None) -> OrchestrationResult:
    """Run Snakemake on ``argv`` and read each request's outcome.

    Arguments from which the workflow would read other requests than ``orchestration``'s are
    refused first (``same_requests``, a ``ConfigError``): what runs is what the caller resolved.

    A run that builds files first takes the lock of every request's results
    folder (``agentcompass.pipeline.locks``): another live run on one of them
    raises ``agentcompass.errors.RunHeldError`` before anything starts.

    ``on_event`` gets each event the run appends to its requests' ``events.jsonl``
    (its shards' inner runs' too), as a dict, from a thread that follows the
    files while the run goes; every event is delivered before this returns.
    """
    args = _parsed(argv)
    same_requests(orchestration, args)
    dry_run = bool(args.dryrun)
    folders = [] if dry_run else locks.acquire_all(run_folders(orchestration, workdir))
    aio.reset()
    lifecycle.note_failures([])
    # from the files' ends now: this invocation's events come after, as it holds the locks
    tail = Tail(folders, on_event).start() if on_event is not None and folders else None
    try:
        ok = run_snakemake(argv)
    finally:
        if tail is not None:
            tail.stop()
        for folder in folders:  # the workflow's holds too: it may have stopped before its end
            locks.release(folder, entirely=True)
    return outcomes(orchestration, ok, workdir, dry_run=dry_run, reason=lifecycle.end_reason(ok),
                    targets=bool(args.targets))


def execute(
    layer: dict[str, Any] | None,
    config_paths: Iterable[str | Path] = (),
    *,
    overrides_source: str = "the SDK call",
    **options: Unpack[RunOptions],
) -> OrchestrationResult:
    """Validate the config (so bad input fails before any job), then build every request.

    ``options``: how to run (``RunOptions``; ``on_event`` is called with each progress event of the run,
    docs/reports.md, Events, as it happens)."""
    run: RunOptions = {**RUN_DEFAULTS, **options}
    workdir = run["workdir"]
    config_paths = [str(p) for p in config_paths]
    start = Path(workdir) if workdir else None
    config = load_run_config(config_paths, layer, start=start,
                             project_fallback=PROJECT_ROOT / "configs" / "config.yaml",
                             overrides_source=overrides_source)
    load_components()
    orchestration = resolve_orchestration(config)
    if run["dry_run"]:
        return OrchestrationResult(outcomes=[
            RequestOutcome(name=r.name, key=r.key, state="planned", results_dir=str(Path(orchestration.runtime.results_dir) / r.key))
            for r in orchestration.runs
        ])
    return build(orchestration, snakemake_argv(layer, config_paths, run["cores"], run["snakemake_args"], workdir),
                 workdir, on_event=run["on_event"])


@_keywords(EvaluationOptions)
def run_evaluation(
    benchmark: str,
    harness: str,
    model: str,
    *,
    config_paths: Iterable[str | Path] = (),
    **options: Unpack[EvaluationOptions],
) -> OrchestrationResult:
    """Evaluate ``model`` with ``harness`` on ``benchmark`` (one request) through Snakemake.

    The keywords are ``agentcompass run B H M``'s options: the request's (``RequestOptions``) and how to run it
    (``RunOptions``). ``on_event`` is called with each progress event of the run (docs/reports.md, Events), as
    it happens."""
    given: dict[str, Any] = dict(options)
    output = {"namespace": given.pop("namespace", None), "run_id": given.pop("run_id", None)}
    request = {name: given.pop(name) for name in RequestOptions.__annotations__ if name in given}
    layer = single_request_layer(benchmark, harness, model, output=output, **request)
    return execute(layer, config_paths, **given)


def _without_nulls(value: Any) -> Any:
    """Unset (None) fields dropped: in a config, absent means the default."""
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    return value


def request_layer(req: RunRequest) -> dict[str, Any]:
    """A constructed RunRequest as a one-request config layer.

    Its component params override the selected config entries; its Model,
    execution, output and reuse are kept as they are.
    """
    data = _without_nulls(req.to_dict())
    environment = data["environment"]
    request = {
        "benchmark": data["benchmark"],
        "harness": data["harness"],
        "environment": environment,
        "model": data["model"],
        "execution": data["execution"],
        "runtime": data["runtime"],
        "output": data["output"],
    }
    if data.get("scanners"):  # the scan stage's scanners (left out of a request without them)
        request["scanners"] = data["scanners"]
    layer: dict[str, Any] = {"requests": {req.metadata.request_name: request}}
    if req.metadata.recipe_dirs:
        layer["recipe_dirs"] = list(req.metadata.recipe_dirs)
    return layer


@_keywords(RunOptions)
def run_evaluation_request(
    req: RunRequest,
    *,
    config_paths: Iterable[str | Path] = (),
    **options: Unpack[RunOptions],
) -> OrchestrationResult:
    """Run a constructed RunRequest through the same workflow (the keywords: as ``run_evaluation``'s)."""
    return execute(request_layer(req), config_paths, **options)


@_keywords(RunOptions)
def run_orchestration(
    config_paths: Iterable[str | Path] = (),
    overrides: dict[str, Any] | None = None,
    **options: Unpack[RunOptions],
) -> OrchestrationResult:
    """Build every request of the given config files (and the project config) at once
    (the keywords: as ``run_evaluation``'s)."""
    return execute(overrides, config_paths, **options)


__all__ = ["run_evaluation", "run_evaluation_request", "run_orchestration"]
