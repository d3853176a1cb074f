"""Registry behaviour and the ``agentcompass list`` / ``config docs`` commands."""

from __future__ import annotations

import subprocess
import sys

import pytest

from agentcompass import cli
from agentcompass.runtime.registry import REGISTRIES, Registry, UnknownComponentError


class Alpha:
    id = "alpha"


class Beta:
    id = "beta"


class Gamma:
    id = "gamma"


def test_register_uses_the_class_id():
    registry = Registry("thing")
    returned = registry.register()(Alpha)
    assert returned is Alpha
    assert "alpha" in registry
    assert registry.get("alpha") is Alpha


def test_register_with_explicit_id():
    registry = Registry("thing")

    class Local:
        id = ""

    registry.register("explicit")(Local)
    assert registry.get("explicit") is Local
    assert Local.id == "explicit"


def test_register_without_id_raises():
    registry = Registry("thing")

    class NoId:
        pass

    with pytest.raises(ValueError, match="NoId"):
        registry.register()(NoId)


def test_registering_a_different_class_under_the_same_id_raises():
    registry = Registry("thing")
    registry.register()(Alpha)

    class Impostor:
        id = "alpha"

    with pytest.raises(ValueError, match="alpha"):
        registry.register()(Impostor)
    assert registry.get("alpha") is Alpha


def test_registering_the_same_class_twice_is_idempotent():
    registry = Registry("thing")
    registry.register()(Alpha)
    registry.register()(Alpha)
    assert list(registry) == ["alpha"]


def test_get_unknown_id_lists_known_ids():
    registry = Registry("thing")
    registry.register()(Alpha)
    registry.register()(Beta)
    with pytest.raises(UnknownComponentError) as info:
        registry.get("nope")
    message = str(info.value)
    assert "'nope'" in message
    assert "alpha" in message and "beta" in message
    assert "agentcompass list thing" in message
    assert isinstance(info.value, KeyError)


def test_get_unknown_id_in_empty_registry():
    with pytest.raises(UnknownComponentError, match="known: none"):
        Registry("thing").get("x")


def test_iteration_follows_insertion_order():
    registry = Registry("thing")
    for cls in (Gamma, Alpha, Beta):
        registry.register()(cls)
    assert list(registry) == ["gamma", "alpha", "beta"]
    assert [cls for _, cls in registry.items()] == [Gamma, Alpha, Beta]


def test_copy_is_independent():
    registry = Registry("thing")
    registry.register()(Alpha)
    clone = registry.copy("other")
    clone.register()(Beta)
    assert list(registry) == ["alpha"]
    assert list(clone) == ["alpha", "beta"]
    assert clone.kind == "other"


def _fresh_python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def test_the_runtime_imports_no_component_package():
    """The built-in components are loaded from above (agentcompass.plugins), never by runtime/ itself."""
    done = _fresh_python(
        "import sys, agentcompass.runtime, agentcompass.runtime.orchestration, agentcompass.runtime.registry\n"
        "print(sorted(m for m in sys.modules if m.split('.')[:2] in (['agentcompass', 'benchmarks'], "
        "['agentcompass', 'harnesses'], ['agentcompass', 'environments'], ['agentcompass', 'recipes'], "
        "['agentcompass', 'analyzers'], ['agentcompass', 'plugins'])))")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_load_components_fills_the_registries_and_resolving_without_it_says_so():
    setup = ("from agentcompass.runtime import BENCHMARKS, load_run_config, resolve_orchestration\n"
             "config = load_run_config([], {'requests': {'r': {'benchmark': 'example_exact_match', "
             "'harness': 'oracle', 'model': {'id': 'none'}}}}, include_user=False, include_project=False)\n")
    unloaded = _fresh_python(setup + "resolve_orchestration(config)")
    assert unloaded.returncode != 0
    assert "no benchmark is registered" in unloaded.stderr
    assert "Fix: call agentcompass.plugins.load_components()" in unloaded.stderr
    loaded = _fresh_python(setup + "from agentcompass.plugins import load_components\nload_components()\n"
                           "print(resolve_orchestration(config).runs[0].request.benchmark.id, 'bfcl' in BENCHMARKS)")
    assert loaded.returncode == 0, loaded.stderr
    assert loaded.stdout.split() == ["example_exact_match", "True"]


# --- CLI ------------------------------------------------------------------------


def run_cli(capsys, *argv):
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("kind, expected", [
    ("benchmark", "example_exact_match"),
    ("harness", "oracle"),
    ("harness", "chat"),
    ("recipe", "task_environment_hints"),
    ("environment", "host_process"),
])
def test_list_prints_registered_components(capsys, kind, expected):
    code, out, _ = run_cli(capsys, "list", kind)
    assert code == 0
    ids = [line.split()[0] for line in out.splitlines() if line.strip()]
    assert expected in ids


def test_list_prints_each_component_summary(capsys):
    code, out, _ = run_cli(capsys, "list", "benchmark")
    assert code == 0
    line = next(row for row in out.splitlines() if row.startswith("example_exact_match"))
    assert "exact match" in line


def test_list_follows_registry_order(capsys):
    code, out, _ = run_cli(capsys, "list", "harness")
    ids = [line.split()[0] for line in out.splitlines() if line.strip()]
    assert ids == list(REGISTRIES["harness"])


def test_list_unknown_kind_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["list", "models"])
    assert info.value.code != 0


def test_config_docs_prints_every_benchmark_parameter_with_description(capsys):
    code, out, _ = run_cli(capsys, "config", "docs", "benchmark", "example_exact_match")
    assert code == 0
    lines = out.splitlines()
    expected = {
        "task_ids": "Run only these task ids",
        "categories": "Run only tasks in these categories",
        "limit": "Run at most this many tasks",
        "case_sensitive": "Compare answers with case sensitivity.",
        "strip_whitespace": "Ignore leading and trailing whitespace",
    }
    for name, description in expected.items():
        index = next(i for i, row in enumerate(lines) if row.strip().startswith(f"{name}:"))
        assert description in lines[index + 1], name
    assert "case_sensitive: bool = false" in out
    assert "limit: int or null = null" in out


def test_config_docs_of_component_without_parameters(capsys):
    code, out, _ = run_cli(capsys, "config", "docs", "harness", "oracle")
    assert code == 0
    assert "(no parameters)" in out


def test_config_docs_environment_parameters(capsys):
    code, out, _ = run_cli(capsys, "config", "docs", "environment", "host_process")
    assert code == 0
    assert "workspace_root" in out and "keep_workspace" in out


def test_config_docs_unknown_id_returns_non_zero(capsys):
    code, out, err = run_cli(capsys, "config", "docs", "benchmark", "nope")
    assert code != 0
    assert "nope" in err
    assert "example_exact_match" in err
    assert out == ""


def test_run_dry_run_prints_resolved_request(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("agentcompass.cli.common.PROJECT_ROOT", tmp_path)  # no project config: only the command line
    code, out, _ = run_cli(capsys, "run", "example_exact_match", "oracle", "none", "-b", "limit=2", "--dry-run")
    assert code == 0
    import json

    runs = json.loads(out)
    assert [r["name"] for r in runs] == ["example_exact_match-oracle-none"]
    assert runs[0]["request"]["benchmark"] == {"id": "example_exact_match", "params": {"limit": 2}}


def test_run_with_invalid_config_returns_2(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, _, err = run_cli(capsys, "run", "example_exact_match", "chat", "none", "--dry-run")
    assert code == 2
    assert "needs a model" in err


def test_each_command_is_registered_by_the_module_that_holds_its_handler():
    """One module of agentcompass.cli per group of commands, each adding its own parsers."""
    import argparse
    import importlib
    import pkgutil

    import agentcompass.cli

    modules = {m.name for m in pkgutil.iter_modules(agentcompass.cli.__path__)} - {"__main__", "common"}
    assert {group.__name__.rpartition(".")[2] for group in cli.GROUPS} == modules
    handlers = {}
    for name in sorted(modules):
        sub = argparse.ArgumentParser().add_subparsers()
        importlib.import_module(f"agentcompass.cli.{name}").register(sub)
        for command, parser in sub.choices.items():
            if command == "config":  # config docs
                parser = parser._subparsers._group_actions[0].choices["docs"]
            if command == "tools":  # tools install, tools list
                parser = parser._subparsers._group_actions[0].choices["install"]
            func = parser.get_default("func")
            handlers[command] = func.__module__
            assert func.__module__ == f"agentcompass.cli.{name}", f"{command}: handler {func.__module__}"
    top = cli.build_parser()._subparsers._group_actions[0].choices
    assert set(top) == set(handlers)
    assert list(top) == ["init", "list", "config", "run", "replay", "check", "status", "retry", "clean", "cache", "tools", "runs",
                         "export", "diff",
                         "compare", "report"]
