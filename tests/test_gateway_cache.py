"""The call cache in the model gateway and the Model client, over real HTTP.

A real ModelGateway (its Unix socket, spoken to with http.client) in front of a ScriptedEndpoint, with
``callcache.ATTEMPT_CALLS`` set to a view of a store in the test's folder as the run stage sets it: a
stream passed through is kept whole and replayed as it came; an Anthropic stream translated through a
chat call is cached as that chat call and made again from it; a replay's miss is an error in the agent's
protocol, sent nowhere. The Model client: a hit sends nothing, a replay's miss is a ModelCallError, refresh
always calls.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import socket
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest

from agentcompass import callcache
from agentcompass.gateway import ModelGateway
from agentcompass.runtime.model_client import ATTEMPT_USAGE, ModelCallConfig, ModelCallError, ModelClient, Usage
from agentcompass.runtime.models import ModelSpec
from agentcompass.testing.endpoint import Reply, ScriptedEndpoint, completion, malformed
from conftest import GATEWAY_KEY

MODEL = "qwen-test"
USER = [{"role": "user", "content": "the capital of France?"}]
CHAT_STREAM = {"model": MODEL, "messages": USER, "stream": True, "stream_options": {"include_usage": True}}
MESSAGES_STREAM = {"model": MODEL, "max_tokens": 32, "messages": USER, "stream": True,
                   "metadata": {"user_id": "session-1"}}


class UnixConnection(http.client.HTTPConnection):
    """HTTP over the gateway's Unix socket (chunked replies read as http.client reads them)."""

    def __init__(self, path: Path) -> None:
        super().__init__("gateway", timeout=10)
        self._socket_path = str(path)

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(10)
        self.sock.connect(self._socket_path)


def post(gateway: ModelGateway, path: str, body: dict) -> tuple[int, str, bytes]:
    """A POST with the gateway's token; the reply's status, content type and whole body."""
    connection = UnixConnection(gateway.socket_path)
    try:
        connection.request("POST", path, body=json.dumps(body),
                           headers={"Content-Type": "application/json", "Authorization": f"Bearer {gateway.token}"})
        reply = connection.getresponse()
        return reply.status, reply.getheader("Content-Type") or "", reply.read()
    finally:
        connection.close()


def events(stream: bytes) -> list:
    """The data of each server-sent event."""
    found = []
    for line in stream.decode().splitlines():
        if line.startswith("data:"):
            data = line[5:].strip()
            found.append(data if data == "[DONE]" else json.loads(data))
    return found


def records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@contextmanager
def attempt(store: callcache.CallStore, mode: str, endpoint: ScriptedEndpoint, trajectory: Path,
            ) -> Iterator[tuple[ModelGateway, Usage]]:
    """One try of attempt 1's run stage with the cache in ``mode``: its gateway, and the attempt's usage."""
    usage = Usage()
    calls = ATTEMPT_USAGE.set(usage), callcache.ATTEMPT_CALLS.set(callcache.AttemptCalls(store, mode, 1, "run"))
    try:
        with ModelGateway(endpoint.base_url, GATEWAY_KEY, trajectory) as gateway:
            yield gateway, usage
    finally:
        callcache.ATTEMPT_CALLS.reset(calls[1])
        ATTEMPT_USAGE.reset(calls[0])


@pytest.fixture
def store(tmp_path: Path) -> callcache.CallStore:
    return callcache.CallStore(tmp_path / "cache")


def test_a_chat_stream_passed_through_is_kept_and_replayed_as_the_same_stream(store, tmp_path: Path):
    with ScriptedEndpoint(script=[completion("Paris."), completion("Lyon?")]) as endpoint:
        with attempt(store, "on", endpoint, tmp_path / "first.jsonl") as (gateway, _):
            first = post(gateway, "/chat/completions", CHAT_STREAM)
            sent = gateway.usage()
        with attempt(store, "on", endpoint, tmp_path / "again.jsonl") as (gateway, usage):
            again = post(gateway, "/chat/completions", CHAT_STREAM)
            cached = gateway.usage()
        with attempt(store, "replay", endpoint, tmp_path / "replay.jsonl") as (gateway, _):
            replayed = post(gateway, "/chat/completions", CHAT_STREAM)
    assert len(endpoint.requests) == 1 and endpoint.requests[0].body["stream"] is True
    status, content_type, body = first
    assert status == 200 and content_type.startswith("text/event-stream")
    texts = [e["choices"][0]["delta"].get("content") for e in events(body)[:-1] if e["choices"]]
    assert "Paris." in texts and events(body)[-1] == "[DONE]"
    assert again == replayed == first, "the same status, content type and bytes: the same events"
    assert (sent["calls"], sent["prompt_tokens"], sent["completion_tokens"]) == (1, 10, 2)
    assert "cached_calls" not in sent
    assert cached["calls"] == 0 and (cached["cached_calls"], cached["cached_prompt_tokens"]) == (1, 10)
    assert usage.as_dict()["calls"] == 0 and usage.as_dict()["cached_calls"] == 1
    [sent_line] = records(tmp_path / "first.jsonl")
    [hit_line] = records(tmp_path / "again.jsonl")
    assert sent_line["cache"]["served"] == "sent" and hit_line["cache"]["served"] == "hit"
    assert hit_line["cache"]["key"] == sent_line["cache"]["key"] and hit_line["status"] == 200
    assert hit_line["reply"] == sent_line["reply"], "the trajectory holds the replayed events"


def test_a_translated_anthropic_stream_is_made_again_from_its_cached_chat_call(store, tmp_path: Path):
    with ScriptedEndpoint(script=[completion("Paris.")]) as endpoint:
        with attempt(store, "on", endpoint, tmp_path / "first.jsonl") as (gateway, _):
            first = post(gateway, "/v1/messages", MESSAGES_STREAM)
        # another session id (Anthropic's metadata): the same call
        with attempt(store, "replay", endpoint, tmp_path / "again.jsonl") as (gateway, _):
            again = post(gateway, "/v1/messages", {**MESSAGES_STREAM, "metadata": {"user_id": "session-2"}})
            cached = gateway.usage()
    [chat] = endpoint.requests
    assert chat.path == "/v1/chat/completions" and chat.body["stream"] is False
    assert first[0] == again[0] == 200 and first[1].startswith("text/event-stream") and again[1] == first[1]

    def same_but_the_message_id(stream: bytes) -> list:
        found = events(stream)
        for event in found:
            event.get("message", {}).pop("id", None)  # made anew for each reply
        return found

    assert same_but_the_message_id(again[2]) == same_but_the_message_id(first[2])
    assert [e["type"] for e in events(first[2])][0] == "message_start"
    assert any(e.get("delta", {}).get("text") == "Paris." for e in events(first[2]))
    assert cached["calls"] == 0 and cached["cached_calls"] == 1
    [sent_line], [hit_line] = records(tmp_path / "first.jsonl"), records(tmp_path / "again.jsonl")
    assert (hit_line["path"], hit_line["translated_from"], hit_line["cache"]["served"]) == (
        "/chat/completions", "/v1/messages", "hit")
    assert hit_line["cache"]["key"] == sent_line["cache"]["key"]
    [entry] = [json.loads(p.read_text()) for p, _, _ in store.entries()]
    assert entry["key_path"] == "/chat/completions" and entry["content_type"].startswith("application/json")


@pytest.mark.parametrize("path,body", [("/chat/completions", CHAT_STREAM), ("/v1/messages", MESSAGES_STREAM)])
def test_a_replays_miss_is_a_503_in_the_agents_protocol_and_nothing_is_sent(store, tmp_path: Path, path: str,
                                                                             body: dict):
    trajectory = tmp_path / "t.jsonl"
    with ScriptedEndpoint(script=[completion("never")]) as endpoint:
        with attempt(store, "replay", endpoint, trajectory) as (gateway, usage):
            status, content_type, data = post(gateway, path, body)
            counted = gateway.usage()
    assert endpoint.requests == [] and status == 503 and content_type == "application/json"
    reply = json.loads(data)
    if path == "/v1/messages":
        assert reply["type"] == "error" and "has no entry in the call cache" in reply["error"]["message"]
    else:
        assert reply["error"]["code"] == "cache_miss" and "replay: model call 1 of the run stage" in reply["error"]["message"]
    [line] = records(trajectory)
    assert line["status"] == 503 and line["cache"]["served"] == "miss" and "no entry" in line["error"]
    assert counted["calls"] == 0 and "cached_calls" not in counted and usage.as_dict()["calls"] == 0
    assert list(store.entries()) == []


# --- the Model client --------------------------------------------------------------------------------


def complete(endpoint: ScriptedEndpoint, store: callcache.CallStore, mode: str, question: str = "capital?"):
    """One call of attempt 1's run stage through a fresh client with the cache in ``mode``; the reply (or the
    error) and the client's usage."""
    token = callcache.ATTEMPT_CALLS.set(callcache.AttemptCalls(store, mode, 1, "run"))
    try:
        client = ModelClient(ModelSpec(id="m", base_url=endpoint.base_url), ModelCallConfig(retry_backoff=0))
    finally:
        callcache.ATTEMPT_CALLS.reset(token)

    async def go():
        async with client:
            return await client.complete([{"role": "user", "content": question}], None, turn=1)

    try:
        outcome = asyncio.run(go())
    except ModelCallError as exc:
        outcome = exc
    return outcome, client.usage.as_dict()


def test_the_model_client_answers_a_hit_from_the_cache_and_a_replays_miss_is_an_error(store):
    with ScriptedEndpoint(script=[completion("Paris"), completion("Lyon")]) as endpoint:
        first, sent = complete(endpoint, store, "on")
        hit, cached = complete(endpoint, store, "on")
        replayed, _ = complete(endpoint, store, "replay")
        miss, missed = complete(endpoint, store, "replay", "another question?")
    assert len(endpoint.requests) == 1
    assert first.text == hit.text == replayed.text == "Paris"
    assert sent["calls"] == 1 and "cached_calls" not in sent
    assert cached["calls"] == 0 and (cached["cached_calls"], cached["cached_prompt_tokens"]) == (1, 10)
    assert isinstance(miss, ModelCallError) and missed["calls"] == 0
    assert "replay: model call 1 of the run stage (POST /chat/completions" in str(miss)
    assert "has no entry in the call cache" in str(miss)


def test_refresh_always_calls_and_keeps_the_newest_reply(store):
    with ScriptedEndpoint(script=[completion("Paris"), completion("Paris!"), completion("Paris!!")]) as endpoint:
        answers = [complete(endpoint, store, "refresh")[0].text for _ in range(2)]
        hit, cached = complete(endpoint, store, "on")
        off, _ = complete(endpoint, store, "off")
    assert answers == ["Paris", "Paris!"] and hit.text == "Paris!" and cached["cached_calls"] == 1
    assert off.text == "Paris!!" and len(endpoint.requests) == 3
    assert len(list(store.entries())) == 1


# --- a translated agent's next call, when the Model names no tool call id ---------------------------

NO_ID_CALL = {"type": "function", "function": {"name": "bash", "arguments": json.dumps({"command": "ls"})}}
TOOLS = [{"name": "bash", "description": "run a command",
          "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}}}]


def no_id_reply() -> dict:
    reply = completion("")
    reply["choices"][0].update(finish_reason="tool_calls", message={"role": "assistant", "content": None,
                                                                     "tool_calls": [NO_ID_CALL]})
    return reply


def two_turns(gateway: ModelGateway, path: str) -> list[int]:
    """An agent's two calls: the first's tool call answered in the second (by the id the gateway gave it)."""
    if path == "/v1/messages":
        first = {"model": MODEL, "max_tokens": 64, "tools": TOOLS, "messages": USER}
        status, _, data = post(gateway, path, first)
        [use] = [block for block in json.loads(data)["content"] if block["type"] == "tool_use"]
        follow = {**first, "messages": [*USER, {"role": "assistant", "content": [use]}, {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": use["id"], "content": "a b"}]}]}
    else:
        first = {"model": MODEL, "input": USER, "tools": [{"type": "function", "name": "bash", "parameters": {
            "type": "object", "properties": {"command": {"type": "string"}}}}]}
        status, _, data = post(gateway, path, first)
        [call] = [item for item in json.loads(data)["output"] if item["type"] == "function_call"]
        follow = {**first, "input": [*USER, call, {"type": "function_call_output", "call_id": call["call_id"],
                                                    "output": "a b"}]}
    return [status, post(gateway, path, follow)[0]]


@pytest.mark.parametrize("path", ["/v1/messages", "/responses"])
def test_a_replayed_tool_call_the_model_gave_no_id_is_answered_by_the_same_next_call(store, tmp_path: Path,
                                                                                      path: str):
    with ScriptedEndpoint(script=[no_id_reply(), completion("Two files.")]) as endpoint:
        with attempt(store, "on", endpoint, tmp_path / "first.jsonl") as (gateway, _):
            assert two_turns(gateway, path) == [200, 200]
        with attempt(store, "replay", endpoint, tmp_path / "again.jsonl") as (gateway, _):
            replayed = two_turns(gateway, path)
    assert len(endpoint.requests) == 2
    assert replayed == [200, 200], "the id the gateway made for the call is made again: the next call is the same"
    assert [line["cache"]["served"] for line in records(tmp_path / "again.jsonl")] == ["hit", "hit"]


def test_the_model_client_replays_an_answer_that_is_no_json_object_as_it_came(store):
    with ScriptedEndpoint(script=[malformed(), Reply(200, [1, 2])]) as endpoint:
        first, _ = complete(endpoint, store, "on")
        listed, _ = complete(endpoint, store, "on", "another question?")
        replayed, cached = complete(endpoint, store, "replay")
        replayed_list, _ = complete(endpoint, store, "replay", "another question?")
    assert len(endpoint.requests) == 2 and cached["cached_calls"] == 1
    assert first.malformed is not None and first.text == ""
    assert (replayed.malformed, replayed.text) == (first.malformed, first.text), "the same empty answer"
    assert (replayed_list.malformed, replayed_list.text) == (listed.malformed, listed.text)


def test_a_reply_past_a_limit_is_kept_and_a_replay_withholds_it_the_same_way(store, tmp_path: Path):
    """A call whose reply goes past the attempt's limit is paid and withheld (a 400 the agent sees); its reply
    is kept, so a replay of the attempt (nothing sent) withholds it for the same reason."""
    from agentcompass import spend
    from agentcompass.runtime.models.request import LimitsSpec

    body = {"model": MODEL, "messages": USER}
    statuses = []
    with ScriptedEndpoint(lambda request: completion("Paris")) as endpoint:  # 10 + 2 tokens a call
        for mode in ("on", "replay"):
            limited = spend.AttemptSpend(LimitsSpec(total_tokens=10), None)
            token = spend.ATTEMPT_SPEND.set(limited)
            try:
                with attempt(store, mode, endpoint, tmp_path / f"{mode}.jsonl") as (gateway, _):
                    status, _, data = post(gateway, "/chat/completions", body)
            finally:
                spend.ATTEMPT_SPEND.reset(token)
            statuses.append(status)
            assert b"execution.limits.total_tokens (10) is reached" in data
            assert limited.limit == "total_tokens"
        sent = len(endpoint.requests)
    assert statuses == [400, 400] and sent == 1
