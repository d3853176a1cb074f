"""A real OpenAI-compatible HTTP server on 127.0.0.1 that answers from a script.

Tests point a ModelSpec's ``base_url`` at it and check what arrived: the
requests (bodies and the Authorization header) are recorded in order.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable


@dataclass
class RecordedRequest:
    path: str
    headers: dict[str, str]
    body: Any


def completion(text: str, model: str = "scripted") -> dict:
    """A chat.completion reply whose message content is ``text``."""
    return {
        "id": "chatcmpl-scripted",
        "object": "chat.completion",
        "model": model,
        "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12},
    }


@dataclass
class ScriptedEndpoint:
    """Replies with ``reply(request_body) -> (status, json)``; records every request."""

    reply: Callable[[Any], tuple[int, dict]] = lambda body: (200, completion("ok"))
    requests: list[RecordedRequest] = field(default_factory=list)

    def __enter__(self) -> "ScriptedEndpoint":
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server naming)
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw or b"null")
                except json.JSONDecodeError:
                    body = raw.decode(errors="replace")
                endpoint.requests.append(RecordedRequest(self.path, dict(self.headers), body))
                status, payload = endpoint.reply(body)
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()
