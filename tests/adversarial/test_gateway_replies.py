"""The model gateway hands the agent no secret it holds, even when the upstream echoes the request.

A real upstream on 127.0.0.1 echoes every header it received (the real
``Authorization`` among them) in its reply's headers, a header's name and its
JSON body, as a debugging proxy or an error that quotes the request would.
Through the gateway the agent gets the reply with the key, and a ``${VAR}``
header value of the Model, replaced by what stands for them (and nothing else
changed): in-process over
the gateway's socket, and from inside a 'none' sandbox through its relay on
both providers. The trajectory holds neither.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from adversarial.test_gateway import CHAT, LoopbackUpstream, over_socket, parse_reply, raw_request
from agentcompass.gateway import KEY_PLACEHOLDER, ModelGateway, _record_line
from agentcompass.secrets import resolve_secret
from agentcompass.testing.endpoint import QuietHandler, send_json
from environments.conftest import isolating_provider, provider  # noqa: F401 (fixtures)
from environments.envkit import Provider

KEY = "sk-echoed-gateway-key-5c2e9d"
ORG_VAR, ORG_VALUE = "ECHO_TEST_ORG_TOKEN", "org-token-echoed-81f0a4"
# a value this process resolved that is no secret of the Model's: a reply holding it comes back as it is
OTHER_VAR, OTHER_VALUE = "ECHO_TEST_OTHER", "words-a-model-may-say"


class EchoingUpstream(LoopbackUpstream):
    """An HTTP server on 127.0.0.1 whose every reply repeats the request's headers, in every place it can."""

    def __enter__(self) -> "EchoingUpstream":
        class Handler(QuietHandler):
            def do_POST(self) -> None:  # noqa: N802
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                received = {k: v for k, v in self.headers.items()}
                auth = self.headers.get("Authorization") or ""
                data = json.dumps({
                    "choices": [{"message": {"role": "assistant", "content": f"you sent {auth!r}"}}],
                    "usage": {"prompt_tokens": 1, "completion_tokens": 1},
                    "echo": received, auth: "as a key", "repr": repr(received),
                }).encode()
                send_json(self, data, headers={
                    "X-Echo-Authorization": auth,
                    "X-Echo-Org": self.headers.get("X-Org-Token") or "",
                    f"X-{auth.split()[-1]}": "the key as a header's name",
                })
                self.close_connection = True

        return self.serve(Handler)


@pytest.fixture
def org_header(monkeypatch) -> dict[str, str]:
    """The Model's headers as its config writes them, resolved as a harness resolves them."""
    monkeypatch.setenv(ORG_VAR, ORG_VALUE)
    monkeypatch.setenv(OTHER_VAR, OTHER_VALUE)
    assert resolve_secret(f"${{{OTHER_VAR}}}") == OTHER_VALUE  # resolved elsewhere in the job (a task's env)
    return resolve_secret({"X-Org-Token": f"${{{ORG_VAR}}}"})


def test_an_upstream_that_echoes_the_key_hands_the_agent_none(tmp_path: Path, org_header: dict[str, str]):
    trajectory = tmp_path / "trajectory.jsonl"
    with EchoingUpstream() as upstream, ModelGateway(upstream.base_url, KEY, trajectory,
                                                     headers=org_header) as gateway:
        request = raw_request("POST", "/chat/completions", gateway.token, CHAT).replace(
            b"Connection: close\r\n", f"Connection: close\r\nX-Note: {OTHER_VALUE}\r\n".encode())
        status, body, head = over_socket(gateway, request)
        usage = gateway.usage()
    assert status == 200 and body is not None, head
    reply = head + json.dumps(body)
    assert KEY not in reply and ORG_VALUE not in reply, reply
    # the upstream did get the real key: what came back was scrubbed, in each place it echoed it
    assert body["echo"]["Authorization"] == f"Bearer {KEY_PLACEHOLDER}"
    assert body["choices"][0]["message"]["content"] == f"you sent 'Bearer {KEY_PLACEHOLDER}'"
    assert body["echo"]["X-Org-Token"] == f"${{{ORG_VAR}}}" and f"Bearer {KEY_PLACEHOLDER}" in body
    assert KEY not in body["repr"] and f"X-Echo-Authorization: Bearer {KEY_PLACEHOLDER}" in head
    assert f"X-Echo-Org: ${{{ORG_VAR}}}" in head and "the key as a header's name" not in head  # that one dropped
    assert body["echo"]["X-Note"] == OTHER_VALUE  # nothing but the Model's secrets is touched
    assert usage["calls"] == 1 and usage["prompt_tokens"] == 1  # the scrubbed reply is still read as a reply
    recorded = trajectory.read_text()
    assert KEY not in recorded and ORG_VALUE not in recorded and KEY_PLACEHOLDER in recorded


def test_from_the_sandbox_the_echoed_key_never_arrives_on_both_providers(
        isolating_provider: Provider, tmp_path: Path, org_header: dict[str, str]):  # noqa: F811
    with EchoingUpstream() as upstream, ModelGateway(upstream.base_url, KEY, tmp_path / "t.jsonl",
                                                     headers=org_header) as gateway:

        async def body(session):
            host, port = (await session.expose_host_socket(gateway.socket_path)).split(":")
            request = raw_request("POST", "/chat/completions", gateway.token, CHAT).decode()
            return await isolating_provider.connect(session, host, int(port), request)

        reply = isolating_provider.run(body, mode="none")
    assert reply.stdout.startswith("HTTP/"), reply
    status, parsed, _ = parse_reply(reply.stdout)
    assert status == 200 and parsed is not None and parsed["echo"]["Authorization"] == f"Bearer {KEY_PLACEHOLDER}"
    assert KEY not in reply.stdout and ORG_VALUE not in reply.stdout


# a JSON value nested this deep: past what Python's json module can read or write (its recursion limit)
DEPTH = 100_000


class DeepUpstream(LoopbackUpstream):
    """An upstream whose reply holds a value nested ``DEPTH`` levels deep beside an ordinary answer."""

    def __enter__(self) -> "DeepUpstream":
        class Handler(QuietHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                data = (b'{"choices": [{"message": {"role": "assistant", "content": "ok"}}], '
                        b'"usage": {"prompt_tokens": 3, "completion_tokens": 1}, "deep": '
                        + b"[" * DEPTH + b"]" * DEPTH + b"}")
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return self.serve(Handler)


def test_a_request_and_a_reply_nested_past_the_json_module_are_passed_and_recorded_as_text(tmp_path: Path):
    """An agent's request and a model's reply that no json call can read or write whole (a value 100,000 levels
    deep) go through the gateway as they are, the call counts, and its record keeps them as text."""
    trajectory = tmp_path / "trajectory.jsonl"
    deep_request = CHAT[:-1] + ', "deep": ' + "[" * DEPTH + "]" * DEPTH + "}"
    with DeepUpstream() as upstream, ModelGateway(upstream.base_url, KEY, trajectory) as gateway:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(30)
            conn.connect(str(gateway.socket_path))
            conn.sendall(raw_request("POST", "/chat/completions", gateway.token, deep_request))
            conn.shutdown(socket.SHUT_WR)
            reply = b"".join(iter(lambda: conn.recv(1 << 20), b""))
        usage = gateway.usage()
    head, _, body = reply.partition(b"\r\n\r\n")
    assert head.split(b" ")[1] == b"200" and body.endswith(b"]" * 1000 + b"}"), head
    assert usage["calls"] == 1
    (record,) = [json.loads(line) for line in trajectory.read_text().splitlines()]
    assert record["status"] == 200
    for side in ("request", "reply"):
        assert isinstance(record[side], str) and '"deep": [[[' in record[side], side


def test_a_body_json_reads_but_cannot_write_back_in_its_record_is_kept_as_text():
    """A value json read near its recursion limit may be one it cannot write inside a record (the record's own
    levels come on top): the line keeps that body's text, and the rest of the record as it was."""
    deep: list = []
    for _ in range(DEPTH):  # what json.loads made of a body just within its limit, and deeper: json.dumps fails
        deep = [deep]
    data = b'{"deep": [[["..."]]]}'
    record = {"status": 200, "request": {"model": "m"}, "reply": {"deep": deep}}
    line = json.loads(_record_line(record, (b'{"model": "m"}', "application/json", data, "application/json")))
    assert line["status"] == 200 and line["reply"] == data.decode() and line["request"] == '{"model": "m"}'
