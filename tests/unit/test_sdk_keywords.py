"""The SDK's entry points take their keywords from one definition each (``RequestOptions``, ``RunOptions``),
and show and check them as a signature that spelled them out would."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from agentcompass import sdk

RUN = ["cores", "dry_run", "snakemake_args", "workdir", "on_event"]
REQUEST = ["environment", "benchmark_params", "harness_params", "environment_params", "base_url", "api_key_env",
           "model_params", "execution", "namespace", "run_id", "reuse", "scanners"]


@pytest.mark.parametrize("entry, named, keywords", [
    (sdk.run_evaluation, ["benchmark", "harness", "model", "config_paths"], REQUEST + RUN),
    (sdk.run_evaluation_request, ["req", "config_paths"], RUN),
    (sdk.run_orchestration, ["config_paths", "overrides"], RUN),
])
def test_help_shows_every_keyword_with_its_default(entry, named, keywords):
    parameters = inspect.signature(entry).parameters
    assert list(parameters) == named + keywords
    assert {name: parameters[name].default for name in RUN} == sdk.RUN_DEFAULTS
    assert all(parameters[name].default is None for name in keywords if name not in RUN)


def test_an_unknown_keyword_is_refused_before_anything_runs():
    with pytest.raises(TypeError, match="unexpected keyword argument 'core'"):
        sdk.run_evaluation("example_exact_match", "oracle", "none", core=4)
    with pytest.raises(TypeError, match="too many positional arguments"):
        sdk.run_orchestration([], None, 4)


def test_the_keywords_reach_the_request_and_the_run(tmp_path: Path):
    result = sdk.run_evaluation("example_exact_match", "oracle", "none", benchmark_params={"limit": 1},
                                namespace="ns", run_id="one", dry_run=True, workdir=tmp_path)
    [outcome] = result.outcomes
    assert outcome.state == "planned" and outcome.key.endswith("ns/one")
