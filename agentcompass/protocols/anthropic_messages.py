"""Anthropic's Messages API (what Claude Code speaks through ``ANTHROPIC_BASE_URL``) to and from chat completions.

``to_chat`` turns a Messages request into a chat-completions request,
``count_tokens`` estimates the tokens of a request (chat completions cannot count them),
``from_chat`` turns the chat-completions reply into a Messages reply,
``stream_events`` turns that reply into the server-sent events of Anthropic's
streaming API (``stream_chunks``: the same, one event at a time), and ``error_body`` is Anthropic's error shape. The gateway
buffers: the upstream call is always ``stream: false``, and a request that
asked for a stream gets the whole reply as one stream of events.

What a request may hold, and what becomes of it:

- ``system`` (a string or text blocks) is one system message, the blocks'
  text joined by a blank line; ``messages`` keep their order, a ``system``
  message among them (Claude Code sends them) a system message in its place
  (a chat template that takes a system message only first refuses it). A user turn's
  ``tool_result`` blocks become ``role: tool`` messages (first, as chat
  completions wants them right after the assistant's calls), an ``is_error``
  result's text prefixed with ``TOOL_ERROR_PREFIX``; its text and ``image``
  blocks (base64 or URL) follow as one user message, with the images that
  tool results returned (a tool message holds text only). An assistant turn's
  ``tool_use`` blocks become ``tool_calls`` whose ``arguments`` are the input
  as a JSON string.
- ``tools`` (custom tools: ``name``, ``description``, ``input_schema``) become
  functions; ``tool_choice`` ``auto``/``any``/``tool``/``none`` becomes
  ``auto``/``required``/the named function/``none``, and
  ``disable_parallel_tool_use`` becomes ``parallel_tool_calls: false``.
- ``max_tokens``, ``temperature``, ``top_p``, ``top_k`` (which vLLM, SGLang
  and llama.cpp take) and ``stop_sequences`` (as ``stop``) carry over.
- Dropped, as they change nothing a chat-completions server can do:
  ``metadata``, ``stream`` (the gateway buffers), ``thinking`` (whether the
  model reasons is the model server's setting), ``cache_control`` on any block,
  ``service_tier``, ``container``, ``context_management``, ``output_config`` and any other
  top-level field (a newer agent's fields do not break the call), and
  ``thinking`` / ``redacted_thinking`` blocks of earlier assistant turns.
- Refused (``ValueError``, which the gateway answers as a 400): anything whose
  meaning would be lost in silence: a server tool (``web_search``, ``bash``
  and other typed tools), a content block of another type (``document``,
  ``server_tool_use``, ...), an image from a file id, and every malformed
  shape (a wrong type, a missing field).

A reply of the model that is no chat completion (no ``choices[0].message``)
is a ``ValueError`` too, which the gateway answers as a 502. Tool-call
arguments that are not a JSON object are kept as text under
``RAW_ARGUMENTS_KEY`` of the tool's input, so the agent sees what the model
sent and the call never fails here. All of it costs time linear in the size
of what it is given.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from . import call_ids

# The input of a tool_use whose arguments were no JSON object: {RAW_ARGUMENTS_KEY: the arguments as sent}.
RAW_ARGUMENTS_KEY = "_raw_arguments"
# What stands before the text of a tool_result marked is_error (chat completions has no such flag).
TOOL_ERROR_PREFIX = "Error: "
# How the text blocks of a system prompt are joined into the one system message.
SYSTEM_JOIN = "\n\n"
# Chat completions' finish_reason -> Messages' stop_reason (any other, or none, is end_turn).
STOP_REASONS = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "content_filter": "refusal",
}
# HTTP status -> Anthropic's error type; any other 4xx is invalid_request_error, any other status api_error.
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    503: "overloaded_error",
    504: "timeout_error",
    529: "overloaded_error",
}
# A count_tokens answer estimates a token per this many characters of the request's JSON (chat completions
# has no call that counts).
CHARS_PER_TOKEN = 4
# Request fields that carry over under the same name.
_SAMPLING = ("temperature", "top_p", "top_k")


def _where(path: str, what: str) -> ValueError:
    return ValueError(f"{path}: {what}")


def _type_name(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _dumps(value: Any, path: str) -> str:
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError) as exc:
        raise _where(path, f"not JSON that can be sent on ({type(exc).__name__})") from None


# --- requests ------------------------------------------------------------------------------


def _text_of(block: dict, path: str) -> str:
    text = block.get("text")
    if not isinstance(text, str):
        raise _where(f"{path}.text", f"must be a string, got {_type_name(text)}")
    return text


def _image_part(block: dict, path: str) -> dict:
    source = block.get("source")
    if not isinstance(source, dict):
        raise _where(f"{path}.source", f"must be an object, got {_type_name(source)}")
    kind = source.get("type")
    if kind == "base64":
        media, data = source.get("media_type"), source.get("data")
        if not isinstance(media, str) or not isinstance(data, str):
            raise _where(path, "a base64 image needs media_type and data as strings")
        return {"type": "image_url", "image_url": {"url": f"data:{media};base64,{data}"}}
    if kind == "url":
        url = source.get("url")
        if not isinstance(url, str):
            raise _where(f"{path}.source.url", f"must be a string, got {_type_name(url)}")
        return {"type": "image_url", "image_url": {"url": url}}
    raise _where(f"{path}.source.type", f"an image from {str(kind)[:40]!r} cannot be sent on (base64 and url can)")


def _blocks(content: Any, path: str) -> list[dict]:
    """A message's content as a list of blocks (a string is one text block)."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list):
        raise _where(path, f"must be a string or a list of content blocks, got {_type_name(content)}")
    for index, block in enumerate(content):
        if not isinstance(block, dict):
            raise _where(f"{path}[{index}]", f"must be a content block (an object), got {_type_name(block)}")
    return content


def _tool_result(block: dict, path: str) -> tuple[dict, list[dict]]:
    """A tool_result block: the tool message, and the image parts it returned (sent on in a user message)."""
    call_id = block.get("tool_use_id")
    if not isinstance(call_id, str) or not call_id:
        raise _where(f"{path}.tool_use_id", f"must be a non-empty string, got {_type_name(call_id)}")
    texts: list[str] = []
    images: list[dict] = []
    content = block.get("content", "")
    for index, part in enumerate(_blocks(content, f"{path}.content") if content is not None else []):
        where = f"{path}.content[{index}]"
        kind = part.get("type")
        if kind == "text":
            texts.append(_text_of(part, where))
        elif kind == "image":
            images.append(_image_part(part, where))
        else:
            raise _where(f"{where}.type", f"a tool result holds text and image blocks, not {str(kind)[:40]!r}")
    text = "\n".join(texts)
    if block.get("is_error") is True:
        text = TOOL_ERROR_PREFIX + text
    return {"role": "tool", "tool_call_id": call_id, "content": text}, images


def _user_turn(blocks: list[dict], path: str) -> list[dict]:
    tools: list[dict] = []
    parts: list[dict] = []
    for index, block in enumerate(blocks):
        where = f"{path}[{index}]"
        kind = block.get("type")
        if kind == "text":
            parts.append({"type": "text", "text": _text_of(block, where)})
        elif kind == "image":
            parts.append(_image_part(block, where))
        elif kind == "tool_result":
            message, images = _tool_result(block, where)
            tools.append(message)
            parts.extend(images)
        else:
            raise _where(f"{where}.type", f"a user turn holds text, image and tool_result blocks, not {str(kind)[:40]!r}")
    if not parts:
        return tools
    if len(parts) == 1 and parts[0]["type"] == "text":
        return [*tools, {"role": "user", "content": parts[0]["text"]}]
    return [*tools, {"role": "user", "content": parts}]


def _assistant_turn(blocks: list[dict], path: str) -> list[dict]:
    texts: list[str] = []
    calls: list[dict] = []
    for index, block in enumerate(blocks):
        where = f"{path}[{index}]"
        kind = block.get("type")
        if kind == "text":
            texts.append(_text_of(block, where))
        elif kind == "tool_use":
            call_id, name, arguments = block.get("id"), block.get("name"), block.get("input", {})
            if not isinstance(call_id, str) or not call_id or not isinstance(name, str) or not name:
                raise _where(where, "a tool_use block needs an id and a name (non-empty strings)")
            if not isinstance(arguments, dict):
                raise _where(f"{where}.input", f"must be an object, got {_type_name(arguments)}")
            calls.append({"id": call_id, "type": "function",
                          "function": {"name": name, "arguments": _dumps(arguments, f"{where}.input")}})
        elif kind in ("thinking", "redacted_thinking"):
            continue  # the model's earlier reasoning: chat completions takes none back
        else:
            raise _where(f"{where}.type", f"an assistant turn holds text and tool_use blocks, not {str(kind)[:40]!r}")
    message: dict[str, Any] = {"role": "assistant", "content": "".join(texts) if texts else None}
    if calls:
        message["tool_calls"] = calls
    return [message] if texts or calls else []


def _tool(tool: Any, path: str) -> dict:
    if not isinstance(tool, dict):
        raise _where(path, f"must be an object, got {_type_name(tool)}")
    kind, name, schema = tool.get("type", "custom"), tool.get("name"), tool.get("input_schema")
    if kind not in ("custom", None):
        raise _where(f"{path}.type", f"the server tool {str(kind)[:60]!r} is Anthropic's own: an OpenAI-compatible "
                     "endpoint has none (send custom tools: name, description, input_schema)")
    if not isinstance(name, str) or not name:
        raise _where(f"{path}.name", f"must be a non-empty string, got {_type_name(name)}")
    if not isinstance(schema, dict):
        raise _where(f"{path}.input_schema", f"must be an object (a JSON schema), got {_type_name(schema)}")
    function: dict[str, Any] = {"name": name, "parameters": schema}
    description = tool.get("description")
    if description is not None:
        if not isinstance(description, str):
            raise _where(f"{path}.description", f"must be a string, got {_type_name(description)}")
        function["description"] = description
    return {"type": "function", "function": function}


def _tool_choice(choice: Any, chat: dict) -> None:
    if not isinstance(choice, dict):
        raise _where("tool_choice", f"must be an object, got {_type_name(choice)}")
    kind = choice.get("type")
    if kind == "auto":
        chat["tool_choice"] = "auto"
    elif kind == "any":
        chat["tool_choice"] = "required"
    elif kind == "none":
        chat["tool_choice"] = "none"
    elif kind == "tool":
        name = choice.get("name")
        if not isinstance(name, str) or not name:
            raise _where("tool_choice.name", f"must be a non-empty string, got {_type_name(name)}")
        chat["tool_choice"] = {"type": "function", "function": {"name": name}}
    else:
        raise _where("tool_choice.type", f"must be auto, any, tool or none, got {str(kind)[:40]!r}")
    if choice.get("disable_parallel_tool_use") is True and kind != "none":
        chat["parallel_tool_calls"] = False


def _system_text(system: Any, path: str) -> str:
    """A system prompt (a string or text blocks) as one text, the blocks joined by ``SYSTEM_JOIN``."""
    if isinstance(system, str):
        return system
    blocks = _blocks(system, path)
    for index, block in enumerate(blocks):
        if block.get("type") != "text":
            raise _where(f"{path}[{index}].type", f"a system prompt holds text blocks, not {str(block.get('type'))[:40]!r}")
    return SYSTEM_JOIN.join(_text_of(block, f"{path}[{index}]") for index, block in enumerate(blocks))


def to_chat(body: Any) -> dict:
    """A Messages request -> the chat-completions request that asks the same (``stream`` always false).

    Raises ``ValueError`` naming the field for a request that is malformed or asks what chat
    completions cannot carry (the module docstring lists what is kept, dropped and refused).
    """
    if not isinstance(body, dict):
        raise ValueError(f"the request body must be a JSON object, got {_type_name(body)}")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise _where("model", f"must be a non-empty string, got {_type_name(model)}")
    max_tokens = body.get("max_tokens")
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        raise _where("max_tokens", f"must be a whole number of at least 1, got {str(max_tokens)[:40]}")
    messages: list[dict] = []
    system = body.get("system")
    if system is not None:
        text = _system_text(system, "system")
        if text:
            messages.append({"role": "system", "content": text})
    turns = body.get("messages")
    if not isinstance(turns, list) or not turns:
        raise _where("messages", f"must be a non-empty list, got {_type_name(turns) if not isinstance(turns, list) else 'an empty one'}")
    for index, turn in enumerate(turns):
        path = f"messages[{index}]"
        if not isinstance(turn, dict):
            raise _where(path, f"must be an object, got {_type_name(turn)}")
        role = turn.get("role")
        blocks = _blocks(turn.get("content"), f"{path}.content")
        if role == "user":
            messages.extend(_user_turn(blocks, f"{path}.content"))
        elif role == "assistant":
            messages.extend(_assistant_turn(blocks, f"{path}.content"))
        elif role == "system":
            messages.append({"role": "system", "content": _system_text(turn.get("content"), f"{path}.content")})
        else:
            raise _where(f"{path}.role", f"must be user, assistant or system, got {str(role)[:40]!r}")
    chat: dict[str, Any] = {"model": model, "messages": messages, "max_tokens": max_tokens, "stream": False}
    for name in _SAMPLING:
        value = body.get(name)
        if value is not None:
            if not _number(value):
                raise _where(name, f"must be a number, got {_type_name(value)}")
            chat[name] = value
    stops = body.get("stop_sequences")
    if stops is not None:
        if not isinstance(stops, list) or not all(isinstance(stop, str) for stop in stops):
            raise _where("stop_sequences", "must be a list of strings")
        if stops:
            chat["stop"] = stops
    tools = body.get("tools")
    if tools is not None:
        if not isinstance(tools, list):
            raise _where("tools", f"must be a list, got {_type_name(tools)}")
        if tools:
            chat["tools"] = [_tool(tool, f"tools[{index}]") for index, tool in enumerate(tools)]
    choice = body.get("tool_choice")
    if choice is not None:
        _tool_choice(choice, chat)
    return chat


def count_tokens(body: Any) -> dict:
    """The answer to ``POST /v1/messages/count_tokens``: ``{"input_tokens": N}``, an estimate from the
    length of the prompt's JSON (``CHARS_PER_TOKEN``); ``ValueError`` for a body that is no object."""
    if not isinstance(body, dict):
        raise ValueError(f"the request body must be a JSON object, got {_type_name(body)}")
    prompt = {name: body.get(name) for name in ("system", "messages", "tools")}
    return {"input_tokens": len(_dumps(prompt, "the request")) // CHARS_PER_TOKEN + 1}


# --- replies -------------------------------------------------------------------------------


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def _text(content: Any) -> str:
    """A chat message's content as text: a string, or the text of a list of parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part["text"] for part in content
                       if isinstance(part, dict) and isinstance(part.get("text"), str))
    return ""


def _tool_input(arguments: Any) -> dict:
    if isinstance(arguments, dict):
        return arguments
    if arguments is None or (isinstance(arguments, str) and not arguments.strip()):
        return {}
    if not isinstance(arguments, str):
        return {RAW_ARGUMENTS_KEY: _dumps(arguments, "arguments")}
    try:
        parsed = json.loads(arguments)
    except (ValueError, RecursionError):
        return {RAW_ARGUMENTS_KEY: arguments}
    return parsed if isinstance(parsed, dict) else {RAW_ARGUMENTS_KEY: arguments}


def _thinking_wanted(request: Any) -> bool:
    thinking = request.get("thinking") if isinstance(request, dict) else None
    return isinstance(thinking, dict) and thinking.get("type") in ("enabled", "adaptive")


def from_chat(reply: Any, request: Any) -> dict:
    """The Messages reply for ``request`` (the Messages request) from the model's chat-completions ``reply``.

    Raises ``ValueError`` when ``reply`` is no chat completion (no ``choices[0].message`` object).
    The reply names the model the request named (the model the reply names when the request names none).
    """
    choices = reply.get("choices") if isinstance(reply, dict) else None
    choice = choices[0] if isinstance(choices, list) and choices else None
    message = choice.get("message") if isinstance(choice, dict) else None
    if not isinstance(message, dict):
        raise ValueError("the model's reply is no chat completion: it has no choices[0].message object")
    content: list[dict] = []
    reasoning = message.get("reasoning_content", message.get("reasoning"))
    if isinstance(reasoning, str) and reasoning and _thinking_wanted(request):
        content.append({"type": "thinking", "thinking": reasoning, "signature": ""})
    text = _text(message.get("content"))
    if text:
        content.append({"type": "text", "text": text})
    calls = message.get("tool_calls")
    made_id = call_ids("toolu_", request, reply)
    for index, call in enumerate(calls if isinstance(calls, list) else []):
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict):
            continue  # no function to call: nothing the agent could run
        call_id = call.get("id")
        name = function.get("name")
        content.append({
            "type": "tool_use",
            "id": call_id if isinstance(call_id, str) and call_id else made_id(index),
            "name": name if isinstance(name, str) else "",
            "input": _tool_input(function.get("arguments")),
        })
    finish = choice.get("finish_reason") if isinstance(choice, dict) else None
    stop_reason = STOP_REASONS.get(finish, "end_turn") if isinstance(finish, str) else "end_turn"
    if stop_reason != "max_tokens" and any(block["type"] == "tool_use" for block in content):
        stop_reason = "tool_use"
    elif stop_reason == "tool_use":
        stop_reason = "end_turn"  # tool_calls said, but no call came through
    # vLLM names the stop string that ended the text in choices[0].stop_reason
    matched = choice.get("stop_reason") if isinstance(choice, dict) else None
    stops = request.get("stop_sequences") if isinstance(request, dict) else None
    stop_sequence = None
    if stop_reason == "end_turn" and isinstance(matched, str) and isinstance(stops, list) and matched in stops:
        stop_reason, stop_sequence = "stop_sequence", matched
    usage = reply.get("usage")
    usage = usage if isinstance(usage, dict) else {}
    model = request.get("model") if isinstance(request, dict) else None
    if not isinstance(model, str) or not model:
        model = reply.get("model") if isinstance(reply.get("model"), str) else "unknown"
    return {
        "id": f"msg_{uuid.uuid4().hex[:24]}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": stop_sequence,
        "usage": {"input_tokens": _count(usage.get("prompt_tokens")),
                  "output_tokens": _count(usage.get("completion_tokens"))},
    }


# --- streams and errors --------------------------------------------------------------------


def _event(name: str, data: dict) -> bytes:
    # ASCII JSON: a lone surrogate of the model's text is escaped, never an encoding error
    return b"event: " + name.encode() + b"\ndata: " + json.dumps(data).encode() + b"\n\n"


def _block_events(index: int, block: dict) -> list[bytes]:
    kind = block.get("type")
    start: dict[str, Any]
    if kind == "text":
        start, delta = {"type": "text", "text": ""}, {"type": "text_delta", "text": block["text"]}
        deltas = [delta]
    elif kind == "tool_use":
        start = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
        deltas = [{"type": "input_json_delta", "partial_json": json.dumps(block["input"])}]
    elif kind == "thinking":
        start = {"type": "thinking", "thinking": "", "signature": ""}
        deltas = [{"type": "thinking_delta", "thinking": block["thinking"]},
                  {"type": "signature_delta", "signature": block.get("signature", "")}]
    else:
        raise ValueError(f"a content block of type {str(kind)[:40]!r} has no stream form here")
    return [
        _event("content_block_start", {"type": "content_block_start", "index": index, "content_block": start}),
        *(_event("content_block_delta", {"type": "content_block_delta", "index": index, "delta": d}) for d in deltas),
        _event("content_block_stop", {"type": "content_block_stop", "index": index}),
    ]


def stream_events(message: dict) -> bytes:
    """The server-sent events of Anthropic's streaming API that carry ``message`` (a reply of ``from_chat``):
    message_start, each block's start, delta(s) and stop, message_delta (stop reason, usage), message_stop."""
    return b"".join(stream_chunks(message))


def stream_chunks(message: dict) -> list[bytes]:
    """``stream_events`` as its events, one ``bytes`` each (written one after another, never joined whole)."""
    usage = message["usage"]
    start = {**message, "content": [], "stop_reason": None, "stop_sequence": None,
             "usage": {"input_tokens": usage["input_tokens"], "output_tokens": 0}}
    events = [_event("message_start", {"type": "message_start", "message": start}), _event("ping", {"type": "ping"})]
    for index, block in enumerate(message["content"]):
        events.extend(_block_events(index, block))
    events.append(_event("message_delta", {
        "type": "message_delta",
        "delta": {"stop_reason": message["stop_reason"], "stop_sequence": message["stop_sequence"]},
        "usage": {"input_tokens": usage["input_tokens"], "output_tokens": usage["output_tokens"]},
    }))
    events.append(_event("message_stop", {"type": "message_stop"}))
    return events


def error_type(status: int) -> str:
    """Anthropic's error type for an HTTP status."""
    if status in ERROR_TYPES:
        return ERROR_TYPES[status]
    return "invalid_request_error" if 400 <= status < 500 else "api_error"


def error_body(status: int, message: str) -> bytes:
    """An error in the shape Anthropic's clients read: {"type": "error", "error": {"type", "message"}}."""
    return json.dumps({"type": "error", "error": {"type": error_type(status), "message": message}}).encode()
