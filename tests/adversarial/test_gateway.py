"""The model gateway passes only model calls: no other method or path reaches the Model with the real key.

A real upstream on 127.0.0.1 records every request that reaches it (any
method, any path). The hostile requests are sent as raw bytes, straight to the
gateway's socket and, for both providers, from inside a 'none' sandbox
through its relay: each is refused with a JSON error and nothing of it
reaches the upstream, while the model calls still go through.
"""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from agentcompass.gateway import ROUTES, ModelGateway
from agentcompass.testing.endpoint import QuietHandler, send_json
from environments.conftest import isolating_provider, provider  # noqa: F401 (fixtures)
from environments.envkit import Provider

KEY = "sk-gateway-adversary-key"
CHAT = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]})

# (method, path) an agent holding the token might try; none is a model call
HOSTILE = [
    ("DELETE", "/files/file-abc"),
    ("GET", "/files"),
    ("POST", "/files"),
    ("GET", "/organization/users"),
    ("POST", "/organization/admin_api_keys"),
    ("POST", "/fine_tuning/jobs"),
    ("GET", "/../../admin"),
    ("POST", "/../../admin"),
    ("POST", "/chat/completions/../../admin"),
    ("POST", "/chat/../files"),
    ("POST", "/./chat/completions"),
    ("POST", "/%2e%2e/%2e%2e/admin"),
    ("POST", "/%2E%2E/admin"),
    ("POST", "/chat%2fcompletions"),
    ("POST", "/chat/completions%2f..%2f..%2fadmin"),
    ("POST", "/%252e%252e/admin"),
    ("POST", "/chat/completions%00"),
    ("POST", "/..\\..\\admin"),
    ("POST", "/chat\\completions"),
    ("POST", "//evil.example/chat/completions"),
    ("POST", "/chat//completions"),
    ("POST", "/chat/completions/"),
    ("POST", "/chat/completions?x=/../../admin"),
    ("POST", "/chat/completions?api-version=1"),
    ("POST", "/chat/completions#frag"),
    ("POST", "/chat/completions;x=1/../../admin"),
    ("POST", "http://127.0.0.1/admin"),
    ("POST", "*"),
    ("GET", "/models/../files"),
    ("GET", "/models/%2e%2e"),
    ("GET", "/models/.."),
    ("DELETE", "/models/ft-model"),
    ("DELETE", "/responses/resp_1"),
    ("GET", "/responses/resp_1"),
    ("GET", "/chat/completions"),
    ("PUT", "/chat/completions"),
    ("PATCH", "/chat/completions"),
    ("DELETE", "/chat/completions"),
    ("OPTIONS", "/chat/completions"),
    ("TRACE", "/chat/completions"),
    ("HEAD", "/models"),
    ("CONNECT", "127.0.0.1:80"),
    ("BREW", "/chat/completions"),
    ("POST", "/models"),
    ("POST", "/v1/chat/completions"),
    ("POST", "/CHAT/COMPLETIONS"),
]


class LoopbackUpstream:
    """An HTTP server on 127.0.0.1, in a thread, for as long as the ``with`` block: the Model's upstream."""

    def serve(self, handler: type[BaseHTTPRequestHandler]):
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


class RecordingUpstream(LoopbackUpstream):
    """An HTTP server on 127.0.0.1 that records every request reaching it, whatever its method or path."""

    def __enter__(self) -> "RecordingUpstream":
        seen = self.seen = []
        headers = self.headers = []

        class Handler(QuietHandler):
            def handle_one_request(self) -> None:
                self.raw_requestline = self.rfile.readline(65537)
                if not self.raw_requestline or not self.parse_request():
                    return
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                seen.append((self.command, self.path, self.headers.get("Authorization"), body))
                headers.append({k.lower(): v for k, v in self.headers.items()})
                data = json.dumps({"object": "list", "data": [{"id": "m"}]} if self.command == "GET"
                                  else {"choices": [{"message": {"role": "assistant", "content": "ok"}}],
                                        "usage": {"prompt_tokens": 1, "completion_tokens": 1}}).encode()
                send_json(self, data)
                self.close_connection = True

        return self.serve(Handler)


def raw_request(method: str, path: str, token: str | None, body: str = "") -> bytes:
    auth = f"Authorization: Bearer {token}\r\n" if token else ""
    return (f"{method} {path} HTTP/1.1\r\nHost: gateway\r\nContent-Type: application/json\r\n{auth}"
            f"Connection: close\r\nContent-Length: {len(body.encode())}\r\n\r\n{body}").encode()


def over_socket(gateway: ModelGateway, data: bytes) -> tuple[int, dict | None, str]:
    """Send raw bytes to the gateway's Unix socket; the reply's status, JSON body and raw head."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(10)
        conn.connect(str(gateway.socket_path))
        conn.sendall(data)
        conn.shutdown(socket.SHUT_WR)
        reply = b""
        while chunk := conn.recv(65536):
            reply += chunk
    return parse_reply(reply.decode(errors="replace"))


def parse_reply(text: str) -> tuple[int, dict | None, str]:
    head, _, body = text.partition("\r\n\r\n")
    status = int(head.split(" ", 2)[1])
    try:
        parsed = json.loads(body) if body else None
    except json.JSONDecodeError:
        parsed = None
    return status, parsed, head


@pytest.mark.parametrize("method,path", HOSTILE)
def test_a_call_that_is_no_model_call_is_refused_and_never_reaches_the_model(method: str, path: str, tmp_path: Path):
    trajectory = tmp_path / "trajectory.jsonl"
    with RecordingUpstream() as upstream, ModelGateway(upstream.base_url, KEY, trajectory) as gateway:
        status, body, head = over_socket(gateway, raw_request(method, path, gateway.token, CHAT if method != "GET" else ""))
        # the same gateway still answers a model call afterwards
        ok, answer, _ = over_socket(gateway, raw_request("POST", "/chat/completions", gateway.token, CHAT))
        usage = gateway.usage()
    assert 400 <= status < 500 or status == 501, head
    if method != "HEAD":
        assert body is not None and body["error"]["type"] == "agentcompass_gateway", head
        assert body["error"]["message"], body
    assert ok == 200 and answer["choices"][0]["message"]["content"] == "ok"
    assert [(m, p) for m, p, _, _ in upstream.seen] == [("POST", "/v1/chat/completions")], upstream.seen
    assert usage["calls"] == 1
    refused, answered = [json.loads(line) for line in trajectory.read_text().splitlines()]
    assert refused["status"] == status and refused["error"].startswith("refused:"), refused
    assert "request" not in refused and answered["status"] == 200


def test_a_refused_call_without_the_token_is_a_401_and_reaches_nothing(tmp_path: Path):
    with RecordingUpstream() as upstream, ModelGateway(upstream.base_url, KEY, tmp_path / "t.jsonl") as gateway:
        replies = [over_socket(gateway, raw_request(m, p, None, CHAT)) for m, p in (
            ("DELETE", "/files/x"), ("POST", "/../../admin"), ("GET", "/organization/users"))]
    assert [status for status, _, _ in replies] == [401, 401, 401]
    assert upstream.seen == []


def test_every_model_call_of_the_protocol_passes_with_its_method_under_the_base_path(tmp_path: Path):
    trajectory = tmp_path / "trajectory.jsonl"
    calls = [(method, path) for path, method in ROUTES["openai_chat"].items()] + [
        ("GET", "/models/gpt-4o-mini"), ("GET", "/models/meta-llama/Llama-3.1-8B-Instruct")]
    with RecordingUpstream() as upstream, ModelGateway(upstream.base_url, KEY, trajectory) as gateway:
        replies = [over_socket(gateway, raw_request(m, p, gateway.token, CHAT if m == "POST" else "")) for m, p in calls]
        usage = gateway.usage()
    assert [status for status, _, _ in replies] == [200] * len(calls)
    assert [(m, p) for m, p, _, _ in upstream.seen] == [(m, "/v1" + p) for m, p in calls]
    assert {auth for _, _, auth, _ in upstream.seen} == {f"Bearer {KEY}"}
    assert {p for _, p, _, _ in upstream.seen} >= {"/v1/chat/completions", "/v1/completions", "/v1/responses",
                                                     "/v1/embeddings", "/v1/models"}
    assert usage["calls"] == 4  # the POSTs
    assert KEY not in trajectory.read_text() and gateway.token not in trajectory.read_text()


def test_the_agent_cannot_pick_the_organization_or_project_the_key_acts_for(tmp_path: Path):
    with RecordingUpstream() as upstream, ModelGateway(upstream.base_url, KEY, tmp_path / "t.jsonl") as gateway:
        data = raw_request("POST", "/chat/completions", gateway.token, CHAT).replace(
            b"Connection: close\r\n", b"Connection: close\r\nOpenAI-Organization: org-other\r\nOpenAI-Project: proj-x\r\n")
        status, _, _ = over_socket(gateway, data)
    assert status == 200
    [forwarded] = upstream.headers
    assert forwarded["authorization"] == f"Bearer {KEY}"
    assert "openai-organization" not in forwarded and "openai-project" not in forwarded


def test_a_bad_content_length_is_a_400_and_reaches_nothing(tmp_path: Path):
    with RecordingUpstream() as upstream, ModelGateway(upstream.base_url, KEY, tmp_path / "t.jsonl") as gateway:
        data = raw_request("POST", "/chat/completions", gateway.token, CHAT).replace(
            f"Content-Length: {len(CHAT)}".encode(), b"Content-Length: -5")
        status, body, _ = over_socket(gateway, data)
    assert status == 400 and body["error"]["code"] == "bad_request"
    assert upstream.seen == []


# from inside a 'none' sandbox, through the provider's relay: the path arrives as the agent sent it
SANDBOXED = [("DELETE", "/files/x"), ("GET", "/../../admin"), ("POST", "/%2e%2e/%2e%2e/admin"),
             ("POST", "/..%5c..%5cadmin"), ("POST", "/chat/completions?x=../"), ("GET", "/organization/users")]


def test_from_the_sandbox_only_model_calls_pass_on_both_providers(isolating_provider: Provider, tmp_path: Path):  # noqa: F811
    with RecordingUpstream() as upstream, ModelGateway(upstream.base_url, KEY, tmp_path / "t.jsonl") as gateway:

        async def body(session):
            host, port = (await session.expose_host_socket(gateway.socket_path)).split(":")
            out = []
            for method, path in [*SANDBOXED, ("POST", "/chat/completions")]:
                request = raw_request(method, path, gateway.token, CHAT).decode()
                out.append(await isolating_provider.connect(session, host, int(port), request))
            return out

        replies = isolating_provider.run(body, mode="none")
    statuses = [parse_reply(r.stdout)[0] if r.stdout.startswith("HTTP/") else r for r in replies]
    assert statuses[:-1] == [404, 400, 400, 400, 400, 404], statuses
    assert statuses[-1] == 200, replies[-1]
    assert [(m, p) for m, p, _, _ in upstream.seen] == [("POST", "/v1/chat/completions")]
