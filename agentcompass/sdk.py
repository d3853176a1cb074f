"""The Python SDK: the same Snakemake workflow as the CLI, called from Python.

    from agentcompass.sdk import run_evaluation
    result = run_evaluation("example_exact_match", "oracle", "none")
    result.outcomes[0].metrics   # {'accuracy': 1.0, ...}
"""

from __future__ import annotations

import gc
import json
from pathlib import Path
from typing import Any, Iterable

from agentcompass import PROJECT_ROOT
from agentcompass.runtime.config import load_run_config
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
        return bool(args_to_api(args, parser))
    finally:
        # The workflow freezes the heap at its end, for a quick exit
        # (EvaluationWorkflow.finish); this process goes on.
        gc.unfreeze()


def snakemake_argv(
    layer: dict[str, Any] | None,
    config_paths: Iterable[str | Path] = (),
    cores: int | str = 2,
    extra: Iterable[str] = (),
    workdir: str | Path | None = None,
) -> list[str]:
    argv = [
        "--snakefile", str(PROJECT_ROOT / "Snakefile"),
        "--directory", str(Path(workdir or Path.cwd()).resolve()),
        "--cores", str(cores),
    ]
    for path in config_paths:
        argv += ["--configfile", str(Path(path).resolve())]
    if layer:
        # JSON is YAML: the Snakefile reads these values back with their types.
        argv += ["--config", *[f"{key}={json.dumps(value)}" for key, value in layer.items()]]
    return argv + list(extra)


def outcomes(orchestration: Orchestration, ok: bool, workdir: str | Path | None = None) -> OrchestrationResult:
    """Each request's terminal state, read from its metrics.json, in declaration order."""
    base = Path(workdir or Path.cwd()) / orchestration.runtime.results_dir
    result = []
    for run in orchestration.runs:
        req = run.request
        run_path = base / req.namespace / req.run_id
        metrics_file = run_path / "metrics.json"
        counts: dict[str, int] = {}
        metrics: dict[str, Any] = {}
        state = "failed"
        if metrics_file.exists():
            data = json.loads(metrics_file.read_text())
            counts, metrics = data["counts"], data["metrics"]
            state = "completed" if ok else "failed"
        result.append(RequestOutcome(name=run.name, key=run.key, state=state, counts=counts, metrics=metrics,
                                     results_dir=str(run_path)))
    return OrchestrationResult(outcomes=result)


def execute(
    layer: dict[str, Any] | None,
    config_paths: Iterable[str | Path] = (),
    *,
    cores: int | str = 2,
    dry_run: bool = False,
    snakemake_args: Iterable[str] = (),
    workdir: str | Path | None = None,
    overrides_source: str = "the SDK call",
) -> OrchestrationResult:
    """Validate the config (so bad input fails before any job), then build every request."""
    config_paths = [str(p) for p in config_paths]
    start = Path(workdir) if workdir else None
    config = load_run_config(config_paths, layer, start=start,
                             project_fallback=PROJECT_ROOT / "configs" / "config.yaml",
                             overrides_source=overrides_source)
    orchestration = resolve_orchestration(config)
    if dry_run:
        return OrchestrationResult(outcomes=[
            RequestOutcome(name=r.name, key=r.key, state="planned", results_dir=str(Path(orchestration.runtime.results_dir) / r.key))
            for r in orchestration.runs
        ])
    ok = run_snakemake(snakemake_argv(layer, config_paths, cores, snakemake_args, workdir))
    return outcomes(orchestration, ok, workdir)


def run_evaluation(
    benchmark: str,
    harness: str,
    model: str,
    *,
    environment: str | None = None,
    benchmark_params: dict | None = None,
    harness_params: dict | None = None,
    environment_params: dict | None = None,
    base_url: str | None = None,
    api_key_env: str | None = None,
    model_params: dict | None = None,
    execution: dict | None = None,
    namespace: str | None = None,
    run_id: str | None = None,
    reuse: bool | None = None,
    config_paths: Iterable[str | Path] = (),
    cores: int | str = 2,
    dry_run: bool = False,
    snakemake_args: Iterable[str] = (),
    workdir: str | Path | None = None,
) -> OrchestrationResult:
    """Evaluate ``model`` with ``harness`` on ``benchmark`` (one request) through Snakemake."""
    layer = single_request_layer(
        benchmark, harness, model,
        environment=environment, benchmark_params=benchmark_params, harness_params=harness_params,
        environment_params=environment_params, base_url=base_url, api_key_env=api_key_env,
        model_params=model_params, execution=execution,
        output={"namespace": namespace, "run_id": run_id}, reuse=reuse,
    )
    return execute(layer, config_paths, cores=cores, dry_run=dry_run, snakemake_args=snakemake_args, workdir=workdir)


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
    layer: dict[str, Any] = {"requests": {req.metadata.request_name: request}}
    if req.metadata.recipe_dirs:
        layer["recipe_dirs"] = list(req.metadata.recipe_dirs)
    return layer


def run_evaluation_request(
    req: RunRequest,
    *,
    config_paths: Iterable[str | Path] = (),
    cores: int | str = 2,
    dry_run: bool = False,
    snakemake_args: Iterable[str] = (),
    workdir: str | Path | None = None,
) -> OrchestrationResult:
    """Run a constructed RunRequest through the same workflow."""
    return execute(request_layer(req), config_paths, cores=cores, dry_run=dry_run,
                   snakemake_args=snakemake_args, workdir=workdir)


def run_orchestration(
    config_paths: Iterable[str | Path] = (),
    overrides: dict[str, Any] | None = None,
    *,
    cores: int | str = 2,
    dry_run: bool = False,
    snakemake_args: Iterable[str] = (),
    workdir: str | Path | None = None,
) -> OrchestrationResult:
    """Build every request of the given config files (and the project config) at once."""
    return execute(overrides, config_paths, cores=cores, dry_run=dry_run,
                   snakemake_args=snakemake_args, workdir=workdir)


__all__ = ["run_evaluation", "run_evaluation_request", "run_orchestration"]
