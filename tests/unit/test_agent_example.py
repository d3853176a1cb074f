"""The guide's installed agent (docs/components.md, "An installed agent: one small file") is a working
component as it is written: executed, it registers its tool and its harness, plans its tool, builds its
command line and reads its transcript; its extra_args may not move it."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path
from types import SimpleNamespace

import pytest

from agentcompass import tools
from agentcompass.runtime import HARNESSES
from agentcompass.runtime.config import ConfigError
from agentcompass.runtime.models.request import ModelSpec

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "components.md"


def example() -> str:
    found = re.search(r"<!-- example: installed-agent -->\n```python\n(.*?)```", GUIDE.read_text(), re.S)
    assert found, "docs/components.md lost its installed-agent example"
    return found.group(1)


@pytest.fixture
def module(monkeypatch) -> dict:
    monkeypatch.setattr(tools, "TOOLS", dict(tools.TOOLS))
    monkeypatch.setattr(HARNESSES, "_items", dict(HARNESSES._items))
    loaded = types.ModuleType("my_agent")  # a module of its own, as a plug-in's is
    monkeypatch.setitem(sys.modules, "my_agent", loaded)
    exec(compile(example(), "docs/components.md:installed-agent", "exec"), loaded.__dict__)
    return loaded.__dict__


def request(**params) -> SimpleNamespace:
    return SimpleNamespace(model=ModelSpec(id="m", base_url="http://127.0.0.1:9/v1"), harness=SimpleNamespace(params=params))


def test_the_guides_installed_agent_registers_plans_and_runs_its_parts(module):
    harness = HARNESSES.get("my_agent")()
    assert tools.resolve("my-agent").key == "my-agent@1.4.2"
    config = harness.build_config(request())
    assert harness.tools(config) == ("my-agent@1.4.2",)
    assert harness.model_protocols == ("openai_chat",)
    run = module["AgentRun"](["/opt/agentcompass/tools/my-agent@1.4.2/my-agent-linux-x64/bin/my-agent"], "do it", "m",
                             "http://gw", "tok", "/w/.state", {})
    assert harness.argv(run)[1:] == ["run", "--json", "--model", "m", "--base-url", "http://gw"]
    assert harness.stdin(run) == "do it" and harness.environment(run) == {"MY_AGENT_API_KEY": "tok"}
    found = harness.transcript('{"type": "message", "text": "thinking"}\nnot json\n{"type": "done", "answer": "42"}\n')
    assert found.answer == "42" and [r["message"]["content"] for r in found.records] == ["thinking"]
    with pytest.raises(ConfigError, match="extra_args may not set --base-url=http://elsewhere"):
        harness.build_config(request(extra_args=["--base-url=http://elsewhere"]))


def test_a_tool_recipe_is_checked_when_registered(module):
    recipe = tools.TOOLS["my-agent"]
    assert tools.register_tool(recipe) is recipe  # the same recipe again: one
    bad = [tools.ToolRecipe("my-agent", "2.0.0", recipe.packages, recipe.program),  # the name is taken
           tools.ToolRecipe("Bad Name", "1", ("x@{version}",), "x/bin/x"),
           tools.ToolRecipe("x", "1", ("x@{version}",), "../../bin/sh"),
           tools.ToolRecipe("x", "1", ("x@{version}",), "x/bin/x", interpreter="/usr/bin/node"),
           tools.ToolRecipe("x", "1", (), "x/bin/x"),
           tools.ToolRecipe("x", "1", ("not a package@{version}",), "x/bin/x")]
    for recipe in bad:
        with pytest.raises(tools.ToolError):
            tools.register_tool(recipe)
        assert tools.TOOLS.get(recipe.name) in (None, tools.TOOLS["my-agent"])
