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
"""

from __future__ import annotations

import json
import socket
import sys
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Mapping


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
    path: str
    headers: dict[str, str]
    body: Any


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


# --- the server ------------------------------------------------------------------------


@dataclass
class ScriptedEndpoint:
    """Replies from ``script`` (one step per request) or ``reply(body) -> step``; records every request."""

    reply: Callable[[Any], Step] = lambda body: (200, completion("ok"))
    script: list[Step] | None = None
    requests: list[RecordedRequest] = field(default_factory=list)
    max_in_flight: int = 0
    port: int = 0  # 0: any free port (tests); a fixed one for a stand-in model a person points a run at

    def __post_init__(self) -> None:
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
                    endpoint.requests.append(RecordedRequest(self.path, dict(self.headers), body))
                    self._play(endpoint._next_step(body))
                finally:
                    endpoint._leave()

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
                send_json(self, data, step.status, step.headers)

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
