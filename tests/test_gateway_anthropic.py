"""The gateway speaks Anthropic's Messages API to an agent and chat completions to the Model.

A real ModelGateway in front of a ScriptedEndpoint (chat completions only), and
Anthropic's own SDK as the agent, over the gateway's Unix socket: what the SDK
reads, streaming and not, is what Claude Code reads; what the endpoint receives
is the translated chat request with the real key; usage comes from the Model's
replies.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anthropic
import httpx2
import pytest

from agentcompass.gateway import ModelGateway
from agentcompass.runtime.model_client import RECORD_LIMIT
from agentcompass.protocols.anthropic_messages import RAW_ARGUMENTS_KEY
from agentcompass.testing.endpoint import (
    Reply, ScriptedEndpoint, completion, malformed, rate_limited, tool_call, tool_calls_reply,
)
from adversarial.test_gateway import over_socket, raw_request
from conftest import GATEWAY_KEY as REAL_KEY

MODEL = "qwen-test"
TOOLS: Any = [{"name": "bash", "description": "run a command",
               "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}}}]
USER: Any = [{"role": "user", "content": "list the files"}]


def client(gateway: ModelGateway, **auth: str) -> anthropic.Anthropic:
    """Anthropic's SDK speaking to ``gateway``'s Unix socket, with the gateway's token (as a bearer token unless
    ``auth`` says otherwise)."""
    http = httpx2.Client(transport=httpx2.HTTPTransport(uds=str(gateway.socket_path)))
    return anthropic.Anthropic(base_url="http://gateway", http_client=http, max_retries=0, timeout=10,
                               **(auth or {"auth_token": gateway.token}))




def records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_text_reply_streamed_and_not(through):
    endpoint, gateway, trajectory = through([completion("Paris."), completion("Paris, again.")])
    sdk = client(gateway)
    plain = sdk.messages.create(model=MODEL, max_tokens=32, system="brief", messages=USER)
    with sdk.messages.stream(model=MODEL, max_tokens=32, messages=USER) as stream:
        streamed = stream.get_final_message()
    assert plain.content[0].type == "text" and plain.content[0].text == "Paris."
    assert streamed.content[0].type == "text" and streamed.content[0].text == "Paris, again."
    assert plain.stop_reason == streamed.stop_reason == "end_turn"
    assert (streamed.usage.input_tokens, streamed.usage.output_tokens) == (10, 2)
    assert [r.path for r in endpoint.requests] == ["/v1/chat/completions"] * 2
    assert {r.headers["Authorization"] for r in endpoint.requests} == {f"Bearer {REAL_KEY}"}
    first = endpoint.requests[0].body
    assert first == {"model": MODEL, "max_tokens": 32, "stream": False, "messages": [
        {"role": "system", "content": "brief"}, {"role": "user", "content": "list the files"}]}
    assert endpoint.requests[1].body["stream"] is False
    assert gateway.usage()["calls"] == 2 and gateway.usage()["prompt_tokens"] == 20
    assert [(r["path"], r["translated_from"], r["status"]) for r in records(trajectory)] == [
        ("/chat/completions", "/v1/messages", 200)] * 2


def test_claude_codes_beta_calls_with_tool_use_streamed(through):
    reply = tool_calls_reply([tool_call("bash", {"command": "ls"}, "call_1"), tool_call("bash", "{oops", "call_2")],
                             text="Looking.")
    endpoint, gateway, _ = through([reply, completion("Two files.")])
    sdk = client(gateway)
    with sdk.beta.messages.stream(model=MODEL, max_tokens=256, tools=TOOLS, messages=USER,
                                  betas=["interleaved-thinking-2025-05-14"]) as stream:
        message = stream.get_final_message()
    assert [block.type for block in message.content] == ["text", "tool_use", "tool_use"]
    _, first, second = message.content
    assert first.type == "tool_use" and (first.id, first.name, first.input) == ("call_1", "bash", {"command": "ls"})
    assert second.type == "tool_use" and second.input == {RAW_ARGUMENTS_KEY: "{oops"}
    assert message.stop_reason == "tool_use"
    follow: Any = [*USER, {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in message.content]},
                   {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_1", "content": "a b"},
                                                {"type": "tool_result", "tool_use_id": "call_2", "content": "?"}]}]
    answer = sdk.beta.messages.create(model=MODEL, max_tokens=256, tools=TOOLS, messages=follow)
    assert answer.content[0].type == "text" and answer.content[0].text == "Two files."
    assert endpoint.requests[0].body["tools"][0]["function"]["name"] == "bash"
    assert [m["role"] for m in endpoint.requests[1].body["messages"]] == ["user", "assistant", "tool", "tool"]
    assert all("anthropic-beta" not in {k.lower() for k in r.headers} for r in endpoint.requests)


def test_the_paths_claude_code_sends_with_the_beta_query(through):
    # Claude Code's client (Anthropic's TypeScript SDK) adds ?beta=true to its beta calls; the Python SDK does not
    endpoint, gateway, _ = through([completion("ok")])
    body = json.dumps({"model": MODEL, "max_tokens": 8, "messages": USER})
    replies = [over_socket(gateway, raw_request("POST", path, gateway.token, body))
               for path in ("/v1/messages?beta=true", "/v1/messages/count_tokens?beta=true")]
    assert [(status, (reply or {}).get("type")) for status, reply, _ in replies] == [(200, "message"), (200, None)]
    assert replies[1][1] is not None and replies[1][1]["input_tokens"] > 0
    assert [r.path for r in endpoint.requests] == ["/v1/chat/completions"]


def test_count_tokens_is_estimated_by_the_gateway_without_a_model_call(through):
    endpoint, gateway, trajectory = through([])
    sdk = client(gateway)
    counted = sdk.messages.count_tokens(model=MODEL, messages=USER, tools=TOOLS)
    beta = sdk.beta.messages.count_tokens(model=MODEL, messages=USER)
    assert counted.input_tokens > beta.input_tokens > 0
    assert endpoint.requests == [] and gateway.usage()["calls"] == 0
    assert [r["path"] for r in records(trajectory)] == ["/v1/messages/count_tokens"] * 2


def test_the_token_as_an_api_key_passes_and_goes_no_further(through):
    endpoint, gateway, _ = through([completion("ok")])
    message = client(gateway, api_key=gateway.token).messages.create(model=MODEL, max_tokens=8, messages=USER)
    assert message.content[0].type == "text" and message.content[0].text == "ok"
    [sent] = endpoint.requests
    assert sent.headers["Authorization"] == f"Bearer {REAL_KEY}"
    assert gateway.token not in json.dumps(sent.headers)


def test_errors_are_in_anthropics_shape_and_refused_calls_reach_nothing(through):
    endpoint, gateway, _ = through([rate_limited(retry_after=0), malformed()], rate_limit_patience=0)
    with pytest.raises(anthropic.AuthenticationError) as wrong_token:
        client(gateway, auth_token="not-the-token").messages.create(model=MODEL, max_tokens=8, messages=USER)
    assert wrong_token.value.body == {"type": "error", "error": {"type": "authentication_error",
                                                                 "message": "missing or wrong gateway token"}}
    sdk = client(gateway)
    with pytest.raises(anthropic.BadRequestError) as server_tool:
        sdk.messages.create(model=MODEL, max_tokens=8, messages=USER,
                            tools=[{"type": "web_search_20250305", "name": "web_search"}])
    assert "server tool" in server_tool.value.message
    assert endpoint.requests == []
    with pytest.raises(anthropic.RateLimitError) as limited:
        sdk.messages.create(model=MODEL, max_tokens=8, messages=USER)
    assert limited.value.body["error"] == {"type": "rate_limit_error", "message": "rate limited (scripted)"}  # type: ignore[index]
    with pytest.raises(anthropic.APIStatusError) as unreadable:
        sdk.messages.create(model=MODEL, max_tokens=8, messages=USER)
    assert unreadable.value.status_code == 502
    assert "cannot be translated" in unreadable.value.message
    assert len(endpoint.requests) == 2 and gateway.usage()["calls"] == 2


@pytest.mark.parametrize("body", ["{not json", "[" * 200_000, "null", '{"model": "m", "max_tokens": 8, "messages": 5}',
                                  json.dumps({"model": "m", "max_tokens": 8, "messages": [
                                      {"role": "user", "content": [{"type": "document", "source": {}}]}]})])
def test_a_request_that_cannot_be_translated_is_a_400_in_anthropics_shape_and_reaches_nothing(through, body: str):
    endpoint, gateway, trajectory = through([])
    status, reply, _ = over_socket(gateway, raw_request("POST", "/v1/messages", gateway.token, body))
    assert status == 400 and reply is not None and reply["type"] == "error"
    assert reply["error"]["type"] == "invalid_request_error" and "cannot be translated" in reply["error"]["message"]
    assert endpoint.requests == [] and gateway.usage()["calls"] == 0
    assert [r["status"] for r in records(trajectory)] == [400]


@pytest.mark.parametrize(("method", "path", "status"), [
    ("POST", "/v1/messages?beta=false", 400),
    ("POST", "/v1/messages?beta=true&x=1", 400),
    ("POST", "/v1/chat/completions?beta=true", 400),
    ("POST", "/v1/messages/batches", 404),
    ("POST", "/messages", 404),
    ("GET", "/v1/messages", 405),
    ("POST", "/v1/messages/../../admin", 400),
])
def test_only_the_messages_paths_are_added(through, method: str, path: str, status: int):
    endpoint, gateway, _ = through([])
    got, body, _ = over_socket(gateway, raw_request(method, path, gateway.token, json.dumps(
        {"model": MODEL, "max_tokens": 8, "messages": USER})))
    assert got == status and body is not None
    assert endpoint.requests == []


@pytest.mark.parametrize("stream", [False, True])
def test_an_anthropic_model_is_passed_through_with_its_key_as_x_api_key(tmp_path: Path, stream: bool):
    reply = tool_calls_reply([tool_call("bash", {"command": "ls"}, "call_1")], text="Looking.")
    with ScriptedEndpoint(script=[reply, completion("ok")], protocols=("anthropic",)) as endpoint, \
            ModelGateway(endpoint.base_url.removesuffix("/v1"), REAL_KEY, tmp_path / "t.jsonl",
                         protocol="anthropic") as gateway:
        sdk = client(gateway, api_key=gateway.token)
        if stream:
            with sdk.beta.messages.stream(model=MODEL, max_tokens=64, tools=TOOLS, messages=USER,
                                          betas=["interleaved-thinking-2025-05-14"]) as events:
                message = events.get_final_message()
        else:
            message = sdk.messages.create(model=MODEL, max_tokens=64, tools=TOOLS, messages=USER)
        counted = sdk.messages.count_tokens(model=MODEL, messages=USER)
        usage = gateway.usage()
    assert [block.type for block in message.content] == ["text", "tool_use"]
    assert (message.usage.input_tokens, message.usage.output_tokens) == (10, 2) and counted.input_tokens > 0
    sent, count = endpoint.requests
    assert (sent.path, count.path) == ("/v1/messages", "/v1/messages/count_tokens")  # no ?beta=true upstream
    assert sent.body["tools"] == TOOLS and sent.body.get("stream", False) is stream  # as the agent sent it
    headers = {k.lower(): v for k, v in sent.headers.items()}
    assert headers["x-api-key"] == REAL_KEY and "authorization" not in headers
    assert headers["anthropic-version"] and (headers.get("anthropic-beta") == "interleaved-thinking-2025-05-14") is stream
    assert gateway.token not in json.dumps([r.headers for r in endpoint.requests])
    # the count of tokens is a POST too, which an Anthropic endpoint answers with no tokens spent
    assert (usage["calls"], usage["prompt_tokens"], usage["completion_tokens"]) == (2, 10, 2)


def test_chat_completions_to_an_anthropic_model_are_refused_in_anthropics_shape(tmp_path: Path):
    with ScriptedEndpoint(script=[], protocols=("anthropic",)) as endpoint, \
            ModelGateway(endpoint.base_url.removesuffix("/v1"), REAL_KEY, tmp_path / "t.jsonl",
                         protocol="anthropic") as gateway:
        chat = json.dumps({"model": MODEL, "messages": USER})
        replies = [over_socket(gateway, raw_request("POST", path, gateway.token, chat))
                   for path in ("/v1/chat/completions", "/chat/completions", "/responses")]
    assert [(status, body and body["type"]) for status, body, _ in replies] == [(404, "error")] * 3
    assert endpoint.requests == []


def _anthropic_stream(*events: dict) -> bytes:
    return b"".join(b"event: %s\ndata: %s\n\n" % (e["type"].encode(), json.dumps(e).encode()) for e in events)


def test_anthropics_usage_is_counted_with_its_cached_input_streamed_and_not(tmp_path: Path):
    cached = {"input_tokens": 5, "cache_creation_input_tokens": 20, "cache_read_input_tokens": 100}
    message = {"id": "msg_1", "type": "message", "role": "assistant", "model": MODEL, "content": [],
               "stop_reason": None, "stop_sequence": None, "usage": {**cached, "output_tokens": 1}}
    stream = _anthropic_stream({"type": "message_start", "message": message},
                               {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 7}},
                               {"type": "message_stop"})
    whole = {**message, "content": [{"type": "text", "text": "hi"}], "usage": {**cached, "output_tokens": 7}}
    script = [Reply(200, stream, {"Content-Type": "text/event-stream"}), whole]
    with ScriptedEndpoint(script=script, protocols=("anthropic",)) as endpoint, \
            ModelGateway(endpoint.base_url.removesuffix("/v1"), REAL_KEY, tmp_path / "t.jsonl",
                         protocol="anthropic") as gateway:
        body = json.dumps({"model": MODEL, "max_tokens": 8, "messages": USER, "stream": True})
        streamed = over_socket(gateway, raw_request("POST", "/v1/messages", gateway.token, body))
        plain = client(gateway).messages.create(model=MODEL, max_tokens=8, messages=USER)
        usage = gateway.usage()
    assert streamed[0] == 200 and plain.usage.cache_read_input_tokens == 100
    assert (usage["calls"], usage["prompt_tokens"], usage["completion_tokens"]) == (2, 250, 14)


def test_the_usage_of_a_stream_too_long_to_record_is_read_from_both_its_ends(tmp_path: Path):
    message = {"id": "msg_1", "type": "message", "role": "assistant", "model": MODEL, "content": [],
               "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": 40, "output_tokens": 1}}
    text = {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "x" * 1000}}
    stream = _anthropic_stream({"type": "message_start", "message": message}, *[text] * 2000,
                               {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 900}})
    assert len(stream) > RECORD_LIMIT
    with ScriptedEndpoint(script=[Reply(200, stream, {"Content-Type": "text/event-stream"})],
                          protocols=("anthropic",)) as endpoint, \
            ModelGateway(endpoint.base_url.removesuffix("/v1"), REAL_KEY, tmp_path / "t.jsonl",
                         protocol="anthropic") as gateway:
        body = json.dumps({"model": MODEL, "max_tokens": 8, "messages": USER, "stream": True})
        status, _, _ = over_socket(gateway, raw_request("POST", "/v1/messages", gateway.token, body))
        usage = gateway.usage()
    assert status == 200 and (usage["prompt_tokens"], usage["completion_tokens"]) == (40, 900)
    assert "agentcompass_cut" in json.dumps(records(tmp_path / "t.jsonl")[0]["reply"])
