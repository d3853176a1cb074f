"""agentcompass.protocols.anthropic_messages: Messages requests to chat completions and the replies back.

The conformance tests serve the translation over real HTTP on 127.0.0.1 and read
it with Anthropic's own Python SDK, streaming and not: what the SDK parses is
what Claude Code's client (the same API, generated from one spec) reads.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import ThreadingHTTPServer
from typing import Any, Iterator

import anthropic
import pytest

from agentcompass.protocols.anthropic_messages import (
    RAW_ARGUMENTS_KEY, TOOL_ERROR_PREFIX, error_body, from_chat, stream_events, to_chat,
)
from agentcompass.testing.endpoint import QuietHandler, completion, send_json, tool_call, tool_calls_reply

MODEL = "qwen-test"
PNG = "iVBORw0KGgo="


def request(**fields: Any) -> dict:
    return {"model": MODEL, "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}], **fields}


# --- requests ------------------------------------------------------------------------------


def test_a_plain_request_carries_its_settings_and_never_streams():
    chat = to_chat(request(system="be brief", temperature=0.2, top_p=0.9, top_k=5, stop_sequences=["END"],
                           stream=True, metadata={"user_id": "u"}, thinking={"type": "enabled", "budget_tokens": 1024},
                           service_tier="auto", context_management={"edits": []}))
    assert chat == {
        "model": MODEL, "max_tokens": 64, "stream": False, "temperature": 0.2, "top_p": 0.9, "top_k": 5,
        "stop": ["END"],
        "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}],
    }


def test_a_system_prompt_of_blocks_is_one_system_message():
    chat = to_chat(request(system=[{"type": "text", "text": "one", "cache_control": {"type": "ephemeral"}},
                                   {"type": "text", "text": "two"}]))
    assert chat["messages"][0] == {"role": "system", "content": "one\n\ntwo"}


def test_a_system_message_among_the_messages_stays_in_its_place():
    # Claude Code 2.1 sends one after the first user turn (the agent types of its Agent tool)
    chat = to_chat(request(messages=[{"role": "user", "content": "hi"}, {"role": "system", "content": "agents: a, b"},
                                     {"role": "system", "content": [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}]}]))
    assert chat["messages"] == [{"role": "user", "content": "hi"}, {"role": "system", "content": "agents: a, b"},
                                {"role": "system", "content": "one\n\ntwo"}]


def test_a_multi_turn_conversation_with_tool_use_and_tool_results():
    chat = to_chat(request(messages=[
        {"role": "user", "content": [{"type": "text", "text": "list files"}]},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "let me look", "signature": "sig"},
            {"type": "text", "text": "Looking."},
            {"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {"command": "ls"}},
            {"type": "tool_use", "id": "toolu_2", "name": "read", "input": {"path": "é.txt"}},
        ]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "a\nb"},
            {"type": "tool_result", "tool_use_id": "toolu_2", "is_error": True,
             "content": [{"type": "text", "text": "no such file"}]},
            {"type": "text", "text": "go on"},
        ]},
    ]))
    assert chat["messages"] == [
        {"role": "user", "content": "list files"},
        {"role": "assistant", "content": "Looking.", "tool_calls": [
            {"id": "toolu_1", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}},
            {"id": "toolu_2", "type": "function", "function": {"name": "read", "arguments": '{"path": "é.txt"}'}},
        ]},
        {"role": "tool", "tool_call_id": "toolu_1", "content": "a\nb"},
        {"role": "tool", "tool_call_id": "toolu_2", "content": TOOL_ERROR_PREFIX + "no such file"},
        {"role": "user", "content": "go on"},
    ]
    assert json.loads(chat["messages"][1]["tool_calls"][1]["function"]["arguments"]) == {"path": "é.txt"}


def test_an_assistant_turn_of_tool_use_alone_has_no_text():
    chat = to_chat(request(messages=[
        {"role": "user", "content": "x"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t"}]},
    ]))
    assert chat["messages"][1] == {"role": "assistant", "content": None, "tool_calls": [
        {"id": "t", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}
    assert chat["messages"][2] == {"role": "tool", "tool_call_id": "t", "content": ""}


def test_images_become_image_url_parts_and_a_tool_results_images_follow_in_a_user_message():
    chat = to_chat(request(messages=[
        {"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
            {"type": "image", "source": {"type": "url", "url": "https://example.invalid/a.png"}},
            {"type": "text", "text": "what is this?"},
        ]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "screenshot", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": [
            {"type": "text", "text": "taken"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": "AAAA"}},
        ]}]},
    ]))
    assert chat["messages"][0] == {"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
        {"type": "image_url", "image_url": {"url": "https://example.invalid/a.png"}},
        {"type": "text", "text": "what is this?"},
    ]}
    assert chat["messages"][2:] == [
        {"role": "tool", "tool_call_id": "t", "content": "taken"},
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,AAAA"}}]},
    ]


TOOLS = [{"name": "bash", "description": "run a command",
          "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}]


@pytest.mark.parametrize(("choice", "expected"), [
    ({"type": "auto"}, {"tool_choice": "auto"}),
    ({"type": "any"}, {"tool_choice": "required"}),
    ({"type": "none"}, {"tool_choice": "none"}),
    ({"type": "tool", "name": "bash"}, {"tool_choice": {"type": "function", "function": {"name": "bash"}}}),
    ({"type": "auto", "disable_parallel_tool_use": True}, {"tool_choice": "auto", "parallel_tool_calls": False}),
    ({"type": "any", "disable_parallel_tool_use": True}, {"tool_choice": "required", "parallel_tool_calls": False}),
])
def test_tools_and_each_tool_choice(choice, expected):
    chat = to_chat(request(tools=TOOLS, tool_choice=choice))
    assert chat["tools"] == [{"type": "function", "function": {
        "name": "bash", "description": "run a command", "parameters": TOOLS[0]["input_schema"]}}]
    assert {k: chat[k] for k in ("tool_choice", "parallel_tool_calls") if k in chat} == expected


@pytest.mark.parametrize(("body", "names"), [
    (None, "JSON object"),
    ([], "JSON object"),
    ({"max_tokens": 5, "messages": [{"role": "user", "content": "x"}]}, "model"),
    (request(max_tokens=None), "max_tokens"),
    (request(max_tokens=0), "max_tokens"),
    (request(max_tokens=True), "max_tokens"),
    (request(max_tokens="64"), "max_tokens"),
    (request(messages=[]), "messages"),
    (request(messages="hi"), "messages"),
    (request(messages=[None]), "messages[0]"),
    (request(messages=[{"role": "tool", "content": "x"}]), "messages[0].role"),
    (request(messages=[{"role": "system", "content": [{"type": "image"}]}]), "messages[0].content[0].type"),
    (request(messages=[{"role": "user"}]), "messages[0].content"),
    (request(messages=[{"role": "user", "content": 5}]), "messages[0].content"),
    (request(messages=[{"role": "user", "content": [5]}]), "messages[0].content[0]"),
    (request(messages=[{"role": "user", "content": [{"type": "text"}]}]), "messages[0].content[0].text"),
    (request(messages=[{"role": "user", "content": [{"type": "text", "text": ["x"]}]}]), "text"),
    (request(messages=[{"role": "user", "content": [{"type": "document", "source": {}}]}]), "document"),
    (request(messages=[{"role": "user", "content": [{"type": "image", "source": "x"}]}]), "source"),
    (request(messages=[{"role": "user", "content": [{"type": "image", "source": {"type": "file", "file_id": "f"}}]}]), "file"),
    (request(messages=[{"role": "user", "content": [{"type": "image", "source": {"type": "base64", "data": 1}}]}]), "base64"),
    (request(messages=[{"role": "user", "content": [{"type": "tool_result"}]}]), "tool_use_id"),
    (request(messages=[{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": 3}]}]), "content"),
    (request(messages=[{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t",
                                                     "content": [{"type": "document"}]}]}]), "document"),
    (request(messages=[{"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": "x"}]}]), "input"),
    (request(messages=[{"role": "assistant", "content": [{"type": "tool_use", "name": "f", "input": {}}]}]), "id"),
    (request(messages=[{"role": "assistant", "content": [{"type": "server_tool_use", "id": "t"}]}]), "server_tool_use"),
    (request(system=5), "system"),
    (request(system=[{"type": "image"}]), "system[0]"),
    (request(temperature="hot"), "temperature"),
    (request(top_p=True), "top_p"),
    (request(stop_sequences="END"), "stop_sequences"),
    (request(stop_sequences=[1]), "stop_sequences"),
    (request(tools={"name": "x"}), "tools"),
    (request(tools=[None]), "tools[0]"),
    (request(tools=[{"name": "x"}]), "input_schema"),
    (request(tools=[{"name": "", "input_schema": {}}]), "name"),
    (request(tools=[{"name": "x", "input_schema": {}, "description": 3}]), "description"),
    (request(tools=[{"type": "web_search_20250305", "name": "web_search"}]), "server tool"),
    (request(tool_choice="auto"), "tool_choice"),
    (request(tool_choice={"type": "maybe"}), "tool_choice.type"),
    (request(tool_choice={"type": "tool"}), "tool_choice.name"),
])
def test_a_malformed_or_untranslatable_request_is_a_value_error_naming_the_field(body, names):
    with pytest.raises(ValueError) as raised:
        to_chat(body)
    assert type(raised.value) is ValueError
    assert names in str(raised.value)


def test_an_input_that_cannot_be_json_is_a_value_error():
    deep: Any = {}
    for _ in range(100_000):
        deep = {"a": deep}
    for body in (
        request(messages=[{"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": deep}]}]),
        request(messages=[{"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f",
                                                              "input": {"x": object()}}]}]),
    ):
        with pytest.raises(ValueError, match="input"):
            to_chat(body)


# --- replies -------------------------------------------------------------------------------


def test_a_text_reply():
    message = from_chat(completion("Paris"), request())
    assert message["id"].startswith("msg_") and message["type"] == "message" and message["role"] == "assistant"
    assert message["model"] == MODEL
    assert message["content"] == [{"type": "text", "text": "Paris"}]
    assert (message["stop_reason"], message["stop_sequence"]) == ("end_turn", None)
    assert message["usage"] == {"input_tokens": 10, "output_tokens": 2}


def test_a_reply_with_tool_calls_parses_their_arguments():
    reply = tool_calls_reply([tool_call("bash", {"command": "ls -l"}, "call_a"), tool_call("noargs", "", "call_b")],
                             text="Running.")
    message = from_chat(reply, request())
    assert message["content"] == [
        {"type": "text", "text": "Running."},
        {"type": "tool_use", "id": "call_a", "name": "bash", "input": {"command": "ls -l"}},
        {"type": "tool_use", "id": "call_b", "name": "noargs", "input": {}},
    ]
    assert message["stop_reason"] == "tool_use"


@pytest.mark.parametrize("arguments", ['{"command": "ls"', "[1, 2]", '"text"', "null", "[" * 100_000])
def test_arguments_that_are_no_json_object_are_kept_as_text(arguments):
    message = from_chat(tool_calls_reply([tool_call("bash", arguments)]), request())
    assert message["content"] == [{"type": "tool_use", "id": "call_bash", "name": "bash",
                                   "input": {RAW_ARGUMENTS_KEY: arguments}}]


@pytest.mark.parametrize(("finish", "calls", "expected"), [
    ("stop", False, "end_turn"),
    ("length", False, "max_tokens"),
    ("length", True, "max_tokens"),
    ("tool_calls", True, "tool_use"),
    ("stop", True, "tool_use"),
    ("tool_calls", False, "end_turn"),
    ("content_filter", False, "refusal"),
    (None, False, "end_turn"),
    ("something_new", False, "end_turn"),
    (7, False, "end_turn"),
])
def test_finish_reasons(finish, calls, expected):
    reply = tool_calls_reply([tool_call("f", {})]) if calls else completion("x")
    reply["choices"][0]["finish_reason"] = finish
    assert from_chat(reply, request())["stop_reason"] == expected


def test_a_stop_sequence_vllm_names_is_the_stop_sequence():
    reply = completion("x")
    reply["choices"][0]["stop_reason"] = "END"
    assert from_chat(reply, request(stop_sequences=["END"]))["stop_sequence"] == "END"
    assert from_chat(reply, request(stop_sequences=["END"]))["stop_reason"] == "stop_sequence"
    assert from_chat(reply, request())["stop_sequence"] is None


@pytest.mark.parametrize(("usage", "expected"), [
    ({"prompt_tokens": 1200, "completion_tokens": 34, "total_tokens": 1234}, {"input_tokens": 1200, "output_tokens": 34}),
    (None, {"input_tokens": 0, "output_tokens": 0}),
    ("lots", {"input_tokens": 0, "output_tokens": 0}),
    ({"prompt_tokens": -3, "completion_tokens": True}, {"input_tokens": 0, "output_tokens": 0}),
    ({"prompt_tokens": "5", "completion_tokens": 2.5}, {"input_tokens": 0, "output_tokens": 0}),
])
def test_usage(usage, expected):
    reply = completion("x")
    reply["usage"] = usage
    assert from_chat(reply, request())["usage"] == expected


def test_reasoning_is_a_thinking_block_only_when_the_request_asked_for_thinking():
    reply = completion("42")
    reply["choices"][0]["message"]["reasoning_content"] = "6 times 7"
    assert [b["type"] for b in from_chat(reply, request())["content"]] == ["text"]
    thinking = from_chat(reply, request(thinking={"type": "enabled", "budget_tokens": 2048}))
    assert thinking["content"] == [{"type": "thinking", "thinking": "6 times 7", "signature": ""},
                                   {"type": "text", "text": "42"}]


@pytest.mark.parametrize("reply", [None, [], "text", {}, {"choices": []}, {"choices": "x"}, {"choices": [None]},
                                   {"choices": [{"message": "hi"}]}, {"choices": [{"text": "legacy"}]}])
def test_a_reply_that_is_no_chat_completion_is_a_value_error(reply):
    with pytest.raises(ValueError, match="no chat completion"):
        from_chat(reply, request())


@pytest.mark.parametrize("message", [
    {"role": "assistant"},
    {"content": ["not a part", {"type": "text", "text": "a"}, {"text": 5}, {"type": "text", "text": "b"}]},
    {"content": 5, "tool_calls": "x"},
    {"content": None, "tool_calls": [None, 5, {"function": "x"}, {"function": {"name": 5, "arguments": 7}}]},
])
def test_odd_shapes_of_a_reply_still_give_a_valid_message(message):
    reply = {"choices": [{"message": message, "finish_reason": "stop"}], "model": ["x"], "usage": []}
    result = from_chat(reply, None)
    assert result["model"] == "unknown" and result["usage"] == {"input_tokens": 0, "output_tokens": 0}
    for block in result["content"]:
        assert block["type"] in ("text", "tool_use")
        if block["type"] == "tool_use":
            assert isinstance(block["name"], str) and isinstance(block["input"], dict) and block["id"].startswith("toolu_")
    json.dumps(result)
    stream_events(result)


def test_error_bodies_in_anthropics_shape():
    assert json.loads(error_body(400, "bad")) == {"type": "error", "error": {"type": "invalid_request_error", "message": "bad"}}
    types = {status: json.loads(error_body(status, "m"))["error"]["type"] for status in (401, 403, 404, 413, 418, 429, 500, 502, 503, 504, 529)}
    assert types == {401: "authentication_error", 403: "permission_error", 404: "not_found_error", 413: "request_too_large",
                     418: "invalid_request_error", 429: "rate_limit_error", 500: "api_error", 502: "api_error",
                     503: "overloaded_error", 504: "timeout_error", 529: "overloaded_error"}


def events(stream: bytes) -> list[tuple[str, dict]]:
    """(event, data) pairs of an SSE byte stream, checking each event is an `event:` and a `data:` line."""
    found = []
    for chunk in stream.decode().split("\n\n"):
        if not chunk:
            continue
        name, data = chunk.split("\n")
        assert name.startswith("event: ") and data.startswith("data: ")
        found.append((name[7:], json.loads(data[6:])))
    return found


def test_a_stream_carries_each_block_in_order():
    message = from_chat(tool_calls_reply([tool_call("bash", {"command": "ls"}, "call_a")], text="Hi"), request())
    stream = events(stream_events(message))
    assert [name for name, _ in stream] == [
        "message_start", "ping",
        "content_block_start", "content_block_delta", "content_block_stop",
        "content_block_start", "content_block_delta", "content_block_stop",
        "message_delta", "message_stop",
    ]
    assert all(data["type"] == name for name, data in stream)
    assert stream[0][1]["message"]["content"] == [] and stream[0][1]["message"]["stop_reason"] is None
    assert stream[3][1]["delta"] == {"type": "text_delta", "text": "Hi"}
    assert stream[5][1]["content_block"] == {"type": "tool_use", "id": "call_a", "name": "bash", "input": {}}
    assert stream[6][1]["delta"] == {"type": "input_json_delta", "partial_json": '{"command": "ls"}'}
    assert stream[8][1] == {"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": None},
                            "usage": {"input_tokens": 10, "output_tokens": 2}}


def test_a_lone_surrogate_of_the_models_text_streams_escaped():
    reply = tool_calls_reply([tool_call("f", '{"x": "\\ud800"}')], text="a\ud800b")
    stream = events(stream_events(from_chat(reply, request())))
    assert stream[3][1]["delta"]["text"] == "a\ud800b"
    assert json.loads(stream[6][1]["delta"]["partial_json"]) == {"x": "\ud800"}
    json.dumps(from_chat(reply, request())).encode()


# --- bounded: linear in what it is given ---------------------------------------------------


def _seconds(work) -> float:
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        work()
        best = min(best, time.perf_counter() - started)
    return best


def _round_trip(calls: int) -> None:
    message = from_chat(tool_calls_reply([tool_call("f", {"i": i}, f"call_{i}") for i in range(calls)]), request())
    stream_events(message)
    assert len(message["content"]) == calls


def test_ten_thousand_tool_calls_cost_linear_time():
    small, large = _seconds(lambda: _round_trip(1_000)), _seconds(lambda: _round_trip(10_000))
    assert large < 25 * small + 0.05, f"10x the calls took {large / small:.1f}x the time"
    assert large < 2.0


def test_huge_text_and_a_long_conversation_cost_linear_time():
    text = "x" * (8 << 20)
    started = time.perf_counter()
    message = from_chat(completion(text), request())
    assert len(stream_events(message)) > len(text)
    turns = [{"role": "user" if i % 2 == 0 else "assistant", "content": [{"type": "text", "text": "t"}] * 10}
             for i in range(20_001)]
    assert len(to_chat(request(messages=turns))["messages"]) == 20_001
    assert time.perf_counter() - started < 3.0


# --- conformance: Anthropic's SDK reads what a server of these functions sends ----------------


class MessagesServer:
    """POST /v1/messages on 127.0.0.1: the request through ``to_chat``, the next scripted chat reply back
    through ``from_chat`` (and ``stream_events`` when the request streams)."""

    def __init__(self, replies: list[dict]) -> None:
        self.replies = list(replies)
        self.chat_requests: list[dict] = []
        server = self

        class Handler(QuietHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802 (http.server naming)
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"null")
                if self.path != "/v1/messages":
                    send_json(self, error_body(404, f"no {self.path}"), 404)
                    return
                try:
                    server.chat_requests.append(to_chat(body))
                except ValueError as exc:
                    send_json(self, error_body(400, str(exc)), 400)
                    return
                message = from_chat(server.replies.pop(0), body)
                if not body.get("stream"):
                    send_json(self, json.dumps(message).encode())
                    return
                data = stream_events(message)
                send_json(self, data, content_type="text/event-stream")

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)

    def __enter__(self) -> anthropic.Anthropic:
        threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True).start()
        host, port = self.httpd.server_address[:2]
        return anthropic.Anthropic(base_url=f"http://{host!s}:{port}", api_key="test-key", max_retries=0, timeout=10)

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def sdk_server() -> Iterator[Any]:
    servers: list[MessagesServer] = []

    def start(replies: list[dict]) -> tuple[anthropic.Anthropic, MessagesServer]:
        server = MessagesServer(replies)
        servers.append(server)
        return server.__enter__(), server

    yield start
    for server in servers:
        server.__exit__()


SDK_TOOLS: Any = TOOLS
TOOL_REPLY = tool_calls_reply([tool_call("bash", {"command": "ls -la", "timeout": 5}, "call_1"),
                               tool_call("bash", '{"command": "echo ', "call_2")], text="Let me look.")


def _check_tool_message(message: Any) -> None:
    assert message.type == "message" and message.role == "assistant" and message.model == MODEL
    assert message.id.startswith("msg_")
    assert [block.type for block in message.content] == ["text", "tool_use", "tool_use"]
    text, first, second = message.content
    assert text.text == "Let me look."
    assert (first.id, first.name, first.input) == ("call_1", "bash", {"command": "ls -la", "timeout": 5})
    assert (second.id, second.input) == ("call_2", {RAW_ARGUMENTS_KEY: '{"command": "echo '})
    assert message.stop_reason == "tool_use" and message.stop_sequence is None
    assert (message.usage.input_tokens, message.usage.output_tokens) == (10, 2)


def test_the_sdk_reads_a_text_reply(sdk_server):
    client, server = sdk_server([completion("Paris is the capital.")])
    message = client.messages.create(model=MODEL, max_tokens=32, system="answer briefly",
                                     messages=[{"role": "user", "content": "capital of France?"}])
    assert [block.type for block in message.content] == ["text"]
    assert message.content[0].text == "Paris is the capital."
    assert message.stop_reason == "end_turn" and message.model == MODEL
    assert (message.usage.input_tokens, message.usage.output_tokens) == (10, 2)
    assert server.chat_requests[0]["messages"][0] == {"role": "system", "content": "answer briefly"}


def test_the_sdk_reads_a_tool_use_reply(sdk_server):
    client, server = sdk_server([TOOL_REPLY])
    message = client.messages.create(model=MODEL, max_tokens=256, tools=SDK_TOOLS, tool_choice={"type": "auto"},
                                     messages=[{"role": "user", "content": "list the files"}])
    _check_tool_message(message)
    assert server.chat_requests[0]["tools"][0]["function"]["name"] == "bash"


def test_the_sdk_reads_a_streamed_tool_use_reply(sdk_server):
    client, _ = sdk_server([TOOL_REPLY])
    with client.messages.stream(model=MODEL, max_tokens=256, tools=SDK_TOOLS,
                                messages=[{"role": "user", "content": "list the files"}]) as stream:
        texts = list(stream.text_stream)
        message = stream.get_final_message()
    assert texts == ["Let me look."]
    _check_tool_message(message)


def test_the_sdk_reads_a_raw_stream_event_by_event(sdk_server):
    client, _ = sdk_server([completion("Hello there")])
    raw = list(client.messages.create(model=MODEL, max_tokens=32, stream=True,
                                      messages=[{"role": "user", "content": "hi"}]))
    assert [event.type for event in raw] == ["message_start", "content_block_start", "content_block_delta",
                                             "content_block_stop", "message_delta", "message_stop"]
    assert raw[2].delta.text == "Hello there"
    assert raw[4].delta.stop_reason == "end_turn" and raw[4].usage.output_tokens == 2


def test_the_sdk_continues_a_tool_conversation_and_reads_a_refusal_as_an_error(sdk_server):
    client, server = sdk_server([TOOL_REPLY, completion("There are two files.")])
    first = client.messages.create(model=MODEL, max_tokens=256, tools=SDK_TOOLS,
                                   messages=[{"role": "user", "content": "list the files"}])
    history: Any = [
        {"role": "user", "content": "list the files"},
        {"role": "assistant", "content": [block.model_dump(exclude_none=True) for block in first.content]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_1", "content": "a\nb"},
                                     {"type": "tool_result", "tool_use_id": "call_2", "content": "bad", "is_error": True}]},
    ]
    second = client.messages.create(model=MODEL, max_tokens=256, tools=SDK_TOOLS, messages=history)
    assert second.content[0].text == "There are two files."
    sent = server.chat_requests[1]["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "tool", "tool"]
    assert [c["id"] for c in sent[1]["tool_calls"]] == ["call_1", "call_2"]
    with pytest.raises(anthropic.BadRequestError) as refused:
        client.messages.create(model=MODEL, max_tokens=16, messages=[{"role": "user", "content": "x"}],
                               tools=[{"type": "web_search_20250305", "name": "web_search"}])
    assert refused.value.body["error"]["type"] == "invalid_request_error"
    assert "server tool" in refused.value.message
