"""Bad input stops before any job runs, with the file, the field and the fix.

Each message is checked where its entry point builds it, in this process: the
Snakefile's first line (``EvaluationWorkflow.from_snakemake``, given the config
settings Snakemake's own command line makes of the same arguments), the
command's ``main(argv)``, and the SDK's ``run_evaluation``. One end-to-end case
per entry point shows that the message reaches the user of the real
``snakemake``, the real ``agentcompass run`` and the SDK.
"""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from agentcompass import cli, sdk
from agentcompass.errors import AgentCompassError, ConfigError
from agentcompass.pipeline.workflow import EvaluationWorkflow
from conftest import SNAKEFILE, agentcompass, clean_env, snakemake

PREFIX = "agentcompass: invalid run config: "


def snakefile_loads(folder: Path, *args: str) -> EvaluationWorkflow:
    """What the Snakefile's first line makes of ``snakemake *args`` run in ``folder``, in this process.

    Snakemake reads the command line (and the workflow's profile) as its ``snakemake`` command
    does and makes its config settings of it, reading each ``--configfile`` itself; then the
    Snakefile's ``EvaluationWorkflow.from_snakemake`` loads and validates every config layer, and
    on bad input prints the message and raises ``SystemExit(2)`` before any rule exists.
    """
    from snakemake.cli import parse_args, parse_config
    from snakemake.settings.types import ConfigSettings

    _, parsed = parse_args(["--snakefile", str(SNAKEFILE), "--directory", str(folder), "--cores", "2", *args])
    settings = ConfigSettings(config=parse_config(parsed.config), configfiles=parsed.configfile,
                              config_args=parsed.config, replace_workflow_config=parsed.replace_workflow_config)
    return EvaluationWorkflow.from_snakemake(SimpleNamespace(config_settings=settings, basedir=str(SNAKEFILE.parent)))


def snakefile_refuses(folder: Path, capsys, *args: str) -> tuple[int, str]:
    """``snakefile_loads`` on bad input: its exit status and what it printed."""
    with pytest.raises(SystemExit) as stop:
        snakefile_loads(folder, *args)
    return stop.value.code, capsys.readouterr().err


def run_cli(capsys, *argv: str) -> tuple[int, str]:
    """``agentcompass *argv``, in this process: its exit status and its stderr."""
    code = cli.main(list(argv))
    return code, capsys.readouterr().err


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
    "reference in a workflow field": (
        "requests:\n  r1: {benchmark: example_exact_match, harness: oracle, model: {id: none}, output: {run_id: 'r-${HOME}'}}\n",
        "requests.r1.output.run_id", "steers the workflow itself",
    ),
    "model param the client cannot honour": (
        "requests:\n  r1: {benchmark: example_exact_match, harness: chat, model: {id: m, params: {stream: true}}}\n",
        "requests.r1.model.params.stream", "not a stream of events",
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
    "base_url with another scheme": (
        "requests:\n  r1: {benchmark: example_exact_match, harness: chat, model: {id: m, base_url: 'ftp://x'}}\n",
        "requests.r1.model.base_url", "http:// or https://",
    ),
    "base_url without a scheme": (
        "requests:\n  r1: {benchmark: example_exact_match, harness: chat, model: {id: m, base_url: 'localhost:8000'}}\n",
        "requests.r1.model.base_url", "'localhost:8000'",
    ),
    "base_url that is no URL": (
        "defaults:\n  model: {id: m, base_url: not a url}\nrequests:\n  r1: {benchmark: example_exact_match, harness: chat}\n",
        "defaults.model.base_url", "'not a url'",
    ),
    "a harness that calls a model without base_url": (
        "requests:\n  r1: {benchmark: example_exact_match, harness: chat, model: {id: m}}\n",
        "requests.r1.model", "base_url is not set",
    ),
    "a harness that calls its model in chat completions, given a Model of another protocol": (
        "requests:\n  r1: {benchmark: example_exact_match, harness: chat, "
        "model: {id: m, base_url: 'http://127.0.0.1:9', protocol: anthropic}}\n",
        "requests.r1.model", "calls its Model in openai_chat, and model.protocol is 'anthropic'",
    ),
    "a key repeated in a mapping": (
        "requests:\n  r1: {benchmark: example_exact_match, harness: oracle, model: {id: none}}\n"
        "  r1: {benchmark: example_exact_match, harness: fixed_answer, model: {id: none}}\n",
        "line 3", "key 'r1' appears twice",
    ),
    "a string for a benchmark's list": (
        GOOD + "benchmarks:\n  example_exact_match: {task_ids: 'a,b'}\n",
        "benchmarks.example_exact_match.task_ids", "task_ids: [a, b]",
    ),
    "a string for enabled_recipes": (
        "requests:\n  r1: {benchmark: example_exact_match, harness: oracle, model: {id: none}, "
        "execution: {enabled_recipes: x}}\n",
        "requests.r1.execution.enabled_recipes", "enabled_recipes: [x]",
    ),
    "limit 0": (
        GOOD + "benchmarks:\n  example_exact_match: {limit: 0}\n",
        "benchmarks.example_exact_match.limit", "at least 1",
    ),
    "attempts as a string": (
        "requests:\n  r1: {benchmark: example_exact_match, harness: oracle, model: {id: none}, execution: {attempts: '2'}}\n",
        "requests.r1.execution.attempts", "write it without quotes: 'attempts: 2'",
    ),
    "attempts as a boolean": (
        "requests:\n  r1: {benchmark: example_exact_match, harness: oracle, model: {id: none}, execution: {attempts: true}}\n",
        "requests.r1.execution.attempts", "must be a whole number, got true",
    ),
    "a component table that is not a mapping": (
        GOOD + "harnesses:\n  oracle: [1]\n",
        "harnesses.oracle", "must be a mapping",
    ),
    "a request that is a string": (
        "requests:\n  r1: example_exact_match\n",
        "requests.r1", "must be a mapping",
    ),
    "a parameter of the wrong type": (
        GOOD + "environments:\n  host_process: {keep_workspace: maybe}\n",
        "environments.host_process.keep_workspace", "must be bool",
    ),
    "a task_dir path that does not exist": (
        "requests:\n  r1: {benchmark: {id: task_dir, params: {path: /nonexistent/tasks}}, harness: oracle, model: {id: none}}\n",
        "requests.r1.benchmark.params.path", "does not exist",
    ),
}


def assert_refused(code: int, message: str, folder: Path, source: str, field: str, problem: str) -> None:
    """Refused (exit status ``code``, printing ``message``) naming the source, the field, the problem
    and the fix, with no traceback, no job and no results folder in ``folder``."""
    assert code != 0
    assert source in message and field in message and problem in message and "Fix:" in message, message
    assert "Traceback" not in message, message
    assert not (folder / "results").exists()
    assert "Finished jobid" not in message


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_bad_configfile_is_refused_by_the_snakefile_before_any_job(here: Path, capsys, case: str):
    text, field, problem = BAD_FILES[case]
    path = here / "bad.yaml"
    path.write_text(text)
    code, message = snakefile_refuses(here, capsys, "--configfile", str(path))
    assert_refused(code, message, here, str(path), field, problem)


def test_snakemake_shows_the_refusal_of_a_bad_configfile(workdir: Path):
    """End to end, the real ``snakemake``: the Snakefile's message reaches its stderr, before any job."""
    text, field, problem = BAD_FILES["unknown component id"]
    path = workdir / "bad.yaml"
    path.write_text(text)
    done = snakemake(workdir, "--configfile", str(path), env=clean_env())
    assert PREFIX + str(path) in done.stderr, done.stderr
    assert_refused(done.returncode, done.stderr, workdir, str(path), field, problem)


CLI_BAD_FILES = {
    "models section": ("models:\n  gpt: {id: x}\n", "'models'", "not allowed"),
    "schema violation": ("execution: {attempts: 0}\n", "execution.attempts", "less than the minimum of 1"),
    "unset variable": ("benchmarks:\n  example_exact_match: {case_sensitive: '${AGENTCOMPASS_TEST_UNSET}'}\n",
                       "benchmarks.example_exact_match.case_sensitive", "AGENTCOMPASS_TEST_UNSET is not set"),
    "unknown benchmark parameter": ("benchmarks:\n  example_exact_match: {case_sensitiv: true}\n",
                                    "benchmarks.example_exact_match.case_sensitiv", "unknown parameter"),
}


@pytest.mark.parametrize("case", sorted(CLI_BAD_FILES))
def test_bad_configfile_is_refused_by_the_cli_before_any_job(here: Path, capsys, case: str):
    text, field, problem = CLI_BAD_FILES[case]
    path = here / "bad.yaml"
    path.write_text(text)
    code, message = run_cli(capsys, "run", "example_exact_match", "oracle", "none", "--config", str(path))
    assert_refused(code, message, here, str(path), field, problem)


def test_the_cli_shows_the_refusal_of_a_bad_configfile(workdir: Path):
    """End to end, the real ``agentcompass run``: the message reaches its stderr, status 2, before any job."""
    text, field, problem = CLI_BAD_FILES["schema violation"]
    path = workdir / "bad.yaml"
    path.write_text(text)
    done = agentcompass(workdir, "run", "example_exact_match", "oracle", "none", "--config", str(path))
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(PREFIX), done.stderr
    assert_refused(done.returncode, done.stderr, workdir, str(path), field, problem)


def test_the_sdk_raises_the_refusal_as_a_config_error_before_any_job(workdir: Path, monkeypatch):
    """End to end, the SDK: the message is the typed error ``run_evaluation`` raises, before any job."""
    monkeypatch.setenv("AGENTCOMPASS_USER_CONFIG", "")
    with pytest.raises(ConfigError) as refused:
        sdk.run_evaluation("example_exact_match", "oracle", "none", execution={"attempts": 0}, workdir=workdir)
    assert isinstance(refused.value, AgentCompassError) and isinstance(refused.value, ValueError)
    message = str(refused.value)
    assert "the SDK call" in message and "execution.attempts" in message, message
    assert "less than the minimum of 1" in message and "Fix:" in message, message
    assert not (workdir / "results").exists()


# Snakemake reads each --configfile itself before the Snakefile, and refuses these with its own
# message; through the CLI, the run config loader names the file and the fix.
NOT_A_MAPPING = {
    "empty": ("", "the config file is empty"),
    "only comments": ("# nothing yet\n", "the config file is empty"),
    "a list": ("- requests\n", "this one is a list"),
    "a scalar": ("requests\n", "this one is a string"),
}


@pytest.mark.parametrize("case", sorted(NOT_A_MAPPING))
def test_a_config_file_that_is_not_a_mapping_is_refused_naming_it(here: Path, capsys, case: str):
    from snakemake.exceptions import WorkflowError

    text, problem = NOT_A_MAPPING[case]
    path = here / "bad.yaml"
    path.write_text(text)
    code, message = run_cli(capsys, "run", "--config", str(path))
    assert code == 2, message
    assert message.startswith(PREFIX)
    assert_refused(code, message, here, str(path), "", problem)
    # plain snakemake: its own reading of the --configfile refuses it, a WorkflowError, which its
    # command prints without a traceback (exit status 1), before the Snakefile is read
    with pytest.raises(WorkflowError, match="keys at top level"):
        snakefile_loads(here, "--configfile", str(path))
    assert not (here / "results").exists()


@pytest.mark.parametrize("command", ["run", "retry"])
@pytest.mark.parametrize("cores", ["abc", "0", "-2"])
def test_bad_cores_is_a_usage_error(here: Path, capsys, command: str, cores: str):
    with pytest.raises(SystemExit) as stop:
        cli.main([command, "example_exact_match", "oracle", "none", "--cores", cores])
    stderr = capsys.readouterr().err
    assert stop.value.code == 2
    assert stderr.startswith("usage: agentcompass " + command), stderr
    assert "argument --cores: must be a whole number of at least 1, or 'all'" in stderr
    assert "Traceback" not in stderr
    assert not (here / "results").exists()


@pytest.mark.parametrize(
    "args, field, problem",
    [
        (["--base-url", "ftp://x"], "model.base_url", "'ftp://x'"),
        (["-b", "limit=0"], "benchmark.params.limit", "limit must be at least 1"),
        (["-b", "limit=-3"], "benchmark.params.limit", "limit must be at least 1"),
        (["-b", "task_ids=a,b"], "benchmark.params.task_ids", "'task_ids=[a,b]' on the command line"),
        (["-b", "limit"], "--benchmark-param 'limit'", "expected KEY=VALUE"),
        (["-e", "nope"], "environment", "unknown environment id 'nope'"),
        (["-b", "path=/nonexistent/tasks"], "benchmark.params.path", "does not exist"),
    ],
)
def test_bad_command_line_values_are_refused_before_any_job(here: Path, capsys, args: list, field: str, problem: str):
    benchmark = "task_dir" if any("path=" in a for a in args) else "example_exact_match"
    code, message = run_cli(capsys, "run", benchmark, "oracle", "none", *args)
    assert code == 2
    assert message.startswith(PREFIX)
    assert_refused(code, message, here, "", field, problem)


@pytest.mark.parametrize(
    "override, field, problem",
    [
        ("models={gpt: {id: x}}", "models", "not allowed"),
        ("execution={attempts: 0}", "execution.attempts", "less than the minimum"),
        ("benchmarks={nope: {}}", "", ""),
        ("requests={r1: {benchmark: nope, harness: oracle, model: {id: none}}}", "requests.r1.benchmark", "unknown benchmark id"),
        ("requests={r1: {benchmark: example_exact_match, harness: oracle, model: {id: 'x${HOME}'}}}", "requests.r1.model.id", "steers the workflow"),
    ],
)
def test_bad_config_override_is_refused_before_any_job(here: Path, capsys, override: str, field: str, problem: str):
    if not field:  # params for a component no request selects are allowed
        evaluation = snakefile_loads(here, "--config", override)
        assert [r.name for r in evaluation.orchestration.runs] == ["example-oracle"]  # the project config's
        assert "Traceback" not in capsys.readouterr().err
        return
    code, message = snakefile_refuses(here, capsys, "--config", override)
    assert_refused(code, message, here, "--config", field, problem)


def test_unknown_harness_in_cli_run_is_refused(here: Path, capsys):
    code, message = run_cli(capsys, "run", "example_exact_match", "no_such_harness", "none")
    assert code != 0
    assert "unknown harness id 'no_such_harness'" in message and "Fix:" in message
    assert not (here / "results").exists()


def test_harness_that_needs_a_model_refuses_model_none(here: Path, capsys):
    code, message = run_cli(capsys, "run", "example_exact_match", "chat", "none")
    assert code != 0
    assert "needs a model" in message
    assert not (here / "results").exists()


def test_without_the_swebench_extra_selecting_the_benchmark_fails_at_config_time_naming_it(tmp_path: Path, workdir: Path):
    """The extra's package is hidden from this Python (whether installed or not): no job runs."""
    blocker = tmp_path / "block"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text(
        "import sys\n\nclass _Block:\n    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'swebench' or name.startswith('swebench.'):\n"
        "            raise ModuleNotFoundError(name)\n\nsys.meta_path.insert(0, _Block())\n")
    instances = tmp_path / "instances.jsonl"
    instances.write_text('{"instance_id": "a__b-1"}\n')
    config = tmp_path / "swe.yaml"
    config.write_text("requests:\n  swe: {benchmark: {id: swebench, params: {path: %s}}, harness: oracle, "
                      "model: {id: none}, environment: {id: docker}}\n" % instances)
    env = clean_env(PYTHONPATH=os.pathsep.join([str(blocker), os.environ.get("PYTHONPATH", "")]))
    done = snakemake(workdir, "--configfile", str(config), env=env)
    assert done.returncode != 0
    assert "benchmark 'swebench' imports swebench (optional extra 'swebench')" in done.stderr, done.stderr[-3000:]
    assert "pip install 'agentcompass[swebench]'" in done.stderr
    assert not (workdir / "results").exists()


MINE = "requests:\n  mine: {benchmark: example_exact_match, harness: oracle, model: {id: none}}\n"


@pytest.mark.parametrize("command", ["run", "check", "retry"])
def test_config_for_snakemake_after_the_double_dash_is_refused(here: Path, capsys, command: str):
    """The command gives Snakemake its config itself: a --configfile or --config of the user's after '--'
    would replace it, or be replaced by it (Snakemake keeps the last of a repeated flag)."""
    (here / "a.yaml").write_text(MINE)
    (here / "b.yaml").write_text("benchmarks:\n  example_exact_match: {limit: 2}\n")
    selection = ["example_exact_match"] if command == "check" else []
    code, message = run_cli(capsys, command, *selection, "--config", "a.yaml", "--", "--configfile", "b.yaml")
    assert code == 2 and message.startswith(PREFIX), message
    assert "--configfile among Snakemake's arguments" in message and "Fix: give config files with --config" in message


def test_snakemake_arguments_that_would_build_other_requests_are_refused(here: Path):
    """What the workflow reads from Snakemake's arguments is resolved again before anything runs: another
    config (a profile's config files, say) never builds requests that were not asked for."""
    from snakemake.cli import parse_args

    from agentcompass.plugins import load_components
    from agentcompass.runtime.config import load_run_config
    from agentcompass.runtime.orchestration import resolve_orchestration

    (here / "a.yaml").write_text(MINE)
    (here / "b.yaml").write_text("benchmarks:\n  example_exact_match: {limit: 2}\n")
    load_components()
    orchestration = resolve_orchestration(load_run_config(["a.yaml"], None, project_fallback=SNAKEFILE.parent
                                                          / "configs" / "config.yaml"))

    def snakemake_reads(*paths: str):
        return parse_args(sdk.snakemake_argv(None, paths))[1]

    sdk.same_requests(orchestration, snakemake_reads("a.yaml"))
    with pytest.raises(ConfigError, match=r"would build example-oracle instead of mine; nothing was run"):
        sdk.same_requests(orchestration, snakemake_reads())  # the project's config: its example-oracle
    with pytest.raises(ConfigError, match=r"would build mine with other settings than the ones given"):
        sdk.same_requests(orchestration, snakemake_reads("a.yaml", "b.yaml"))
