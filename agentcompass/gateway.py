"""Key wrapping: a per-attempt model gateway between an agent program and the Model.

The real API key stays in the agentcompass job. An agent that runs in the
Environment as a program of its own gets a stand-in for the Model's base URL
(the gateway, reached through ``EnvironmentSession.expose_host_socket``) and
a random per-attempt token that lives only in memory. The gateway refuses a
request without that token (401, nothing forwarded), and passes on only the
model calls of the Model's protocol (``ROUTES``: for ``openai_chat``, POST
``/chat/completions``, ``/completions``, ``/embeddings`` and GET ``/models``;
for ``anthropic``, POST ``/v1/messages``, ``/v1/messages/count_tokens`` and GET
``/v1/models``; for ``openai_responses``, POST ``/responses`` and GET
``/models``), under the ``base_url``'s path, with the real key in place of the
token (as ``X-Api-Key`` for ``anthropic``, else as a bearer token). Any other
method or path, and any path that is not plain text (``..`` or ``.`` segments,
``//``, a percent-encoding, a backslash, a query), is refused with a JSON error
(400, 404 or 405) in the shape of the agent's protocol and never forwarded: the
key's other powers (files, batches, fine-tuning, stored responses, the
organization) stay out of the agent's reach. ``TRANSLATED`` adds the calls of
another protocol that the gateway answers through an ``openai_chat`` Model:
Anthropic's POST ``/v1/messages`` (Claude Code's) and OpenAI's POST
``/responses`` (Codex's), each translated by its module of
``agentcompass.protocols`` into one ``/chat/completions`` call and its reply
back (a stream of events when the agent asked for one), and
``/v1/messages/count_tokens``, estimated here with no model call. There is no
translation the other way: chat completions to an ``anthropic`` or
``openai_responses`` Model are refused. Anthropic's two Messages paths alone
may carry a query, ``BETA_QUERY``, which is dropped. Every request and reply is
recorded into the attempt's trajectory and usage (each within ``RECORD_LIMIT``:
a larger one is recorded cut, saying so); each call counts in the attempt's
``ATTEMPT_USAGE`` too, as a ModelClient's does, its tokens read from the reply
of whichever protocol, whole or streamed (``_usage_of``).

What an agent sends costs the job bounded memory: the token is checked before
any of a request's body is read, a body over ``BODY_LIMIT`` is refused (413)
unread, and the bodies of all calls in flight together hold at most
``BODIES_IN_FLIGHT`` bytes (a call waits, unread, until its body fits). A
reply of the Model over ``REPLY_LIMIT`` is a 502, never held whole. What is
translated holds at most ``TRANSLATE_ITEMS`` JSON values (a request over it is a
400, a reply a 502) and a chat reply at most ``TRANSLATE_REPLY_LIMIT`` bytes; a
translated stream is written one event at a time.

What comes back is scrubbed of the secrets the gateway holds before the agent
or the trajectory sees it: the key, and the value of each ``${VAR}`` in the
Model's headers (of at least ``SECRET_MIN`` characters), as they are,
JSON-escaped or in a Python repr, are replaced in the reply's header values
and its body by ``[model api_key]`` or the reference (``${VAR}``), and a
header whose name holds one is dropped. An upstream that echoes the request
(a debugging proxy, an error that quotes the ``Authorization`` header) hands
the agent no key. Nothing else of a reply is touched: the model's text stays
the model's.

The gateway listens on a Unix socket: a file, so it can be reached from a
sandbox whose network holds nothing else.
"""

from __future__ import annotations

import contextlib
import hmac
import http.client
import json
import random
import re
import secrets
import shutil
import socketserver
import tempfile
import threading
import time
from email.message import Message
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from agentcompass import callcache, spend
from agentcompass.errors import LimitReachedError
from agentcompass.protocols import anthropic_messages, openai_responses
from agentcompass.runtime import ratelimit
from agentcompass.runtime.model_client import (
    ATTEMPT_USAGE, RECORD_LIMIT, REPLY_LIMIT, recorded_body, reply_tokens, retry_after_seconds,
)
from agentcompass.secrets import Scrubber, check_header_value, resolved_values

# Never passed on: hop-by-hop headers, the agent's token, and what is set anew for the Model.
_NOT_FORWARDED = {
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
    "transfer-encoding", "upgrade", "host", "content-length", "authorization", "api-key", "accept-encoding",
    # which organization or project the key acts for is the Model's config (its headers), not the agent's
    "openai-organization", "openai-project",
    "x-api-key",  # where an Anthropic client sends its key: the gateway's token, never passed on
}
_NOT_RETURNED = {
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
    "transfer-encoding", "upgrade", "content-length",
}


# The longest request body the gateway takes (a longer one is a 413, never read), and the most bytes the bodies
# of one gateway's calls in flight hold together (a call waits, its body unread, until its own fits).
BODY_LIMIT = 8 << 20
BODIES_IN_FLIGHT = 16 << 20
# What the gateway translates (TRANSLATED), each bounding the memory that parsing and rewriting take (a parsed
# value costs far more than its bytes): a request or reply of more JSON values than this (counted from its commas
# and brackets, those in strings too) is refused (400) or not passed on (502); a chat reply of more bytes is not
# translated (502). Both lie far beyond what a model's context or one of its turns holds.
TRANSLATE_ITEMS = 100_000
TRANSLATE_REPLY_LIMIT = 2 << 20
# How much of each end of a reply too long to record whole is read for its usage.
USAGE_WINDOW = 64 << 10
# What stands in a reply for the key.
KEY_PLACEHOLDER = "[model api_key]"
# What stands for the agent's per-attempt token in what outlives the attempt (its trajectory, the call cache).
TOKEN_PLACEHOLDER = "<gateway-token>"
# A ${VAR} value in the Model's headers shorter than this is no secret kept out of replies (it would rewrite
# ordinary text of the model's: a flag, a version); the key is kept out whatever its length.
SECRET_MIN = 8

# The model calls of each protocol: path (under the base_url's path) -> the one method it takes. Anthropic's clients
# send /v1/... under a base URL of host alone (ANTHROPIC_BASE_URL); OpenAI's send /responses under one ending in /v1.
ROUTES: dict[str, dict[str, str]] = {
    "openai_chat": {
        "/chat/completions": "POST",
        "/completions": "POST",
        "/embeddings": "POST",
        "/models": "GET",
    },
    "anthropic": {
        "/v1/messages": "POST",
        "/v1/messages/count_tokens": "POST",
        "/v1/models": "GET",
    },
    "openai_responses": {
        "/responses": "POST",
        "/models": "GET",
    },
}
# The calls of another protocol an agent speaks that the gateway answers by translating them into the Model's
# protocol (agentcompass.protocols): path -> the one method it takes. There is no translation into a protocol other
# than chat completions: an agent speaking chat completions to an anthropic or openai_responses Model is refused.
TRANSLATED: dict[str, dict[str, str]] = {
    "openai_chat": {
        "/v1/messages": "POST",
        "/v1/messages/count_tokens": "POST",
        "/responses": "POST",
    },
}
# The protocol an agent speaks on each translated path (its requests, replies and errors are in that shape).
SPOKEN = {"/v1/messages": "anthropic", "/v1/messages/count_tokens": "anthropic", "/responses": "openai_responses"}
# The one query a path may carry, on the paths of Anthropic's Messages API (Anthropic's SDKs add it to the beta
# calls; Claude Code's do); it is dropped, never forwarded.
BETA_QUERY = "?beta=true"
BETA_PATHS = frozenset({"/v1/messages", "/v1/messages/count_tokens"})
# GET <models path>/<id> too: a model id may hold '/' (org/name), each segment of plain characters
_MODEL_ID = re.compile(r"(?P<models>(?:/v1)?/models)(?:/[A-Za-z0-9_][A-Za-z0-9._:@+-]*)+")
# what a path of a model call is made of: no '%' (no encoding of any kind), no '\\', no '?' or '#'
_PLAIN_PATH = re.compile(r"[A-Za-z0-9._~:@+/-]*")


# the refusals of calls past an attempt's limits recorded in its trajectory; the rest are counted
# (``metadata.limit.refused_calls``): an agent that calls on once refused grows no file
LIMIT_RECORDS = 3


def routes_of(protocol: str) -> dict[str, str]:
    """Every call the gateway answers for a Model of ``protocol``: its own and the translated ones."""
    return {**ROUTES.get(protocol, {}), **TRANSLATED.get(protocol, {})}


def model_protocols_for(agent: str) -> tuple[str, ...]:
    """The protocols of the Models the gateway serves an agent speaking ``agent`` from: its own (passed through),
    then those it translates ``agent``'s calls into."""
    return (agent, *(model for model, paths in TRANSLATED.items()
                     if model != agent and any(SPOKEN[path] == agent for path in paths)))


def canonical(protocol: str, path: str) -> str:
    """``path`` without ``BETA_QUERY`` when it is a call of Anthropic's (``BETA_PATHS``) that ``protocol``
    answers; any other path as it is."""
    bare = path.removesuffix(BETA_QUERY)
    return bare if bare != path and bare in BETA_PATHS and bare in routes_of(protocol) else path


def spoken(protocol: str, path: str) -> str:
    """The protocol the agent speaks calling ``path`` (canonical) of a Model of ``protocol``: the translated
    path's, else the Model's own (what its replies and errors are shaped as)."""
    return SPOKEN[path] if path in TRANSLATED.get(protocol, {}) else protocol


def route(protocol: str, method: str, path: str) -> tuple[int, str, str] | None:
    """None when ``method path`` is a model call of ``protocol``, its own or translated; else the status, error
    code and message to refuse it with."""
    if protocol not in ROUTES:
        return 400, "unknown_protocol", f"the gateway knows no model calls of protocol {protocol!r}"
    if not path.startswith("/") or path.startswith("//"):
        return 400, "invalid_path", f"not a path of this gateway: {path[:200]!r} (send a path such as /chat/completions)"
    if not _PLAIN_PATH.fullmatch(path):
        return 400, "invalid_path", (
            f"refused path {path[:200]!r}: a model call's path is plain text, with no percent-encoding, "
            "backslash, query or fragment")
    segments = path.split("/")[1:]
    if any(segment in ("", ".", "..") for segment in segments):
        return 400, "invalid_path", f"refused path {path[:200]!r}: no empty, '.' or '..' segments"
    routes = routes_of(protocol)
    model_id = _MODEL_ID.fullmatch(path)
    wanted = routes.get(path) or ("GET" if model_id and routes.get(model_id["models"]) == "GET" else None)
    if wanted is None:
        return 404, "unknown_endpoint", (
            f"{path[:200]} is not a model call: this gateway passes only {', '.join(f'{m} {p}' for p, m in routes.items())}")
    if method != wanted:
        return 405, "method_not_allowed", f"{path} takes {wanted}, not {method[:20]}"
    return None


def _error_body(message: str, code: str) -> bytes:
    """An error in the shape OpenAI clients read."""
    return json.dumps({"error": {"message": message, "type": "agentcompass_gateway", "code": code}}).encode()


def error_reply(protocol: str, status: int, message: str, code: str) -> bytes:
    """An error of the gateway's in the shape a client of ``protocol`` reads: Anthropic's, or OpenAI's."""
    return anthropic_messages.error_body(status, message) if protocol == "anthropic" else _error_body(message, code)


def _decoded(data: bytes, content_type: str = "") -> Any:
    """A body as the trajectory keeps it: JSON, the events of a stream, or text; cut past ``RECORD_LIMIT``.
    What json cannot read (not JSON, or nested past its recursion limit: the agent's or the model's bytes)
    is kept as text."""
    if len(data) > RECORD_LIMIT:
        return recorded_body(data)
    text = data.decode(errors="replace")
    if "text/event-stream" in content_type:
        events = []
        for line in text.splitlines():
            if line.startswith("data:") and line[5:].strip() not in ("", "[DONE]"):
                try:
                    events.append(json.loads(line[5:]))
                except (json.JSONDecodeError, RecursionError):
                    events.append(line[5:].strip())
        return events
    try:
        return json.loads(text) if text else None
    except (json.JSONDecodeError, RecursionError):
        return text


def _record_line(record: dict, bodies: tuple | None) -> str:
    """``record`` as one line of the trajectory. A body json read but cannot write back (nested near its
    recursion limit, which the record's own levels pass) is kept as its text instead."""
    try:
        return json.dumps(record, sort_keys=True)
    except (RecursionError, ValueError):
        if bodies is None:
            raise
        body, _, data, _ = bodies
        record["request"] = recorded_body(body) if len(body) > RECORD_LIMIT else body.decode(errors="replace")
        if data is not None:
            record["reply"] = recorded_body(data) if len(data) > RECORD_LIMIT else data.decode(errors="replace")
        return json.dumps(record, sort_keys=True)


def _model_of(body: bytes) -> str:
    """The ``model`` a request body names (for its call's key), or "" when it names none it can read."""
    at = body.find(b'"model"')
    if at < 0:
        return ""
    try:
        text = body[at + len(b'"model"'):at + 1024].decode(errors="replace").lstrip()
        value = json.JSONDecoder().raw_decode(text[1:].lstrip())[0] if text.startswith(":") else ""
    except ValueError:
        return ""
    return value if isinstance(value, str) else ""


def _upstream_error(status: int, data: bytes) -> str:
    """The message of an error the Model (or the gateway for it) answered, for an error of another protocol."""
    try:
        error = json.loads(data).get("error")
        message = error.get("message") if isinstance(error, dict) else error
    except (ValueError, RecursionError, AttributeError):
        message = None
    return message[:2000] if isinstance(message, str) and message else f"the model's endpoint answered HTTP {status}"


def _parsed(data: bytes | bytearray, what: str) -> Any:
    """``data`` parsed as JSON, when it holds at most ``TRANSLATE_ITEMS`` values; else a ``ValueError``."""
    items = data.count(b",") + data.count(b"{") + data.count(b"[")
    if items > TRANSLATE_ITEMS:
        raise ValueError(f"{what} holds about {items} JSON values (counted from its commas and brackets), more "
                         f"than the {TRANSLATE_ITEMS} the gateway translates")
    return json.loads(data)


def _event_usage(event: Any) -> Any:
    """The ``usage`` of a reply or of one event of a stream: its own, or its ``message``'s (Anthropic's
    message_start) or ``response``'s (the Responses API's response.completed); None when it has none."""
    if not isinstance(event, dict):
        return None
    if event.get("usage") is not None:
        return event["usage"]
    for key in ("message", "response"):
        inner = event.get(key)
        if isinstance(inner, dict) and inner.get("usage") is not None:
            return inner["usage"]
    return None


def _usage_of(reply: Any) -> Any:
    """What a reply reports of its usage. Of a stream, the usages of its events merged in order, a later count
    replacing an earlier one of the same name: chat completions' last chunk, Anthropic's message_start (input
    tokens) with message_delta (output tokens), the Responses API's response.completed. A usage that is no
    object is kept when it is the last, so that it is reported unreadable."""
    if not isinstance(reply, list):
        return _event_usage(reply)
    merged: Any = None
    for event in reply:
        usage = _event_usage(event)
        if isinstance(usage, dict):
            merged = merged if isinstance(merged, dict) else {}
            merged.update(usage)  # in place: linear in what the stream holds
        elif usage is not None:
            merged = usage
    return merged


def _tokens(reply: Any) -> tuple[int, int, str | None]:
    """Prompt and completion tokens a reply of any protocol reports (``_usage_of``), and what could not be read."""
    return reply_tokens(_usage_of(reply))


def _tail_usage(data: bytes, content_type: str) -> Any:
    """The ``usage`` of a reply too long to decode whole for the record, read from its ends: the first and last
    events of a stream (Anthropic's input tokens come first), or the last ``"usage"`` object of a JSON body
    (None when there is none)."""
    tail = data[-USAGE_WINDOW:]
    if "text/event-stream" in content_type:
        head = data[:USAGE_WINDOW].rpartition(b"\n")[0]
        return _decoded(head, content_type) + _decoded(tail.partition(b"\n")[2], content_type)
    at = tail.rfind(b'"usage"')
    if at < 0:
        return None
    text = tail[at + len(b'"usage"'):].decode(errors="replace").lstrip()
    try:
        return {"usage": json.JSONDecoder().raw_decode(text[1:].lstrip())[0]} if text.startswith(":") else None
    except json.JSONDecodeError:
        return None


# The waits on a rate-limited call (429, 503) the gateway tries again: the first backoff (doubled for each further
# one, with jitter) and the longest; a Retry-After sets the wait instead, up to RETRY_AFTER_MAX unless told.
RATE_BACKOFF = 1.0
RATE_BACKOFF_MAX = 30.0
RETRY_AFTER_MAX = 60.0
# At most this many connections to one gateway (one attempt's agent) at once: one more is answered 503
# and closed, and the attempt fails as out of its limits. Each holds a thread and a descriptor of the job
# process, which every attempt of the process shares.
MAX_CONNECTIONS = 32
# A connection that sends nothing for this long while its request is read (or reads nothing of its reply)
# is closed.
IDLE_SECONDS = 30.0


def _crowded_reply() -> bytes:
    body = _error_body(f"more than {MAX_CONNECTIONS} connections to the gateway at once", "too_many_connections")
    return (b"HTTP/1.0 503 Service Unavailable\r\nContent-Type: application/json\r\nConnection: close\r\n"
            b"Content-Length: %d\r\n\r\n" % len(body)) + body


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    block_on_close = False  # closing never waits for a call the Model is still answering
    gateway: "ModelGateway"

    def __init__(self, *args, **kwargs) -> None:
        self.open_connections = 0
        self.count_lock = threading.Lock()
        super().__init__(*args, **kwargs)

    def process_request(self, request, client_address) -> None:
        with self.count_lock:
            crowded = self.open_connections >= MAX_CONNECTIONS
            if not crowded:
                self.open_connections += 1
        if crowded:
            self.gateway.crowded()
            try:
                request.setblocking(False)  # a few hundred bytes into an empty buffer; never waits
                request.send(_crowded_reply())
            except OSError:
                pass
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._closed_one()
            raise

    def process_request_thread(self, request, client_address) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._closed_one()

    def _closed_one(self) -> None:
        with self.count_lock:
            self.open_connections -= 1


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    timeout = IDLE_SECONDS  # each read of the request and write of the reply; an idle connection is closed

    translated = False  # a call in another protocol, answered by translation
    speaks = "openai_chat"  # the protocol of the agent's call: its refusals are in that protocol's shape

    def _handle(self) -> None:
        gateway = self.server.gateway
        path = canonical(gateway.protocol, self.path)
        self.translated = path in TRANSLATED.get(gateway.protocol, {})
        self.speaks = spoken(gateway.protocol, path)
        # every refusal comes before any of the body is read: the connection then closes, the body unread
        if not gateway.authorized(self.headers.get("Authorization"), self.headers.get("X-Api-Key")):
            gateway.refused(self.command, self.path, 401, "missing or wrong gateway token")
            self._refuse(401, "missing or wrong gateway token", "invalid_api_key")
            return
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            self._refuse(411, "send the body with a Content-Length", "length_required")
            return
        length = (self.headers.get("Content-Length") or "0").strip()
        if not length.isdigit() or len(self.headers.get_all("Content-Length") or []) > 1:
            self._refuse(400, "Content-Length must be one whole number of bytes", "bad_request")
            return
        size = int(length)
        if size > BODY_LIMIT:
            message = f"the request body is {size} bytes, more than the {BODY_LIMIT} this gateway takes"
            gateway.refused(self.command, self.path, 413, message)
            self._refuse(413, message, "request_too_large")
            return
        refusal = route(gateway.protocol, self.command, path)
        if refusal is not None:
            status, code, message = refusal
            gateway.refused(self.command, self.path, status, message)
            allow = routes_of(gateway.protocol).get(path)
            self._refuse(status, message, code, [("Allow", allow)] if status == 405 and allow else [])
            return
        if not gateway.admit(size):
            message = f"the bodies of other calls in flight fill this gateway's {BODIES_IN_FLIGHT} bytes"
            gateway.refused(self.command, self.path, 503, message)
            self._refuse(503, message, "too_many_calls_in_flight")
            return
        try:
            if self.translated:
                body = bytearray(size)  # which translate empties once it has parsed it
                del body[self.rfile.readinto(body) or 0:]  # what did not come (the agent closed early) is no body
                status, headers, data = gateway.translate(path, body)
                del body
            else:
                status, headers, data = gateway.forward(self.command, path, self.headers, self.rfile.read(size))
        finally:
            gateway.release(size)
        self._reply(status, headers, data)

    def _refuse(self, status: int, message: str, code: str, extra: list[tuple[str, str]] | None = None) -> None:
        """A JSON error, and the connection closed: what the agent sent after its headers stays unread."""
        self.close_connection = True
        self._reply(status, [("Content-Type", "application/json"), ("Connection", "close"), *(extra or [])],
                    error_reply(self.speaks, status, message, code))

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """http.server's own refusals (an unknown method, a malformed request line) as JSON errors too."""
        self.close_connection = True
        why = message or self.responses.get(code, ("error",))[0]
        self.server.gateway.refused(getattr(self, "command", None) or "", getattr(self, "path", None) or "", code, why)
        data = _error_body(why, "bad_request")
        self.send_response(code, message)
        self.send_header("Content-Type", "application/json")
        self.send_header("Connection", "close")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD" and code >= 200 and code not in (204, 304):
            self.wfile.write(data)

    def _reply(self, status: int, headers: list[tuple[str, str]], data: bytes | list[bytes]) -> None:
        """Send the reply: ``data`` is its body, or the pieces of it in order."""
        pieces = [data] if isinstance(data, bytes) else data
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(sum(len(piece) for piece in pieces)))
        self.end_headers()
        if self.command != "HEAD":
            for piece in pieces:
                self.wfile.write(piece)

    # every method is answered here (refused unless it is the one a model call takes); any other is a 501
    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = do_TRACE = do_CONNECT = _handle  # noqa: N815

    def log_message(self, *args) -> None:
        pass  # the trajectory is the log


class ModelGateway:
    """One attempt's gateway to the Model at ``base_url``: use it as a context manager.

    ``token`` is what the agent sends as its API key; ``socket_path`` is where
    the gateway listens; ``usage()`` sums the forwarded calls.
    """

    def __init__(
        self, base_url: str, api_key: str | None, trajectory_path: Path, *, timeout: float = 600.0,
        headers: dict[str, str] | None = None, protocol: str = "openai_chat",
        rate_limit_patience: float = ratelimit.PATIENCE, retry_after_max: float = RETRY_AFTER_MAX,
    ) -> None:
        if protocol not in ROUTES:
            raise ValueError(f"the model gateway knows no protocol {protocol!r} (it knows {', '.join(ROUTES)})")
        self.protocol = protocol
        upstream = urlsplit(base_url)
        if upstream.scheme not in ("http", "https") or not upstream.hostname:
            raise ValueError(f"model base_url must be an http(s) URL, got {base_url!r}")
        self._upstream = upstream
        self._host: str = upstream.hostname
        if api_key:
            check_header_value(api_key, "the model's api_key")
        for name, value in (headers or {}).items():
            check_header_value(value, f"model.headers.{name}")
        self._api_key = api_key
        self._headers = dict(headers or {})  # the Model's own headers, resolved: set on every forwarded request
        # the secrets it holds, kept out of replies: the key, and each ${VAR} value (the caller resolved them)
        # that stands in one of the Model's headers
        held = {value: f"${{{name}}}" for name, value in resolved_values().items()
                if len(value) >= SECRET_MIN and any(value in header for header in self._headers.values())}
        self._scrubber = Scrubber(resolved=False, literals={**held, **({api_key: KEY_PLACEHOLDER} if api_key else {})})
        self._trajectory_path = Path(trajectory_path)
        self._timeout = timeout
        self._patience, self._retry_after_max = rate_limit_patience, retry_after_max
        self._rng = random.Random()
        self.token = secrets.token_urlsafe(32)
        self._lock = threading.Lock()
        self._attempt_usage = ATTEMPT_USAGE.get()  # the attempt's, counted with the gateway's own
        self._calls = callcache.ATTEMPT_CALLS.get()  # the attempt's view of the call cache, when it uses one
        self._spend = spend.ATTEMPT_SPEND.get()  # the attempt's limits and the ledgers it pays into
        self._endpoint = callcache.endpoint_of(base_url)
        self._limit = ratelimit.limit_of(self._endpoint)  # the endpoint's calls in flight, looked up once
        self._usage: dict[str, Any] = {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0,
                                       "latency_seconds": 0.0}
        # short: a Unix socket path has a limit of about 100 bytes
        # the HTTP status of the last model call forwarded (or answered for the Model: 502, 504), None before one
        self.last_call_status: int | None = None
        self._room = threading.Condition()
        self._in_flight = 0  # bytes of the bodies of the calls being read or forwarded
        # connections refused because MAX_CONNECTIONS were open: the agent held more than it is given
        self.connections_refused = 0
        self._dir = Path(tempfile.mkdtemp(prefix="acgw-"))
        self.socket_path = self._dir / "gateway.sock"
        self._server: _Server | None = None

    def __enter__(self) -> "ModelGateway":
        self._server = _Server(str(self.socket_path), _Handler)
        self._server.gateway = self
        threading.Thread(target=self._server.serve_forever, name="agentcompass-gateway", daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        shutil.rmtree(self._dir, ignore_errors=True)

    def usage(self) -> dict[str, float]:
        """Calls (forwarded POSTs), their prompt, completion and total tokens (whole numbers), and their summed
        latency; with the calls answered from the call cache, when there were any (``Usage``'s names)."""
        with self._lock:
            return {**self._usage, "latency_seconds": round(self._usage["latency_seconds"], 6)}

    def admit(self, size: int) -> bool:
        """Take ``size`` bytes of ``BODIES_IN_FLIGHT`` for a call's body, waiting for other calls to release
        theirs (at most the Model's timeout); False if they did not."""
        with self._room:
            if not self._room.wait_for(lambda: self._in_flight + size <= BODIES_IN_FLIGHT, self._timeout):
                return False
            self._in_flight += size
            return True

    def release(self, size: int) -> None:
        with self._room:
            self._in_flight -= size
            self._room.notify_all()

    def authorized(self, header: str | None, api_key: str | None = None) -> bool:
        """The token as ``Authorization: Bearer`` (OpenAI's clients, Claude Code's ``ANTHROPIC_AUTH_TOKEN``)
        or as ``X-Api-Key`` (Anthropic's ``ANTHROPIC_API_KEY``)."""
        scheme, _, given = (header or "").partition(" ")
        if api_key is not None and not header:
            return hmac.compare_digest(api_key.strip().encode(), self.token.encode())
        return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), self.token.encode())

    def crowded(self) -> None:
        """A connection refused as one too many: counted, and recorded once."""
        with self._lock:
            self.connections_refused += 1
            first = self.connections_refused == 1
        if first:
            self.refused("", "", 503, f"more than {MAX_CONNECTIONS} connections at once (this one and any later "
                         "one over the limit are closed unanswered, and not recorded again)")

    def refused(self, method: str, path: str, status: int, why: str) -> None:
        self._record({"source": "gateway", "method": method, "path": path, "status": status, "error": f"refused: {why}"})

    def forward(self, method: str, path: str, headers: Message | dict[str, str], body: bytes, *,
                translated_from: str | None = None) -> tuple[int, list, bytes]:
        """Send a model call (``route`` passed it) on to the Model with the real key; its status, headers and body.
        ``translated_from``: the agent's call this one translates, which its record names."""
        refusal = route(self.protocol, method, path)
        if refusal is not None:  # never with the key
            status, code, message = refusal
            return status, [("Content-Type", "application/json")], error_reply(self.protocol, status, message, code)
        if self._spend is not None and method == "POST":  # a call past the attempt's limits: refused, unsent
            withheld = self._past_limit(method, path, answered=False)
            if withheld is not None:
                return withheld
        cache, key = self._calls, None
        if cache is not None and method == "POST":
            key = cache.key(endpoint=self._endpoint, model=_model_of(body), protocol=self.protocol, path=path,
                            body=body.replace(self.token.encode(), TOKEN_PLACEHOLDER.encode()))
            answered = self._from_cache(cache, key, path, headers, body, translated_from)
            if answered is not None:
                return answered
        outgoing = {k: v for k, v in headers.items() if k.lower() not in _NOT_FORWARDED}
        outgoing["Accept-Encoding"] = "identity"  # the trajectory records what it can read
        if self._api_key and self.protocol == "anthropic":
            outgoing["X-Api-Key"] = self._api_key  # Anthropic's API takes its key so, not as a bearer token
        elif self._api_key:
            outgoing["Authorization"] = f"Bearer {self._api_key}"
        outgoing.update(self._headers)
        limit = self._limit if method == "POST" else None
        waits, patience_ends = 0, None  # from the call's first rate-limit rejection
        while True:
            with limit.slot() if limit is not None else contextlib.nullcontext():
                status, returned, data, error, latency = self._exchange(method, path, outgoing, body)
            if limit is None or error is not None:
                break
            if status not in ratelimit.REJECTED:
                if status < 400:
                    limit.answered()
                break
            limit.rejected()
            now = time.monotonic()
            patience_ends = patience_ends or now + self._patience
            if now >= patience_ends:
                break  # the agent sees the rejection, as the Model sent it
            waits += 1
            self._answered(method, path, headers, body, status, returned, data, error, latency, translated_from,
                           cache, key, rate_limited=True)
            retry_after = retry_after_seconds(next((v for k, v in returned if k.lower() == "retry-after"), None))
            time.sleep(ratelimit.wait_seconds(waits, retry_after, self._retry_after_max, RATE_BACKOFF,
                                              RATE_BACKOFF_MAX, self._rng))
        return self._answered(method, path, headers, body, status, returned, data, error, latency, translated_from,
                              cache, key)

    def _exchange(self, method: str, path: str, outgoing: dict[str, str],
                  body: bytes) -> tuple[int, list, bytes, str | None, float]:
        """One request to the Model: its status, headers, body, the error that stood for a reply, and latency."""
        connection_class = http.client.HTTPSConnection if self._upstream.scheme == "https" else http.client.HTTPConnection
        connection = connection_class(self._host, self._upstream.port, timeout=self._timeout)
        started = time.monotonic()
        error = None
        try:
            connection.request(method, self._upstream.path.rstrip("/") + path,
                               body=body if body or method in ("POST", "PUT", "PATCH") else None, headers=outgoing)
            reply = connection.getresponse()
            status, data = reply.status, reply.read(REPLY_LIMIT + 1)
            returned = [(k, v) for k, v in reply.getheaders() if k.lower() not in _NOT_RETURNED]
            if len(data) > REPLY_LIMIT:
                error = f"the model's reply is more than {REPLY_LIMIT} bytes, more than the gateway passes on"
                status, data = 502, error_reply(self.protocol, 502, error, "reply_too_large")
                returned = [("Content-Type", "application/json")]
        except TimeoutError:
            error = f"the model did not answer within {self._timeout} s"
            status, data = 504, error_reply(self.protocol, 504, error, "upstream_timeout")
            returned = [("Content-Type", "application/json")]
        except (OSError, http.client.HTTPException) as exc:
            error = f"the model could not be reached: {type(exc).__name__}: {exc}"
            status, data = 502, error_reply(self.protocol, 502, error, "upstream_unreachable")
            returned = [("Content-Type", "application/json")]
        finally:
            connection.close()
        return status, returned, data, error, time.monotonic() - started

    def _answered(self, method: str, path: str, headers: Message | dict[str, str], body: bytes, status: int,
                  returned: list, data: bytes, error: str | None, latency: float, translated_from: str | None,
                  cache: callcache.AttemptCalls | None, key: callcache.CallKey | None,
                  rate_limited: bool = False) -> tuple[int, list, bytes]:
        """The Model's reply scrubbed, recorded and counted (a rejection waited on, ``rate_limited``, too)."""
        returned, data = self._scrubbed(returned, data)
        content_type = next((v for k, v in returned if k.lower() == "content-type"), "")
        record = {
            "source": "gateway", "method": method, "path": path, "status": status,
            "latency_seconds": round(latency, 6),
        }
        if error is not None:
            record["error"] = error
        if translated_from is not None:
            record["translated_from"] = translated_from
        if rate_limited:  # tried again by the gateway: the agent never sees this reply
            record["rate_limited"] = True
            with self._lock:
                self._usage["rate_limited"] = self._usage.get("rate_limited", 0) + 1
            if self._attempt_usage is not None:
                self._attempt_usage.add(rate_limited=1)
        if cache is not None and key is not None:
            record["cache"] = cache.record(key, "sent")
        bodies = (body, headers.get("Content-Type") or "", data if error is None else None, content_type)
        tokens = self._record(record, latency if method == "POST" else None, bodies)
        if cache is not None and key is not None and error is None and status == 200 and not rate_limited:
            # the agent's token, should the model repeat it, is no part of what outlives the attempt
            kept = data.replace(self.token.encode(), TOKEN_PLACEHOLDER.encode())
            cache.keep(key, callcache.Entry(status, content_type, kept, *tokens, latency_seconds=latency))
        if self._spend is not None and method == "POST" and error is None and status == 200:
            self._spend.charge(*tokens, paid=True)  # kept first: a replay withholds the same reply
            withheld = self._past_limit(method, path)
            if withheld is not None:
                return withheld
        return status, returned, data

    def _past_limit(self, method: str, path: str, answered: bool = True) -> tuple[int, list, bytes] | None:
        """The refusal of a call once the attempt reached a limit (``answered``: the call just answered went past
        one, and its reply is withheld): a 400 in the agent's protocol, recorded; None within the limits."""
        assert self._spend is not None
        try:
            self._spend.check(answered=answered)
        except LimitReachedError as exc:
            if self._spend.refused <= LIMIT_RECORDS:  # an agent that calls on and on: its refusals are counted
                self.refused(method, path, 400, str(exc))
            return 400, [("Content-Type", "application/json")], error_reply(
                self.protocol, 400, str(exc), "attempt_limit_reached")
        return None

    def _from_cache(self, cache: callcache.AttemptCalls, key: callcache.CallKey, path: str,
                    headers: Message | dict[str, str], body: bytes,
                    translated_from: str | None) -> tuple[int, list, bytes] | None:
        """The answer to a call from the call cache: its kept reply (recorded and counted as cached), a
        replay's miss (an error in the protocol's shape, nothing sent), or None to send it."""
        record: dict[str, Any] = {"source": "gateway", "method": "POST", "path": path}
        if translated_from is not None:
            record["translated_from"] = translated_from
        entry = cache.lookup(key)
        if entry is not None:
            record.update(status=entry.status, latency_seconds=0.0, cache=cache.record(key, "hit"))
            returned = [("Content-Type", entry.content_type)] if entry.content_type else []
            tokens = self._record(record, 0.0, (body, headers.get("Content-Type") or "",
                                                entry.body, entry.content_type), cached=True)
            if self._spend is not None:
                self._spend.charge(*tokens, paid=False)
                withheld = self._past_limit("POST", path)
                if withheld is not None:
                    return withheld
            return entry.status, returned, entry.body
        if not cache.replaying:
            return None
        message = callcache.miss_message(cache.missed(key))
        record.update(status=503, error=message, cache=cache.record(key, "miss"))
        self._record(record, None, (body, headers.get("Content-Type") or "", None, ""))
        with self._lock:
            self.last_call_status = 503
        return 503, [("Content-Type", "application/json")], error_reply(self.protocol, 503, message, "cache_miss")

    def translate(self, path: str, body: bytes | bytearray) -> tuple[int, list, bytes | list[bytes]]:
        """Answer a call of another protocol (``path`` in ``TRANSLATED``: Anthropic's Messages, OpenAI's Responses)
        through the Model's chat completions: the request through the protocol module's ``to_chat``, one
        ``/chat/completions`` call (never streamed), its reply back through ``from_chat`` (as the protocol's
        events when the request asked for a stream); Anthropic's count of tokens is estimated here, with no model
        call. Errors are in the protocol's shape; the upstream call is recorded and counted as every forwarded
        call is."""
        module: Any = openai_responses if SPOKEN[path] == "openai_responses" else anthropic_messages
        json_reply = [("Content-Type", "application/json")]
        try:
            request = _parsed(body, "the request")
            if isinstance(body, bytearray):
                body.clear()  # parsed: its bytes are held no longer
            if path == "/v1/messages/count_tokens":
                answer = anthropic_messages.count_tokens(request)
                self._record({"source": "gateway", "method": "POST", "path": path, "status": 200,
                              "answered": "estimated by the gateway, no model call", "reply": answer})
                return 200, json_reply, json.dumps(answer).encode()
            chat = module.to_chat(request)
        except (ValueError, RecursionError) as exc:  # JSONDecodeError is a ValueError
            why = f"the request cannot be translated for the model: {exc}"
            self.refused("POST", path, 400, why)
            return 400, json_reply, module.error_body(400, why)
        status, _, data = self.forward("POST", "/chat/completions", {"Content-Type": "application/json"},
                                       json.dumps(chat).encode(), translated_from=path)
        del chat
        if status != 200:
            return status, json_reply, module.error_body(status, _upstream_error(status, data))
        try:
            if len(data) > TRANSLATE_REPLY_LIMIT:
                raise ValueError(f"it is {len(data)} bytes, more than the {TRANSLATE_REPLY_LIMIT} the gateway translates")
            answer = module.from_chat(_parsed(data, "it"), request)  # the parsed reply is held no longer
        except (ValueError, RecursionError) as exc:
            return 502, json_reply, module.error_body(502, f"the model's reply cannot be translated: {exc}")
        del data
        if request.get("stream") is True:  # its events, written one after another: never joined whole
            return 200, [("Content-Type", "text/event-stream"), ("Cache-Control", "no-cache")], \
                module.stream_chunks(answer)
        return 200, json_reply, json.dumps(answer).encode()

    def _scrubbed(self, headers: list[tuple[str, str]], data: bytes) -> tuple[list[tuple[str, str]], bytes]:
        """A reply's headers and body with every secret the gateway holds replaced: in header values and the
        body; a header whose name holds one is dropped (no stand-in is a header name). Bytes that are no UTF-8
        pass through as they are (``surrogateescape`` keeps them; a header's value is ASCII)."""
        if not self._scrubber:
            return headers, data
        clean = self._scrubber.text
        text = data.decode("utf-8", "surrogateescape")
        scrubbed = clean(text)
        return ([(k, clean(v)) for k, v in headers if clean(k) == k],
                data if scrubbed == text else scrubbed.encode("utf-8", "surrogateescape"))

    def _record(self, record: dict, call_latency: float | None = None, bodies: tuple | None = None,
                cached: bool = False) -> tuple[int, int]:
        """Write ``record`` (with ``bodies``: the request and reply, decoded) to the trajectory; a model call
        (``call_latency`` given) counts in the usage, as sent or, ``cached``, as answered from the call
        cache. Returns the call's prompt and completion tokens."""
        prompt = completion = 0
        with self._lock:  # one record at a time: what is decoded for it is held once per gateway
            usage: Any = None
            if bodies is not None:
                body, body_type, data, data_type = bodies
                record["request"] = _decoded(body, body_type)
                record["reply"] = None if data is None else _decoded(data, data_type)
                usage = _tail_usage(data, data_type) if data is not None and len(data) > RECORD_LIMIT else None
            if call_latency is not None:  # a POST is a model call, answered or not
                prompt, completion, unread = _tokens(usage if usage is not None else record.get("reply"))
                if unread:
                    record["usage_unreadable"] = unread
                self._usage["prompt_tokens"] += prompt
                self._usage["completion_tokens"] += completion
                self._usage["total_tokens"] += prompt + completion
                if cached:
                    for name, count in (("cached_calls", 1), ("cached_prompt_tokens", prompt),
                                        ("cached_completion_tokens", completion)):
                        self._usage[name] = self._usage.get(name, 0) + count
                    if self._attempt_usage is not None:
                        self._attempt_usage.add_cached(prompt, completion)
                else:
                    self._usage["calls"] += 1
                    self._usage["latency_seconds"] += call_latency
                    if self._attempt_usage is not None:
                        self._attempt_usage.add(calls=1, prompt_tokens=prompt, completion_tokens=completion,
                                                latency_seconds=call_latency)
                self.last_call_status = record["status"]
            with self._trajectory_path.open("a", encoding="utf-8") as log:
                log.write(_record_line(record, bodies) + "\n")
        return prompt, completion
