"""The Responses API translation (agentcompass.protocols.openai_responses), and what the official SDK parses of it."""

from __future__ import annotations

import json
import threading
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest

from agentcompass.protocols.openai_responses import IMAGE_LEFT_OUT, error_body, from_chat, stream_events, to_chat
from agentcompass.testing.endpoint import QuietHandler, completion, send_json, tool_call, tool_calls_reply

# what Codex CLI 0.169 sent, recorded (tests/data/protocols: the file says how)
CODEX_REQUEST = Path(__file__).parent.parent / "data" / "protocols" / "codex-0.169-responses-request.json"
APPLY_PATCH = {"type": "custom", "name": "apply_patch", "description": "Edit files.",
               "format": {"type": "grammar", "syntax": "lark", "definition": 'start: "*** Begin Patch"'}}
SHELL = {"type": "function", "name": "shell", "description": "Run a command.", "strict": False,
         "parameters": {"type": "object", "properties": {"command": {"type": "array", "items": {"type": "string"}}},
                        "required": ["command"]}}


# --- the request -------------------------------------------------------------------


def test_string_input_and_instructions():
    chat = to_chat({"model": "m", "instructions": "Be brief.", "input": "Capital of France?", "stream": True,
                    "store": False, "include": ["reasoning.encrypted_content"], "max_output_tokens": 50,
                    "temperature": 0.2, "top_p": 0.9})
    assert chat == {"model": "m", "stream": False, "max_tokens": 50, "temperature": 0.2, "top_p": 0.9,
                    "messages": [{"role": "system", "content": "Be brief."},
                                 {"role": "user", "content": "Capital of France?"}]}


def test_items_with_function_calls_and_outputs():
    chat = to_chat({"model": "m", "input": [
        {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "Rules."}]},
        {"role": "user", "content": [{"type": "input_text", "text": "List files"},
                                     {"type": "input_image", "image_url": "data:image/png;base64,AA"}]},
        {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "xyz"},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Looking."}]},
        {"type": "function_call", "call_id": "call_1", "name": "shell", "arguments": '{"command": ["ls"]}'},
        {"type": "function_call", "call_id": "call_2", "name": "shell", "arguments": '{"command": ["pwd"]}'},
        {"type": "function_call_output", "call_id": "call_1", "output": "a.txt"},
        {"type": "function_call_output", "call_id": "call_2", "output": [{"type": "input_text", "text": "/w"}]},
        {"type": "function_call", "call_id": "call_3", "name": "shell", "arguments": "{}"},
    ], "tools": [SHELL], "tool_choice": {"type": "function", "name": "shell"}, "parallel_tool_calls": False})
    assert chat["messages"] == [
        {"role": "system", "content": "Rules."},
        {"role": "user", "content": [{"type": "text", "text": "List files"},
                                     {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA"}}]},
        {"role": "assistant", "content": "Looking.", "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "shell", "arguments": '{"command": ["ls"]}'}},
            {"id": "call_2", "type": "function", "function": {"name": "shell", "arguments": '{"command": ["pwd"]}'}},
        ]},
        {"role": "tool", "tool_call_id": "call_1", "content": "a.txt"},
        {"role": "tool", "tool_call_id": "call_2", "content": "/w"},
        # a call after tool outputs starts an assistant message of its own
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_3", "type": "function", "function": {"name": "shell", "arguments": "{}"}}]},
    ]
    assert chat["tools"] == [{"type": "function", "function": {
        "name": "shell", "description": "Run a command.", "parameters": SHELL["parameters"], "strict": False}}]
    assert chat["tool_choice"] == {"type": "function", "function": {"name": "shell"}}
    assert chat["parallel_tool_calls"] is False


def test_one_system_message_first_and_later_ones_as_user_messages_text_as_one_string():
    chat = to_chat({"model": "m", "instructions": "Base.", "input": [
        {"role": "developer", "content": [{"type": "input_text", "text": "Sandbox: none."},
                                          {"type": "input_text", "text": "Network: off."}]},
        {"role": "user", "content": [{"type": "input_text", "text": "Task."}, {"type": "input_text", "text": "Go."}]},
        {"role": "developer", "content": "Model switched."},
    ]})
    assert chat["messages"] == [{"role": "system", "content": "Base.\n\nSandbox: none.\nNetwork: off."},
                                {"role": "user", "content": "Task.\nGo."},
                                {"role": "user", "content": "Model switched."}]
    assert to_chat({"model": "m", "input": [{"role": "user", "content": "x"}]})["messages"] == [
        {"role": "user", "content": "x"}]


def test_an_image_in_a_tool_output_is_left_out_saying_so():
    chat = to_chat({"model": "m", "input": [
        {"type": "function_call", "call_id": "c", "name": "view_image", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c", "output": [
            {"type": "input_text", "text": "the screenshot: "}, {"type": "input_image", "image_url": "data:,"}]},
    ]})
    assert chat["messages"][1] == {"role": "tool", "tool_call_id": "c",
                                   "content": "the screenshot: " + IMAGE_LEFT_OUT}


def test_custom_tools_are_function_tools_of_one_string_and_hosted_tools_are_left_out():
    chat = to_chat({"model": "m", "input": [
        {"type": "custom_tool_call", "call_id": "c1", "name": "apply_patch", "input": "*** Begin Patch"},
        {"type": "custom_tool_call_output", "call_id": "c1", "output": "Done"},
    ], "tools": [APPLY_PATCH, {"type": "web_search"}, SHELL]})
    assert [t["function"]["name"] for t in chat["tools"]] == ["apply_patch", "shell"]
    patch = chat["tools"][0]["function"]
    assert patch["description"] == "Edit files."
    assert patch["parameters"]["required"] == ["input"]
    assert 'start: "*** Begin Patch"' in patch["parameters"]["properties"]["input"]["description"]
    assert chat["messages"] == [
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function", "function": {
            "name": "apply_patch", "arguments": json.dumps({"input": "*** Begin Patch"})}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "Done"},
    ]
    # only hosted tools: the chat request has none
    assert "tools" not in to_chat({"model": "m", "input": "hi", "tools": [{"type": "web_search_preview"}],
                                   "tool_choice": "auto"})


# as Codex CLI 0.169 sends its sub-agent tools
AGENTS = {"type": "namespace", "name": "multi_agent_v1", "description": "Tools for sub-agents.", "tools": [
    {"type": "function", "name": "spawn_agent", "description": "Spawn one.", "strict": False,
     "parameters": {"type": "object", "properties": {"task": {"type": "string"}}}},
    {"type": "custom", "name": "note", "description": "Free text."}]}


def test_namespace_tools_are_chat_tools_of_qualified_names_and_their_calls_come_back_in_the_namespace():
    request = {"model": "m", "tools": [SHELL, AGENTS, {"type": "web_search", "external_web_access": True}],
               "tool_choice": {"type": "function", "namespace": "multi_agent_v1", "name": "spawn_agent"},
               "input": [
        {"type": "function_call", "call_id": "c1", "namespace": "multi_agent_v1", "name": "spawn_agent",
         "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "agent 1"}]}
    chat = to_chat(request)
    assert [t["function"]["name"] for t in chat["tools"]] == [
        "shell", "multi_agent_v1__spawn_agent", "multi_agent_v1__note"]
    assert chat["tools"][1]["function"]["description"] == "Tools for sub-agents.\n\nSpawn one."
    assert chat["tool_choice"] == {"type": "function", "function": {"name": "multi_agent_v1__spawn_agent"}}
    assert chat["messages"][0]["tool_calls"][0]["function"]["name"] == "multi_agent_v1__spawn_agent"
    reply = tool_calls_reply([tool_call("multi_agent_v1__spawn_agent", {"task": "t"}, "c2"),
                              tool_call("multi_agent_v1__note", {"input": "n"}, "c3"),
                              tool_call("shell", {"command": ["ls"]}, "c4")])
    spawn, note, shell = from_chat(reply, request)["output"]
    assert (spawn["type"], spawn["namespace"], spawn["name"]) == ("function_call", "multi_agent_v1", "spawn_agent")
    assert (note["type"], note["namespace"], note["name"], note["input"]) == (
        "custom_tool_call", "multi_agent_v1", "note", "n")
    assert "namespace" not in shell and shell["name"] == "shell"
    with pytest.raises(ValueError, match=r"tools\[0\].tools\[0\]: a tool of type 'web_search' is not supported"):
        to_chat({"model": "m", "input": "x", "tools": [{"type": "namespace", "name": "n", "tools": [
            {"type": "web_search"}]}]})


def test_a_recorded_codex_request():
    request = json.loads(CODEX_REQUEST.read_text())["request"]
    chat = to_chat(request)
    assert chat["stream"] is False and chat["model"] == request["model"]
    # developer, developer, user, user; the reasoning dropped; the call and its output
    assert [m["role"] for m in chat["messages"]] == ["system", "user", "user", "assistant", "tool"]
    assert all(isinstance(m["content"], str) for m in chat["messages"] if m["role"] != "assistant")
    call = chat["messages"][3]["tool_calls"][0]
    assert call["function"]["name"] == "exec_command" and chat["messages"][4]["tool_call_id"] == call["id"]
    names = [t["function"]["name"] for t in chat["tools"]]
    assert "exec_command" in names and "multi_agent_v1__spawn_agent" in names and "web_search" not in names
    assert chat["parallel_tool_calls"] is True and chat["tool_choice"] == "auto"
    reply = tool_calls_reply([tool_call("multi_agent_v1__spawn_agent", {"message": "go"}, "call_s")])
    [item] = from_chat(reply, request)["output"]
    assert (item["namespace"], item["name"], item["call_id"]) == ("multi_agent_v1", "spawn_agent", "call_s")


def test_text_format():
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    chat = to_chat({"model": "m", "input": "x",
                    "text": {"format": {"type": "json_schema", "name": "out", "schema": schema, "strict": True}}})
    assert chat["response_format"] == {"type": "json_schema",
                                       "json_schema": {"name": "out", "schema": schema, "strict": True}}
    assert to_chat({"model": "m", "input": "x", "text": {"format": {"type": "json_object"}}})["response_format"] == {
        "type": "json_object"}
    assert "response_format" not in to_chat({"model": "m", "input": "x", "text": {"format": {"type": "text"}}})


def test_previous_response_id_is_refused():
    with pytest.raises(ValueError, match="previous_response_id is not supported: this gateway keeps no responses"):
        to_chat({"model": "m", "input": "and then?", "previous_response_id": "resp_123"})


@pytest.mark.parametrize("body, says", [
    (None, "the request must be an object"),
    ({"input": "x"}, "model must be a string"),
    ({"model": "m"}, "input must be an array, not null"),
    ({"model": "m", "input": [["x"]]}, r"input\[0\] must be an object"),
    ({"model": "m", "input": [{"role": ["user"], "content": "x"}]}, r"input\[0\].role must be one of"),
    ({"model": "m", "input": [{"role": "user", "content": [{"type": {"a": 1}}]}]}, "content part of type None"),
    ({"model": "m", "input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]},
     "'input_file' is not supported"),
    ({"model": "m", "input": [{"role": "user", "content": [{"type": "input_image", "file_id": "f"}]}]},
     "only an input_image with an image_url"),
    ({"model": "m", "input": [{"type": "function_call", "call_id": "c", "name": "f", "arguments": {}}]},
     r"input\[0\].arguments must be a string, not dict"),
    ({"model": "m", "input": [{"type": "function_call_output", "call_id": "", "output": "x"}]},
     r"input\[0\].call_id must not be empty"),
    ({"model": "m", "input": [{"type": "item_reference", "id": "x"}]}, "'item_reference' is not supported"),
    ({"model": "m", "input": "x", "tools": {"type": "function"}}, "tools must be an array"),
    ({"model": "m", "input": "x", "tools": [{"type": "local_shell"}]}, "'local_shell' is not supported"),
    ({"model": "m", "input": "x", "tools": [{"type": ["function"]}]}, "type None is not supported"),
    ({"model": "m", "input": "x", "tools": [SHELL], "tool_choice": {"type": "web_search"}}, "tool_choice of type"),
    ({"model": "m", "input": "x", "max_output_tokens": True}, "max_output_tokens must be a positive integer"),
    ({"model": "m", "input": "x", "temperature": "hot"}, "temperature must be a number"),
    ({"model": "m", "input": "x", "text": {"format": {"type": "xml"}}}, "text.format of type 'xml'"),
    ({"model": "m", "input": "x", "conversation": "conv_1"}, "conversation is not supported"),
])
def test_odd_requests_are_a_value_error_that_says_what(body, says):
    with pytest.raises(ValueError, match=says):
        to_chat(body)


# --- the reply ---------------------------------------------------------------------


def test_text_reply():
    reply = completion("Paris", model="served")
    reply["created"] = 1700000000
    reply["usage"] = {"prompt_tokens": 30, "completion_tokens": 5, "total_tokens": 35,
                      "prompt_tokens_details": {"cached_tokens": 8},
                      "completion_tokens_details": {"reasoning_tokens": 2}}
    request = {"model": "asked", "input": "x", "instructions": "Be brief.", "temperature": 0.5}
    response = from_chat(reply, request)
    assert response["id"].startswith("resp_") and response["object"] == "response"
    assert (response["created_at"], response["status"], response["model"]) == (1700000000, "completed", "served")
    assert response["incomplete_details"] is None
    [message] = response["output"]
    assert message["id"].startswith("msg_")
    assert (message["type"], message["role"], message["status"]) == ("message", "assistant", "completed")
    assert message["content"] == [{"type": "output_text", "text": "Paris", "annotations": [], "logprobs": []}]
    assert response["usage"] == {"input_tokens": 30, "input_tokens_details": {"cached_tokens": 8},
                                 "output_tokens": 5, "output_tokens_details": {"reasoning_tokens": 2},
                                 "total_tokens": 35}
    assert (response["instructions"], response["temperature"], response["tools"]) == ("Be brief.", 0.5, [])


def test_tool_call_reply():
    reply = tool_calls_reply([tool_call("shell", {"command": ["ls"]}, "call_a"),
                              tool_call("apply_patch", {"input": "*** Begin Patch"}, "call_b"),
                              tool_call("apply_patch", "not json", "call_c")], text="On it.")
    response = from_chat(reply, {"model": "m", "input": "x", "tools": [SHELL, APPLY_PATCH]})
    message, shell, patch, raw = response["output"]
    assert message["content"][0]["text"] == "On it."
    assert shell["id"].startswith("fc_")
    assert {k: shell[k] for k in ("type", "call_id", "name", "arguments", "status")} == {
        "type": "function_call", "call_id": "call_a", "name": "shell", "arguments": '{"command": ["ls"]}',
        "status": "completed"}
    assert {k: patch[k] for k in ("type", "call_id", "name", "input")} == {
        "type": "custom_tool_call", "call_id": "call_b", "name": "apply_patch", "input": "*** Begin Patch"}
    # arguments that are not the one-string object: the custom call's input is what the model wrote
    assert raw["input"] == "not json"


def test_length_is_incomplete_and_usage_is_never_made_up():
    reply = completion("Par")
    reply["choices"][0]["finish_reason"] = "length"
    reply["usage"] = {"prompt_tokens": 7, "completion_tokens": "many", "total_tokens": None}
    response = from_chat(reply, {"model": "m", "input": "x", "max_output_tokens": 1})
    assert response["status"] == "incomplete"
    assert response["incomplete_details"] == {"reason": "max_output_tokens"}
    assert response["output"][0]["status"] == "incomplete"
    assert response["usage"]["input_tokens"] == 7
    assert response["usage"]["output_tokens"] == 0 and response["usage"]["total_tokens"] == 7
    del reply["usage"]
    assert from_chat(reply, {})["usage"]["total_tokens"] == 0


@pytest.mark.parametrize("reply, says", [
    ([], "the reply must be an object"),
    ({"choices": []}, "the reply has no choices"),
    ({"choices": [{"message": "hi"}]}, "the reply's message must be an object"),
    ({"choices": [{"message": {"content": 5}}]}, r"message.content must be an array, not int"),
    ({"choices": [{"message": {"tool_calls": {}}}]}, "tool_calls must be an array"),
    ({"choices": [{"message": {"tool_calls": [{"function": {"name": ""}}]}}]}, "function.name must not be empty"),
    ({"choices": [{"finish_reason": [], "message": {"tool_calls": [{"function": {"name": "f", "arguments": 1}}]}}]},
     "function.arguments must be a string"),
])
def test_odd_replies_are_a_value_error_that_says_what(reply, says):
    with pytest.raises(ValueError, match=says):
        from_chat(reply, {"model": "m"})


def _events(stream: bytes) -> list[tuple[str, dict]]:
    events = []
    for block in stream.decode().split("\n\n")[:-1]:
        event, data = block.split("\n")
        events.append((event.removeprefix("event: "), json.loads(data.removeprefix("data: "))))
    return events


def test_stream_events():
    response = from_chat(tool_calls_reply([tool_call("shell", {"command": ["ls"]})], text="Hi"), {"model": "m"})
    events = _events(stream_events(response))
    assert [name for name, _ in events] == [
        "response.created", "response.in_progress",
        "response.output_item.added", "response.content_part.added", "response.output_text.delta",
        "response.output_text.done", "response.content_part.done", "response.output_item.done",
        "response.output_item.added", "response.function_call_arguments.delta",
        "response.function_call_arguments.done", "response.output_item.done", "response.completed"]
    assert all(data["type"] == name for name, data in events)
    assert [data["sequence_number"] for _, data in events] == list(range(len(events)))
    assert events[0][1]["response"]["status"] == "in_progress" and events[0][1]["response"]["output"] == []
    assert events[-1][1]["response"] == response
    length = completion("Par")
    length["choices"][0]["finish_reason"] = "length"
    assert _events(stream_events(from_chat(length, {})))[-1][0] == "response.incomplete"


def test_error_body():
    assert json.loads(error_body(400, "bad input")) == {
        "error": {"message": "bad input", "type": "invalid_request_error", "param": None, "code": None}}
    assert json.loads(error_body(401, "no"))["error"]["type"] == "authentication_error"
    assert json.loads(error_body(502, "upstream"))["error"]["type"] == "server_error"
    assert json.loads(error_body(400, "too long", "context_length_exceeded"))["error"]["code"] == "context_length_exceeded"


ODD = [None, True, 7, -1, "x", "", [], [[]], {}, {"type": []}, [{"type": "message"}]]


def _mutants(value):
    """``value`` with one of its parts (at any depth) replaced by each ``ODD`` value, one at a time."""
    for odd in ODD:
        yield odd
    if isinstance(value, dict):
        for key, inner in value.items():
            for mutant in _mutants(inner):
                yield {**value, key: mutant}
    elif isinstance(value, list):
        for i, inner in enumerate(value):
            for mutant in _mutants(inner):
                yield [*value[:i], mutant, *value[i + 1:]]


def test_any_odd_shape_is_a_value_error_or_a_valid_translation():
    request = {"model": "m", "instructions": "i", "input": [
        {"role": "user", "content": [{"type": "input_text", "text": "t"}, {"type": "input_image", "image_url": "u"}]},
        {"type": "function_call", "call_id": "c", "name": "shell", "arguments": "{}"},
        {"type": "custom_tool_call", "call_id": "d", "name": "apply_patch", "input": "p"},
        {"type": "function_call_output", "call_id": "c", "output": [{"type": "input_text", "text": "o"}]},
        {"type": "function_call", "call_id": "e", "namespace": "multi_agent_v1", "name": "spawn_agent", "arguments": ""},
    ], "tools": [SHELL, APPLY_PATCH, AGENTS], "tool_choice": {"type": "function", "name": "shell"},
        "text": {"format": {"type": "json_schema", "name": "n", "schema": {}}}, "max_output_tokens": 5}
    reply = tool_calls_reply([tool_call("shell", {"a": 1}), tool_call("apply_patch", {"input": "p"}),
                              tool_call("multi_agent_v1__note", {"input": "n"})], text="t")
    reply["usage"]["prompt_tokens_details"] = {"cached_tokens": 1}
    reply["created"] = 1
    translated = refused = 0
    for mutant in _mutants(request):
        try:
            json.dumps(to_chat(mutant))
            translated += 1
        except ValueError:
            refused += 1
    for mutant in _mutants(reply):
        for asked in (request, mutant):
            try:
                stream_events(from_chat(mutant, asked))
                translated += 1
            except ValueError:
                refused += 1
    assert translated > 100 and refused > 100


# --- conformance: the official SDK against a real server that answers with these functions ------------


class _ResponsesServer:
    """POST /v1/responses on 127.0.0.1: the request translated to chat, answered from ``script`` (chat replies)."""

    def __init__(self, script: list[dict]):
        self.script = list(script)
        self.chat_requests: list[dict] = []
        server = self

        class Handler(QuietHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if self.path != "/v1/responses":
                    return send_json(self, error_body(404, "no such path"), 404)
                try:
                    server.chat_requests.append(to_chat(body))
                    response = from_chat(server.script.pop(0), body)
                except ValueError as error:
                    return send_json(self, error_body(400, str(error)), 400)
                if not body.get("stream"):
                    return send_json(self, json.dumps(response).encode())
                data = stream_events(response)
                send_json(self, data, content_type="text/event-stream")

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()

    def client(self):
        openai = pytest.importorskip("openai")
        return openai.OpenAI(base_url=f"http://127.0.0.1:{self.httpd.server_address[1]}/v1", api_key="token",
                             max_retries=0, timeout=10)


def _text_reply() -> dict:
    reply = completion("Paris is the capital.")
    reply["usage"] = {"prompt_tokens": 21, "completion_tokens": 6, "total_tokens": 27}
    return reply


def _call_reply() -> dict:
    return tool_calls_reply([tool_call("shell", {"command": ["ls", "-la"]}, "call_ls")])


def test_sdk_parses_a_text_and_a_function_call_response():
    with _ResponsesServer([_text_reply(), _call_reply()]) as server:
        client = server.client()
        text = client.responses.create(model="m", instructions="Be brief.", input="Capital of France?")
        call = client.responses.create(model="m", input="List files", tools=[SHELL])
    assert text.output_text == "Paris is the capital."
    assert text.status == "completed" and text.id.startswith("resp_")
    assert (text.usage.input_tokens, text.usage.output_tokens, text.usage.total_tokens) == (21, 6, 27)
    [item] = call.output
    assert (item.type, item.name, item.call_id, item.status) == ("function_call", "shell", "call_ls", "completed")
    assert json.loads(item.arguments) == {"command": ["ls", "-la"]}
    assert call.output_text == ""
    assert server.chat_requests[0]["messages"] == [{"role": "system", "content": "Be brief."},
                                                   {"role": "user", "content": "Capital of France?"}]
    assert server.chat_requests[1]["tools"][0]["function"]["name"] == "shell"


def test_sdk_parses_the_streams():
    with _ResponsesServer([_text_reply(), _call_reply(), _text_reply()]) as server:
        client = server.client()
        text_events = list(client.responses.create(model="m", input="Capital of France?", stream=True))
        call_events = list(client.responses.create(model="m", input="List files", tools=[SHELL], stream=True))
        # the SDK's stream helper rebuilds the response from the events, checking that they fit together
        with client.responses.stream(model="m", input="Capital of France?") as stream:
            deltas = [event.delta for event in stream if event.type == "response.output_text.delta"]
            final = stream.get_final_response()
    assert [e.sequence_number for e in text_events] == list(range(len(text_events)))
    assert "".join(e.delta for e in text_events if e.type == "response.output_text.delta") == "Paris is the capital."
    completed = text_events[-1]
    assert completed.type == "response.completed"
    assert completed.response.output_text == "Paris is the capital." and completed.response.status == "completed"
    assert completed.response.usage.total_tokens == 27
    done = [e for e in call_events if e.type == "response.function_call_arguments.done"]
    assert len(done) == 1 and json.loads(done[0].arguments) == {"command": ["ls", "-la"]}
    [item] = call_events[-1].response.output
    assert (call_events[-1].type, item.name, item.call_id) == ("response.completed", "shell", "call_ls")
    assert [e.item.type for e in call_events if e.type == "response.output_item.done"] == ["function_call"]
    assert deltas == ["Paris is the capital."] and final.output_text == "Paris is the capital."


def test_sdk_sees_a_refused_request_as_a_400_that_says_why():
    openai = pytest.importorskip("openai")
    with _ResponsesServer([]) as server:
        with pytest.raises(openai.BadRequestError, match="previous_response_id is not supported"):
            server.client().responses.create(model="m", input="and then?", previous_response_id="resp_1")


def test_sdk_parses_a_custom_tool_call_in_a_namespace_streamed_and_not():
    reply = tool_calls_reply([tool_call("multi_agent_v1__note", {"input": "remember"}, "call_n")], text="Noting.")
    with _ResponsesServer([reply, reply]) as server:
        client = server.client()
        plain = client.responses.create(model="m", input="x", tools=[AGENTS])
        with client.responses.stream(model="m", input="x", tools=[AGENTS]) as stream:
            kinds = [event.type for event in stream]
            final = stream.get_final_response()
    for response in (plain, final):
        message, note = response.output
        assert response.output_text == "Noting."
        assert (note.type, note.namespace, note.name, note.input, note.call_id) == (
            "custom_tool_call", "multi_agent_v1", "note", "remember", "call_n")
    assert "response.custom_tool_call_input.done" in kinds and kinds[-1] == "response.completed"


def test_the_models_reasoning_is_a_reasoning_item_first_streamed_and_not():
    reply = tool_calls_reply([tool_call("shell", {"command": ["ls"]}, "call_r")], text="Listing.")
    reply["choices"][0]["message"]["reasoning_content"] = "The user wants files."
    response = from_chat(reply, {"model": "m"})
    reasoning = response["output"][0]
    assert (reasoning["type"], reasoning["summary"], reasoning["content"]) == (
        "reasoning", [], [{"type": "reasoning_text", "text": "The user wants files."}])
    assert [item["type"] for item in response["output"]] == ["reasoning", "message", "function_call"]
    events = _events(stream_events(response))
    assert [name for name, _ in events][2:6] == [
        "response.output_item.added", "response.reasoning_text.delta", "response.reasoning_text.done",
        "response.output_item.done"]
    assert events[3][1]["delta"] == "The user wants files." and events[2][1]["item"]["content"] == []
    with _ResponsesServer([reply, reply]) as server:
        client = server.client()
        plain = client.responses.create(model="m", input="x", tools=[SHELL])
        with client.responses.stream(model="m", input="x", tools=[SHELL]) as stream:
            deltas = [event.delta for event in stream if event.type == "response.reasoning_text.delta"]
            final = stream.get_final_response()
    for parsed in (plain, final):
        assert parsed.output[0].type == "reasoning"
        assert parsed.output[0].content[0].text == "The user wants files."
        assert parsed.output_text == "Listing." and parsed.output[2].call_id == "call_r"
    assert deltas == ["The user wants files."]
