"""The gateway speaks OpenAI's Responses API to an agent (Codex's): translated for a chat Model, passed through
for a Responses Model.

A real ModelGateway in front of a ScriptedEndpoint, and OpenAI's own SDK as the
agent, over the gateway's Unix socket. Against a chat-only endpoint the
endpoint answers /responses 404, so a reply shows the gateway translated: one
chat-completions call each, never streamed; against an ``openai_responses``
endpoint the call passes as it is. Usage is counted from either shape.
"""

from __future__ import annotations

import json
from typing import Any

import httpx2
import openai
import pytest

from agentcompass.gateway import ModelGateway, model_protocols_for
from agentcompass.testing.endpoint import completion, malformed, rate_limited, tool_call, tool_calls_reply
from adversarial.test_gateway import over_socket, raw_request
from conftest import GATEWAY_KEY as REAL_KEY
from test_gateway_anthropic import MODEL, records

TOOLS: Any = [{"type": "function", "name": "exec_command", "description": "run a command",
               "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}}},
              {"type": "custom", "name": "apply_patch", "description": "patch files"}]


def client(gateway: ModelGateway, token: str | None = None) -> openai.OpenAI:
    """OpenAI's SDK speaking to ``gateway``'s Unix socket with the gateway's token (or ``token``)."""
    http = httpx2.Client(transport=httpx2.HTTPTransport(uds=str(gateway.socket_path)))
    return openai.OpenAI(base_url="http://gateway", http_client=http, max_retries=0, timeout=10,
                         api_key=token or gateway.token)




def test_a_text_reply_translated_streamed_and_not(through):
    endpoint, gateway, trajectory = through([completion("Paris."), completion("Paris, again.")])
    sdk = client(gateway)
    plain = sdk.responses.create(model=MODEL, instructions="brief", input="capital of France?")
    with sdk.responses.stream(model=MODEL, input=[{"role": "user", "content": "again"}]) as stream:
        texts = [event.delta for event in stream if event.type == "response.output_text.delta"]
        streamed = stream.get_final_response()
    assert plain.output_text == "Paris." and plain.status == "completed"
    assert texts == ["Paris, again."] and streamed.output_text == "Paris, again."
    assert streamed.usage is not None and (streamed.usage.input_tokens, streamed.usage.output_tokens) == (10, 2)
    assert [r.path for r in endpoint.requests] == ["/v1/chat/completions"] * 2
    assert {r.headers["Authorization"] for r in endpoint.requests} == {f"Bearer {REAL_KEY}"}
    assert endpoint.requests[0].body == {"model": MODEL, "stream": False, "messages": [
        {"role": "system", "content": "brief"}, {"role": "user", "content": "capital of France?"}]}
    assert endpoint.requests[1].body["stream"] is False
    assert gateway.usage() == {**gateway.usage(), "calls": 2, "prompt_tokens": 20, "completion_tokens": 4,
                               "total_tokens": 24}
    assert [(r["path"], r["translated_from"], r["status"]) for r in records(trajectory)] == [
        ("/chat/completions", "/responses", 200)] * 2


def test_tool_calls_translated_both_ways(through):
    reply = tool_calls_reply([tool_call("exec_command", {"cmd": "ls"}, "call_1"),
                              tool_call("apply_patch", {"input": "*** Begin Patch"}, "call_2")])
    endpoint, gateway, _ = through([reply, completion("Done.")])
    sdk = client(gateway)
    with sdk.responses.stream(model=MODEL, input="fix it", tools=TOOLS) as stream:
        first = stream.get_final_response()
    function, custom = first.output
    assert function.type == "function_call" and (function.call_id, function.name) == ("call_1", "exec_command")
    assert json.loads(function.arguments) == {"cmd": "ls"}
    assert custom.type == "custom_tool_call" and (custom.name, custom.input) == ("apply_patch", "*** Begin Patch")
    follow: Any = ["fix it", *[item.model_dump(exclude_none=True) for item in first.output],
                   {"type": "function_call_output", "call_id": "call_1", "output": "a b"},
                   {"type": "custom_tool_call_output", "call_id": "call_2", "output": "patched"}]
    follow[0] = {"role": "user", "content": "fix it"}
    answer = sdk.responses.create(model=MODEL, input=follow, tools=TOOLS)
    assert answer.output_text == "Done."
    sent = endpoint.requests[0].body
    assert [t["function"]["name"] for t in sent["tools"]] == ["exec_command", "apply_patch"]
    assert [m["role"] for m in endpoint.requests[1].body["messages"]] == ["user", "assistant", "tool", "tool"]
    assert gateway.usage()["calls"] == 2


def test_errors_are_in_openais_shape_and_an_untranslatable_request_reaches_nothing(through):
    endpoint, gateway, trajectory = through([rate_limited(retry_after=0), malformed()], rate_limit_patience=0)
    with pytest.raises(openai.AuthenticationError):
        client(gateway, "not-the-token").responses.create(model=MODEL, input="hi")
    sdk = client(gateway)
    with pytest.raises(openai.BadRequestError) as stateful:
        sdk.responses.create(model=MODEL, input="hi", previous_response_id="resp_1")
    assert "previous_response_id" in stateful.value.message
    assert endpoint.requests == []
    with pytest.raises(openai.RateLimitError) as limited:
        sdk.responses.create(model=MODEL, input="hi")
    assert limited.value.body["message"] == "rate limited (scripted)"  # type: ignore[index]
    with pytest.raises(openai.APIStatusError) as unreadable:
        sdk.responses.create(model=MODEL, input="hi")
    assert unreadable.value.status_code == 502 and "cannot be translated" in unreadable.value.message
    assert len(endpoint.requests) == 2 and gateway.usage()["calls"] == 2
    assert [r["status"] for r in records(trajectory)] == [401, 400, 429, 200]


def test_a_responses_model_is_passed_through_and_its_usage_counted(through):
    endpoint, gateway, trajectory = through([completion("Paris."), tool_calls_reply([tool_call("exec_command", {})])],
                                            "openai_responses")
    sdk = client(gateway)
    plain = sdk.responses.create(model=MODEL, input="capital of France?")
    with sdk.responses.stream(model=MODEL, input="list", tools=TOOLS) as stream:
        streamed = stream.get_final_response()
    assert plain.output_text == "Paris." and streamed.output[0].type == "function_call"
    assert [(r.path, r.protocol) for r in endpoint.requests] == [("/v1/responses", "openai_responses")] * 2
    assert endpoint.requests[0].body == {"model": MODEL, "input": "capital of France?"}  # as the agent sent it
    assert endpoint.requests[1].body["stream"] is True
    assert {r.headers["Authorization"] for r in endpoint.requests} == {f"Bearer {REAL_KEY}"}
    assert gateway.usage() == {**gateway.usage(), "calls": 2, "prompt_tokens": 20, "completion_tokens": 4}
    assert [(r["path"], r["status"], "translated_from" in r) for r in records(trajectory)] == [
        ("/responses", 200, False)] * 2


def test_chat_completions_to_a_responses_model_are_refused_there_is_no_translation_that_way(through):
    endpoint, gateway, _ = through([], "openai_responses")
    with pytest.raises(openai.NotFoundError):
        client(gateway).chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}])
    status, body, _ = over_socket(gateway, raw_request("POST", "/v1/messages", gateway.token, "{}"))
    assert status == 404 and body is not None and "is not a model call" in body["error"]["message"]
    assert endpoint.requests == []


def test_which_models_serve_an_agent_of_each_protocol():
    assert model_protocols_for("openai_responses") == ("openai_responses", "openai_chat")
    assert model_protocols_for("anthropic") == ("anthropic", "openai_chat")
    assert model_protocols_for("openai_chat") == ("openai_chat",)
