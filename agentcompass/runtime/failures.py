"""Why an attempt did not complete: its ``FailureClass``, decided from the type of what stopped it.

An error message is text the engine, the endpoint or the agent chose, so it
never decides a class: an ``InfrastructureError`` whose message says
"timeout" is still infrastructure. What returns a failed ``RunResult``
without raising (a harness that caught a ``ModelCallError``, a verifier that
wrote no reward) sets the class it knows; ``classified`` gives the rest the
class of the stage they failed in.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from agentcompass.errors import DeadlineError, InfrastructureError, LimitReachedError, ModelCallError

from .base import SandboxEndedFromInsideError
from .models.result import FailureClass, RunResult, TaskStatus

# The HTTP statuses of a model call that say the endpoint failed whatever the request held: its own faults
# (5xx, the gateway's 502 and 504 for an endpoint it could not reach or that did not answer in time), the real
# key refused (401, 403) and rate limits (408, 429). Any other 4xx answers what the request held, and the
# agent's own commands can send the gateway any request: that is the agent's doing, never the endpoint's.
_ENDPOINT_FAULTS = frozenset({401, 403, 408, 429})
# The class of a failed result that names none, by the stage it failed in: the harness's
# own code ran in 'run', the Benchmark's verdict in 'evaluate'; 'load' is the task's data.
_BY_STAGE = {"run": FailureClass.HARNESS, "evaluate": FailureClass.VERIFIER, "load": FailureClass.TASK}


def classify(exc: BaseException, stage: str) -> FailureClass:
    """The class of an attempt that raised ``exc`` in ``stage`` ('run' or 'evaluate')."""
    if isinstance(exc, SandboxEndedFromInsideError):  # what ran in the sandbox ended it: the agent's doing
        return FailureClass.HARNESS
    if isinstance(exc, InfrastructureError):
        return FailureClass.INFRASTRUCTURE
    if isinstance(exc, (DeadlineError, LimitReachedError)):  # out of time, or past what it may spend
        return FailureClass.LIMIT
    if isinstance(exc, ModelCallError):  # the model's endpoint, or a judge's, failed after its retries
        return FailureClass.ENDPOINT
    return _BY_STAGE.get(stage, FailureClass.HARNESS)


def detail(exc: BaseException) -> dict[str, Any]:
    """What ``metadata.failure`` records beside the class: the HTTP status of an endpoint's last reply."""
    status = getattr(exc, "status", None) if isinstance(exc, ModelCallError) else None
    return {} if status is None else {"http_status": status}


def failed(result: RunResult, exc: BaseException, stage: str) -> RunResult:
    """``result`` classed by ``exc``, with ``metadata.failure`` saying so."""
    cls = classify(exc, stage)
    return dataclasses.replace(result, failure_class=cls, metadata={
        **result.metadata, "failure": {"class": cls.value, **detail(exc)}})


def classified(result: RunResult, stage: str) -> RunResult:
    """``result`` with exactly one class when it did not complete (the stage's, if it names none), none when it did.

    A completed attempt has no class whatever its score: a wrong answer is not a failure.
    """
    if result.status == TaskStatus.COMPLETED:
        return result if result.failure_class is None else dataclasses.replace(result, failure_class=None)
    if result.failure_class is not None:
        return result
    default = FailureClass.TASK if result.status == TaskStatus.SKIPPED else _BY_STAGE.get(
        result.error_stage or stage, _BY_STAGE.get(stage, FailureClass.HARNESS))
    return dataclasses.replace(result, failure_class=default)


def endpoint_failure(exc: ModelCallError) -> dict[str, Any]:
    """The fields of a failed RunResult a harness returns for a model call that failed for good."""
    return {"failure_class": FailureClass.ENDPOINT, "metadata": {"failure": {"class": "endpoint", **detail(exc)}}}


def endpoint_failed(status: int | None) -> bool:
    """Whether a model call the gateway forwarded and saw answered with ``status`` failed at the endpoint."""
    return status is not None and (status >= 500 or status in _ENDPOINT_FAULTS)
