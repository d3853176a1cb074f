"""mini_swe_agent's parameters and the command line it builds (no agent is run here)."""

from __future__ import annotations

import json

import pytest

from agentcompass.harnesses.mini_swe_agent import MiniSweAgentConfig, MiniSweAgentHarness
from agentcompass.runtime.config import ConfigError, build_component_config
from agentcompass.runtime.models import ModelSpec, PreparedTask, TaskInput, TaskOutput


@pytest.mark.parametrize(
    "params, named",
    [
        ({"step_limit": -1}, "step_limit"),
        ({"timeout": 0}, "timeout"),
        ({"model_call_timeout": "soon"}, "model_call_timeout"),
        ({"model_retries": 0}, "model_retries"),
        ({"settings": ["agent.step_limit=3"]}, "settings"),
    ],
)
def test_a_bad_parameter_is_named_before_anything_runs(params, named):
    with pytest.raises(ConfigError, match=named):
        build_component_config(MiniSweAgentConfig, params, "harness 'mini_swe_agent' params")


def settings_of(argv: list[str]) -> list[tuple[str, object]]:
    pairs = [argv[i + 1] for i, a in enumerate(argv) if a == "-c" and "=" in argv[i + 1]]
    return [(k, json.loads(v)) for k, v in (p.split("=", 1) for p in pairs)]


def test_the_gateway_comes_last_and_the_key_variable_is_taken_out():
    config = build_component_config(
        MiniSweAgentConfig, {"step_limit": 7, "settings": {"model.model_kwargs.api_base": "http://elsewhere"}}, "params"
    )
    params = {f: getattr(config, f) for f in config.__slots__}
    model = ModelSpec(id="qwen", base_url="http://127.0.0.1:1/v1", api_key="${MY_KEY}", params={"temperature": 0.5})
    prepared = PreparedTask(task_id="t", input=TaskInput(prompt="Fix it."), output=TaskOutput(answer="A patch."))
    argv = MiniSweAgentHarness._argv("/bin/mini", prepared, model, params, "/w/.mini-swe-agent", "http://127.0.0.1:9", "tok")
    assert argv[:4] == ["env", "-u", "MY_KEY", "/bin/mini"]
    assert argv[argv.index("-m") + 1] == "openai/qwen"
    assert argv[argv.index("-t") + 1] == "Fix it.\n\nA patch."
    settings = settings_of(argv)
    assert ("agent.step_limit", 7) in settings and ("model.model_kwargs.temperature", 0.5) in settings
    # a setting cannot send the agent past the gateway: the gateway's URL and token are applied last
    assert settings[-2:] == [("model.model_kwargs.api_base", "http://127.0.0.1:9"), ("model.model_kwargs.api_key", "tok")]
