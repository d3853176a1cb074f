"""ScriptedEndpoint speaks each protocol a Model may speak, from one chat-completions script.

The official SDKs talk to it on 127.0.0.1: what they read is the scripted chat
reply translated (usage in the protocol's shape, events when streamed), what it
records is the request as sent and the chat request the script saw; a
chat-only endpoint answers 404 to the other protocols' paths.
"""

from __future__ import annotations

from typing import Any

import anthropic
import openai
import pytest

from agentcompass.testing.endpoint import (
    ALL_PROTOCOLS, ScriptedEndpoint, completion, rate_limited, tool_call_reply,
)

USER: Any = [{"role": "user", "content": "list the files"}]


def test_messages_and_responses_answered_from_the_chat_script():
    script = [completion("hi"), tool_call_reply("bash", {"command": "ls"}), completion("there"),
              tool_call_reply("bash", {"command": "pwd"})]
    with ScriptedEndpoint(script=script, protocols=ALL_PROTOCOLS) as endpoint:
        messages = anthropic.Anthropic(base_url=endpoint.base_url.removesuffix("/v1"), api_key="k", max_retries=0)
        plain = messages.messages.create(model="m", max_tokens=8, system="brief", messages=USER)
        with messages.messages.stream(model="m", max_tokens=8, messages=USER) as stream:
            streamed = stream.get_final_message()
        responses = openai.OpenAI(base_url=endpoint.base_url, api_key="k", max_retries=0)
        answer = responses.responses.create(model="m", input="hello")
        with responses.responses.stream(model="m", input="hello") as events:
            call = events.get_final_response()
        counted = messages.messages.count_tokens(model="m", messages=USER)
    assert plain.content[0].type == "text" and plain.content[0].text == "hi"
    assert (plain.usage.input_tokens, plain.usage.output_tokens) == (10, 2)
    assert streamed.content[0].type == "tool_use" and streamed.content[0].input == {"command": "ls"}
    assert answer.output_text == "there" and answer.usage is not None
    assert (answer.usage.input_tokens, answer.usage.output_tokens, answer.usage.total_tokens) == (10, 2, 12)
    [item] = call.output
    assert item.type == "function_call" and (item.name, item.arguments) == ("bash", '{"command": "pwd"}')
    assert counted.input_tokens > 0
    assert [(r.path, r.protocol) for r in endpoint.requests] == [
        ("/v1/messages", "anthropic")] * 2 + [("/v1/responses", "openai_responses")] * 2 + [
        ("/v1/messages/count_tokens", "anthropic")]
    assert endpoint.requests[0].chat["messages"] == [{"role": "system", "content": "brief"}, *USER]
    assert endpoint.requests[0].body["system"] == "brief"
    assert endpoint.requests[2].chat["messages"] == [{"role": "user", "content": "hello"}]
    assert endpoint.requests[4].chat is None  # estimated, no step of the script


def test_a_chat_only_endpoint_refuses_the_other_protocols_and_plays_no_step():
    with ScriptedEndpoint(script=[completion("only chat")]) as endpoint:
        sdk = openai.OpenAI(base_url=endpoint.base_url, api_key="k", max_retries=0)
        with pytest.raises(openai.NotFoundError):
            sdk.responses.create(model="m", input="hello")
        with pytest.raises(anthropic.NotFoundError):
            anthropic.Anthropic(base_url=endpoint.base_url.removesuffix("/v1"), api_key="k",
                                max_retries=0).messages.create(model="m", max_tokens=8, messages=USER)
        chat = sdk.chat.completions.create(model="m", messages=USER)
    assert chat.choices[0].message.content == "only chat"
    assert [r.protocol for r in endpoint.requests] == ["openai_responses", "anthropic", "openai_chat"]


def test_a_scripted_error_is_in_the_protocols_shape():
    with ScriptedEndpoint(script=[rate_limited(), rate_limited()], protocols=ALL_PROTOCOLS) as endpoint:
        with pytest.raises(anthropic.RateLimitError) as limited:
            anthropic.Anthropic(base_url=endpoint.base_url.removesuffix("/v1"), api_key="k",
                                max_retries=0).messages.create(model="m", max_tokens=8, messages=USER)
        with pytest.raises(openai.RateLimitError) as too_many:
            openai.OpenAI(base_url=endpoint.base_url, api_key="k", max_retries=0).responses.create(
                model="m", input="hello")
    assert limited.value.body == {"type": "error", "error": {"type": "rate_limit_error",
                                                             "message": "rate limited (scripted)"}}
    assert too_many.value.body["message"] == "rate limited (scripted)"  # type: ignore[index]


def test_an_unknown_protocol_is_refused():
    with pytest.raises(ValueError, match="not gemini"):
        ScriptedEndpoint(protocols=("gemini",))


def test_a_streamed_chat_call_is_answered_in_chunks_with_usage_when_asked():
    """The openai SDK reassembles the chunks into the scripted reply: the text, the tool call, the usage."""
    script = [completion("hi"), tool_call_reply("bash", {"command": "ls"}), completion("plain")]
    with ScriptedEndpoint(script=script) as endpoint:
        client = openai.OpenAI(base_url=endpoint.base_url, api_key="k", max_retries=0)
        with client.chat.completions.stream(model="m", messages=USER, stream_options={"include_usage": True}) as s:
            text = s.get_final_completion()
        with client.chat.completions.stream(model="m", messages=USER) as s:
            call = s.get_final_completion()
        plain = client.chat.completions.create(model="m", messages=USER)
    assert text.choices[0].message.content == "hi" and text.choices[0].finish_reason == "stop"
    assert text.usage is not None and (text.usage.prompt_tokens, text.usage.completion_tokens) == (10, 2)
    tool = call.choices[0].message.tool_calls[0]
    assert (tool.function.name, tool.function.arguments, call.choices[0].finish_reason) == ("bash", '{"command": "ls"}',
                                                                                            "tool_calls")
    assert call.usage is None, "no usage chunk unless stream_options.include_usage asks for one"
    assert plain.choices[0].message.content == "plain" and plain.usage.total_tokens == 12


def test_the_model_list_is_answered_in_both_shapes_without_a_step():
    with ScriptedEndpoint(script=[completion("kept")], protocols=ALL_PROTOCOLS) as endpoint:
        listed = [m.id for m in openai.OpenAI(base_url=endpoint.base_url, api_key="k", max_retries=0).models.list()]
        one = anthropic.Anthropic(base_url=endpoint.base_url.removesuffix("/v1"), api_key="k",
                                  max_retries=0).models.retrieve("claude-x")
        chat = openai.OpenAI(base_url=endpoint.base_url, api_key="k", max_retries=0).chat.completions.create(
            model="m", messages=USER)
    assert listed == ["scripted"] and one.id == "claude-x"
    assert chat.choices[0].message.content == "kept"
    assert [r.path for r in endpoint.requests] == ["/v1/models", "/v1/models/claude-x", "/v1/chat/completions"]
