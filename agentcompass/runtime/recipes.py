"""The run-local Recipe registry: built-in Recipes, then trusted external ones."""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
from pathlib import Path

from .base import BaseRecipe
from .config.fields import ConfigError
from .models import RunRequest
from .registry import RECIPES, Registry


def load_recipe_dir(directory: str | Path) -> list[type[BaseRecipe]]:
    """Import each ``*.py`` in a trusted directory and return its Recipe classes, in file order."""
    directory = Path(directory)
    if not directory.is_dir():
        raise ConfigError(
            f"recipe_dirs: {directory} is not a directory. Fix: correct the path or remove it "
            "from 'recipe_dirs'"
        )
    found: list[type[BaseRecipe]] = []
    for path in sorted(directory.glob("*.py")):
        digest = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:12]
        name = f"agentcompass_external_recipes_{digest}_{path.stem}"
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None  # a .py file always has a source loader
        module = importlib.util.module_from_spec(spec)
        try:
            spec.loader.exec_module(module)
        except Exception as exc:  # a broken trusted file is a config error, named
            raise ConfigError(f"{path}: importing the Recipe failed ({type(exc).__name__}: {exc}). Fix: correct the file") from exc
        for _, obj in inspect.getmembers(module, inspect.isclass):
            if issubclass(obj, BaseRecipe) and obj is not BaseRecipe and obj.__module__ == name:
                if not obj.id:
                    raise ConfigError(f"{path}: Recipe class {obj.__name__} has no 'id'. Fix: set a class attribute id = '...'")
                found.append(obj)
    return found


def build_run_recipe_registry(req: RunRequest) -> Registry:
    """Copy ``RECIPES`` and append the validated Recipes of ``req.metadata.recipe_dirs``."""
    registry = RECIPES.copy("recipe")
    for directory in req.metadata.recipe_dirs:
        for cls in load_recipe_dir(directory):
            if cls.id in registry and registry.get(cls.id) is not cls:
                raise ConfigError(
                    f"recipe_dirs: Recipe id {cls.id!r} from {directory} is already registered. "
                    "Fix: give the external Recipe another id"
                )
            registry.register(cls.id)(cls)
    return registry
