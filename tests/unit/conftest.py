"""Shared fixtures of the unit suite."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _no_user_config(monkeypatch):
    """Never read the real user config (~/.config/agentcompass/config.yaml)."""
    monkeypatch.setenv("AGENTCOMPASS_USER_CONFIG", "")
