"""Run config loading: deep_merge, layer order, ${VAR} references, errors."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from agentcompass.runtime.config import (
    ConfigError,
    config_field,
    deep_merge,
    describe_config,
    find_project_config,
    load_run_config,
    parse_bool,
    parse_int,
)
from agentcompass.runtime.config.benchmark import RuntimeBenchmarkConfig
from agentcompass.runtime.config.fields import build_component_config


def write_yaml(path: Path, data) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def request(benchmark="example_exact_match", harness="oracle", **extra):
    return {"benchmark": benchmark, "harness": harness, "model": {"id": "none"}, **extra}


@pytest.fixture
def isolated(monkeypatch, tmp_path):
    """No user config, and a start directory without a project config above it."""
    monkeypatch.setenv("AGENTCOMPASS_USER_CONFIG", "")
    start = tmp_path / "work"
    start.mkdir()
    return start


# --- deep_merge --------------------------------------------------------------------


def test_deep_merge_does_not_mutate_either_input():
    base = {"a": {"b": 1, "l": [1, 2]}, "s": "x"}
    override = {"a": {"c": 2, "l": [3]}, "t": {"u": 1}}
    base_before, override_before = copy.deepcopy(base), copy.deepcopy(override)
    merged = deep_merge(base, override)
    assert base == base_before
    assert override == override_before
    merged["a"]["l"].append(99)
    merged["t"]["u"] = 2
    assert base == base_before
    assert override == override_before


def test_deep_merge_nested_mappings_merge_by_key():
    merged = deep_merge({"a": {"b": {"c": 1, "d": 2}, "e": 3}}, {"a": {"b": {"d": 20, "f": 4}}})
    assert merged == {"a": {"b": {"c": 1, "d": 20, "f": 4}, "e": 3}}


def test_deep_merge_later_scalars_and_lists_replace():
    merged = deep_merge({"x": 1, "l": [1, 2, 3], "m": {"k": 1}}, {"x": 2, "l": [9], "m": "flat"})
    assert merged == {"x": 2, "l": [9], "m": "flat"}


def test_deep_merge_mapping_replaces_scalar_and_none_replaces_value():
    assert deep_merge({"a": 1}, {"a": {"b": 2}}) == {"a": {"b": 2}}
    assert deep_merge({"a": {"b": 2}}, {"a": None}) == {"a": None}


# --- config helpers ----------------------------------------------------------------


@pytest.mark.parametrize("value, expected", [
    (True, True), (False, False), ("yes", True), ("On", True), (" true ", True), ("1", True),
    ("no", False), ("OFF", False), ("0", False), (1, True), (0, False),
])
def test_parse_bool_accepts_usual_spellings(value, expected):
    assert parse_bool(value, "flag") is expected


@pytest.mark.parametrize("value", ["maybe", 2, None, 1.5, []])
def test_parse_bool_rejects_other_values_naming_the_parameter(value):
    with pytest.raises(ConfigError, match="flag"):
        parse_bool(value, "flag")


def test_parse_int_checks_type_and_minimum():
    assert parse_int("3", "n") == 3
    assert parse_int(4.0, "n") == 4
    for bad in (True, 2.5, "x", None):
        with pytest.raises(ConfigError, match="n must be an integer"):
            parse_int(bad, "n")
    with pytest.raises(ConfigError, match="at least 0"):
        parse_int(-1, "n", minimum=0)


def test_config_field_list_default_is_not_shared():
    import dataclasses

    @dataclasses.dataclass
    class Cfg:
        items: list = config_field(default=[1], description="Items.")

    a, b = Cfg(), Cfg()
    a.items.append(2)
    assert b.items == [1]
    assert describe_config(Cfg) == [
        {"name": "items", "type": "list", "default": [1], "description": "Items.", "choices": None, "stage": "tasks"}
    ]


def test_config_field_choices_are_enforced():
    import dataclasses

    @dataclasses.dataclass
    class Cfg:
        mode: str = config_field(default="a", description="Mode.", choices=["a", "b"])

    assert build_component_config(Cfg, {"mode": "b"}, "where").mode == "b"
    with pytest.raises(ConfigError, match="mode must be one of"):
        build_component_config(Cfg, {"mode": "c"}, "where")


def test_runtime_benchmark_config_normalizes_selection():
    cfg = RuntimeBenchmarkConfig(task_ids=["only"], categories=[1, "b"], limit="2")
    assert cfg.task_ids == ["only"]
    assert cfg.categories == ["1", "b"]
    assert cfg.limit == 2
    for limit in (0, -1):
        with pytest.raises(ConfigError, match="limit must be at least 1"):
            RuntimeBenchmarkConfig(limit=limit)
    with pytest.raises(ConfigError, match="task_ids"):
        RuntimeBenchmarkConfig(task_ids=[{"a": 1}])
    with pytest.raises(ConfigError, match="task_ids must be a list"):
        RuntimeBenchmarkConfig(task_ids="only")


def test_build_component_config_names_unknown_parameters():
    with pytest.raises(ConfigError, match=r"unknown parameter\(s\) \['bogus'\]"):
        build_component_config(RuntimeBenchmarkConfig, {"bogus": 1}, "benchmark 'x' params")


# --- layer order -------------------------------------------------------------------


def test_find_project_config_walks_up_from_start(tmp_path):
    project = write_yaml(tmp_path / "configs" / "config.yaml", {})
    deep = tmp_path / "a" / "b" / "c"
    deep.mkdir(parents=True)
    assert find_project_config(deep) == project.resolve()


def test_layer_order_user_project_explicit_overrides(monkeypatch, tmp_path):
    user = write_yaml(tmp_path / "user.yaml", {
        "benchmarks": {"example_exact_match": {"limit": 1, "case_sensitive": True, "categories": ["u"]}},
        "runtime": {"results_dir": "user-results", "log_level": "debug"},
    })
    monkeypatch.setenv("AGENTCOMPASS_USER_CONFIG", str(user))
    write_yaml(tmp_path / "proj" / "configs" / "config.yaml", {
        "requests": {"p": request()},
        "benchmarks": {"example_exact_match": {"limit": 2, "strip_whitespace": False}},
        "runtime": {"results_dir": "project-results"},
    })
    start = tmp_path / "proj" / "sub" / "dir"
    start.mkdir(parents=True)
    first = write_yaml(tmp_path / "first.yaml", {
        "benchmarks": {"example_exact_match": {"limit": 3, "task_ids": ["a"]}},
    })
    second = write_yaml(tmp_path / "second.yaml", {
        "benchmarks": {"example_exact_match": {"limit": 4}},
        "runtime": {"results_dir": "second-results"},
    })
    config = load_run_config([first, second], {"benchmarks": {"example_exact_match": {"limit": 5}}}, start=start)
    assert config.data["benchmarks"]["example_exact_match"] == {
        "limit": 5,  # overrides
        "case_sensitive": True,  # user
        "categories": ["u"],  # user
        "strip_whitespace": False,  # project
        "task_ids": ["a"],  # first explicit file
    }
    assert config.data["runtime"] == {"results_dir": "second-results", "log_level": "debug"}
    assert [Path(layer.source).name for layer in config.layers] == [
        "user.yaml", "config.yaml", "first.yaml", "second.yaml", "--config",
    ]
    assert "--config" not in config.config_paths
    assert config.source_of(("benchmarks", "example_exact_match", "strip_whitespace")).endswith("config.yaml")
    assert config.source_of(("benchmarks", "example_exact_match", "limit")) == "--config"


def test_explicit_files_apply_in_argument_order(isolated, tmp_path):
    a = write_yaml(tmp_path / "a.yaml", {"requests": {"r": request()}, "runtime": {"results_dir": "A"}})
    b = write_yaml(tmp_path / "b.yaml", {"runtime": {"results_dir": "B"}})
    assert load_run_config([a, b], start=isolated).data["runtime"]["results_dir"] == "B"
    assert load_run_config([b, a], start=isolated).data["runtime"]["results_dir"] == "A"


def test_missing_user_config_file_is_ignored(monkeypatch, isolated, tmp_path):
    monkeypatch.setenv("AGENTCOMPASS_USER_CONFIG", str(tmp_path / "does-not-exist.yaml"))
    config = load_run_config([], {"requests": {"r": request()}}, start=isolated)
    assert list(config.data["requests"]) == ["r"]
    assert [layer.source for layer in config.layers] == ["--config"]


def test_explicit_file_that_is_the_project_config_is_read_once(isolated, tmp_path):
    project = write_yaml(tmp_path / "configs" / "config.yaml", {"requests": {"p": request()}})
    config = load_run_config([project], start=tmp_path)
    assert len(config.layers) == 1


def test_include_project_false_skips_project_config(tmp_path):
    write_yaml(tmp_path / "configs" / "config.yaml", {"requests": {"p": request()}})
    config = load_run_config([], {"runtime": {"progress": False}}, start=tmp_path, include_project=False)
    assert "requests" not in config.data


def test_requests_and_defaults_come_whole_from_highest_layer_declaring_requests(isolated, tmp_path):
    write_yaml(tmp_path / "configs" / "config.yaml", {
        "requests": {"project-req": request()},
        "defaults": {"model": {"id": "project-model"}, "execution": {"attempts": 3}},
        "benchmarks": {"example_exact_match": {"limit": 1}},
    })
    explicit = write_yaml(tmp_path / "mine.yaml", {
        "requests": {"mine": request()},
        "defaults": {"execution": {"max_retries": 2}},
        "benchmarks": {"example_exact_match": {"case_sensitive": True}},
    })
    config = load_run_config([explicit], start=tmp_path)
    assert list(config.data["requests"]) == ["mine"]
    assert config.data["defaults"] == {"execution": {"max_retries": 2}}
    # component tables still merge
    assert config.data["benchmarks"]["example_exact_match"] == {"limit": 1, "case_sensitive": True}


def test_project_requests_kept_when_explicit_file_declares_none(isolated, tmp_path):
    write_yaml(tmp_path / "configs" / "config.yaml", {"requests": {"project-req": request()}})
    explicit = write_yaml(tmp_path / "tables.yaml", {"benchmarks": {"example_exact_match": {"limit": 1}}})
    config = load_run_config([explicit], start=tmp_path)
    assert list(config.data["requests"]) == ["project-req"]


def test_override_layer_declaring_requests_replaces_file_requests(isolated, tmp_path):
    explicit = write_yaml(tmp_path / "a.yaml", {"requests": {"a": request(), "b": request()}})
    config = load_run_config([explicit], {"requests": {"c": request()}}, start=isolated)
    assert list(config.data["requests"]) == ["c"]


# --- ${VAR} references ---------------------------------------------------------------


def test_references_stay_references_in_every_field(isolated, monkeypatch, tmp_path):
    monkeypatch.setenv("AC_TEST_HOST", "127.0.0.1:9999")
    monkeypatch.setenv("AC_TEST_KEY", "sk-should-not-appear")
    monkeypatch.setenv("AC_TEST_TASK", "capital-france")
    monkeypatch.setenv("AC_TEST_TOKEN", "secret-token")
    path = write_yaml(tmp_path / "c.yaml", {
        "requests": {"r": request(model={
            "id": "m", "base_url": "http://${AC_TEST_HOST}/v1", "api_key": "${AC_TEST_KEY}",
            "params": {"user": "Bearer ${AC_TEST_TOKEN}"},
        })},
        "benchmarks": {"example_exact_match": {"task_ids": ["${AC_TEST_TASK}"]}},
        "harnesses": {"chat": {"auth_token": "${AC_TEST_TOKEN}"}},
    })
    config = load_run_config([path], start=isolated)
    model = config.data["requests"]["r"]["model"]
    assert model["base_url"] == "http://${AC_TEST_HOST}/v1" and model["api_key"] == "${AC_TEST_KEY}"
    assert model["params"]["user"] == "Bearer ${AC_TEST_TOKEN}"
    assert config.data["benchmarks"]["example_exact_match"]["task_ids"] == ["${AC_TEST_TASK}"]
    assert config.data["harnesses"]["chat"]["auth_token"] == "${AC_TEST_TOKEN}"
    for value in ("sk-should-not-appear", "secret-token", "capital-france", "127.0.0.1:9999"):
        assert value not in repr(config.data)


@pytest.mark.parametrize("field, data", [
    ("requests.r.model.id", {"requests": {"r": request(model={"id": "${AC_TEST_HOST}"})}}),
    ("requests.r.output.run_id", {"requests": {"r": request(output={"run_id": "${AC_TEST_HOST}"})}}),
    ("runtime.results_dir", {"runtime": {"results_dir": "out-${AC_TEST_HOST}"}}),
    ("requests.r.harness", {"requests": {"r": {**request(), "harness": "${AC_TEST_HOST}"}}}),
])
def test_reference_in_a_field_that_shapes_the_workflow_raises_naming_file_and_field(
        isolated, monkeypatch, tmp_path, field, data):
    monkeypatch.setenv("AC_TEST_HOST", "127.0.0.1")
    path = write_yaml(tmp_path / "c.yaml", {"requests": {"r": request()}, **data})
    with pytest.raises(ConfigError) as info:
        load_run_config([path], start=isolated)
    message = str(info.value)
    assert str(path) in message and f"field '{field}'" in message
    assert "steers the workflow" in message and "Fix: write the value here" in message


@pytest.mark.parametrize("params, field, why", [
    ({"stream": True}, "stream", "not a stream"),
    ({"n": 3}, "n", "first choice only"),
    ({"model": "other"}, "model", "model.id"),
    ({"messages": []}, "messages", "remove it"),
])
def test_model_params_the_client_cannot_honour_are_refused(isolated, tmp_path, params, field, why):
    path = write_yaml(tmp_path / "c.yaml", {"requests": {"r": request(model={"id": "m", "params": params})}})
    with pytest.raises(ConfigError) as info:
        load_run_config([path], start=isolated)
    message = str(info.value)
    assert str(path) in message and f"field 'requests.r.model.params.{field}'" in message and why in message


def test_model_params_the_client_honours_pass(isolated, tmp_path):
    path = write_yaml(tmp_path / "c.yaml", {"defaults": {"model": {"params": {"stream": False, "n": 1}}},
                                           "requests": {"r": request(model={"id": "m", "params": {"seed": 1}})}})
    load_run_config([path], start=isolated)
    with pytest.raises(ConfigError, match="field 'defaults.model.params.stream'"):
        load_run_config([path], {"defaults": {"model": {"params": {"stream": True}}}}, start=isolated)


def test_unset_variable_raises_naming_variable_and_file(isolated, monkeypatch, tmp_path):
    monkeypatch.delenv("AC_TEST_UNSET_VAR", raising=False)
    path = write_yaml(tmp_path / "c.yaml", {"requests": {"r": request(model={
        "id": "m", "base_url": "${AC_TEST_UNSET_VAR}",
    })}})
    with pytest.raises(ConfigError) as info:
        load_run_config([path], start=isolated)
    message = str(info.value)
    assert "AC_TEST_UNSET_VAR" in message
    assert str(path) in message
    assert "Fix:" in message


def test_unset_variable_in_api_key_is_rejected_at_parse_time(isolated, monkeypatch, tmp_path):
    monkeypatch.delenv("AC_TEST_UNSET_KEY", raising=False)
    path = write_yaml(tmp_path / "c.yaml", {"requests": {"r": request(model={
        "id": "m", "api_key": "${AC_TEST_UNSET_KEY}",
    })}})
    with pytest.raises(ConfigError, match="AC_TEST_UNSET_KEY"):
        load_run_config([path], start=isolated)


def test_reference_in_override_layer_names_the_override_source(isolated, monkeypatch):
    monkeypatch.delenv("AC_TEST_UNSET_VAR", raising=False)
    with pytest.raises(ConfigError) as info:
        load_run_config([], {"runtime": {"results_dir": "${AC_TEST_UNSET_VAR}"}}, start=isolated)
    assert "--config" in str(info.value)
    assert "runtime.results_dir" in str(info.value)


# --- errors ------------------------------------------------------------------------


def _error(paths, overrides=None, start=None) -> str:
    with pytest.raises(ConfigError) as info:
        load_run_config(paths, overrides, start=start)
    return str(info.value)


def test_models_section_is_rejected(isolated, tmp_path):
    path = write_yaml(tmp_path / "c.yaml", {"models": {"gpt": {"id": "gpt"}}, "requests": {"r": request()}})
    message = _error([path], start=isolated)
    assert str(path) in message
    assert "models" in message
    assert "Fix:" in message


def test_unknown_top_level_field_is_rejected_naming_it(isolated, tmp_path):
    path = write_yaml(tmp_path / "c.yaml", {"requests": {"r": request()}, "benchmark_params": {}})
    message = _error([path], start=isolated)
    assert "benchmark_params" in message
    assert str(path) in message
    assert "Fix:" in message


def test_unknown_nested_field_is_rejected_naming_it(isolated, tmp_path):
    path = write_yaml(tmp_path / "c.yaml", {"requests": {"r": request(executon={"attempts": 2})}})
    message = _error([path], start=isolated)
    assert "executon" in message
    assert str(path) in message
    assert "Fix:" in message


def test_schema_violation_names_file_and_field(isolated, tmp_path):
    good = write_yaml(tmp_path / "good.yaml", {"requests": {"r": request()}})
    bad = write_yaml(tmp_path / "bad.yaml", {"execution": {"attempts": 0}})
    message = _error([good, bad], start=isolated)
    assert str(bad) in message
    assert str(good) not in message
    assert "execution.attempts" in message
    assert "Fix:" in message


def test_user_config_declaring_requests_is_rejected(monkeypatch, isolated, tmp_path):
    user = write_yaml(tmp_path / "user.yaml", {"requests": {"r": request()}})
    monkeypatch.setenv("AGENTCOMPASS_USER_CONFIG", str(user))
    message = _error([], {"runtime": {"progress": False}}, start=isolated)
    assert str(user) in message
    assert "requests" in message
    assert "Fix:" in message


def test_missing_explicit_file_is_a_config_error(isolated, tmp_path):
    missing = tmp_path / "nope.yaml"
    message = _error([missing], start=isolated)
    assert str(missing) in message
    assert "Fix:" in message


def test_invalid_yaml_is_a_config_error(isolated, tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("requests: {r: [unclosed\n")
    message = _error([path], start=isolated)
    assert str(path) in message
    assert "Fix:" in message


def test_non_mapping_config_is_a_config_error(isolated, tmp_path):
    path = tmp_path / "list.yaml"
    path.write_text("- a\n- b\n")
    message = _error([path], start=isolated)
    assert str(path) in message
    assert "Fix:" in message


def test_literal_api_key_is_a_schema_violation(isolated, tmp_path):
    path = write_yaml(tmp_path / "c.yaml", {"requests": {"r": request(model={"id": "m", "api_key": "sk-lit"})}})
    message = _error([path], start=isolated)
    assert "requests.r.model.api_key" in message
    assert str(path) in message


def test_literal_api_key_error_does_not_echo_the_key(isolated, tmp_path):
    path = write_yaml(tmp_path / "c.yaml", {"requests": {"r": request(model={
        "id": "m", "api_key": "sk-verysecret123",
    })}})
    message = _error([path], start=isolated)
    assert "sk-verysecret123" not in message


def test_a_key_repeated_in_a_mapping_names_the_file_line_and_key(isolated, tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(
        "requests:\n"
        "  r: {benchmark: example_exact_match, harness: oracle, model: {id: none}}\n"
        "benchmarks:\n"
        "  example_exact_match:\n"
        "    limit: 1\n"
        "    case_sensitive: true\n"
        "    limit: 2\n"
    )
    message = _error([path], start=isolated)
    assert message.startswith(f"{path}: line 7: key 'limit' appears twice in the same mapping (first on line 5)")
    assert "Fix:" in message


def test_the_same_key_in_two_mappings_and_a_yaml_merge_are_not_repeats(isolated, tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(
        "requests:\n"
        "  a: &base {benchmark: example_exact_match, harness: oracle, model: {id: none}}\n"
        "  b:\n"
        "    <<: *base\n"
        "    harness: fixed_answer\n"
    )
    requests = load_run_config([path], start=isolated).data["requests"]
    assert requests["b"]["harness"] == "fixed_answer" and requests["a"]["harness"] == "oracle"


@pytest.mark.parametrize("text, problem", [
    ("", "the config file is empty"),
    ("# only a comment\n", "the config file is empty"),
    ("[a, b]\n", "a run config is a mapping of keys, but this one is a list"),
    ("42\n", "a run config is a mapping of keys, but this one is a number"),
])
def test_an_empty_or_non_mapping_file_names_the_file(isolated, tmp_path, text, problem):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    message = _error([path], start=isolated)
    assert message.startswith(str(path)) and problem in message and "Fix:" in message


def test_a_folder_or_a_binary_file_as_config_is_a_config_error(isolated, tmp_path):
    binary = tmp_path / "c.yaml"
    binary.write_bytes(b"\xff\xfe\x00requests")
    assert _error([binary], start=isolated).startswith(f"{binary}: not a text file")
    assert _error([tmp_path], start=isolated).startswith(f"{tmp_path}: is a folder, not a config file")


@pytest.mark.parametrize("execution, field, problem, fix", [
    ({"attempts": "2"}, "execution.attempts", "must be a whole number, got the string '2'",
     "write it without quotes: 'attempts: 2'"),
    ({"attempts": True}, "execution.attempts", "must be a whole number, got true", "expected: Semantic attempts"),
    ({"task_timeout": "soon"}, "execution.task_timeout", "must be a number, got the string 'soon'", "expected: Seconds"),
    ({"enabled_recipes": "a, b"}, "execution.enabled_recipes", "must be a list, got the string 'a, b'",
     "write it as a YAML list: 'enabled_recipes: [a, b]'"),
])
def test_a_value_of_the_wrong_type_says_the_type_and_the_yaml_that_gives_it(isolated, tmp_path, execution, field, problem, fix):
    path = write_yaml(tmp_path / "c.yaml", {"requests": {"r": request()}, "execution": execution})
    assert _error([path], start=isolated).startswith(f"{path}: field '{field}': {problem}. Fix: {fix}")


@pytest.mark.parametrize("url", ["ftp://x", "localhost:8000", "not a url", "http://", "https:// spaced"])
def test_base_url_must_be_an_http_url(isolated, tmp_path, url):
    path = write_yaml(tmp_path / "c.yaml", {"requests": {"r": request(model={"id": "m", "base_url": url})}})
    message = _error([path], start=isolated)
    assert f"{path}: field 'requests.r.model.base_url': {url!r}" in message and "http:// or https://" in message


@pytest.mark.parametrize("url", ["http://127.0.0.1:8000/v1", "https://api.example.com/v1", "http://localhost"])
def test_http_base_urls_are_accepted(isolated, tmp_path, url):
    path = write_yaml(tmp_path / "c.yaml", {"requests": {"r": request(model={"id": "m", "base_url": url})}})
    assert load_run_config([path], start=isolated).data["requests"]["r"]["model"]["base_url"] == url


def test_config_paths_are_absolute_whichever_way_the_file_is_named(isolated, tmp_path, monkeypatch):
    path = write_yaml(tmp_path / "c.yaml", {"requests": {"r": request()}})
    monkeypatch.chdir(tmp_path)
    named = [load_run_config([name], start=isolated).config_paths for name in ("c.yaml", "./c.yaml", str(path))]
    assert named == [[str(path.resolve())]] * 3


@pytest.mark.parametrize("params, message", [
    ({"task_ids": "a,b"}, "task_ids must be a list, got 'a,b': write it as a YAML list, 'task_ids: [a, b]'"),
    ({"categories": 3}, "categories must be a list, got 3"),
    ({"limit": 0}, "limit must be at least 1, got 0"),
    ({"limit": True}, "limit must be an integer, got True"),
])
def test_component_params_of_the_wrong_shape_are_refused_by_name(params, message):
    with pytest.raises(ConfigError) as info:
        build_component_config(RuntimeBenchmarkConfig, params, "benchmark 'x' params")
    assert str(info.value).startswith(f"benchmark 'x' params: {message}")
    assert info.value.names == list(params)


def test_a_number_for_a_text_parameter_is_its_text_and_other_types_are_refused():
    import dataclasses

    @dataclasses.dataclass
    class Cfg:
        answer: str = config_field(default="", description="An answer.")
        keep: bool = config_field(default=False, description="Keep it.")

    assert build_component_config(Cfg, {"answer": 42}, "where").answer == "42"
    # null ('-H answer=') for a parameter that cannot be null: not set, so its default
    assert build_component_config(Cfg, {"answer": None, "keep": None}, "where") == Cfg()
    with pytest.raises(ConfigError, match="keep must be bool, got 'maybe'"):
        build_component_config(Cfg, {"keep": "maybe"}, "where")


def test_snakemake_reads_every_config_file_of_the_argv_in_order(tmp_path):
    """``--config a.yaml --config b.yaml`` reaches Snakemake as one ``--configfile a b``: Snakemake keeps only
    the last of repeated flags, and the workflow then read b.yaml (and the project config's requests) only."""
    from snakemake.cli import parse_args

    from agentcompass import sdk

    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    argv = sdk.snakemake_argv({"runtime": {"progress": False}}, [a, b], 2, ["-n"], workdir=tmp_path)
    parsed = parse_args(argv)[1]
    assert [str(p) for p in parsed.configfile] == [str(a), str(b)]
    assert parsed.config == ['runtime={"progress": false}'] and parsed.dryrun
    for extra in (["--configfile", str(a)], ["--configfiles=x.yaml"], ["--config", "runtime={}"]):
        with pytest.raises(ConfigError, match="among Snakemake's arguments.*Fix: give config files with --config"):
            sdk.snakemake_argv(None, [b], 2, extra)


def test_plain_snakemake_with_repeated_configfile_flags_is_refused():
    from agentcompass.pipeline.workflow import repeated_config_files

    for program in ("/venv/bin/snakemake", "/venv/lib/python3.12/site-packages/snakemake/__main__.py"):
        with pytest.raises(ConfigError, match="2 --configfile flags.*--configfile a.yaml b.yaml"):
            repeated_config_files([program, "--configfile", "a.yaml", "--configfile=b.yaml", "-n"])
        repeated_config_files([program, "--configfile", "a.yaml", "b.yaml"])  # one flag: fine
    # another program's own arguments (a script that calls the SDK) are not Snakemake's
    repeated_config_files(["/venv/bin/agentcompass", "--configfile", "a", "--configfile", "b"])


def test_two_files_layer_in_order_over_the_project_config(isolated, tmp_path):
    """The issue's case: a.yaml declares the requests, b.yaml only settings: a's requests with b's settings
    over a's, and none of the project config's requests."""
    write_yaml(tmp_path / "configs" / "config.yaml", {"requests": {"example-oracle": request()}})
    a = write_yaml(tmp_path / "a.yaml", {"requests": {"mine": request()}, "execution": {"attempts": 2},
                                         "benchmarks": {"example_exact_match": {"limit": 3, "case_sensitive": True}}})
    b = write_yaml(tmp_path / "b.yaml", {"benchmarks": {"example_exact_match": {"limit": 2}}})
    config = load_run_config([a, b], start=tmp_path)
    assert list(config.data["requests"]) == ["mine"]
    assert config.data["benchmarks"]["example_exact_match"] == {"limit": 2, "case_sensitive": True}
    assert config.data["execution"] == {"attempts": 2}
    assert config.source_of(("benchmarks", "example_exact_match", "limit")) == str(b)
