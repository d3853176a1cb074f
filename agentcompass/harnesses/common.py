"""What the model-calling harnesses share: the opening messages, the trajectory, the result."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentcompass.gateway import MAX_CONNECTIONS, TOKEN_PLACEHOLDER
from agentcompass.runtime import PreparedTask, RunResult, TaskStatus
from agentcompass.runtime.failures import endpoint_failure
from agentcompass.runtime.model_client import ChatReply, ModelCallError, ModelClient, Trajectory, parse_reply
from agentcompass.secrets import Scrubber

__all__ = ["GatewaySeen", "Trajectory", "call_model", "opening_messages", "run_error"]


def opening_messages(prepared: PreparedTask, system_prompt: str | None = None) -> list[dict[str, Any]]:
    """System prompt, the task's own messages, then the prompt with the expected answer form."""
    messages: list[dict[str, Any]] = []
    system = "\n\n".join(p for p in (system_prompt, prepared.input.system_prompt) if p)
    if system:
        messages.append({"role": "system", "content": system})
    messages.extend(prepared.input.messages)
    text = prepared.input.prompt
    if prepared.output.answer:
        text = f"{text}\n\n{prepared.output.answer}"
    messages.append({"role": "user", "content": text})
    return messages


async def call_model(
    client: ModelClient, trajectory: Trajectory, messages: list[dict], tools: list[dict] | None = None, **where: Any
) -> ChatReply:
    """One model call; each of its tries is a line of the trajectory, as sent and as answered (or as failed)."""
    return parse_reply(await client.send(client.request_body(messages, tools), trajectory, **where))


def run_error(prepared: PreparedTask, attempt: int, exc: ModelCallError, client: ModelClient | None,
              **metadata) -> RunResult:
    """An attempt the model endpoint ended: its last error, its class (endpoint), and what the tries cost."""
    failure = endpoint_failure(exc)
    return RunResult(
        task_id=prepared.task_id, attempt=attempt, status=TaskStatus.RUN_ERROR, error=str(exc), error_stage="run",
        usage=client.usage.as_dict() if client else {}, metadata={**metadata, **failure["metadata"]},
        failure_class=failure["failure_class"],
    )


@dataclass(frozen=True, slots=True)
class GatewaySeen:
    """What an attempt's model gateway saw of the agent, read once its program is done: the usage of the calls
    it forwarded, the HTTP status of the last one (None before one), the connections it refused as too many,
    and a scrubber of the token and of every secret of the Model and the harness's params, for what the
    agent's run leaves (its log as text, its trajectory's records as values)."""

    usage: dict[str, Any]
    last_call: int | None
    crowded: int
    scrubber: Scrubber

    @classmethod
    def of(cls, gateway: Any, model: Any, params: dict[str, Any]) -> "GatewaySeen":
        scrubber = Scrubber([model.to_dict(), params], literals={gateway.token: TOKEN_PLACEHOLDER})
        return cls(gateway.usage(), gateway.last_call_status, gateway.connections_refused, scrubber)

    def over_limits(self, done: Any, who: str, timeout: float) -> str | None:
        """Why the agent's run (``done``, its ExecResult) was out of its limits, by what the host saw: the run
        took its ``timeout``, or it held more connections to the gateway than an attempt is given; else None."""
        if done.timed_out:
            return f"{who} did not finish within {timeout} s"
        if self.crowded:
            return (f"the agent opened more than {MAX_CONNECTIONS} connections to the model gateway at once "
                    f"({self.crowded} refused)")
        return None

    def append_records(self, path: Path, records: list[dict]) -> None:
        """Append the agent's ``records`` to the trajectory at ``path``, scrubbed, one JSON line each."""
        with path.open("a", encoding="utf-8") as log:
            for record in records:
                log.write(json.dumps(self.scrubber.value(record), sort_keys=True) + "\n")
