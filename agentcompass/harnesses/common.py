"""What the model-calling harnesses share: the opening messages, the trajectory, the result."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agentcompass.runtime import PreparedTask, RunResult, TaskStatus
from agentcompass.runtime.model_client import ChatReply, ModelCallError, ModelClient, parse_reply


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


class Trajectory:
    """``trajectory.jsonl``: one JSON line per event, appended in the order things happened."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def append(self, kind: str, **event: Any) -> None:
        line = json.dumps({"type": kind, **event}, sort_keys=True, ensure_ascii=False, default=str)
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write(line + "\n")


async def call_model(
    client: ModelClient, trajectory: Trajectory, messages: list[dict], tools: list[dict] | None = None, **where: Any
) -> ChatReply:
    """One model call, recorded in the trajectory as sent and as answered (or as failed)."""
    body = client.request_body(messages, tools)
    try:
        raw = await client.send(body)
    except ModelCallError as exc:
        trajectory.append("model_call", **where, request=body, error=str(exc))
        raise
    reply = parse_reply(raw)
    trajectory.append("model_call", **where, request=body, reply=raw, malformed=reply.malformed)
    return reply


def run_error(prepared: PreparedTask, attempt: int, error: str, client: ModelClient | None, **metadata) -> RunResult:
    """An attempt the model endpoint ended: its last error, and what the tries cost."""
    return RunResult(
        task_id=prepared.task_id, attempt=attempt, status=TaskStatus.RUN_ERROR, error=error, error_stage="run",
        usage=client.usage.as_dict() if client else {}, metadata=metadata,
    )
