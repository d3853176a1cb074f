"""A real OpenAI-compatible HTTP server on 127.0.0.1 that answers from a script.

Tests point a ModelSpec's ``base_url`` at it and check what arrived: the
requests (bodies and the Authorization header) are recorded in order, and
``max_in_flight`` is the largest number of requests it was answering at once.

What it answers is either a ``reply(body)`` callable or a ``script``: a list
of steps played one per request, in order. A step is a reply body (a dict,
sent with status 200), a ``(status, body)`` pair, or one of the steps below,
which also inject the faults a real endpoint has::

    ScriptedEndpoint(script=[rate_limited(retry_after=0), server_error(), completion("Paris")])
    ScriptedEndpoint(script=[tool_call_reply("bash", {"command": "ls"}), tool_call_reply("submit", {"answer": "x"})])
    ScriptedEndpoint(reply=lambda body: Drop())     # every request: the connection is closed unanswered

It speaks chat completions (any POST path; a chat completion the script
gives is sent as chunks, ``chat_stream_events``, when the request asked for
``stream: true``, with a usage chunk when ``stream_options.include_usage``
is set, as OpenAI's API does); ``protocols`` adds the other
protocols a Model may speak, each answered from the same chat script by
translation through ``agentcompass.protocols``: ``anthropic`` (POST
``/v1/messages``, ``/v1/messages/count_tokens``, the count estimated with no
step of the script) and ``openai_responses`` (POST ``/responses``,
``/v1/responses``). The request goes through the protocol's ``to_chat`` (the
script, and ``RecordedRequest.chat``, see the chat request), the scripted
reply back through ``from_chat`` (usage in the protocol's shape), as the
protocol's events when the request asked for ``stream: true``; a scripted
error is an error in the protocol's shape. A path of a protocol the endpoint
does not speak is recorded and answered 404, with no step played: a test sees
whether the gateway translated. A GET of ``.../models`` lists one model
(``MODEL_ENTRY``), with no step played either::

    ScriptedEndpoint(script=[completion("hi")], protocols=ALL_PROTOCOLS)
"""

from __future__ import annotations

import json
import socket
import sys
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Mapping

from agentcompass.protocols import anthropic_messages, openai_responses


class QuietHandler(BaseHTTPRequestHandler):
    """A request handler that logs nothing (a test's output stays its own)."""

    def log_message(self, *args) -> None:
        pass


def send_json(handler: BaseHTTPRequestHandler, data: bytes, status: int = 200, headers: Mapping[str, str] = {},
              content_type: str = "application/json") -> None:
    """Answer ``handler``'s request with ``data`` (JSON, or the ``content_type`` given), its length and ``headers``."""
    handler.send_response(status)
    handler.send_header("Content-Type", content_type)
    handler.send_header("Content-Length", str(len(data)))
    for name, value in headers.items():
        handler.send_header(name, value)
    handler.end_headers()
    handler.wfile.write(data)


@dataclass
class RecordedRequest:
    """A request as it arrived (``body`` parsed as JSON when it is), and ``chat``: the chat-completions request
    the script saw (``body`` for a chat call; the translation of a call of another protocol; None for a call
    answered without the script)."""

    path: str
    headers: dict[str, str]
    body: Any
    chat: Any = None
    protocol: str = "openai_chat"


# --- reply bodies ------------------------------------------------------------------


def _usage() -> dict:
    return {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12}


def completion(text: str, model: str = "scripted") -> dict:
    """A chat.completion reply whose message content is ``text``."""
    return {
        "id": "chatcmpl-scripted",
        "object": "chat.completion",
        "model": model,
        "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}],
        "usage": _usage(),
    }


def tool_call(name: str, arguments: dict | str, call_id: str | None = None) -> dict:
    """One entry of a message's ``tool_calls``; ``arguments`` as a dict, or raw text to send as is."""
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {"id": call_id or f"call_{name}", "type": "function", "function": {"name": name, "arguments": raw}}


def tool_call_reply(name: str, arguments: dict | str, *, text: str | None = None, call_id: str | None = None) -> dict:
    """A chat.completion reply that calls one tool."""
    return tool_calls_reply([tool_call(name, arguments, call_id)], text=text)


def tool_calls_reply(calls: list[dict], *, text: str | None = None, model: str = "scripted") -> dict:
    """A chat.completion reply that calls several tools (entries made by ``tool_call``), in order."""
    return {
        "id": "chatcmpl-scripted",
        "object": "chat.completion",
        "model": model,
        "choices": [{
            "index": 0,
            "finish_reason": "tool_calls",
            "message": {"role": "assistant", "content": text, "tool_calls": calls},
        }],
        "usage": _usage(),
    }


# --- steps: what to do with one request ----------------------------------------------


@dataclass
class Reply:
    """An HTTP reply: ``body`` is sent as JSON, or as is when it is ``bytes``; after ``delay`` seconds."""

    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0


@dataclass
class Hang:
    """Read the request and send nothing for ``seconds`` (past the client's timeout), then close."""

    seconds: float = 30.0


@dataclass
class Drop:
    """Read the request and close the connection without a reply."""


def rate_limited(retry_after: float | str | None = 0) -> Reply:
    """429 Too Many Requests, with a ``Retry-After`` header unless None."""
    headers = {} if retry_after is None else {"Retry-After": str(retry_after)}
    return Reply(429, {"error": {"message": "rate limited (scripted)", "type": "rate_limit_error"}}, headers)


def server_error(status: int = 500) -> Reply:
    return Reply(status, {"error": {"message": f"scripted server error {status}", "type": "server_error"}})


def malformed(raw: bytes = b'{"choices": [{"message": ') -> Reply:
    """200 with a body that is not JSON."""
    return Reply(200, raw)


Step = Any  # dict | (status, dict) | Reply | Hang | Drop


def _as_step(step: Step) -> Reply | Hang | Drop:
    if isinstance(step, (Reply, Hang, Drop)):
        return step
    if isinstance(step, tuple):
        status, body = step
        return Reply(status, body)
    return Reply(200, step)


def chat_stream_events(reply: dict, include_usage: bool = False) -> bytes:
    """The SSE stream of chat-completion chunks that says what the chat completion ``reply`` says: a chunk with
    the role, one with the text, one per tool call (its whole arguments in one delta), one with the finish
    reason, then (when ``include_usage``, as ``stream_options.include_usage`` asks) one with the usage and no
    choices, and ``data: [DONE]``."""
    base = {"id": reply.get("id", "chatcmpl-scripted"), "object": "chat.completion.chunk",
            "created": reply.get("created", 0), "model": reply.get("model", "scripted")}
    choice = (reply.get("choices") or [{}])[0]
    message = choice.get("message") or {}
    deltas: list[dict] = [{"role": "assistant", "content": ""}]
    if message.get("content"):
        deltas.append({"content": message["content"]})
    for index, call in enumerate(message.get("tool_calls") or []):
        deltas.append({"tool_calls": [{"index": index, **call}]})
    chunks = [{**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]} for delta in deltas]
    chunks.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": choice.get("finish_reason", "stop")}]})
    if include_usage and reply.get("usage"):
        chunks.append({**base, "choices": [], "usage": reply["usage"]})
    return b"".join(b"data: " + json.dumps(chunk).encode() + b"\n\n" for chunk in chunks) + b"data: [DONE]\n\n"


def _chat_streamed(request: Any, step: Reply | Hang | Drop) -> Reply | Hang | Drop:
    """``step`` as chunks when the chat ``request`` asked for a stream and it is a chat completion; else as is."""
    if not (isinstance(request, dict) and request.get("stream") is True and isinstance(step, Reply)
            and step.status == 200 and isinstance(step.body, dict) and step.body.get("object") == "chat.completion"):
        return step
    options = request.get("stream_options")
    include_usage = isinstance(options, dict) and options.get("include_usage") is True
    return Reply(200, chat_stream_events(step.body, include_usage),
                 {**step.headers, "Content-Type": "text/event-stream"}, step.delay)


# --- protocols ---------------------------------------------------------------------------

# What a GET of .../models lists (the one model, in OpenAI's and Anthropic's shape at once), and a GET of
# .../models/<id> answers (with that id); no step of the script is played.
MODEL_ENTRY = {"id": "scripted", "object": "model", "type": "model", "owned_by": "agentcompass",
               "display_name": "scripted", "created": 0, "created_at": "1970-01-01T00:00:00Z"}
# The protocols a ScriptedEndpoint can speak (``ModelSpec.protocol``'s values).
ALL_PROTOCOLS = ("openai_chat", "anthropic", "openai_responses")


def protocol_of(path: str) -> str:
    """The protocol whose call ``path`` is (its query aside): ``anthropic`` for ``.../messages`` and
    ``.../messages/count_tokens``, ``openai_responses`` for ``.../responses``; any other is ``openai_chat``."""
    bare = path.partition("?")[0].rstrip("/")
    if bare.endswith(("/messages", "/messages/count_tokens")):
        return "anthropic"
    if bare.endswith("/responses"):
        return "openai_responses"
    return "openai_chat"


def _error_message(body: Any, status: int) -> str:
    error = body.get("error") if isinstance(body, dict) else None
    message = error.get("message") if isinstance(error, dict) else None
    return message if isinstance(message, str) else f"scripted error {status}"


def _translated(protocol: str, request: Any, step: Reply) -> Reply:
    """``step`` (a chat-completions reply to the translation of ``request``) in ``protocol``'s shape: an error as
    the protocol's error, a chat completion through ``from_chat`` (its events when the request asked for a
    stream); a body that is no chat completion (a fault the script injects) is sent as it is."""
    module: Any = anthropic_messages if protocol == "anthropic" else openai_responses
    if step.status != 200:
        return Reply(step.status, module.error_body(step.status, _error_message(step.body, step.status)),
                     step.headers, step.delay)
    try:
        answer = module.from_chat(step.body, request)
    except ValueError:
        return step
    if isinstance(request, dict) and request.get("stream") is True:
        return Reply(200, module.stream_events(answer), {**step.headers, "Content-Type": "text/event-stream"},
                     step.delay)
    return Reply(200, answer, step.headers, step.delay)


# --- the server ------------------------------------------------------------------------


@dataclass
class ScriptedEndpoint:
    """Replies from ``script`` (one step per request) or ``reply(body) -> step``; records every request."""

    reply: Callable[[Any], Step] = lambda body: (200, completion("ok"))
    script: list[Step] | None = None
    requests: list[RecordedRequest] = field(default_factory=list)
    max_in_flight: int = 0
    port: int = 0  # 0: any free port (tests); a fixed one for a stand-in model a person points a run at
    # the protocols it answers (ALL_PROTOCOLS names them); another's path is a 404
    protocols: tuple[str, ...] = ("openai_chat",)

    def __post_init__(self) -> None:
        unknown = set(self.protocols) - set(ALL_PROTOCOLS)
        if unknown:
            raise ValueError(f"ScriptedEndpoint speaks {', '.join(ALL_PROTOCOLS)}, not {', '.join(sorted(unknown))}")
        self._lock = threading.Lock()
        self._in_flight = 0
        self._closing = threading.Event()
        self._pending = list(self.script) if self.script is not None else None

    def _next_step(self, body: Any) -> Reply | Hang | Drop:
        with self._lock:
            if self._pending is None:
                step = None
            elif self._pending:
                step = self._pending.pop(0)
            else:
                return server_error(599)  # the script ran out: a test asked for more than it scripted
        return _as_step(self.reply(body) if step is None else step)

    def _answer(self, path: str, headers: dict[str, str], body: Any) -> Reply | Hang | Drop:
        """Record the request and say what to answer: the next step, translated for a call of another protocol."""
        protocol = protocol_of(path)
        recorded = RecordedRequest(path, headers, body, protocol=protocol)
        self.requests.append(recorded)
        if protocol not in self.protocols:
            return Reply(404, {"error": {"message": f"this endpoint speaks {', '.join(self.protocols)}, not {protocol} "
                                                    f"({path[:200]})", "type": "not_found_error"}})
        if protocol == "openai_chat":
            recorded.chat = body
            return _chat_streamed(body, self._next_step(body))
        module: Any = anthropic_messages if protocol == "anthropic" else openai_responses
        try:
            if protocol == "anthropic" and path.partition("?")[0].rstrip("/").endswith("/count_tokens"):
                return Reply(200, anthropic_messages.count_tokens(body))
            recorded.chat = module.to_chat(body)
        except (ValueError, RecursionError) as exc:
            return Reply(400, module.error_body(400, f"cannot be translated: {exc}"))
        step = self._next_step(recorded.chat)
        return _translated(protocol, body, step) if isinstance(step, Reply) else step

    def _enter(self) -> None:
        with self._lock:
            self._in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self._in_flight)

    def _leave(self) -> None:
        with self._lock:
            self._in_flight -= 1

    def __enter__(self) -> "ScriptedEndpoint":
        endpoint = self

        class Handler(QuietHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as real endpoints do

            def do_POST(self) -> None:  # noqa: N802 (http.server naming)
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw or b"null")
                except json.JSONDecodeError:
                    body = raw.decode(errors="replace")
                endpoint._enter()
                try:
                    self._play(endpoint._answer(self.path, dict(self.headers), body))
                finally:
                    endpoint._leave()

            def do_GET(self) -> None:  # noqa: N802 (http.server naming)
                endpoint.requests.append(RecordedRequest(self.path, dict(self.headers), None))
                bare = self.path.partition("?")[0]
                if bare.endswith("/models"):
                    send_json(self, json.dumps({"object": "list", "has_more": False, "data": [MODEL_ENTRY]}).encode())
                elif "/models/" in bare:
                    send_json(self, json.dumps({**MODEL_ENTRY, "id": bare.partition("/models/")[2]}).encode())
                else:
                    send_json(self, json.dumps({"error": {"message": f"no GET {bare[:200]}"}}).encode(), 404)

            def _play(self, step: Reply | Hang | Drop) -> None:
                if isinstance(step, Hang):
                    endpoint._closing.wait(step.seconds)
                if isinstance(step, (Hang, Drop)):
                    self.close_connection = True
                    try:
                        self.connection.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass
                    return
                if step.delay:
                    endpoint._closing.wait(step.delay)
                data = step.body if isinstance(step.body, bytes) else json.dumps(step.body).encode()
                headers = dict(step.headers)
                send_json(self, data, step.status, headers, headers.pop("Content-Type", "application/json"))

        class Server(ThreadingHTTPServer):
            def handle_error(self, request, client_address) -> None:
                # a client that went away mid-reply (a killed run) is what the tests do on purpose
                if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
                    super().handle_error(request, client_address)

        self._server = Server(("127.0.0.1", self.port), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)
        self._thread.start()
        return self

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def __exit__(self, *exc) -> None:
        self._closing.set()  # hanging and delayed replies end now
        self._server.shutdown()
        self._server.server_close()
