"""agentcompass.errors: every exception class of the package derives from AgentCompassError, or is a named internal one."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import agentcompass
from agentcompass import errors
from agentcompass.errors import AgentCompassError

# Internal control flow, never raised to a user (agentcompass/errors.py says why each one).
INTERNAL = {
    "agentcompass._util.aio.Stopped",
    "agentcompass.runtime.model_client._RetryableError",
    "agentcompass.runtime.config.loader._DuplicateKey",
    "agentcompass.harnesses.tool_agent.ToolError",
    "agentcompass.benchmarks.humaneval_check.CompletionFailed",
    "agentcompass.environments.transfer.CopyLimitError",
    "agentcompass.environments.transfer.Refused",
}


def _modules() -> list[str]:
    """Every module of the package, but a ``__main__`` (``python -m``'s script: it runs the command)."""
    found = [m.name for m in pkgutil.walk_packages(agentcompass.__path__, "agentcompass.")]
    return ["agentcompass", *(name for name in found if not name.endswith(".__main__"))]


def _exception_classes() -> dict[str, type]:
    found = {}
    for name in _modules():
        module = importlib.import_module(name)
        for value in vars(module).values():
            if inspect.isclass(value) and issubclass(value, BaseException) and value.__module__ == name:
                found[f"{name}.{value.__qualname__}"] = value
    return found


def test_every_exception_class_derives_from_the_root_or_is_a_named_internal_one():
    classes = _exception_classes()
    assert "agentcompass.errors.RunHeldError" in classes and "agentcompass.pipeline.files.FileSchemaError" in classes
    stray = sorted(name for name, cls in classes.items() if not issubclass(cls, AgentCompassError) and name not in INTERNAL)
    assert not stray, f"exception classes outside agentcompass.errors.AgentCompassError: {stray}. Fix: derive " \
                      "them from it, or (internal control flow only) add them to INTERNAL with the reason in errors.py"
    internal_rooted = sorted(name for name in INTERNAL if name in classes and issubclass(classes[name], AgentCompassError))
    assert not internal_rooted, f"listed as internal but derived from the root: {internal_rooted}"
    assert INTERNAL <= set(classes), f"INTERNAL names classes that no longer exist: {sorted(INTERNAL - set(classes))}"


def test_the_internal_ones_are_the_ones_errors_py_explains():
    doc = errors.__doc__ or ""
    for name in INTERNAL:
        module, _, cls = name.rpartition(".")
        assert cls in doc and module.rpartition(".")[2] in doc, f"agentcompass/errors.py does not say why {name} is internal"


@pytest.mark.parametrize("name, builtin", [
    ("ConfigError", ValueError), ("PluginError", ValueError), ("ContractError", ValueError),
    ("InfrastructureError", RuntimeError), ("ModelCallError", RuntimeError),
    ("MissingSecretError", RuntimeError), ("RunHeldError", RuntimeError),
])
def test_each_error_keeps_its_builtin_base(name, builtin):
    """An ``except ValueError`` / ``except RuntimeError`` written before the root still catches it."""
    assert issubclass(getattr(errors, name), (AgentCompassError,)) and issubclass(getattr(errors, name), builtin)


def test_the_old_homes_hold_the_same_classes():
    from agentcompass import plugins, secrets
    from agentcompass.pipeline import locks
    from agentcompass.runtime import base, config, model_client
    from agentcompass.runtime.models import codec

    assert config.ConfigError is errors.ConfigError
    assert plugins.PluginError is errors.PluginError
    assert codec.ContractError is errors.ContractError
    assert base.InfrastructureError is errors.InfrastructureError
    assert model_client.ModelCallError is errors.ModelCallError
    assert secrets.MissingSecretError is errors.MissingSecretError
    assert locks.RunHeldError is errors.RunHeldError
    assert issubclass(errors.PluginError, errors.ConfigError)


def test_an_unknown_component_is_still_a_key_error_with_a_plain_message():
    from agentcompass.runtime.registry import Registry, UnknownComponentError

    with pytest.raises(KeyError) as caught:
        Registry("benchmark").get("nope")
    assert isinstance(caught.value, UnknownComponentError) and isinstance(caught.value, AgentCompassError)
    assert str(caught.value).startswith("unknown benchmark 'nope'")


def test_a_run_held_error_says_who_holds_the_folder(tmp_path):
    from agentcompass.pipeline.locks import Holder

    exc = errors.RunHeldError(tmp_path, Holder("elsewhere", 4242, 0.0, "agentcompass run"))
    assert (exc.folder, exc.holder.pid) == (tmp_path, 4242)
    assert f"{tmp_path} is being built by another run: pid 4242 on host elsewhere" in str(exc)
    assert "kill -TERM 4242 on elsewhere" in str(exc)
    assert "it did not say which" in str(errors.RunHeldError(tmp_path, None))
