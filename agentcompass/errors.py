"""The errors agentcompass raises to its users, under one root: ``AgentCompassError``.

    from agentcompass.errors import AgentCompassError
    try:
        run_evaluation("example_exact_match", "oracle", "none")
    except AgentCompassError as exc:
        print(exc)   # what is wrong, where, and how to fix it

Each type also derives from the builtin exception it derived from before it had
a root (``ConfigError`` is a ``ValueError``, ``RunHeldError`` a ``RuntimeError``,
...), so a handler written for the builtin keeps catching it. The types defined
here are the ones more than one layer raises or catches; the modules that raise
them import them from here (``agentcompass.runtime.config.ConfigError`` is this
``ConfigError``). The narrower ones live next to their code and derive from the
root too: ``UnknownComponentError`` (``runtime.registry``), ``ParameterError``
(``runtime.config``), ``RecipeContractError`` (``runtime.planner``), the
subclasses of ``InfrastructureError`` (``runtime.base``), ``FileSchemaError``
(``pipeline.files``), ``DiffError`` (``plan_diff``), ``CompareError``
(``compare``), ``ScorerError`` (``benchmarks.dataset_scorers``) and the
``ConfigError`` subclasses of the environments.

Some exception classes of the package are internal on purpose and do not derive
from the root; ``tests/unit/test_errors.py`` names each one, so a new error class
cannot skip the root unnoticed:

- ``agentcompass._util.aio.Stopped``: a cancellation, a ``BaseException`` like
  ``KeyboardInterrupt`` so that no ``except Exception`` of a stage turns it into a
  status; it ends the run, it is not reported as an error.
- ``agentcompass.runtime.model_client._RetryableError``: one failed try of a model
  call, retried inside the client; the last one becomes a ``ModelCallError``.
- ``agentcompass.runtime.config.loader._DuplicateKey``: raised inside the YAML
  loader and turned into a ``ConfigError`` naming the file and line.
- ``agentcompass.harnesses.tool_agent.ToolError``: a mistake of the model in a
  tool call, sent back to the model as the tool's reply, never raised out of the
  harness.
- ``agentcompass.benchmarks.humaneval_check.CompletionFailed``: raised in the
  checker's sandboxed process when the completion cannot answer; it becomes the
  attempt's verdict.
- ``agentcompass.environments.transfer.CopyLimitError`` and ``Refused``: ``OSError``
  of a copy into or out of a session, caught by the environments as the copy's
  ``OSError`` and reported as the attempt's error status, never to the user.
"""

from __future__ import annotations

import datetime
import socket
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentcompass.pipeline.locks import Holder


class AgentCompassError(Exception):
    """The root of every error agentcompass raises to a user; the message says what, where and the fix."""


class ConfigError(AgentCompassError, ValueError):
    """A parameter value that cannot be used; the message says which and how to fix it."""


class PluginError(ConfigError):
    """An installed plug-in whose entry point cannot be loaded."""


class ContractError(AgentCompassError, ValueError):
    """A contract value has the wrong shape or type."""


class InfrastructureError(AgentCompassError, RuntimeError):
    """A fault of the sandbox or of the way to it, not of the agent.

    Providers raise one of its subclasses (``agentcompass.runtime.base``), translated
    from what their engine or their processes report; ``runtime.base.retryable``
    says which of them the run stage retries under ``execution.max_retries``. This
    class itself, raised by a provider that has no finer type for a fault, is retried.
    """


class DeadlineError(AgentCompassError, RuntimeError):
    """A host-side wait on something the agent can touch outlived its deadline (a file call, a copy, a
    command after the agent, the evaluate stage, a package's grader): the attempt's own failure, class
    ``limit``, never retried. What the wait started is ended before it is raised. Not a ``TimeoutError``:
    the run stage reads that as ``execution.task_timeout``."""

    def __init__(self, what: str, seconds: float) -> None:
        self.what, self.seconds = what, seconds
        super().__init__(f"{what} did not finish within {seconds:g} s (a limit of agentcompass's own: "
                         "what the agent controls cannot hold the host longer), and was ended")

    def __reduce__(self):
        return type(self), (self.what, self.seconds)


class ModelCallError(AgentCompassError, RuntimeError):
    """A model call that failed on every try; the message names the last error."""

    status: int | None = None  # the HTTP status of a refusal, when there was one
    reply: Any = None  # the reply body of a reply that could not be used, as recorded


class LimitReachedError(ModelCallError):
    """A model call refused because its attempt reached one of its limits (``execution.limits``): the
    attempt ends with the ``limit`` class. ``limit`` names it (``total_tokens``)."""

    limit: str = ""


class MissingSecretError(AgentCompassError, RuntimeError):
    """A ``${VAR}`` whose variable is not set in the job's environment."""


class RunHeldError(AgentCompassError, RuntimeError):
    """Another live run holds the lock of a folder this run would build (``folder``; ``holder``
    says who, when it wrote so)."""

    def __init__(self, folder: Path, holder: Holder | None) -> None:
        self.folder = folder
        self.holder = holder
        super().__init__(self.message())

    def message(self) -> str:
        if self.holder is None:
            who = "another run (it did not say which)"
            stop = "stop it"
        else:
            since = datetime.datetime.fromtimestamp(self.holder.since).astimezone().strftime("%Y-%m-%d %H:%M:%S %Z")
            ago = max(0, int(time.time() - self.holder.since))
            who = (f"another run: pid {self.holder.pid} on host {self.holder.host}, since {since} ({ago} s ago)"
                   + (f": {self.holder.command}" if self.holder.command else ""))
            where = "" if self.holder.host == socket.gethostname() else f" on {self.holder.host}"
            stop = f"stop it (kill -TERM {self.holder.pid}{where}: it stops gracefully)"
        return (
            f"{self.folder} is being built by {who}. Nothing was started here. "
            f"Fix: wait for that run to end, or {stop}; then run this command again, and it continues "
            f"where the other left off. A lock whose process has died is taken over without asking."
        )
