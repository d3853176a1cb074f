"""``chat``: one plain chat completion; the answer is the reply's text."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.error
import urllib.request
from dataclasses import dataclass

from agentcompass.runtime import HARNESSES, BaseHarness, RunResult, TaskStatus
from agentcompass.runtime.config import ComponentConfig, config_field
from agentcompass.secrets import resolve_secret


@dataclass(slots=True)
class ChatConfig(ComponentConfig):
    timeout: float = config_field(default=60.0, description="Seconds to wait for one model reply.")


def _post(url: str, body: dict, headers: dict, timeout: float) -> dict:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers, method="POST")
    with urllib.request.urlopen(request, timeout=timeout) as reply:
        return json.loads(reply.read().decode())


@HARNESSES.register()
class ChatHarness(BaseHarness):
    """Sends the prompt to the Model once and answers with the reply's text."""

    id = "chat"
    config_class = ChatConfig

    async def run(self, prepared, env, req, plan, context) -> RunResult:
        _ = env
        model = req.model
        if not model.base_url:
            return RunResult(task_id=prepared.task_id, attempt=context.attempt, status=TaskStatus.RUN_ERROR,
                             error="model.base_url is not set", error_stage="run")
        messages = []
        if prepared.input.system_prompt:
            messages.append({"role": "system", "content": prepared.input.system_prompt})
        messages.extend(prepared.input.messages)
        text = prepared.input.prompt
        if prepared.output.answer:
            text = f"{text}\n\n{prepared.output.answer}"
        messages.append({"role": "user", "content": text})
        headers = {"Content-Type": "application/json"}
        key = resolve_secret(model.api_key)
        if key:
            headers["Authorization"] = f"Bearer {key}"
        body = {"model": model.id, "messages": messages, **model.params}
        started = time.monotonic()
        url = model.base_url.rstrip("/") + "/chat/completions"
        try:
            reply = await asyncio.to_thread(_post, url, body, headers, plan.params["timeout"])
        except (urllib.error.URLError, TimeoutError, OSError, json.JSONDecodeError) as exc:
            return RunResult(task_id=prepared.task_id, attempt=context.attempt, status=TaskStatus.RUN_ERROR,
                             error=f"model call failed: {type(exc).__name__}: {exc}", error_stage="run")
        latency = time.monotonic() - started
        with context.trajectory_path.open("a") as log:
            log.write(json.dumps({"request": {"messages": messages}, "reply": reply}, sort_keys=True) + "\n")
        choices = reply.get("choices") or [{}]
        answer = ((choices[0] or {}).get("message") or {}).get("content") or ""
        usage = reply.get("usage") or {}
        return RunResult(
            task_id=prepared.task_id,
            attempt=context.attempt,
            answer=answer,
            usage={
                "calls": 1,
                "prompt_tokens": float(usage.get("prompt_tokens") or 0),
                "completion_tokens": float(usage.get("completion_tokens") or 0),
                "latency_seconds": round(latency, 6),
            },
        )
