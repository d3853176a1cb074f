"""OpenAI's Responses API (what Codex CLI speaks), translated to and from chat completions.

``to_chat(body)`` turns a Responses request into a chat-completions request
(``stream: false``: the gateway buffers the Model's reply); ``from_chat(reply,
request)`` turns the chat reply into a Responses ``response`` object;
``stream_events(response)`` writes that response as the SSE stream the
Responses API sends when the request asked for ``stream`` (``stream_chunks``: one event at a time); ``error_body``
is OpenAI's error shape.

What is translated:

- ``instructions`` is the first (system) message; ``input`` is a string (one
  user message) or a list of items: messages (role ``user``, ``assistant``,
  ``system``, or ``developer``, which becomes ``system``: not every chat
  template knows it), their parts ``input_text``/``output_text`` (text) and
  ``input_image`` (an image URL, in a user message); text-only content is one
  string, its parts joined by a newline. The leading system messages are
  joined into one and a later one is sent as a user message: chat templates
  such as Qwen's refuse a system message anywhere but first. ``function_call``
  and ``custom_tool_call`` items become the ``tool_calls`` of an assistant
  message (joined to the assistant message just before them), their
  ``*_output`` items ``tool`` messages (an image in a tool output becomes
  ``IMAGE_LEFT_OUT``: a chat tool message holds only text); ``reasoning``
  items are dropped (a chat endpoint takes no reasoning back).
- ``function`` tools are chat function tools. A ``custom`` (freeform) tool,
  such as Codex's ``apply_patch``, is a function tool of one string parameter,
  ``input`` (its grammar, if any, in that parameter's description); the
  model's call of it comes back as a ``custom_tool_call`` item with that
  string. The function and custom tools of a ``namespace`` tool (Codex 0.169
  sends its sub-agent tools so) are chat tools named ``<namespace>__<name>``
  (``qualified``), their description after the namespace's; a call of one
  comes back with its ``name`` and ``namespace``, and a call item with a
  ``namespace`` goes to the model by that name. Hosted tools
  (``HOSTED_TOOLS``: web search, file search, code interpreter, ...) run on
  OpenAI's servers, not in a model: no chat endpoint can serve them, so they
  are left out and the model never sees them. Any other tool type
  (``local_shell`` among them) is refused.
- ``tool_choice``, ``parallel_tool_calls``, ``max_output_tokens`` (as
  ``max_tokens``), ``temperature``, ``top_p``, and ``text.format``
  (``json_schema`` or ``json_object``, as ``response_format``) pass on;
  ``store``, ``include``, ``metadata``, ``reasoning``, ``truncation``,
  ``user``, ``service_tier``, ``prompt_cache_key`` and the like concern
  OpenAI's own service and are ignored. ``previous_response_id`` (and
  ``conversation``) are refused: the gateway keeps no state, so the agent must
  send the whole conversation (Codex does: it sends ``store: false`` and its
  whole history each turn).

The response's output is, in order: a ``reasoning`` item (its text as a
``reasoning_text`` part) when the message holds the model's reasoning
(``REASONING_FIELDS``), a ``message`` item with its text (or refusal), and a
call item per tool call. A reply that stopped at its length (``finish_reason:
length``) is an ``incomplete`` response (reason ``max_output_tokens``),
streamed with a final ``response.incomplete`` event as OpenAI's API does; any
other is ``completed``.

The request is the agent's and the reply the Model's: an odd shape in either
is a ``ValueError`` whose message says what and where (the gateway answers
the agent 400), never another exception; all work is linear in the size of
what came in.

How Codex CLI reads the stream (codex-rs, ``codex-api/src/sse/responses.rs``,
``process_responses_event``, read in a 2026 revision, not pinned to 0.169): an
item counts only once its ``response.output_item.done`` arrives (parsed as a
``ResponseItem``: a ``message`` whose content parts are
``input_text``/``output_text``/``input_image``, a ``function_call``, a
``custom_tool_call``, ``reasoning``; an item that does not parse is skipped
silently, so a ``refusal`` part loses its message);
``response.output_text.delta`` and ``response.custom_tool_call_input.delta``
are shown as they come, ``response.output_item.added`` is passed on as the
item's start, and the content part, ``output_text.done`` and
``function_call_arguments`` events are ignored (so are events it does not
know). ``response.completed`` ends the stream: its response must have an
``id`` and, if it has ``usage``, integer ``input_tokens``, ``output_tokens``
and ``total_tokens`` (``input_tokens_details.cached_tokens`` and
``output_tokens_details.reasoning_tokens`` optional), which Codex takes as the
turn's token usage. ``response.failed`` (its ``error.code``:
``context_length_exceeded``, ``rate_limit_exceeded`` with "try again in Ns",
...), ``response.incomplete`` ("Incomplete response returned, reason: ...")
and a stream closed before ``response.completed`` are stream errors, which
Codex may retry (its provider's ``stream_max_retries`` in config.toml; 0 turns
retries off) before it fails the turn. Seen with 0.169 and no retries: a reply
cut at its length failed the turn ("Incomplete response returned, reason:
max_output_tokens", exit status 1), as it would against OpenAI.

What Codex CLI 0.169 sends (``codex exec`` with a custom provider,
``wire_api = "responses"``, a model it has no metadata for, seen on a
loopback server): ``stream: true``, ``store: false``, the whole history
each turn (items with ``id``s), no ``instructions`` (its base prompt is the
first developer message), ``tool_choice: auto``, ``parallel_tool_calls``,
``reasoning: {summary: auto}``, ``include``, ``prompt_cache_key``,
``client_metadata``; tools: functions (``exec_command``, ``write_stdin``,
``view_image``, ...), a ``namespace`` (``multi_agent_v1``) and
``{"type": "web_search", "external_web_access": true}``. Through these
functions it ran the model's ``exec_command`` call and ended its turn with
the model's text and the summed usage, a reasoning item in the reply
included (sent back the next turn, then dropped by ``to_chat``); the agents
tier runs it so through the gateway (``tests/test_installed_agents.py``,
``test_codex_writes_the_file_and_answers``).
"""

from __future__ import annotations

import json
import secrets
import time
from typing import Any

from . import call_ids

# Tools that OpenAI's servers run (not the model): no chat endpoint serves them, so they are left out.
HOSTED_TOOLS = frozenset({
    "web_search", "web_search_preview", "web_search_preview_2025_03_11", "web_search_2025_08_26",
    "file_search", "code_interpreter", "image_generation", "computer_use_preview", "computer_use", "mcp",
})
# Message roles as the chat request has them (developer is system: not every chat template knows it).
_ROLES = {"user": "user", "assistant": "assistant", "system": "system", "developer": "system"}
_TEXT_PARTS = frozenset({"input_text", "output_text", "text"})
# What stands in a chat tool message for an image a tool returned (a chat tool message holds only text).
IMAGE_LEFT_OUT = "[an image the tool returned: left out, the model's endpoint takes only text in a tool result]"
# Between a namespace's name and its tool's in the chat name of the tool (OpenAI's tool names allow [a-zA-Z0-9_-]).
NAMESPACE_JOIN = "__"
# Where a chat reply's message holds the model's reasoning (vLLM, SGLang, llama.cpp: reasoning_content; newer vLLM:
# reasoning), given back as a reasoning item.
REASONING_FIELDS = ("reasoning_content", "reasoning")
# The one parameter of the function tool that stands for a custom (freeform) tool.
CUSTOM_INPUT = "input"
# The error type of OpenAI's error body, by status (any other 4xx: invalid_request_error; 5xx: server_error).
_ERROR_TYPES = {
    401: "authentication_error", 403: "permission_error", 404: "not_found_error", 429: "rate_limit_error",
}
# Fields of the request echoed in the response, as OpenAI's are.
_ECHOED = ("instructions", "max_output_tokens", "metadata", "parallel_tool_calls", "temperature", "tool_choice",
           "tools", "top_p", "text", "reasoning", "truncation", "store", "user")
# Of those, the ones that may be long, which a stream echoes in its last event alone (not in its first two too).
_ECHOED_ONCE = ("instructions", "tools", "metadata")
_ECHO_DEFAULTS: dict[str, Any] = {
    "instructions": None, "max_output_tokens": None, "metadata": {}, "parallel_tool_calls": True,
    "temperature": None, "tool_choice": "auto", "tools": [], "top_p": None, "text": {"format": {"type": "text"}},
    "reasoning": None, "truncation": "disabled", "store": False, "user": None,
}


def _new_id(prefix: str) -> str:
    return prefix + secrets.token_hex(12)


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _dict(value: Any, where: str) -> dict:
    if not isinstance(value, dict):
        raise ValueError(f"{where} must be an object, not {_kind(value)}")
    return value


def _list(value: Any, where: str) -> list:
    if not isinstance(value, list):
        raise ValueError(f"{where} must be an array, not {_kind(value)}")
    return value


def _str(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{where} must be a string, not {_kind(value)}")
    return value


def _tag(value: Any) -> str | None:
    """A ``type`` or ``role`` field: the string, or None for anything else (which no table holds)."""
    return value if isinstance(value, str) else None


def _name(value: Any, where: str) -> str:
    if not _str(value, where):
        raise ValueError(f"{where} must not be empty")
    return value


def _number(value: Any, where: str) -> int | float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{where} must be a number, not {_kind(value)}")
    return value


# --- the request -------------------------------------------------------------------


def _content(content: Any, role: str, where: str) -> str | list[dict]:
    """A message's content in chat form: text as one string (parts joined by a newline), else chat parts.

    Not every chat template takes a list of parts; only a user message may hold an image.
    """
    if isinstance(content, str):
        return content
    parts: list[dict] = []
    for i, raw in enumerate(_list(content, where)):
        part = _dict(raw, f"{where}[{i}]")
        kind = _tag(part.get("type"))
        if kind in _TEXT_PARTS or kind == "refusal":
            key = "refusal" if kind == "refusal" else "text"
            parts.append({"type": "text", "text": _str(part.get(key), f"{where}[{i}].{key}")})
        elif kind == "input_image" and role == "user":
            url = part.get("image_url")
            if not isinstance(url, str) or not url:
                raise ValueError(f"{where}[{i}]: only an input_image with an image_url is supported (no file_id)")
            image: dict[str, Any] = {"url": url}
            if isinstance(part.get("detail"), str):
                image["detail"] = part["detail"]
            parts.append({"type": "image_url", "image_url": image})
        else:
            raise ValueError(f"{where}[{i}]: a content part of type {kind!r} is not supported in a message of "
                             f"role {role}")
    if all(part["type"] == "text" for part in parts):
        return "\n".join(part["text"] for part in parts)
    return parts


def _output_text(output: Any, where: str) -> str:
    """A tool output as the text of a chat ``tool`` message."""
    if isinstance(output, str):
        return output
    texts = []
    for i, raw in enumerate(_list(output, where)):
        part = _dict(raw, f"{where}[{i}]")
        kind = _tag(part.get("type"))
        if kind == "input_image":
            texts.append(IMAGE_LEFT_OUT)
        elif kind in _TEXT_PARTS:
            texts.append(_str(part.get("text"), f"{where}[{i}].text"))
        else:
            raise ValueError(f"{where}[{i}]: a tool output part of type {kind!r} is not supported")
    return "".join(texts)


def _messages(body: dict) -> list[dict]:
    return _system_first(_all_messages(body))


def _system_first(messages: list[dict]) -> list[dict]:
    """The leading system messages joined into one; a later one is a user message (see the module's docstring)."""
    lead = 0
    while lead < len(messages) and messages[lead]["role"] == "system":
        lead += 1
    rest = [{**m, "role": "user"} if m["role"] == "system" else m for m in messages[lead:]]
    if lead == 0:
        return rest
    return [{"role": "system", "content": "\n\n".join(m["content"] for m in messages[:lead])}, *rest]


def _all_messages(body: dict) -> list[dict]:
    messages: list[dict] = []
    instructions = body.get("instructions")
    if instructions is not None:
        messages.append({"role": "system", "content": _str(instructions, "instructions")})
    items = body.get("input")
    if isinstance(items, str):
        messages.append({"role": "user", "content": items})
        return messages
    for i, raw in enumerate(_list(items, "input")):
        where = f"input[{i}]"
        item = _dict(raw, where)
        kind = _tag(item.get("type", "message"))
        if kind == "message":
            role = _tag(item.get("role"))
            if role not in _ROLES:
                raise ValueError(f"{where}.role must be one of {', '.join(_ROLES)}")
            messages.append({"role": _ROLES[role], "content": _content(item.get("content"), role, where + ".content")})
        elif kind in ("function_call", "custom_tool_call"):
            if kind == "function_call":
                arguments = _str(item.get("arguments"), where + ".arguments")
            else:
                arguments = json.dumps({CUSTOM_INPUT: _str(item.get("input"), where + ".input")})
            namespace = item.get("namespace")
            if namespace is not None:
                namespace = _name(namespace, where + ".namespace")
            name = qualified(namespace, _name(item.get("name"), where + ".name"))
            call = {"id": _name(item.get("call_id"), where + ".call_id"), "type": "function",
                    "function": {"name": name, "arguments": arguments}}
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant":
                last.setdefault("tool_calls", []).append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind in ("function_call_output", "custom_tool_call_output"):
            messages.append({"role": "tool", "tool_call_id": _name(item.get("call_id"), where + ".call_id"),
                             "content": _output_text(item.get("output"), where + ".output")})
        elif kind == "reasoning":
            continue
        else:
            raise ValueError(f"{where}: an input item of type {kind!r} is not supported")
    return messages


def _custom_parameters(tool: dict, where: str) -> dict:
    description = "The tool's input, as plain text (not JSON)."
    fmt = tool.get("format")
    if fmt is not None and _dict(fmt, where + ".format").get("type") == "grammar":
        syntax = fmt.get("syntax")
        definition = _str(fmt.get("definition"), where + ".format.definition")
        description += f" It follows this {syntax if isinstance(syntax, str) else ''} grammar:\n{definition}"
    return {"type": "object", "properties": {CUSTOM_INPUT: {"type": "string", "description": description}},
            "required": [CUSTOM_INPUT], "additionalProperties": False}


def qualified(namespace: str | None, name: str) -> str:
    """The chat name of the tool ``name`` in ``namespace`` (a chat request has no namespaces)."""
    return name if namespace is None else f"{namespace}{NAMESPACE_JOIN}{name}"


def _tools(raw: Any) -> list[dict]:
    tools = []
    for i, entry in enumerate(_list(raw, "tools")):
        where = f"tools[{i}]"
        tool = _dict(entry, where)
        kind = _tag(tool.get("type"))
        if kind in HOSTED_TOOLS:
            continue
        if kind == "namespace":
            namespace = _name(tool.get("name"), where + ".name")
            about = tool.get("description")
            for j, inner in enumerate(_list(tool.get("tools"), where + ".tools")):
                inner_where = f"{where}.tools[{j}]"
                if _tag(_dict(inner, inner_where).get("type")) not in ("function", "custom"):
                    raise ValueError(f"{inner_where}: a tool of type {_tag(inner.get('type'))!r} is not supported "
                                     "in a namespace (function, custom)")
                tools.append(_tool(inner, inner_where, namespace, about if isinstance(about, str) else None))
        elif kind in ("function", "custom"):
            tools.append(_tool(tool, where, None, None))
        else:
            raise ValueError(f"{where}: a tool of type {kind!r} is not supported (function, custom, namespace)")
    return tools


def _tool(tool: dict, where: str, namespace: str | None, about: str | None) -> dict:
    """The chat function tool for the function or custom ``tool`` (in ``namespace``, which is ``about`` that)."""
    function: dict[str, Any] = {"name": qualified(namespace, _name(tool.get("name"), where + ".name"))}
    descriptions = [about] if about else []
    if tool.get("description") is not None:
        descriptions.append(_str(tool["description"], where + ".description"))
    if descriptions:
        function["description"] = "\n\n".join(descriptions)
    if tool.get("type") == "custom":
        function["parameters"] = _custom_parameters(tool, where)
    else:
        if tool.get("parameters") is not None:
            function["parameters"] = _dict(tool["parameters"], where + ".parameters")
        if isinstance(tool.get("strict"), bool):
            function["strict"] = tool["strict"]
    return {"type": "function", "function": function}


def _tool_choice(choice: Any) -> Any:
    if choice in ("auto", "none", "required"):
        return choice
    choice = _dict(choice, "tool_choice")
    if choice.get("type") in ("function", "custom"):
        namespace = choice.get("namespace") if isinstance(choice.get("namespace"), str) else None
        return {"type": "function",
                "function": {"name": qualified(namespace, _name(choice.get("name"), "tool_choice.name"))}}
    if choice.get("type") == "allowed_tools" and choice.get("mode") in ("auto", "required"):
        return choice["mode"]
    raise ValueError(f"tool_choice of type {_tag(choice.get('type'))!r} is not supported")


def _response_format(text: Any) -> dict | None:
    fmt = _dict(text, "text").get("format")
    if fmt is None:
        return None
    kind = _dict(fmt, "text.format").get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "json_object"}
    if kind != "json_schema":
        raise ValueError(f"text.format of type {kind!r} is not supported (text, json_object, json_schema)")
    schema: dict[str, Any] = {"name": _name(fmt.get("name"), "text.format.name"),
                              "schema": _dict(fmt.get("schema"), "text.format.schema")}
    if isinstance(fmt.get("strict"), bool):
        schema["strict"] = fmt["strict"]
    if isinstance(fmt.get("description"), str):
        schema["description"] = fmt["description"]
    return {"type": "json_schema", "json_schema": schema}


def to_chat(body: Any) -> dict:
    """The chat-completions request for the Responses request ``body`` (``ValueError`` for what cannot be)."""
    body = _dict(body, "the request")
    for field in ("previous_response_id", "conversation"):
        if body.get(field) is not None:
            raise ValueError(f"{field} is not supported: this gateway keeps no responses, so send the whole "
                             "conversation in input (and store: false)")
    chat: dict[str, Any] = {"model": _name(body.get("model"), "model"), "messages": _messages(body),
                            "stream": False}
    tools = _tools(body["tools"]) if body.get("tools") is not None else []
    if tools:
        chat["tools"] = tools
        if body.get("tool_choice") is not None:
            chat["tool_choice"] = _tool_choice(body["tool_choice"])
        if body.get("parallel_tool_calls") is not None:
            if not isinstance(body["parallel_tool_calls"], bool):
                raise ValueError("parallel_tool_calls must be true or false")
            chat["parallel_tool_calls"] = body["parallel_tool_calls"]
    if body.get("max_output_tokens") is not None:
        limit = body["max_output_tokens"]
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValueError("max_output_tokens must be a positive integer")
        chat["max_tokens"] = limit
    for field in ("temperature", "top_p"):
        if body.get(field) is not None:
            chat[field] = _number(body[field], field)
    if body.get("text") is not None:
        response_format = _response_format(body["text"])
        if response_format is not None:
            chat["response_format"] = response_format
    return chat


# --- the reply ---------------------------------------------------------------------


def _count(usage: dict, key: str, detail: str | None = None) -> int:
    value = usage.get(key)
    if detail is not None:
        value = value.get(detail) if isinstance(value, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def _usage(raw: Any) -> dict:
    usage = raw if isinstance(raw, dict) else {}
    prompt, completion = _count(usage, "prompt_tokens"), _count(usage, "completion_tokens")
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": _count(usage, "prompt_tokens_details", "cached_tokens")},
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": _count(usage, "completion_tokens_details", "reasoning_tokens")},
        "total_tokens": _count(usage, "total_tokens") or prompt + completion,
    }


def _reply_text(content: Any) -> str:
    """The text of the reply's message: a string, or text parts (some servers send those)."""
    if content is None or isinstance(content, str):
        return content or ""
    texts = []
    for i, raw in enumerate(_list(content, "the reply's message.content")):
        part = _dict(raw, f"the reply's message.content[{i}]")
        if isinstance(part.get("text"), str):
            texts.append(part["text"])
    return "".join(texts)


def _tool_names(request: dict) -> dict[str, tuple[str | None, str, str]]:
    """The request's tools by their chat name: (namespace or None, name, type: function or custom)."""
    names: dict[str, tuple[str | None, str, str]] = {}

    def add(tool: Any, namespace: str | None) -> None:
        if isinstance(tool, dict) and tool.get("type") in ("function", "custom") and isinstance(tool.get("name"), str):
            names[qualified(namespace, tool["name"])] = (namespace, tool["name"], tool["type"])

    tools = request.get("tools")
    for tool in tools if isinstance(tools, list) else []:
        if isinstance(tool, dict) and tool.get("type") == "namespace" and isinstance(tool.get("name"), str):
            inner = tool.get("tools")
            for each in inner if isinstance(inner, list) else []:
                add(each, tool["name"])
        else:
            add(tool, None)
    return names


def _call_item(raw: Any, where: str, tools: dict[str, tuple[str | None, str, str]], made_id: str) -> dict:
    """The output item of one tool call of the reply; ``made_id`` its call_id when the Model named none."""
    call = _dict(raw, where)
    function = _dict(call.get("function"), where + ".function")
    name = _name(function.get("name"), where + ".function.name")
    arguments = function.get("arguments")
    arguments = "" if arguments is None else _str(arguments, where + ".function.arguments")
    call_id = call.get("id") if isinstance(call.get("id"), str) and call.get("id") else made_id
    # a name the request does not hold (the model made it up) is passed on as it is: the agent answers it
    namespace, name, kind = tools.get(name, (None, name, "function"))
    where_from = {} if namespace is None else {"namespace": namespace}
    if kind == "custom":
        # the function tool that stands for a custom tool: its one string parameter is the custom call's input
        try:
            parsed = json.loads(arguments)
        except ValueError:
            parsed = None
        text = parsed.get(CUSTOM_INPUT) if isinstance(parsed, dict) else None
        return {"id": _new_id("ctc_"), "type": "custom_tool_call", "status": "completed", "call_id": call_id,
                "name": name, **where_from, "input": text if isinstance(text, str) else arguments}
    return {"id": _new_id("fc_"), "type": "function_call", "status": "completed", "call_id": call_id,
            "name": name, **where_from, "arguments": arguments}


def from_chat(reply: Any, request: Any) -> dict:
    """The Responses ``response`` object for the chat ``reply`` to ``request`` (the Responses request)."""
    reply = _dict(reply, "the reply")
    request = request if isinstance(request, dict) else {}
    choices = _list(reply.get("choices"), "the reply's choices")
    if not choices:
        raise ValueError("the reply has no choices")
    choice = _dict(choices[0], "the reply's choices[0]")
    message = _dict(choice.get("message"), "the reply's message")
    finish = choice.get("finish_reason")
    incomplete = {"length": "max_output_tokens", "content_filter": "content_filter"}.get(_tag(finish) or "")
    status = "incomplete" if incomplete else "completed"
    output: list[dict] = []
    thought = next((message[key] for key in REASONING_FIELDS if isinstance(message.get(key), str) and message[key]),
                   None)
    if thought is not None:
        output.append({"id": _new_id("rs_"), "type": "reasoning", "summary": [],
                       "content": [{"type": "reasoning_text", "text": thought}], "encrypted_content": None})
    text = _reply_text(message.get("content"))
    refusal = message.get("refusal")
    if text or isinstance(refusal, str) and refusal:
        part = ({"type": "output_text", "text": text, "annotations": [], "logprobs": []} if text
                else {"type": "refusal", "refusal": refusal})
        output.append({"id": _new_id("msg_"), "type": "message", "role": "assistant", "status": status,
                       "content": [part]})
    calls = message.get("tool_calls")
    if calls is not None:
        names, made_id = _tool_names(request), call_ids("call_", request, reply)
        output.extend(_call_item(call, f"the reply's tool_calls[{i}]", names, made_id(i))
                      for i, call in enumerate(_list(calls, "the reply's tool_calls")))
    created = reply.get("created")
    model = reply.get("model") if isinstance(reply.get("model"), str) else request.get("model")
    response: dict[str, Any] = {
        "id": _new_id("resp_"), "object": "response",
        "created_at": created if isinstance(created, int) and not isinstance(created, bool) else int(time.time()),
        "status": status, "error": None,
        "incomplete_details": {"reason": incomplete} if incomplete else None,
        "model": model if isinstance(model, str) else "",
        "output": output, "previous_response_id": None,
        "usage": _usage(reply.get("usage")),
    }
    for field in _ECHOED:
        response[field] = request[field] if request.get(field) is not None else _ECHO_DEFAULTS[field]
    return response


# --- the stream --------------------------------------------------------------------


class _Stream:
    """SSE events, each numbered (``sequence_number``) in order."""

    def __init__(self) -> None:
        self.chunks: list[bytes] = []

    def send(self, kind: str, **fields: Any) -> None:
        data = {"type": kind, "sequence_number": len(self.chunks), **fields}
        self.chunks.append(f"event: {kind}\ndata: {json.dumps(data)}\n\n".encode())


def _started(item: dict) -> dict:
    """``item`` as it is when the model begins it: empty, in progress."""
    kind = item.get("type")
    empty: dict[str, Any] = ({"content": []} if kind in ("message", "reasoning") else {"arguments": ""} if kind == "function_call"
             else {"input": ""} if kind == "custom_tool_call" else {})
    return {**item, **empty, "status": "in_progress"}


def _stream_item(stream: _Stream, index: int, item: dict) -> None:
    stream.send("response.output_item.added", output_index=index, item=_started(item))
    item_id = item.get("id")
    kind = item.get("type")
    if kind == "message":
        for j, part in enumerate(item.get("content") or []):
            text_part = part.get("type") == "output_text"
            empty = {**part, "text": ""} if text_part else {**part, "refusal": ""}
            stream.send("response.content_part.added", item_id=item_id, output_index=index, content_index=j,
                        part=empty)
            if text_part:
                stream.send("response.output_text.delta", item_id=item_id, output_index=index, content_index=j,
                            delta=part["text"], logprobs=[])
                stream.send("response.output_text.done", item_id=item_id, output_index=index, content_index=j,
                            text=part["text"], logprobs=[])
            else:
                stream.send("response.refusal.delta", item_id=item_id, output_index=index, content_index=j,
                            delta=part["refusal"])
                stream.send("response.refusal.done", item_id=item_id, output_index=index, content_index=j,
                            refusal=part["refusal"])
            stream.send("response.content_part.done", item_id=item_id, output_index=index, content_index=j,
                        part=part)
    elif kind == "reasoning":
        for j, part in enumerate(item.get("content") or []):
            stream.send("response.reasoning_text.delta", item_id=item_id, output_index=index, content_index=j,
                        delta=part["text"])
            stream.send("response.reasoning_text.done", item_id=item_id, output_index=index, content_index=j,
                        text=part["text"])
    elif kind == "function_call":
        stream.send("response.function_call_arguments.delta", item_id=item_id, output_index=index,
                    delta=item["arguments"])
        stream.send("response.function_call_arguments.done", item_id=item_id, output_index=index,
                    name=item["name"], arguments=item["arguments"])
    elif kind == "custom_tool_call":
        stream.send("response.custom_tool_call_input.delta", item_id=item_id, output_index=index,
                    delta=item["input"])
        stream.send("response.custom_tool_call_input.done", item_id=item_id, output_index=index,
                    input=item["input"])
    stream.send("response.output_item.done", output_index=index, item=item)


def stream_events(response: dict) -> bytes:
    """The SSE stream of the Responses API for ``response`` (one made by ``from_chat``), whole (``stream_chunks``)."""
    return b"".join(stream_chunks(response))


def stream_chunks(response: dict) -> list[bytes]:
    """The SSE stream of the Responses API for ``response``, one event a ``bytes`` (written one after another).

    The text and the arguments come in one delta each: the gateway has the whole reply before it answers. The
    request's long fields (``_ECHOED_ONCE``: its tools, instructions, metadata) are echoed in the last event alone:
    ``response.created`` and ``response.in_progress`` give their defaults.
    """
    stream = _Stream()
    # the request's own fields that may be long (its tools, its instructions) are echoed once, in the last event
    begun = {**response, "status": "in_progress", "output": [], "incomplete_details": None, "usage": None,
             **{field: _ECHO_DEFAULTS[field] for field in _ECHOED_ONCE}}
    stream.send("response.created", response=begun)
    stream.send("response.in_progress", response=begun)
    for index, item in enumerate(response.get("output") or []):
        _stream_item(stream, index, item)
    final = "response.incomplete" if response.get("status") == "incomplete" else "response.completed"
    stream.send(final, response=response)
    return stream.chunks


def error_body(status: int, message: str, code: str | None = None) -> bytes:
    """OpenAI's error body for an HTTP ``status`` with ``message`` (and ``code``, e.g. ``context_length_exceeded``)."""
    kind = _ERROR_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    return json.dumps({"error": {"message": message, "type": kind, "param": None, "code": code}}).encode()
