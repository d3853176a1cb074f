"""Bad input stops before any job runs, with the file, the field and the fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import agentcompass, clean_env, snakemake

GOOD = "requests:\n  r1: {benchmark: example_exact_match, harness: oracle, model: {id: none}}\n"

BAD_FILES = {
    "unknown component id": (
        "requests:\n  r1: {benchmark: nope, harness: oracle, model: {id: none}}\n",
        "requests.r1.benchmark", "unknown benchmark id 'nope'",
    ),
    "models section": (
        "models:\n  gpt: {id: x}\n" + GOOD,
        "'models'", "not allowed",
    ),
    "embedded variable": (
        "requests:\n  r1: {benchmark: example_exact_match, harness: oracle, model: {id: none, base_url: 'http://${HOST}/v1'}}\n",
        "requests.r1.model.base_url", "embeds a ${VAR} reference",
    ),
    "unset variable": (
        "requests:\n  r1: {benchmark: example_exact_match, harness: chat, model: {id: m, api_key: '${AGENTCOMPASS_TEST_UNSET}'}}\n",
        "requests.r1.model.api_key", "AGENTCOMPASS_TEST_UNSET is not set",
    ),
    "schema violation": (
        "requests:\n  r1: {benchmark: example_exact_match, harness: oracle, model: {id: none}, execution: {attempts: 0}}\n",
        "requests.r1.execution.attempts", "less than the minimum of 1",
    ),
    "unknown field": (
        "requests:\n  r1: {benchmark: example_exact_match, harness: oracle, model: {id: none}, exectuion: {}}\n",
        "requests.r1.exectuion", "unknown field",
    ),
    "unknown benchmark parameter": (
        GOOD + "benchmarks:\n  example_exact_match: {case_sensitiv: true}\n",
        "benchmarks.example_exact_match.case_sensitiv", "unknown parameter",
    ),
}


def assert_refused(done, workdir: Path, source: str, field: str, problem: str) -> None:
    assert done.returncode != 0
    message = done.stderr
    assert source in message and field in message and problem in message and "Fix:" in message, message
    assert not (workdir / "results").exists()
    assert "Finished jobid" not in message


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_bad_configfile_is_refused_by_snakemake_before_any_job(workdir: Path, case: str):
    text, field, problem = BAD_FILES[case]
    path = workdir / "bad.yaml"
    path.write_text(text)
    done = snakemake(workdir, "--configfile", str(path), env=clean_env())
    assert_refused(done, workdir, str(path), field, problem)


CLI_BAD_FILES = {
    "models section": ("models:\n  gpt: {id: x}\n", "'models'", "not allowed"),
    "schema violation": ("execution: {attempts: 0}\n", "execution.attempts", "less than the minimum of 1"),
    "unset variable": ("benchmarks:\n  example_exact_match: {case_sensitive: '${AGENTCOMPASS_TEST_UNSET}'}\n",
                       "benchmarks.example_exact_match.case_sensitive", "AGENTCOMPASS_TEST_UNSET is not set"),
    "unknown benchmark parameter": ("benchmarks:\n  example_exact_match: {case_sensitiv: true}\n",
                                    "benchmarks.example_exact_match.case_sensitiv", "unknown parameter"),
}


@pytest.mark.parametrize("case", sorted(CLI_BAD_FILES))
def test_bad_configfile_is_refused_by_the_cli_before_any_job(workdir: Path, case: str):
    text, field, problem = CLI_BAD_FILES[case]
    path = workdir / "bad.yaml"
    path.write_text(text)
    done = agentcompass(workdir, "run", "example_exact_match", "oracle", "none", "--config", str(path))
    assert_refused(done, workdir, str(path), field, problem)


@pytest.mark.parametrize(
    "override, field, problem",
    [
        ("models={gpt: {id: x}}", "models", "not allowed"),
        ("execution={attempts: 0}", "execution.attempts", "less than the minimum"),
        ("benchmarks={nope: {}}", "", ""),
        ("requests={r1: {benchmark: nope, harness: oracle, model: {id: none}}}", "requests.r1.benchmark", "unknown benchmark id"),
        ("requests={r1: {benchmark: example_exact_match, harness: oracle, model: {id: none, base_url: 'x${Y}'}}}", "requests.r1.model.base_url", "embeds"),
    ],
)
def test_bad_config_override_is_refused_before_any_job(workdir: Path, override: str, field: str, problem: str):
    done = snakemake(workdir, "--config", override)
    if not field:  # params for a component no request selects are allowed
        assert done.returncode == 0, done.stderr[-2000:]
        return
    assert_refused(done, workdir, "--config", field, problem)


def test_unknown_harness_in_cli_run_is_refused(workdir: Path):
    done = agentcompass(workdir, "run", "example_exact_match", "no_such_harness", "none")
    assert done.returncode != 0
    assert "unknown harness id 'no_such_harness'" in done.stderr and "Fix:" in done.stderr
    assert not (workdir / "results").exists()


def test_harness_that_needs_a_model_refuses_model_none(workdir: Path):
    done = agentcompass(workdir, "run", "example_exact_match", "chat", "none")
    assert done.returncode != 0
    assert "needs a model" in done.stderr
    assert not (workdir / "results").exists()
