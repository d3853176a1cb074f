"""Secrets: resolved only inside the job that uses them, and never written."""

from __future__ import annotations

import os

from agentcompass.runtime.config.loader import env_ref


class MissingSecretError(RuntimeError):
    """A ``${VAR}`` whose variable is not set in the job's environment."""


def resolve_secret(reference: str | None) -> str | None:
    """The value of a ``${VAR}`` reference from the environment (None stays None)."""
    if reference is None:
        return None
    name = env_ref(reference)
    if name is None:
        raise MissingSecretError("a secret must be given as '${VAR}'")
    try:
        return os.environ[name]
    except KeyError:
        raise MissingSecretError(f"environment variable {name} is not set in this job") from None


def scrub(text: str, references: list[str | None]) -> str:
    """Replace every resolved secret value in ``text`` by its ``${VAR}`` reference."""
    for reference in references:
        name = env_ref(reference) if reference else None
        value = os.environ.get(name) if name else None
        if value and len(value) >= 4:
            text = text.replace(value, reference)
    return text
