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
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from agentcompass.gateway import BODY_LIMIT, ROUTES, TRANSLATE_ITEMS, TRANSLATE_REPLY_LIMIT, ModelGateway
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
        chunks = []
        while chunk := conn.recv(1 << 20):
            chunks.append(chunk)
    return parse_reply(b"".join(chunks).decode(errors="replace"))


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


# what an agent of each protocol sends in a POST: chat completions, Anthropic's Messages, OpenAI's Responses
BODIES = {"openai_chat": CHAT, "anthropic": json.dumps({"model": "m", "max_tokens": 8, "messages": [
    {"role": "user", "content": "hi"}]}), "openai_responses": json.dumps({"model": "m", "input": "hi"})}


@pytest.mark.parametrize("protocol", sorted(ROUTES))
def test_every_model_call_of_the_protocol_passes_with_its_method_under_the_base_path(tmp_path: Path, protocol: str):
    trajectory = tmp_path / "trajectory.jsonl"
    models = next(path for path, method in ROUTES[protocol].items() if path.endswith("/models"))
    calls = [(method, path) for path, method in ROUTES[protocol].items()] + [
        ("GET", f"{models}/gpt-4o-mini"), ("GET", f"{models}/meta-llama/Llama-3.1-8B-Instruct")]
    with RecordingUpstream() as upstream, ModelGateway(upstream.base_url, KEY, trajectory, protocol=protocol) as gateway:
        replies = [over_socket(gateway, raw_request(m, p, gateway.token, BODIES[protocol] if m == "POST" else ""))
                   for m, p in calls]
        usage = gateway.usage()
    assert [status for status, _, _ in replies] == [200] * len(calls)
    assert [(m, p) for m, p, _, _ in upstream.seen] == [(m, "/v1" + p) for m, p in calls]
    assert [body for _, _, _, body in upstream.seen if body] == [BODIES[protocol].encode()] * usage["calls"]
    if protocol == "anthropic":  # Anthropic's API takes its key as x-api-key, and no Authorization
        assert {auth for _, _, auth, _ in upstream.seen} == {None}
        assert {h["x-api-key"] for h in upstream.headers} == {KEY}
    else:
        assert {auth for _, _, auth, _ in upstream.seen} == {f"Bearer {KEY}"}
        assert not any("x-api-key" in h for h in upstream.headers)
    assert usage["calls"] == sum(m == "POST" for m, _ in calls)
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


# --- the other protocols: Anthropic's Messages and OpenAI's Responses, translated or passed through -------------

# (Model protocol, the agent's path): the calls of the agent protocols each Model protocol answers
SPOKEN_PATHS = [("openai_chat", "/v1/messages"), ("openai_chat", "/responses"), ("anthropic", "/v1/messages"),
                ("openai_responses", "/responses")]
# calls beside the protocols' (Anthropic's batches, files and legacy completions; stored responses): never passed
BESIDE = ["/v1/messages/batches", "/v1/messages/batches?beta=true", "/v1/files", "/responses/abc",
          "/responses/abc/cancel", "/responses/abc/input_items", "/v1/complete", "/v1/messages/abc",
          "/v1/models?beta=true", "/responses?beta=true", "/v1/messages?beta=false", "/v1/messages?beta=true&x=1",
          "/v1/messages?beta=true?beta=true", "/v1/messages?BETA=TRUE", "/v1/messages/count_tokens?x=1",
          "/v1/messages%3Fbeta=true", "/v1/messages/", "/v1//messages"]


def body_for(path: str) -> str:
    return BODIES["openai_responses" if path.startswith("/responses") else "anthropic"]


def head_only(gateway: ModelGateway, data: bytes) -> tuple[int, dict | None, float]:
    """Send a request's head and none of its body, the connection left open: the reply's status and JSON body, and
    how long it took (a gateway that read the body would wait for it until its idle limit)."""
    started = time.monotonic()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(10)
        conn.connect(str(gateway.socket_path))
        conn.sendall(data)
        reply = b""
        while chunk := conn.recv(65536):
            reply += chunk
    status, body, _ = parse_reply(reply.decode(errors="replace"))
    return status, body, time.monotonic() - started


@pytest.mark.parametrize("protocol,path", SPOKEN_PATHS)
def test_without_the_token_a_call_of_any_protocol_is_a_401_before_its_body(tmp_path: Path, protocol: str, path: str):
    with RecordingUpstream() as upstream, ModelGateway(upstream.base_url, KEY, tmp_path / "t.jsonl",
                                                       protocol=protocol) as gateway:
        for auth in ("", "Authorization: Bearer wrong\r\n", "X-Api-Key: wrong\r\n", "X-Api-Key: \r\n",
                     f"Authorization: Basic {gateway.token}\r\n", f"X-Api-Key: {gateway.token}x\r\n"):
            head = (f"POST {path} HTTP/1.1\r\nHost: gateway\r\nContent-Type: application/json\r\n{auth}"
                    "Content-Length: 1000000\r\n\r\n").encode()
            status, body, took = head_only(gateway, head)
            assert status == 401 and took < 5, (auth, status, took)
            assert body is not None, auth
            if path.startswith("/v1/messages"):  # in the shape of the agent's protocol
                assert body["type"] == "error" and body["error"]["type"] == "authentication_error", body
            else:
                assert body["error"]["code"] == "invalid_api_key", body
    assert upstream.seen == []


@pytest.mark.parametrize("protocol,path", SPOKEN_PATHS)
def test_the_agents_x_api_key_goes_no_further(tmp_path: Path, protocol: str, path: str):
    with RecordingUpstream() as upstream, ModelGateway(upstream.base_url, KEY, tmp_path / "t.jsonl",
                                                       protocol=protocol) as gateway:
        data = raw_request("POST", path, None, body_for(path)).replace(
            b"Connection: close\r\n", f"Connection: close\r\nX-Api-Key: {gateway.token}\r\n".encode())
        status, _, _ = over_socket(gateway, data)
    assert status == 200
    [forwarded] = upstream.headers
    assert gateway.token not in json.dumps(forwarded)
    assert forwarded.get("x-api-key") == (KEY if protocol == "anthropic" else None)


@pytest.mark.parametrize("protocol", sorted(ROUTES))
def test_a_path_beside_the_protocols_is_refused_and_never_forwarded(tmp_path: Path, protocol: str):
    with RecordingUpstream() as upstream, ModelGateway(upstream.base_url, KEY, tmp_path / "t.jsonl",
                                                       protocol=protocol) as gateway:
        for path in BESIDE:
            for method in ("POST", "GET", "DELETE"):
                status, body, head = over_socket(gateway, raw_request(method, path, gateway.token, body_for(path)))
                assert status in (400, 404, 405), (method, path, head)
                assert body is not None and (body.get("error") or {}).get("message"), (method, path, body)
    assert upstream.seen == []


class ShapedUpstream(LoopbackUpstream):
    """A chat-completions Model on 127.0.0.1 whose every reply is ``reply`` (bytes), counting the calls."""

    def __init__(self, reply: bytes) -> None:
        self.reply, self.calls = reply, 0

    def __enter__(self) -> "ShapedUpstream":
        upstream = self

        class Handler(QuietHandler):
            def do_POST(self) -> None:  # noqa: N802
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                upstream.calls += 1
                send_json(self, upstream.reply)
                self.close_connection = True

        return self.serve(Handler)


def _translated_body(path: str, size: int = 0, stream: bool = False) -> str:
    if path == "/responses":
        return json.dumps({"model": "m", "input": "x" * size or "hi", "stream": stream})
    return json.dumps({"model": "m", "max_tokens": 8, "stream": stream,
                       "messages": [{"role": "user", "content": "x" * size or "hi"}]})


HOSTILE_BODIES = {
    "not json": "{not json",
    "not an object": "[1, 2]",
    "deeply nested lists": "[" * 200_000 + "]" * 200_000,
    "deeply nested objects": '{"a":' * 100_000 + "1" + "}" * 100_000,
    "deep inside a valid request": None,  # made per path: a nested tool schema, ten thousand deep
    "a number of 100,000 digits": '{"model": "m", "max_tokens": ' + "9" * 100_000 + ', "max_output_tokens": 1}',
    "an infinite number": '{"model": "m", "max_tokens": 1e999, "max_output_tokens": 1e999, "input": "x", "messages": []}',
    "wrong types": '{"model": 5, "max_tokens": "8", "messages": {}, "input": 7}',
    "at the body limit": None,  # a valid request of BODY_LIMIT bytes is no error; one of a wrong shape is
}


@pytest.mark.parametrize("path", ["/v1/messages", "/responses"])
@pytest.mark.parametrize("case", sorted(HOSTILE_BODIES))
def test_a_hostile_request_to_translate_is_a_400_in_its_protocols_shape_in_bounded_time(tmp_path: Path, path: str,
                                                                                       case: str):
    body = HOSTILE_BODIES[case]
    if case == "deep inside a valid request":
        schema = '{"type":"object","properties":{"a":' * 10_000 + "{}" + "}}" * 10_000
        body = (_translated_body(path)[:-1] + ', "tools": [{"name": "t", "type": "function", '
                f'"input_schema": {schema}, "parameters": {schema}}}]}}')
    elif case == "at the body limit":
        body = '{"messages": [], "input": [], "pad": "' + "x" * (BODY_LIMIT - 40) + '"}'
    assert body is not None and len(body) <= BODY_LIMIT
    with ShapedUpstream(b"{}") as upstream, ModelGateway(upstream.base_url, KEY, tmp_path / "t.jsonl") as gateway:
        started = time.monotonic()
        status, reply, head = over_socket(gateway, raw_request("POST", path, gateway.token, body))
        took = time.monotonic() - started
    assert status == 400 and took < 10, (head, took)
    assert reply is not None, head
    if path == "/v1/messages":
        assert reply["type"] == "error" and reply["error"]["type"] == "invalid_request_error", reply
    else:
        assert reply["error"]["type"] == "invalid_request_error", reply
    assert "cannot be translated" in (reply["error"]["message"])
    assert upstream.calls == 0


@pytest.mark.parametrize("path", ["/v1/messages", "/responses"])
def test_a_body_over_the_limit_is_a_413_in_its_protocols_shape_unread(tmp_path: Path, path: str):
    with ShapedUpstream(b"{}") as upstream, ModelGateway(upstream.base_url, KEY, tmp_path / "t.jsonl") as gateway:
        head = (f"POST {path} HTTP/1.1\r\nHost: gateway\r\nAuthorization: Bearer {gateway.token}\r\n"
                f"Content-Length: {BODY_LIMIT + 1}\r\n\r\n").encode()
        status, body, took = head_only(gateway, head)
    assert status == 413 and took < 5
    assert body is not None and (body["type"] == "error" if path == "/v1/messages" else "error" in body)
    assert upstream.calls == 0


def _chat_reply(calls: list[dict]) -> bytes:
    return json.dumps({"choices": [{"finish_reason": "tool_calls", "message": {
        "role": "assistant", "content": None, "tool_calls": calls}}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 4}}).encode()


def _call(index: int, arguments: str) -> dict:
    return {"id": f"call_{index}", "type": "function", "function": {"name": "bash", "arguments": arguments}}


HOSTILE_REPLIES = {
    # arguments of nearly the most the gateway translates: the whole reply is one call
    "huge tool arguments": _chat_reply([_call(0, json.dumps({"command": "x" * (TRANSLATE_REPLY_LIMIT - 300)}))]),
    "tool arguments that are no JSON": _chat_reply([_call(0, '{"command": "ls"'), _call(1, "\x00\ud800"),
                                                    _call(2, "[" * 50_000)]),
    "ten thousand tool calls": _chat_reply([_call(i, "{}") for i in range(10_000)]),
    # not translated (502): a call of the wrong shape for the Responses API; more bytes or values than are translated
    "tool calls of the wrong shape": _chat_reply([5, {"function": None}, {"function": {"name": 7}}]),  # type: ignore[list-item]
    "more bytes than are translated": _chat_reply([_call(0, json.dumps({"command": "x" * TRANSLATE_REPLY_LIMIT}))]),
    "more values than are translated": _chat_reply([_call(0, "[]," * TRANSLATE_ITEMS)]),
}


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("path", ["/v1/messages", "/responses"])
@pytest.mark.parametrize("case", sorted(HOSTILE_REPLIES))
def test_a_model_reply_hostile_to_translate_is_answered_in_bounded_time(tmp_path: Path, case: str, path: str,
                                                                        stream: bool):
    reply = HOSTILE_REPLIES[case]
    with ShapedUpstream(reply) as upstream, ModelGateway(upstream.base_url, KEY, tmp_path / "t.jsonl") as gateway:
        started = time.monotonic()
        status, answer, head = over_socket(gateway, raw_request("POST", path, gateway.token,
                                                                 _translated_body(path, stream=stream)))
        took = time.monotonic() - started
        usage = gateway.usage()
    assert took < 20, took
    assert upstream.calls == 1 and (usage["calls"], usage["prompt_tokens"], usage["completion_tokens"]) == (1, 3, 4)
    if case.startswith("more") or case == "tool calls of the wrong shape" and path == "/responses":
        assert status == 502 and answer is not None and "cannot be translated" in answer["error"]["message"]
        return
    assert status == 200, head
    if stream:
        assert "text/event-stream" in head
        return
    assert answer is not None
    calls = answer["content"] if path == "/v1/messages" else answer["output"]
    if case == "ten thousand tool calls":
        assert len(calls) == 10_000
    elif case == "huge tool arguments":
        arguments = calls[0]["input"] if path == "/v1/messages" else json.loads(calls[0]["arguments"])
        assert len(arguments["command"]) == TRANSLATE_REPLY_LIMIT - 300
    elif case == "tool arguments that are no JSON":
        sent = [c["input"]["_raw_arguments"] for c in calls] if path == "/v1/messages" else [
            c["arguments"] for c in calls]
        assert sent == ['{"command": "ls"', "\x00\ud800", "[" * 50_000]


# from inside a 'none' sandbox, for a Model of each protocol: the key as x-api-key, the agent's paths of it
SANDBOXED_SPOKEN = {
    "openai_chat": [("POST", "/v1/messages", 200), ("POST", "/responses", 200), ("POST", "/responses/abc/cancel", 404),
                    ("POST", "/v1/messages/batches", 404)],
    "anthropic": [("POST", "/v1/messages?beta=true", 200), ("POST", "/v1/files", 404), ("POST", "/v1/complete", 404),
                  ("POST", "/v1/messages?beta=1", 400), ("POST", "/chat/completions", 404)],
    "openai_responses": [("POST", "/responses", 200), ("POST", "/responses/abc", 404), ("GET", "/responses/abc", 404),
                         ("POST", "/chat/completions", 404)],
}


def test_from_the_sandbox_each_protocol_passes_only_its_calls_on_both_providers(isolating_provider: Provider,  # noqa: F811
                                                                                tmp_path: Path):
    with RecordingUpstream() as upstream, \
            ModelGateway(upstream.base_url, KEY, tmp_path / "c.jsonl", protocol="openai_chat") as chat, \
            ModelGateway(upstream.base_url, KEY, tmp_path / "a.jsonl", protocol="anthropic") as anthropic, \
            ModelGateway(upstream.base_url, KEY, tmp_path / "r.jsonl", protocol="openai_responses") as responses:
        gateways = {"openai_chat": chat, "anthropic": anthropic, "openai_responses": responses}

        async def body(session):
            out = {}
            for protocol, gateway in gateways.items():
                host, port = (await session.expose_host_socket(gateway.socket_path)).split(":")
                out[protocol] = []
                for method, path, _ in SANDBOXED_SPOKEN[protocol]:
                    request = raw_request(method, path, None, body_for(path)).decode().replace(
                        "Connection: close\r\n", f"Connection: close\r\nX-Api-Key: {gateway.token}\r\n")
                    out[protocol].append(await isolating_provider.connect(session, host, int(port), request))
            return out

        replies = isolating_provider.run(body, mode="none")
    for protocol, results in replies.items():
        statuses = [parse_reply(r.stdout)[0] if r.stdout.startswith("HTTP/") else r for r in results]
        assert statuses == [status for _, _, status in SANDBOXED_SPOKEN[protocol]], (protocol, statuses)
    assert [(m, p) for m, p, _, _ in upstream.seen] == [
        ("POST", "/v1/chat/completions"), ("POST", "/v1/chat/completions"), ("POST", "/v1/v1/messages"),
        ("POST", "/v1/responses")]
    assert [h.get("x-api-key") for h in upstream.headers] == [None, None, KEY, None]
