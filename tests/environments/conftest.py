"""Fixtures of the environment suites: each provider, and a server on this machine."""

from __future__ import annotations

import pytest

from agentcompass.environments.bubblewrap import sandbox_support
from agentcompass.environments.netns import network_isolation
from .envkit import TEST_IMAGE, HostServer, Provider, require_docker


@pytest.fixture(params=["host_process", "docker"])
def provider(request) -> Provider:
    if request.param == "docker":
        require_docker()
        return Provider("docker", {"image": TEST_IMAGE})
    return Provider("host_process")


@pytest.fixture
def isolating_provider(provider: Provider) -> Provider:
    """A provider that can run a 'none' phase on this machine."""
    if provider.name == "host_process":
        if sandbox_support()[0]:
            return provider  # sandbox 'auto': in the bubblewrap sandbox
        available, reason = network_isolation()
        if not available:
            pytest.skip(f"host_process cannot isolate here: {reason}")
        return Provider("host_process", {"sandbox": "off"})  # a network namespace only
    return provider


@pytest.fixture
def sandboxed_provider(provider: Provider) -> Provider:
    """A provider that confines its commands on this machine (host_process: in its bubblewrap sandbox)."""
    if provider.name == "host_process":
        available, reason = sandbox_support()
        if not available:
            pytest.skip(f"host_process cannot make its sandbox here: {reason}")
        return Provider("host_process", {"sandbox": "bubblewrap"})
    return provider


@pytest.fixture
def host_server(provider: Provider):
    server = HostServer(provider.host_address)
    yield server
    server.close()
