"""The run stage's retry decision: by the type of the fault alone."""

from __future__ import annotations

import pytest

from agentcompass.runtime.base import (
    EnvironmentUnavailableError,
    ImageBuildError,
    InfrastructureError,
    SandboxConnectionError,
    SandboxDiedError,
    retryable,
)


class ProviderSpecificDeath(SandboxDiedError):
    """A provider's own finer type: retried as what it refines."""


class ProviderSpecificBuildError(ImageBuildError):
    pass


@pytest.mark.parametrize(
    ("exc", "retried"),
    [
        (EnvironmentUnavailableError("no engine answers"), True),
        (SandboxDiedError("the container died"), True),
        (SandboxConnectionError("the connection dropped"), True),
        (InfrastructureError("a fault with no finer type"), True),
        (ProviderSpecificDeath("died"), True),
        (ImageBuildError("RUN failed"), False),
        (ProviderSpecificBuildError("RUN failed"), False),
        # not typed as a fault: the attempt's own failure, whatever raised it
        (ConnectionError("refused"), False),
        (OSError("no such file"), False),
        (RuntimeError("the harness failed"), False),
        (ValueError("bad answer"), False),
    ],
)
def test_retryable_by_type(exc, retried):
    assert retryable(exc) is retried
