"""Shared fixtures of the unit suite."""

from __future__ import annotations

import sys
import types

import pytest

from agentcompass.benchmarks import bfcl
from agentcompass.testing.dependencies import require


@pytest.fixture(autouse=True)
def _no_user_config(monkeypatch):
    """Never read the real user config (~/.config/agentcompass/config.yaml)."""
    monkeypatch.setenv("AGENTCOMPASS_USER_CONFIG", "")


@pytest.fixture(scope="module")
def bfcl_ast_checker():
    """bfcl-eval's own ast_checker, imported without its model table (which imports every model SDK).

    Only convert_func_name reads the table, for whether a model's tool names turn
    '.' into '_'; OpenAI's do, and so does this stand-in.
    """
    require(bfcl.DEPENDENCY)
    # the real table says so for OpenAI's tool-calling models, e.g.
    source = (bfcl.data_dir().parent / "constants" / "model_config.py").read_text()
    entry = source[source.index('"gpt-4o-2024-11-20-FC": ModelConfig('):]
    assert "underscore_to_dot=True" in entry[:entry.index("),")]
    table = types.ModuleType("bfcl_eval.constants.model_config")
    table.MODEL_CONFIG_MAPPING = {"stand-in": types.SimpleNamespace(underscore_to_dot=True)}
    saved = {name: module for name, module in sys.modules.items() if name.startswith("bfcl_eval")}
    sys.modules["bfcl_eval.constants.model_config"] = table
    try:
        from bfcl_eval.constants.enums import Language
        from bfcl_eval.eval_checker.ast_eval.ast_checker import ast_checker
    finally:
        for name in [n for n in sys.modules if n.startswith("bfcl_eval")]:
            del sys.modules[name]
        sys.modules.update(saved)
    return lambda functions, output, truth, category: ast_checker(functions, output, truth, Language.PYTHON, category, "stand-in")
