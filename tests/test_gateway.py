"""The model gateway over real HTTP: the token check, the key swap, the record of every call.

A host_process session exposes the gateway's Unix socket through its relay,
and the test speaks HTTP to the relay's loopback address.
"""

from __future__ import annotations

import asyncio
import http.client
import json
from pathlib import Path

from agentcompass.environments import HostProcessEnvironment
from agentcompass.gateway import ModelGateway
from agentcompass.runtime.model_client import ATTEMPT_USAGE, Usage
from agentcompass.runtime.models import EnvironmentSpec, NetworkPolicy
from agentcompass.testing.endpoint import ScriptedEndpoint, completion, rate_limited
from adversarial.test_gateway import RecordingUpstream

REAL_KEY = "sk-real-key-of-the-test"
CHAT = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]})


def through_relay(gateway: ModelGateway, calls) -> list[tuple[int, dict | None]]:
    """Expose ``gateway`` from a public host_process session; send each (method, path, headers, body)."""

    async def main():
        session = await HostProcessEnvironment().open(EnvironmentSpec(id="host_process"), NetworkPolicy(), "gwtest")
        try:
            host, port = (await session.expose_host_socket(gateway.socket_path)).split(":")
            return [await asyncio.to_thread(send, host, int(port), *call) for call in calls]
        finally:
            await session.close()

    return asyncio.run(main())


def send(host: str, port: int, method: str, path: str, headers: dict, body: str | None):
    connection = http.client.HTTPConnection(host, port, timeout=10)
    try:
        connection.request(method, path, body=body, headers={"Content-Type": "application/json", **headers})
        reply = connection.getresponse()
        data = reply.read()
        return reply.status, json.loads(data) if data else None
    finally:
        connection.close()


def records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_missing_or_wrong_token_is_refused_and_nothing_is_forwarded(tmp_path: Path):
    trajectory = tmp_path / "trajectory.jsonl"
    with ScriptedEndpoint() as endpoint, ModelGateway(endpoint.base_url, REAL_KEY, trajectory) as gateway:
        replies = through_relay(gateway, [
            ("POST", "/chat/completions", {}, CHAT),
            ("POST", "/chat/completions", {"Authorization": "Bearer not-the-token"}, CHAT),
            ("POST", "/chat/completions", {"Authorization": f"Basic {gateway.token}"}, CHAT),
            ("POST", "/chat/completions", {"Authorization": f"Bearer {REAL_KEY}"}, CHAT),
            ("GET", "/models", {}, None),
        ])
        usage = gateway.usage()
    assert [status for status, _ in replies] == [401] * 5
    assert all(body["error"]["code"] == "invalid_api_key" for _, body in replies)
    assert endpoint.requests == []
    assert usage["calls"] == 0
    assert [r["status"] for r in records(trajectory)] == [401] * 5
    assert all("request" not in r for r in records(trajectory)), "a refused request's body is not recorded"


def test_the_token_is_swapped_for_the_real_key_and_every_call_is_recorded(tmp_path: Path):
    trajectory = tmp_path / "trajectory.jsonl"
    answers = iter([(200, completion("first")), (429, {"error": {"message": "slow down"}}), (200, completion("third"))])
    with ScriptedEndpoint(lambda body: next(answers)) as endpoint, \
            ModelGateway(endpoint.base_url, REAL_KEY, trajectory, rate_limit_patience=0) as gateway:
        token = {"Authorization": f"Bearer {gateway.token}"}
        replies = through_relay(gateway, [("POST", "/chat/completions", token, CHAT)] * 3)
        usage = gateway.usage()
    assert [status for status, _ in replies] == [200, 429, 200]
    assert replies[1][1] == {"error": {"message": "slow down"}}, "the Model's error reaches the agent as it was"
    assert [r.path for r in endpoint.requests] == ["/v1/chat/completions"] * 3
    assert {r.headers["Authorization"] for r in endpoint.requests} == {f"Bearer {REAL_KEY}"}
    assert endpoint.requests[0].body == json.loads(CHAT)
    assert usage["calls"] == 3 and usage["prompt_tokens"] == 20 and usage["completion_tokens"] == 4
    assert usage["latency_seconds"] > 0
    lines = records(trajectory)
    assert [(r["path"], r["status"]) for r in lines] == [("/chat/completions", s) for s in (200, 429, 200)]
    assert lines[0]["request"] == json.loads(CHAT)
    assert lines[2]["reply"]["choices"][0]["message"]["content"] == "third"
    text = trajectory.read_text()
    assert gateway.token not in text and REAL_KEY not in text


def test_a_rate_limited_call_is_tried_again_by_the_gateway_and_the_agent_sees_the_answer(tmp_path: Path):
    trajectory = tmp_path / "trajectory.jsonl"
    answers = iter([rate_limited(retry_after=0.5), (503, {"error": {"message": "busy"}}), (200, completion("late"))])
    spent = Usage()
    ATTEMPT_USAGE.set(spent)
    try:
        with ScriptedEndpoint(lambda body: next(answers)) as endpoint, \
                ModelGateway(endpoint.base_url, REAL_KEY, trajectory) as gateway:
            replies = through_relay(gateway, [("POST", "/chat/completions", {"Authorization": f"Bearer {gateway.token}"},
                                               CHAT)])
            usage = gateway.usage()
    finally:
        ATTEMPT_USAGE.set(None)
    assert [(status, body["choices"][0]["message"]["content"]) for status, body in replies] == [(200, "late")]
    assert len(endpoint.requests) == 3 and usage["calls"] == 3 and usage["rate_limited"] == 2
    assert spent.calls == 3 and spent.rate_limited == 2
    lines = records(trajectory)
    assert [(r["status"], r.get("rate_limited")) for r in lines] == [(429, True), (503, True), (200, None)]
    assert lines[0]["reply"]["error"]["message"] == "rate limited (scripted)"


def test_the_models_list_is_forwarded_but_is_not_a_model_call(tmp_path: Path):
    trajectory = tmp_path / "trajectory.jsonl"
    with RecordingUpstream() as server, ModelGateway(server.base_url, REAL_KEY, trajectory) as gateway:
        [(status, body)] = through_relay(gateway, [("GET", "/models", {"Authorization": f"Bearer {gateway.token}"}, None)])
        usage = gateway.usage()
    assert status == 200 and body["data"][0]["id"] == "m"
    assert server.seen == [("GET", "/v1/models", f"Bearer {REAL_KEY}", b"")]
    assert usage["calls"] == 0
    assert records(trajectory)[0]["reply"]["data"][0]["id"] == "m"


def test_an_unreachable_model_is_a_502_the_agent_can_read(tmp_path: Path):
    with ScriptedEndpoint() as endpoint:
        base_url = endpoint.base_url  # closed again: nothing listens there
    trajectory = tmp_path / "trajectory.jsonl"
    with ModelGateway(base_url, None, trajectory) as gateway:
        [(status, body)] = through_relay(gateway, [("POST", "/chat/completions", {"Authorization": f"Bearer {gateway.token}"}, CHAT)])
        usage = gateway.usage()
    assert status == 502 and "could not be reached" in body["error"]["message"]
    assert usage["calls"] == 1
    [line] = records(trajectory)
    assert line["status"] == 502 and "could not be reached" in line["error"]


def test_the_gateway_leaves_nothing_behind(tmp_path: Path):
    with ScriptedEndpoint() as endpoint:
        gateway = ModelGateway(endpoint.base_url, REAL_KEY, tmp_path / "trajectory.jsonl")
        with gateway:
            assert gateway.socket_path.exists()
    assert not gateway.socket_path.parent.exists()


def test_token_counts_are_whole_numbers_and_an_unreadable_one_is_noted(tmp_path: Path):
    trajectory = tmp_path / "trajectory.jsonl"
    answers = iter([(200, {**completion("a"), "usage": {"prompt_tokens": 10.0, "completion_tokens": 2.6}}),
                    (200, {**completion("b"), "usage": {"prompt_tokens": "lots", "completion_tokens": 1}})])
    with ScriptedEndpoint(lambda body: next(answers)) as endpoint, \
            ModelGateway(endpoint.base_url, REAL_KEY, trajectory) as gateway:
        token = {"Authorization": f"Bearer {gateway.token}"}
        through_relay(gateway, [("POST", "/chat/completions", token, CHAT)] * 2)
        usage = gateway.usage()
    assert {k: usage[k] for k in ("prompt_tokens", "completion_tokens", "total_tokens")} == {
        "prompt_tokens": 10, "completion_tokens": 4, "total_tokens": 14}
    assert all(type(usage[k]) is int for k in ("calls", "prompt_tokens", "completion_tokens", "total_tokens"))
    first, second = records(trajectory)
    assert "usage_unreadable" not in first and "prompt_tokens is not a number" in second["usage_unreadable"]


def test_the_calls_the_gateway_forwards_count_in_the_attempts_usage_as_they_are_made(tmp_path: Path):
    # the run stage's count: what the attempt spent, even when the harness never reads the gateway's own
    spent = Usage()
    held = ATTEMPT_USAGE.set(spent)
    try:
        with ScriptedEndpoint() as endpoint, ModelGateway(endpoint.base_url, REAL_KEY, tmp_path / "t.jsonl") as gateway:
            sent = ("POST", "/chat/completions", {"Authorization": f"Bearer {gateway.token}"}, CHAT)
            assert [status for status, _ in through_relay(gateway, [sent, sent])] == [200, 200]
            refused = ("POST", "/chat/completions", {}, CHAT)  # no token: nothing forwarded, nothing spent
            assert [status for status, _ in through_relay(gateway, [refused])] == [401]
    finally:
        ATTEMPT_USAGE.reset(held)
    assert (spent.calls, spent.prompt_tokens, spent.completion_tokens) == (2, 20, 4)
    assert spent.latency_seconds > 0
