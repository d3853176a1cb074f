"""The Model client: OpenAI-compatible chat completions, with retries, timeouts and usage.

One ``ModelClient`` serves one attempt: it resolves the Model's ``${VAR}`` API
key in the job that calls the model (never earlier, never written), sends the
Model's inference params with every request, and counts what the attempt cost
in ``usage``:

    calls              HTTP requests sent, failed ones included
    retries            requests that were repeats of a failed one
    prompt_tokens      from the replies' ``usage``
    completion_tokens  from the replies' ``usage``
    latency_seconds    time spent waiting on the endpoint (backoff sleeps excluded)

A 429, a 5xx, a timeout or a dropped connection is retried with exponential
backoff and jitter (a ``Retry-After`` header, capped, sets the wait instead);
when the retries run out, ``ModelCallError`` names the last error. A reply
that arrives but is unusable (not JSON, no choices, no content) is the model's
answer: an empty one, recorded in ``ChatReply.malformed``, not an error.
"""

from __future__ import annotations

import asyncio
import dataclasses
import email.utils
import hashlib
import json
import math
import random
import re
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from agentcompass.runtime.config import ComponentConfig, ConfigError, config_field, parse_int
from agentcompass.runtime.models import ModelSpec
from agentcompass.secrets import resolve_secret

# The statuses OpenAI's own SDK retries (with every 5xx): every other 4xx is a
# request that would fail again the same way (a bad key, an unknown model).
RETRYABLE_STATUS = frozenset({408, 409, 429})


@dataclass(slots=True)
class ModelCallConfig(ComponentConfig):
    """The parameters of model calls, shared by every harness that uses ModelClient."""

    timeout: float = config_field(default=60.0, description="Seconds to wait for one model reply (the whole request).")
    max_model_retries: int = config_field(
        default=4,
        description="Retries of one model call after a 429, a 5xx, a timeout or a dropped connection; "
        "then the attempt ends as run_error naming the last error.",
    )
    retry_backoff: float = config_field(
        default=1.0, description="Seconds before the first retry; doubled for each further one, with jitter."
    )
    retry_backoff_max: float = config_field(default=30.0, description="Longest wait between two retries, in seconds.")
    retry_after_max: float = config_field(
        default=60.0, description="Longest wait a Retry-After header may ask for; a longer one is cut to this."
    )

    def __post_init__(self) -> None:
        self.max_model_retries = parse_int(self.max_model_retries, "max_model_retries", minimum=0)
        self.timeout = parse_seconds(self.timeout, "timeout")
        if self.timeout == 0:
            raise ConfigError("timeout must be more than 0 seconds")
        for name in ("retry_backoff", "retry_backoff_max", "retry_after_max"):
            setattr(self, name, parse_seconds(getattr(self, name), name))

    @classmethod
    def from_params(cls, params: dict[str, Any]) -> "ModelCallConfig":
        """The model-call settings among a harness plan's params."""
        return cls(**{f.name: params[f.name] for f in dataclasses.fields(cls) if f.name in params})


def parse_seconds(value: Any, name: str) -> float:
    """A duration parameter: a number of seconds, at least 0."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ConfigError(f"{name} must be a number of seconds, got {value!r}")
    try:
        seconds = float(value)
    except ValueError:
        raise ConfigError(f"{name} must be a number of seconds, got {value!r}") from None
    if not 0 <= seconds < float("inf"):
        raise ConfigError(f"{name} must be a number of seconds >= 0, got {value!r}")
    return seconds


class ModelCallError(RuntimeError):
    """A model call that failed on every try; the message names the last error."""


class _RetryableError(Exception):
    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


@dataclass
class ToolCall:
    """One tool call of a reply. ``arguments`` is the parsed JSON object, or the raw text when it is not one."""

    id: str
    name: str
    arguments: dict[str, Any] | str

    @property
    def arguments_ok(self) -> bool:
        return isinstance(self.arguments, dict)

    def as_answer(self) -> dict[str, Any]:
        return {"name": self.name, "arguments": self.arguments}


@dataclass
class ChatReply:
    """What the model answered: its text, its tool calls, and the message to append to the conversation."""

    text: str
    tool_calls: list[ToolCall] = field(default_factory=list)
    message: dict[str, Any] = field(default_factory=lambda: {"role": "assistant", "content": ""})
    finish_reason: str | None = None
    # the reply's body as received (parsed JSON, or the raw text when it was not JSON)
    raw: Any = None
    # why the reply could not be used as it was; None for a well-formed one
    malformed: str | None = None


@dataclass
class Usage:
    calls: int = 0
    retries: int = 0
    prompt_tokens: float = 0.0
    completion_tokens: float = 0.0
    latency_seconds: float = 0.0

    @property
    def total_tokens(self) -> float:
        return self.prompt_tokens + self.completion_tokens

    def as_dict(self) -> dict[str, float]:
        return {
            "calls": self.calls,
            "retries": self.retries,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "latency_seconds": round(self.latency_seconds, 6),
        }


def endpoint_resource(base_url: str) -> str:
    """The Snakemake resource that counts the model calls in flight at one endpoint.

    ``http://127.0.0.1:8000/v1`` gives ``model_endpoint_127_0_0_1_8000_v1``: the
    base URL without its scheme, lowercased, each run of other characters an
    underscore; a very long one is cut and suffixed with a hash of the URL.
    """
    slug = re.sub(r"[^a-z0-9]+", "_", re.sub(r"^[a-z][a-z0-9+.-]*://", "", base_url.strip().lower())).strip("_")
    if len(slug) > 60:
        slug = f"{slug[:50]}_{hashlib.sha256(base_url.encode()).hexdigest()[:8]}"
    return f"model_endpoint_{slug or 'none'}"


def retry_after_seconds(value: str | None) -> float | None:
    """A ``Retry-After`` header as seconds: delta-seconds or an HTTP date; None when absent or unreadable."""
    if not value:
        return None
    try:
        seconds = float(value.strip())
        return max(seconds, 0.0) if math.isfinite(seconds) else None
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(when.timestamp() - time.time(), 0.0)


def parse_reply(raw: Any) -> ChatReply:
    """The model's answer in a reply body; anything unusable becomes an empty answer that says why."""
    if not isinstance(raw, dict):
        return ChatReply(text="", raw=raw, malformed="the reply is not a JSON object")
    choices = raw.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return ChatReply(text="", raw=raw, malformed="the reply has no choices")
    message = choices[0].get("message")
    if not isinstance(message, dict):
        return ChatReply(text="", raw=raw, malformed="the reply's first choice has no message")
    content = message.get("content")
    text = content if isinstance(content, str) else ""
    calls = [_tool_call(i, entry) for i, entry in enumerate(message.get("tool_calls") or [])]
    calls = [c for c in calls if c is not None]
    appended: dict[str, Any] = {"role": "assistant", "content": text}
    if calls:
        appended["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {
                "name": c.name,
                "arguments": c.arguments if isinstance(c.arguments, str) else json.dumps(c.arguments),
            }}
            for c in calls
        ]
    malformed = None if (text or calls) else "the reply has neither content nor tool calls"
    return ChatReply(text=text, tool_calls=calls, message=appended, finish_reason=choices[0].get("finish_reason"),
                     raw=raw, malformed=malformed)


def _tool_call(index: int, entry: Any) -> ToolCall | None:
    function = entry.get("function") if isinstance(entry, dict) else None
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        return None
    raw = function.get("arguments")
    arguments: dict | str = raw if isinstance(raw, dict) else _json_object(raw if isinstance(raw, str) else "")
    return ToolCall(id=str(entry.get("id") or f"call_{index}"), name=function["name"], arguments=arguments)


def _json_object(text: str) -> dict | str:
    """Tool-call arguments: the JSON object in ``text`` (none at all is {}), else the text itself."""
    try:
        parsed = json.loads(text) if text.strip() else {}
    except json.JSONDecodeError:
        return text
    return parsed if isinstance(parsed, dict) else text


class ModelClient:
    """Chat completions against one Model, for one attempt. Use as ``async with ModelClient(...) as client``."""

    def __init__(self, model: ModelSpec, config: ModelCallConfig | None = None, *, rng: random.Random | None = None):
        if not model.base_url:
            raise ModelCallError("model.base_url is not set: give the Model an OpenAI-compatible endpoint URL")
        self.model = model
        self.config = config or ModelCallConfig()
        self.usage = Usage()
        self.url = model.base_url.rstrip("/") + "/chat/completions"
        self._rng = rng or random.Random()
        self._http: httpx.AsyncClient | None = None

    async def __aenter__(self) -> "ModelClient":
        headers = {"Content-Type": "application/json"}
        key = resolve_secret(self.model.api_key)  # in this job, at call time: never a param or a file
        if key:
            headers["Authorization"] = f"Bearer {key}"
        # the per-call limit is enforced around the whole request (below); httpx's own
        # timeouts are per read, so a server trickling bytes would never trip them
        self._http = httpx.AsyncClient(headers=headers, timeout=httpx.Timeout(self.config.timeout))
        return self

    async def __aexit__(self, *exc) -> None:
        if self._http is not None:
            await self._http.aclose()
            self._http = None

    def request_body(self, messages: list[dict], tools: list[dict] | None = None) -> dict[str, Any]:
        """The body sent: the Model's params, then what the call itself fixes."""
        body = {**self.model.params, "model": self.model.id, "messages": messages}
        if tools:
            body["tools"] = tools
        return body

    async def complete(self, messages: list[dict], tools: list[dict] | None = None) -> ChatReply:
        """One chat completion, retried on transient faults; raises ModelCallError when they persist."""
        return parse_reply(await self.send(self.request_body(messages, tools)))

    async def send(self, body: dict[str, Any]) -> Any:
        """POST ``body`` with retries; the reply body (parsed JSON, or the raw text when it is not JSON)."""
        if self._http is None:
            raise RuntimeError("use ModelClient inside 'async with'")
        tries = self.config.max_model_retries + 1
        for number in range(1, tries + 1):
            try:
                return await self._post_once(body)
            except _RetryableError as exc:
                if number == tries:
                    raise ModelCallError(f"model call failed after {tries} tries; last error: {exc}") from None
                self.usage.retries += 1
                await asyncio.sleep(self._delay(number, exc.retry_after))
        raise AssertionError("unreachable")

    async def _post_once(self, body: dict[str, Any]) -> Any:
        self.usage.calls += 1
        started = time.monotonic()
        try:
            reply = await asyncio.wait_for(self._http.post(self.url, json=body), self.config.timeout)
        except (asyncio.TimeoutError, httpx.TimeoutException):
            raise _RetryableError(f"no reply within {self.config.timeout} s (timeout)") from None
        except httpx.RequestError as exc:  # refused, reset, closed without a reply, a body that breaks off
            raise _RetryableError(f"connection failed: {type(exc).__name__}: {exc}") from None
        finally:
            self.usage.latency_seconds += time.monotonic() - started
        if reply.status_code >= 500 or reply.status_code in RETRYABLE_STATUS:
            raise _RetryableError(_status_error(reply), retry_after_seconds(reply.headers.get("Retry-After")))
        if reply.status_code >= 400:
            raise ModelCallError(f"model call refused: {_status_error(reply)}")
        try:
            data = reply.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            return reply.text
        usage = data.get("usage") if isinstance(data, dict) else None
        if isinstance(usage, dict):
            self.usage.prompt_tokens += _number(usage.get("prompt_tokens"))
            self.usage.completion_tokens += _number(usage.get("completion_tokens"))
        return data

    def _delay(self, number: int, retry_after: float | None) -> float:
        """Seconds before retry ``number``: what the server asked (capped), else backoff with jitter."""
        if retry_after is not None:
            return min(retry_after, self.config.retry_after_max)
        ceiling = min(self.config.retry_backoff * 2 ** (number - 1), self.config.retry_backoff_max)
        # "equal jitter": at least half the backoff, so concurrent attempts spread out but still wait
        return ceiling / 2 + self._rng.uniform(0, ceiling / 2)


def _status_error(reply: httpx.Response) -> str:
    detail = reply.text.strip().replace("\n", " ")
    return f"HTTP {reply.status_code}" + (f": {detail[:200]}" if detail else "")


def _number(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0
