"""The Model client: OpenAI-compatible chat completions, with retries, timeouts and usage.

One ``ModelClient`` serves one attempt: it resolves the ``${VAR}`` references
of the Model (api_key, base_url, headers, params) in the job that calls the model (never
earlier, never written), sends the Model's inference params with every request,
writes every try of every call, failed ones included, as a ``model_call`` line
of the attempt's trajectory, and counts what the attempt cost in ``usage``:

    calls              HTTP requests sent, failed ones included
    retries            requests that were repeats of a failed one
    prompt_tokens      from the replies' ``usage`` (whole numbers)
    completion_tokens  from the replies' ``usage`` (whole numbers)
    total_tokens       prompt_tokens + completion_tokens
    latency_seconds    time spent waiting on the endpoint (backoff sleeps excluded)

and, when calls were answered from the call cache (``agentcompass.callcache``):

    cached_calls              calls answered from the cache: not sent, not counted in ``calls``
    cached_prompt_tokens      the prompt tokens of those replies (counted in prompt_tokens too)
    cached_completion_tokens  their completion tokens (counted in completion_tokens too)

and, when the endpoint refused calls as too many (429, 503) and they were tried again:

    rate_limited       those rate-limit waits (their calls count in ``calls``, not in ``retries``)

Token counts keep each reply's own count, cached or not, so runs compare like
for like; what was paid is the tokens less the cached ones (``results.cost_usd``).

Each call also counts in the attempt's own ``Usage`` (``ATTEMPT_USAGE``), which
the stage that runs the attempt holds and reads whatever ended it: the calls
an attempt made count in its result even when an error, its time limit or a
harness that raised ended it before the harness could report them.

A 429, a 5xx, a timeout or a dropped connection is retried with exponential
backoff and jitter (a ``Retry-After`` header, capped, sets the wait instead);
when the retries run out, ``ModelCallError`` names the last error. A 429 or a
503 is a rate limit (``ratelimit``): each POST holds a slot of the endpoint's
shared limit, a rejection lowers it, and the call waits and tries again without
using a retry, for ``rate_limit_patience`` seconds from its first rejection. A reply
that arrives but is unusable (not JSON, no choices, no content) is the model's
answer: an empty one, recorded in ``ChatReply.malformed``, not an error. A
reply whose JSON holds text that is not valid Unicode (a lone surrogate escape
such as ``"\\ud800"``) is an error of the call, not retried: no file could
hold it as the answer; the trajectory keeps it with U+FFFD in its place.
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import email.utils
import functools
import itertools
import json
import math
import random
import re
import ssl
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from agentcompass import callcache, spend
from agentcompass._util.display import visible
from agentcompass.errors import ModelCallError
from agentcompass._util.jsonio import not_unicode, without_surrogates
from agentcompass.runtime import ratelimit
# the endpoint's Snakemake resource, by the name the pipeline and plug-ins have imported it by
from agentcompass.runtime.ratelimit import endpoint_resource  # noqa: F401
from agentcompass.runtime.config import ComponentConfig, ConfigError, config_field, parse_int
from agentcompass.runtime.models import ModelSpec
from agentcompass.runtime.models.request import BASE_URL_FIX, base_url_problem
from agentcompass.secrets import MissingSecretError, check_header_value, resolve_secret

# The statuses OpenAI's own SDK retries (with every 5xx): every other 4xx is a
# request that would fail again the same way (a bad key, an unknown model).
RETRYABLE_STATUS = frozenset({408, 409, 429})
_HTTP_URL = re.compile(r"^https?://[^\s/?#]+[^\s]*$")
# The longest reply of the Model read (the client's and the gateway's): a longer one is that call's error.
REPLY_LIMIT = 8 << 20
# The most of one body (a request, a reply) a trajectory records: a longer one is recorded as its head, with
# its size and a note that it was cut.
RECORD_LIMIT = 1 << 20
_RECORD_HEAD = 64 << 10
# the fields of a record that hold bodies, cut when the record is long
_BODY_FIELDS = ("request", "reply", "message", "info")


def recorded_body(data: bytes | str) -> dict[str, Any]:
    """A body longer than ``RECORD_LIMIT`` as a trajectory records it: its head, its size, and that it was cut."""
    size = len(data.encode() if isinstance(data, str) else data)
    head = data[:_RECORD_HEAD]
    return {"agentcompass_cut": f"{size} bytes, more than the {RECORD_LIMIT} a trajectory records of one body: "
                                f"only the first {_RECORD_HEAD} are kept",
            "bytes": size, "head": head if isinstance(head, str) else head.decode(errors="replace")}


def _bounded(event: dict[str, Any], dumps) -> str:
    """The line of ``event``, each body field in it cut to ``recorded_body`` when the line is long."""
    line = dumps(event)
    if len(line) <= RECORD_LIMIT:
        return line
    cut = dict(event)
    for name in _BODY_FIELDS:
        if name in cut:
            text = dumps(cut[name])
            if len(text) > RECORD_LIMIT // 4:
                cut[name] = recorded_body(text)
    line = dumps(cut)
    return line if len(line) <= 4 * RECORD_LIMIT else dumps({"type": event.get("type"), **recorded_body(line)})


class Trajectory:
    """``trajectory.jsonl``: one JSON line per event, appended in the order things happened; a body longer than
    ``RECORD_LIMIT`` is recorded cut (``recorded_body``)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def append(self, kind: str, **event: Any) -> None:
        def dumps(value: Any) -> str:
            return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)

        def cleaned(value: Any) -> str:  # text no UTF-8 file holds: its lone surrogates become U+FFFD
            return json.dumps(without_surrogates(value), sort_keys=True, ensure_ascii=False,
                              default=lambda item: without_surrogates(str(item)))

        line = _bounded({"type": kind, **event}, dumps)
        if not_unicode(line) is not None:
            line = _bounded({"type": kind, **event}, cleaned)
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write(line + "\n")


# The trajectory of the attempt being run, set by the run stage: a ModelClient made without
# one (a harness-free Benchmark's) records its calls there.
ATTEMPT_TRAJECTORY: contextvars.ContextVar[Path | None] = contextvars.ContextVar("attempt_trajectory", default=None)
# What the attempt being run spent on model calls: a Usage the stage that runs it (run, evaluate) owns and
# reads after the attempt, however it ended. Every ModelClient and model gateway made while it is set counts
# each call there too.
ATTEMPT_USAGE: contextvars.ContextVar["Usage | None"] = contextvars.ContextVar("attempt_usage", default=None)


@dataclass(slots=True)
class ModelCallConfig(ComponentConfig):
    """The parameters of model calls, shared by every harness that uses ModelClient."""

    timeout: float = config_field(default=60.0, description="Seconds to wait for one model reply (the whole request).")
    max_model_retries: int = config_field(
        default=4,
        description="Retries of one model call after a 5xx, a timeout or a dropped connection (a 429 or 503 "
        "once rate_limit_patience has passed); then the attempt ends as run_error naming the last error.",
    )
    retry_backoff: float = config_field(
        default=1.0, description="Seconds before the first retry; doubled for each further one, with jitter."
    )
    retry_backoff_max: float = config_field(default=30.0, description="Longest wait between two retries, in seconds.")
    retry_after_max: float = config_field(
        default=60.0, description="Longest wait a Retry-After header may ask for; a longer one is cut to this."
    )
    rate_limit_patience: float = config_field(
        default=ratelimit.PATIENCE,
        description="Seconds one model call keeps waiting on rate limits (429, 503), from its first: those "
        "waits use none of max_model_retries; past it, a further 429 or 503 counts as a fault.",
    )

    def __post_init__(self) -> None:
        self.max_model_retries = parse_int(self.max_model_retries, "max_model_retries", minimum=0)
        self.timeout = parse_seconds(self.timeout, "timeout")
        if self.timeout == 0:
            raise ConfigError("timeout must be more than 0 seconds")
        for name in ("retry_backoff", "retry_backoff_max", "retry_after_max", "rate_limit_patience"):
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


class _RetryableError(Exception):
    def __init__(self, message: str, retry_after: float | None = None, status: int | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after
        self.status = status


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


_COUNTING = threading.Lock()  # a gateway counts from its own threads


# the counts of calls answered from the call cache: in a usage only when there were any
CACHED_USAGE = ("cached_calls", "cached_prompt_tokens", "cached_completion_tokens")


@dataclass
class Usage:
    calls: int = 0
    retries: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_seconds: float = 0.0
    cached_calls: int = 0
    cached_prompt_tokens: int = 0
    cached_completion_tokens: int = 0
    rate_limited: int = 0

    def add(self, calls: int = 0, retries: int = 0, prompt_tokens: int = 0, completion_tokens: int = 0,
            latency_seconds: float = 0.0, cached_calls: int = 0, cached_prompt_tokens: int = 0,
            cached_completion_tokens: int = 0, rate_limited: int = 0) -> None:
        with _COUNTING:
            self.rate_limited += rate_limited
            self.calls += calls
            self.retries += retries
            self.prompt_tokens += prompt_tokens
            self.completion_tokens += completion_tokens
            self.latency_seconds += latency_seconds
            self.cached_calls += cached_calls
            self.cached_prompt_tokens += cached_prompt_tokens
            self.cached_completion_tokens += cached_completion_tokens

    def add_cached(self, prompt_tokens: int, completion_tokens: int) -> None:
        """A call answered from the call cache: its reply's tokens count, as cached ones too; no call was sent."""
        self.add(prompt_tokens=prompt_tokens, completion_tokens=completion_tokens, cached_calls=1,
                 cached_prompt_tokens=prompt_tokens, cached_completion_tokens=completion_tokens)

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def as_dict(self) -> dict[str, int | float]:
        counts: dict[str, int | float] = {
            "calls": self.calls,
            "retries": self.retries,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.total_tokens,
            "latency_seconds": round(self.latency_seconds, 6),
        }
        if self.cached_calls:
            counts.update({name: getattr(self, name) for name in CACHED_USAGE})
        if self.rate_limited:
            counts["rate_limited"] = self.rate_limited
        return counts


def counted(reported: dict[str, Any], spent: Usage, prefix: str = "") -> dict[str, Any]:
    """The usage a result records: what its code reported, with the calls its stage counted (``spent``, under
    ``prefix``) in place of that code's own count when it counted any. The stage's count holds every call,
    those of a try that raised included; the code's own keys beyond it stay."""
    if not (spent.calls or spent.cached_calls):
        return dict(reported)
    return {**reported, **{f"{prefix}{key}": value for key, value in spent.as_dict().items()}}


def token_count(value: Any) -> int | None:
    """A token count a provider reported, as a whole number: ints as they are, finite floats
    (and numeric strings) rounded; None for anything else (a missing count is 0 tokens, not an error)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            return None
    if isinstance(value, int):
        return max(value, 0)
    if isinstance(value, float) and math.isfinite(value):
        return max(round(value), 0)
    return None


# Anthropic's input tokens read from or written to its prompt cache, which its input_tokens leaves out: prompt
# tokens too (chat completions' and the Responses API's prompt counts hold their cached tokens already).
CACHE_INPUT_TOKENS = ("cache_creation_input_tokens", "cache_read_input_tokens")


def reply_tokens(usage: Any) -> tuple[int, int, str | None]:
    """(prompt, completion) tokens of a reply's ``usage`` object, and what could not be read, if anything.

    ``input_tokens``/``output_tokens`` (the names of Anthropic's Messages API and OpenAI's Responses API) are
    read when the chat names are absent, and Anthropic's ``CACHE_INPUT_TOKENS`` are prompt tokens too.
    """
    if not isinstance(usage, dict):
        return 0, 0, None if usage is None else f"usage is not an object: {str(usage)[:100]!r}"
    counts, problems = [], []
    for name, alias, more in (("prompt_tokens", "input_tokens", CACHE_INPUT_TOKENS),
                              ("completion_tokens", "output_tokens", ())):
        total = 0
        for key, raw in ((name, usage.get(name, usage.get(alias))), *((k, usage.get(k)) for k in more)):
            count = 0 if raw is None else token_count(raw)
            if count is None:
                problems.append(f"{key} is not a number: {str(raw)[:100]!r}")
            total += count or 0
        counts.append(total)
    return counts[0], counts[1], "; ".join(problems) or None


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
    parsed = [_tool_call(i, entry) for i, entry in enumerate(message.get("tool_calls") or [])]
    calls = [c for c in parsed if c is not None]
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


def model_key(model: ModelSpec) -> str | None:
    """The Model's api_key, resolved in this job. An attempt that replays from the call cache sends no call:
    there, an unset variable is no key, not an error."""
    try:
        return resolve_secret(model.api_key)
    except MissingSecretError:
        calls = callcache.ATTEMPT_CALLS.get()
        if calls is not None and calls.replaying:
            return None
        raise


class ModelClient:
    """Chat completions against one Model, for one attempt. Use as ``async with ModelClient(...) as client``."""

    def __init__(
        self, model: ModelSpec, config: ModelCallConfig | None = None, *, rng: random.Random | None = None,
        trajectory: Trajectory | None = None,
    ):
        if not model.base_url:
            raise ModelCallError("model.base_url is not set: give the Model an OpenAI-compatible endpoint URL")
        if model.protocol != "openai_chat":
            raise ModelCallError(f"a ModelClient speaks chat completions, and model {model.id!r} speaks "
                                 f"{model.protocol} (model.protocol: openai_chat for this harness)")
        self.model = model
        self.config = config or ModelCallConfig()
        self.usage = Usage()
        self._attempt_usage = ATTEMPT_USAGE.get()  # the attempt's, counted with this client's own
        self._calls = callcache.ATTEMPT_CALLS.get()  # the attempt's view of the call cache, when it uses one
        self._spend = spend.ATTEMPT_SPEND.get()  # the attempt's limits and the ledgers it pays into
        # the URL as configured (a ${VAR} stays one): what errors and records name
        self.url = model.base_url.rstrip("/") + "/chat/completions"
        attempt_trajectory = ATTEMPT_TRAJECTORY.get()
        self.trajectory = trajectory or (Trajectory(attempt_trajectory) if attempt_trajectory else None)
        self._rng = rng or random.Random()
        self._http: httpx.AsyncClient | None = None
        self._wire_url = self.url
        self._endpoint = ""

    async def __aenter__(self) -> "ModelClient":
        headers = {"Content-Type": "application/json"}
        # resolved in this job, at call time: never a param, a record or a file
        try:
            key = model_key(self.model)
            base_url = resolve_secret(self.model.base_url) or ""
            extra_headers = resolve_secret(self.model.headers)
            if key:
                check_header_value(key, f"model.api_key {self.model.api_key}")
            for name, value in extra_headers.items():
                check_header_value(value, f"model.headers.{name}")
        except (MissingSecretError, ValueError) as exc:
            raise ModelCallError(f"model: {exc}") from None
        if not _HTTP_URL.match(base_url):
            raise ModelCallError(f"model.base_url {self.model.base_url!r} does not resolve to an http:// or https:// URL")
        problem = base_url_problem(base_url)
        if problem:  # the URL as configured: what a reference resolves to is not shown
            raise ModelCallError(f"model.base_url {self.model.base_url!r}, as resolved in this job: {problem}; "
                                 f"{BASE_URL_FIX}")
        self._wire_url = base_url.rstrip("/") + "/chat/completions"
        self._endpoint = callcache.endpoint_of(base_url)
        self._limit = ratelimit.limit_of(self._endpoint)  # the endpoint's calls in flight, looked up once
        if key:
            headers["Authorization"] = f"Bearer {key}"
        headers.update(extra_headers)
        # the per-call limit is enforced around the whole request (below); httpx's own
        # timeouts are per read, so a server trickling bytes would never trip them
        self._http = httpx.AsyncClient(headers=headers, timeout=httpx.Timeout(self.config.timeout), verify=tls_context())
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

    async def complete(
        self, messages: list[dict], tools: list[dict] | None = None, trajectory: Trajectory | None = None, **where: Any
    ) -> ChatReply:
        """One chat completion, retried on transient faults; raises ModelCallError when they persist."""
        return parse_reply(await self.send(self.request_body(messages, tools), trajectory, **where))

    async def send(self, body: dict[str, Any], trajectory: Trajectory | None = None, **where: Any) -> Any:
        """POST ``body`` with retries; the reply body (parsed JSON, or the raw text when it is not JSON).

        Each try is a ``model_call`` line of ``trajectory`` (else the client's own), with ``where``
        (e.g. ``turn=2``), the body as configured (its ${VAR} references unresolved), the try's
        number, HTTP status and reply, or its error and whether it is retried.
        """
        if self._http is None:
            raise RuntimeError("use ModelClient inside 'async with'")
        record = trajectory or self.trajectory
        try:  # only the Model's own params may hold references: the messages are the task's text
            wire = {**body, **{k: resolve_secret(body[k]) for k in self.model.params if k in body}}
        except MissingSecretError as exc:
            raise ModelCallError(f"model.params: {exc}") from None
        if self._spend is not None:  # a call past the attempt's limits is refused before anything
            try:
                self._spend.check()
            except ModelCallError as exc:
                self._record(record, where, body, 1, error=str(exc), retried=False, refused="limit")
                raise
        cache = self._calls
        key = None
        if cache is not None:  # the body as configured: a reference of the params stays one in the key
            key = cache.key(endpoint=self._endpoint, model=self.model.id, protocol="openai_chat",
                            path="/chat/completions", body=body)
            entry = cache.lookup(key)
            if entry is not None:
                return self._cached(record, where, body, entry, cache.record(key, "hit"))
            if cache.replaying:
                miss = callcache.miss_message(cache.missed(key))
                self._record(record, where, body, 1, error=miss, retried=False, cache=cache.record(key, "miss"))
                raise ModelCallError(miss)
            where = {**where, "cache": cache.record(key, "sent")}
        limit = self._limit
        faults = waits = 0
        patience_ends: float | None = None  # from the call's first rate-limit rejection
        for number in itertools.count(1):
            try:
                async with limit.slot_async():
                    status, data, tokens_unread = await self._post_once(wire)
            except _RetryableError as exc:
                waiting = False
                if exc.status in ratelimit.REJECTED:
                    limit.rejected()
                    now = time.monotonic()
                    patience_ends = patience_ends or now + self.config.rate_limit_patience
                    waiting = now < patience_ends
                last = not waiting and faults == self.config.max_model_retries
                self._record(record, where, body, number, status=exc.status, error=str(exc), retried=not last,
                             **({"rate_limited": True} if waiting else {}))
                if last:
                    failed = ModelCallError(f"model call failed after {number} tries; last error: {exc}")
                    failed.status = exc.status  # the last reply's, when one came: the failure's HTTP status class
                    raise failed from None
                if waiting:  # a rate limit: wait, using none of the retries meant for faults
                    waits += 1
                    self._count(rate_limited=1)
                    await asyncio.sleep(ratelimit.wait_seconds(
                        waits, exc.retry_after, self.config.retry_after_max, self.config.retry_backoff,
                        self.config.retry_backoff_max, self._rng))
                    continue
                faults += 1
                self._count(retries=1)
                await asyncio.sleep(self._delay(faults, exc.retry_after))
            except ModelCallError as exc:
                extra = {} if exc.reply is None else {"reply": exc.reply}
                self._record(record, where, body, number, status=exc.status, error=str(exc),
                             retried=False, **extra)
                raise
            else:
                limit.answered()
                extra = {"usage_unreadable": tokens_unread} if tokens_unread else {}
                self._record(record, where, body, number, status=status, reply=data,
                             malformed=parse_reply(data).malformed, **extra)
                if cache is not None and key is not None:  # an answer that is no JSON object too (its text)
                    cache.keep(key, self._entry(status, data))
                if self._spend is not None:
                    prompt, completion, _ = reply_tokens(data.get("usage") if isinstance(data, dict) else None)
                    self._spend.charge(prompt, completion, paid=True)
                    self._past_limit(record, where, body)
                return data
        raise AssertionError("unreachable")

    @staticmethod
    def _entry(status: int, data: Any) -> callcache.Entry:
        """The entry of an answered call: its parsed JSON, or its text when it was none (read back as such)."""
        if isinstance(data, str):
            return callcache.Entry(status, "text/plain", data.encode("utf-8", "surrogateescape"))
        prompt, completion, _ = reply_tokens(data.get("usage") if isinstance(data, dict) else None)
        return callcache.Entry(status, "application/json", json.dumps(data).encode(), prompt, completion)

    def _cached(self, record: Trajectory | None, where: dict, body: dict, entry: callcache.Entry,
                cache: dict[str, Any]) -> Any:
        """A call answered from the call cache: recorded and counted as the reply it keeps, no call sent."""
        try:
            data = entry.body.decode(errors="replace") if entry.content_type == "text/plain" else json.loads(entry.body)
        except ValueError:
            data = entry.body.decode(errors="replace")
        self.usage.add_cached(entry.prompt_tokens, entry.completion_tokens)
        if self._spend is not None:
            self._spend.charge(entry.prompt_tokens, entry.completion_tokens, paid=False)
        if self._attempt_usage is not None and self._attempt_usage is not self.usage:
            self._attempt_usage.add_cached(entry.prompt_tokens, entry.completion_tokens)
        self._record(record, where, body, 1, status=entry.status, reply=data, malformed=parse_reply(data).malformed,
                     cache=cache)
        self._past_limit(record, where, body)
        return data

    def _past_limit(self, record: Trajectory | None, where: dict, body: dict) -> None:
        """Raise when the call just answered went past one of the attempt's limits: its reply is withheld."""
        if self._spend is None:
            return
        try:
            self._spend.check(answered=True)
        except ModelCallError as exc:
            self._record(record, where, body, 1, error=str(exc), retried=False, refused="limit")
            raise

    def _count(self, **amounts: Any) -> None:
        self.usage.add(**amounts)
        if self._attempt_usage is not None and self._attempt_usage is not self.usage:
            self._attempt_usage.add(**amounts)

    @staticmethod
    def _record(trajectory: Trajectory | None, where: dict, body: dict, number: int, **outcome: Any) -> None:
        if trajectory is not None:
            trajectory.append("model_call", **where, request=body, **{"try": number}, **outcome)

    async def _post_once(self, body: dict[str, Any]) -> tuple[int, Any, str | None]:
        """One POST: its status, its body, and which token counts could not be read."""
        self._count(calls=1)
        started = time.monotonic()
        assert self._http is not None  # opened by the caller, _post
        try:
            reply = await asyncio.wait_for(self._bounded_post(body), self.config.timeout)
        except (asyncio.TimeoutError, httpx.TimeoutException):
            raise _RetryableError(f"no reply within {self.config.timeout} s (timeout)") from None
        except httpx.RequestError as exc:  # refused, reset, closed without a reply, a body that breaks off
            raise _RetryableError(f"connection failed: {type(exc).__name__}: {exc}") from None
        finally:
            self._count(latency_seconds=time.monotonic() - started)
        if reply is None:
            too_long = ModelCallError(f"the model's reply is more than {REPLY_LIMIT} bytes, the most agentcompass "
                                      "reads of one reply")
            too_long.status = 200
            raise too_long
        if reply.status_code >= 500 or reply.status_code in RETRYABLE_STATUS:
            raise _RetryableError(_status_error(reply), retry_after_seconds(reply.headers.get("Retry-After")),
                                  reply.status_code)
        if reply.status_code >= 400:
            refused = ModelCallError(f"model call refused: {_status_error(reply)}")
            refused.status = reply.status_code
            raise refused
        try:
            data = reply.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            return reply.status_code, reply.text, None
        prompt, completion, unread = reply_tokens(data.get("usage") if isinstance(data, dict) else None)
        self._count(prompt_tokens=prompt, completion_tokens=completion)
        bad = not_unicode(data)
        if bad is not None:
            where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in bad).lstrip(".") or "the body"
            invalid = ModelCallError(
                f"the model's reply is not valid Unicode: {visible(where)} holds a lone surrogate (a \\ud800 to "
                "\\udfff escape that stands for no character), so it cannot be the answer; the endpoint or the "
                "model produced broken text (its reply is in the trajectory, with U+FFFD in place of each)")
            invalid.status, invalid.reply = reply.status_code, without_surrogates(data)
            raise invalid
        return reply.status_code, data, unread

    async def _bounded_post(self, body: dict[str, Any]) -> httpx.Response | None:
        """The reply to one POST, read to its end; None when it is longer than ``REPLY_LIMIT`` (the rest unread)."""
        assert self._http is not None
        async with self._http.stream("POST", self._wire_url, json=body) as reply:
            size = reply.headers.get("Content-Length", "")
            if size.isdigit() and int(size) > REPLY_LIMIT:
                return None
            data = bytearray()
            async for chunk in reply.aiter_bytes():  # decoded: a compressed reply counts at its full size
                data += chunk
                if len(data) > REPLY_LIMIT:
                    return None
        headers = [(k, v) for k, v in reply.headers.multi_items()
                   if k.lower() not in ("content-encoding", "content-length", "transfer-encoding")]
        return httpx.Response(reply.status_code, headers=headers, content=bytes(data), request=reply.request)

    def _delay(self, number: int, retry_after: float | None) -> float:
        """Seconds before retry ``number``: what the server asked (capped), else backoff with jitter."""
        if retry_after is not None:
            return min(retry_after, self.config.retry_after_max)
        ceiling = min(self.config.retry_backoff * 2 ** (number - 1), self.config.retry_backoff_max)
        # "equal jitter": at least half the backoff, so concurrent attempts spread out but still wait
        return ceiling / 2 + self._rng.uniform(0, ceiling / 2)


@functools.cache
def tls_context() -> ssl.SSLContext:
    """The TLS settings every client of this process shares, built as httpx builds them
    (``SSL_CERT_FILE`` and ``SSL_CERT_DIR`` honoured).

    httpx builds one (reading every CA certificate) for each client it makes:
    57 ms of CPU, more than the rest of an attempt's job.
    """
    return httpx.create_ssl_context()


def _status_error(reply: httpx.Response) -> str:
    detail = reply.text.strip().replace("\n", " ")
    return f"HTTP {reply.status_code}" + (f": {detail[:200]}" if detail else "")
