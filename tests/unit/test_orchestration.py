"""resolve_orchestration: precedence, ids, compatibility checks, single_request_layer."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from agentcompass.plugins import load_components
from agentcompass.runtime.config import ConfigError, load_run_config
from agentcompass.runtime.models import NetworkPolicy
from agentcompass.runtime.orchestration import resolve_orchestration, single_request_layer

load_components()  # the ids below are the built-in components'


def write_yaml(path: Path, data) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def request(benchmark="example_exact_match", harness="oracle", **extra):
    return {"benchmark": benchmark, "harness": harness, "model": {"id": "none"}, **extra}


def resolve(data: dict, **kwargs):
    config = load_run_config([], data, include_user=False, include_project=False)
    return resolve_orchestration(config, **kwargs)


def resolve_one(data: dict, **kwargs):
    orchestration = resolve(data, **kwargs)
    assert len(orchestration.runs) == 1
    return orchestration.runs[0].request


def config_error(data: dict, **kwargs) -> str:
    with pytest.raises(ConfigError) as info:
        resolve(data, **kwargs)
    return str(info.value)


# --- precedence ------------------------------------------------------------------


def test_benchmark_params_precedence_table_then_defaults_then_request():
    req = resolve_one({
        "benchmarks": {"example_exact_match": {"limit": 1, "case_sensitive": True, "categories": ["geography"]}},
        "defaults": {"benchmark": {"params": {"limit": 2, "strip_whitespace": False}}},
        "requests": {"r": request(benchmark={"id": "example_exact_match", "params": {"limit": 3}})},
    })
    assert req.benchmark.id == "example_exact_match"
    assert req.benchmark.params == {
        "limit": 3,  # request
        "strip_whitespace": False,  # defaults
        "case_sensitive": True,  # table
        "categories": ["geography"],  # table
    }


def test_defaults_params_for_another_component_id_do_not_apply():
    req = resolve_one({
        "defaults": {"benchmark": {"id": "other_benchmark", "params": {"limit": 2}}},
        "requests": {"r": request()},
    })
    assert req.benchmark.params == {}


def test_defaults_select_components_when_request_omits_them():
    req = resolve_one({
        "defaults": {"benchmark": "example_exact_match", "harness": {"id": "fixed_answer", "params": {"answer": "x"}}},
        "requests": {"r": {"model": {"id": "none"}}},
    })
    assert req.benchmark.id == "example_exact_match"
    assert req.harness.id == "fixed_answer"
    assert req.harness.params == {"answer": "x"}


def test_harness_and_environment_params_follow_the_same_precedence(tmp_path):
    root = str(tmp_path)
    req = resolve_one({
        "harnesses": {"fixed_answer": {"answer": "table"}},
        "environments": {"host_process": {"workspace_root": "/table", "keep_workspace": True}},
        "defaults": {"environment": {"id": "host_process", "params": {"workspace_root": "/defaults"}}},
        "requests": {"r": request(
            harness={"id": "fixed_answer", "params": {"answer": "request"}},
            environment={"id": "host_process", "params": {"workspace_root": root}},
        )},
    })
    assert req.harness.params == {"answer": "request"}
    assert req.environment.params == {"workspace_root": root, "keep_workspace": True}


def test_model_request_fields_win_over_defaults_model():
    req = resolve_one({
        "defaults": {"model": {"id": "default-model", "base_url": "http://127.0.0.1:1/v1", "params": {"temperature": 0.0, "top_p": 1.0}}},
        "requests": {"r": request(harness="chat", model={"id": "request-model", "params": {"temperature": 0.7}})},
    })
    assert req.model.id == "request-model"
    assert req.model.base_url == "http://127.0.0.1:1/v1"
    assert req.model.params == {"temperature": 0.7, "top_p": 1.0}


def test_execution_precedence_top_level_then_defaults_then_request():
    req = resolve_one({
        "execution": {"attempts": 2, "max_retries": 1, "task_timeout": 10, "retain_environments": "always"},
        "defaults": {"execution": {"max_retries": 2, "task_timeout": 20}},
        "requests": {"r": request(execution={"task_timeout": 30})},
    })
    assert req.execution.attempts == 2
    assert req.execution.max_retries == 2
    assert req.execution.task_timeout == 30
    assert req.execution.retain_environments == "always"


def test_output_namespace_and_run_id_precedence():
    orchestration = resolve({
        "defaults": {"output": {"namespace": "shared", "run_id": "ignored-by-b"}},
        "requests": {
            "a": request(output={"run_id": "run-a"}),
            "b": request(output={"namespace": "mine", "run_id": "run-b"}),
        },
    })
    a, b = (run.request for run in orchestration.runs)
    assert (a.namespace, a.run_id) == ("shared", "run-a")
    assert (b.namespace, b.run_id) == ("mine", "run-b")
    assert [run.key for run in orchestration.runs] == ["shared/run-a", "mine/run-b"]


def test_run_id_defaults_to_request_name():
    req = resolve_one({"requests": {"my-request": request()}})
    assert req.output.run_id is None
    assert req.run_id == "my-request"
    assert req.namespace == "default"
    assert req.metadata.request_name == "my-request"


def test_reuse_precedence_runtime_then_defaults_then_request():
    orchestration = resolve({
        "runtime": {"reuse": False},
        "defaults": {"runtime": {"reuse": True}},
        "requests": {"a": request(), "b": request(runtime={"reuse": False})},
    })
    assert [run.request.runtime.reuse for run in orchestration.runs] == [True, False]
    assert resolve_one({"runtime": {"reuse": False}, "requests": {"a": request()}}).runtime.reuse is False


def test_requests_keep_declaration_order_and_indices():
    orchestration = resolve({"requests": {"z": request(), "a": request(), "m": request()}})
    assert [run.name for run in orchestration.runs] == ["z", "a", "m"]
    assert [run.index for run in orchestration.runs] == [0, 1, 2]


def test_runtime_options_and_overrides():
    orchestration = resolve(
        {"runtime": {"results_dir": "out", "log_level": "debug"}, "requests": {"r": request()}},
        runtime_overrides={"log_level": "error"},
    )
    assert orchestration.runtime.results_dir == "out"
    assert orchestration.runtime.log_level == "error"


def test_string_network_policy_becomes_network_policy():
    req = resolve_one({"requests": {"r": request(environment={"id": "host_process", "run_network": "public"})}})
    assert req.environment.run_network == NetworkPolicy(mode="public")
    assert req.environment.baseline_network is None


# --- rejections ------------------------------------------------------------------


def test_two_requests_writing_the_same_results_path_are_rejected():
    message = config_error({
        "requests": {
            "a": request(output={"run_id": "same"}),
            "b": request(output={"run_id": "same"}),
        }
    })
    assert "default/same" in message
    assert "'a'" in message and "'b'" in message


def test_request_named_like_another_requests_run_id_is_rejected():
    message = config_error({"requests": {"a": request(), "b": request(output={"run_id": "a"})}})
    assert "default/a" in message


def test_same_run_id_in_different_namespaces_is_allowed():
    orchestration = resolve({
        "requests": {
            "a": request(output={"namespace": "one", "run_id": "same"}),
            "b": request(output={"namespace": "two", "run_id": "same"}),
        }
    })
    assert [run.key for run in orchestration.runs] == ["one/same", "two/same"]


@pytest.mark.parametrize("field, bad_id, known", [
    ("benchmark", "no_such_benchmark", "example_exact_match"),
    ("harness", "no_such_harness", "oracle"),
    ("environment", "no_such_environment", "host_process"),
])
def test_unknown_component_id_is_rejected_listing_known_ids(field, bad_id, known):
    message = config_error({"requests": {"r": request(**{field: bad_id})}})
    assert bad_id in message
    assert known in message
    assert "requests.r" in message
    assert "Fix:" in message


def test_no_requests_is_rejected():
    message = config_error({"runtime": {"progress": False}})
    assert "requests" in message
    assert "Fix:" in message


def test_harness_that_requires_a_model_rejects_model_none():
    message = config_error({"requests": {"r": request(harness="chat")}})
    assert "chat" in message
    assert "model" in message
    assert "Fix:" in message


def test_harness_that_needs_no_model_accepts_model_none():
    req = resolve_one({"requests": {"r": request(harness="oracle")}})
    assert req.model.is_none
    assert req.harness.id == "oracle"


def test_chat_harness_with_a_model_is_accepted():
    req = resolve_one({"requests": {"r": request(harness="chat", model={"id": "gpt-test", "base_url": "http://127.0.0.1:9/v1"})}})
    assert req.model.id == "gpt-test"


def test_a_harness_that_calls_a_model_needs_its_base_url():
    message = config_error({"requests": {"r": request(harness="chat", model={"id": "gpt-test"})}})
    assert "requests.r.model" in message and "base_url is not set" in message and "Fix:" in message


def test_harness_none_requires_a_harness_free_benchmark():
    message = config_error({"requests": {"r": request(harness="none")}})
    assert "harness-free" in message


@pytest.mark.parametrize("params, named", [
    ({"no_such_param": 1}, "no_such_param"),
    ({"limit": -1}, "limit"),
    ({"case_sensitive": "perhaps"}, "case_sensitive"),
])
def test_bad_benchmark_param_is_rejected_before_anything_runs(params, named):
    message = config_error({"requests": {"r": request(benchmark={"id": "example_exact_match", "params": params})}})
    assert named in message
    assert "requests.r.benchmark" in message


def test_bad_benchmark_param_in_table_is_rejected():
    message = config_error({
        "benchmarks": {"example_exact_match": {"limit": -1}},
        "requests": {"r": request()},
    })
    assert "limit" in message


def test_bad_harness_param_is_rejected():
    message = config_error({"requests": {"r": request(harness={"id": "oracle", "params": {"x": 1}})}})
    assert "'x'" in message
    assert "requests.r.harness" in message


def test_bad_environment_param_is_rejected():
    message = config_error({"requests": {"r": request(environment={"id": "host_process", "params": {"gpus": 2}})}})
    assert "gpus" in message


def isolation(monkeypatch, available: bool) -> None:
    """Pretend this machine can (or cannot) give host processes a network namespace."""
    from agentcompass.environments import netns

    monkeypatch.setattr(netns, "network_isolation", lambda: (available, "" if available else "namespaces are off here"))


@pytest.mark.parametrize("phase", ["baseline_network", "run_network", "evaluation_network"])
def test_network_policy_none_with_host_process_is_accepted_where_it_can_isolate(monkeypatch, phase):
    isolation(monkeypatch, True)
    req = resolve_one({"requests": {"r": request(environment={"id": "host_process", phase: "none"})}})
    assert getattr(req.environment, phase) == NetworkPolicy(mode="none")


@pytest.mark.parametrize("phase", ["baseline_network", "run_network", "evaluation_network"])
def test_network_policy_none_with_host_process_is_rejected_where_it_cannot_isolate(monkeypatch, phase):
    isolation(monkeypatch, False)
    message = config_error({"requests": {"r": request(environment={"id": "host_process", phase: "none"})}})
    assert "host_process" in message
    assert "namespaces are off here" in message
    assert "requests.r.environment" in message


def test_network_policy_none_in_defaults_is_rejected_where_it_cannot_isolate(monkeypatch):
    isolation(monkeypatch, False)
    message = config_error({
        "defaults": {"environment": {"run_network": {"mode": "none"}}},
        "requests": {"r": request()},
    })
    assert "host_process" in message


def test_invalid_runtime_options_are_rejected():
    with pytest.raises(ConfigError, match="runtime"):
        resolve({"requests": {"r": request()}}, runtime_overrides={"results_dir": ""})


# --- task concurrency ------------------------------------------------------------


def test_global_task_concurrency_argument_is_written_into_every_request():
    orchestration = resolve(
        {
            "execution": {"task_concurrency": 2},
            "requests": {"a": request(), "b": request(execution={"task_concurrency": 7})},
        },
        task_concurrency=5,
    )
    assert [run.request.execution.task_concurrency for run in orchestration.runs] == [5, 5]


def test_top_level_task_concurrency_applies_without_argument():
    orchestration = resolve({"task_concurrency": 3, "execution": {"task_concurrency": 2},
                             "requests": {"a": request(), "b": request()}})
    assert [run.request.execution.task_concurrency for run in orchestration.runs] == [3, 3]


def test_execution_task_concurrency_applies_without_global_value():
    orchestration = resolve({"execution": {"task_concurrency": 2}, "requests": {"a": request(), "b": request()}})
    assert [run.request.execution.task_concurrency for run in orchestration.runs] == [2, 2]


# --- single_request_layer ----------------------------------------------------------


def test_single_request_layer_builds_one_request():
    layer = single_request_layer(
        "example_exact_match", "chat", "gpt-4o/mini",
        benchmark_params={"limit": 2},
        base_url="http://127.0.0.1:8000/v1",
        execution={"attempts": 2, "max_retries": None},
        output={"namespace": "ns", "run_id": None},
        reuse=False,
    )
    assert list(layer) == ["requests"]
    (name, body), = layer["requests"].items()
    assert name == "example_exact_match-chat-gpt-4o-mini"
    assert body["benchmark"] == {"id": "example_exact_match", "params": {"limit": 2}}
    assert body["harness"] == {"id": "chat", "params": {}}
    assert body["model"] == {"id": "gpt-4o/mini", "base_url": "http://127.0.0.1:8000/v1"}
    assert body["execution"] == {"attempts": 2}
    assert body["output"] == {"namespace": "ns"}
    assert body["runtime"] == {"reuse": False}
    assert "environment" not in body


def test_single_request_layer_replaces_project_requests(tmp_path):
    write_yaml(tmp_path / "configs" / "config.yaml", {
        "requests": {"project-a": request(), "project-b": request()},
        "defaults": {"execution": {"attempts": 3}},
        "benchmarks": {"example_exact_match": {"case_sensitive": True, "limit": 4}},
    })
    layer = single_request_layer("example_exact_match", "oracle", "none", benchmark_params={"limit": 1})
    config = load_run_config([], layer, start=tmp_path)
    orchestration = resolve_orchestration(config)
    assert [run.name for run in orchestration.runs] == ["example_exact_match-oracle-none"]
    req = orchestration.runs[0].request
    # the project's component table still applies; explicit params override it
    assert req.benchmark.params == {"case_sensitive": True, "limit": 1}
    # the project's defaults travel with the project's requests and are dropped
    assert req.execution.attempts == 1
    assert req.metadata.config_paths == [str(tmp_path / "configs" / "config.yaml")]


def test_single_request_layer_with_environment():
    layer = single_request_layer("example_exact_match", "oracle", "none", environment_params={"keep_workspace": True})
    req = resolve_one(layer)
    assert req.environment.id == "host_process"
    assert req.environment.params == {"keep_workspace": True}


def test_recipe_dirs_are_resolved_into_metadata(tmp_path):
    recipes = tmp_path / "recipes"
    recipes.mkdir()
    req = resolve_one({"recipe_dirs": [str(recipes)], "requests": {"r": request()}})
    assert req.metadata.recipe_dirs == [str(recipes.resolve())]


@pytest.mark.parametrize("field", ["enabled_recipes", "analyzers"])
def test_unknown_recipe_or_analyzer_id_is_rejected(field):
    message = config_error({"requests": {"r": request(execution={field: ["no_such_component"]})}})
    assert "no_such_component" in message
