"""Test support shipped with the package: a scripted OpenAI-compatible endpoint."""

from .endpoint import ScriptedEndpoint

__all__ = ["ScriptedEndpoint"]
