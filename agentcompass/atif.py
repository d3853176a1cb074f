"""An attempt's trajectory as Harbor's Agent Trajectory Interchange Format (ATIF, ``SCHEMA_VERSION``).

``attempt_document(folder, ...)`` turns one attempt folder (its trajectory.jsonl as every harness writes it,
its result.json, its prepared.json) into one ATIF document, a dict ready for ``json.dumps``; ``run_documents``
does it for every finished attempt of a run (``agentcompass export --format atif``).

The steps come from the model calls the host recorded, in order, since they are what the attempt's usage
counts: each answered call (a ``model_call`` line of the ModelClient, a ``source: gateway`` record of the
model gateway in chat completions, Anthropic's Messages or OpenAI's Responses, streamed or not) is one
``agent`` step: the reply's text, its reasoning, its tool calls, its token usage and model. What each
call's request adds after the last assistant turn becomes the steps before it: a system prompt a
``system`` step, a user message a ``user`` step, a tool's result an observation of the step that made the
call (matched by call id). Tool results are also read from a harness's ``tool_result`` lines (tool_agent,
the command-line agents) and from an agent's own ``tool`` messages (mini-swe-agent's, which hold the
output of its last command, never sent back to the model). An attempt with no answered call (the oracle,
a run that failed before its first call) takes its system and user steps from prepared.json, the agent's
own messages when it recorded some, and its answer as an ``agent`` step that called no model
(``llm_call_count: 0``). A judge's calls (the evaluate stage's) are not steps of the agent.

All of it is the agent's or the model's text: reading is bounded as the scanners' is
(``agentcompass.runtime.transcript``: ``READ_LIMIT``, ``LINE_LIMIT``, ``STEP_LIMIT``), no link is followed
(a link in a file's place is not read), and a line that is not a JSON object is skipped and counted
(``extra.agentcompass.skipped_lines``), never an error.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping

from agentcompass import __version__, layout
from agentcompass._util import trees
from agentcompass.results import ATTEMPT_FILES, MISSING, Run, read_json, rows
from agentcompass.runtime.model_client import reply_tokens
from agentcompass.runtime.transcript import DEPTH_LIMIT, LINE_LIMIT, READ_LIMIT, STEP_LIMIT

# the version Harbor's models validate (harbor.models.trajectories.Trajectory's schema_version default)
SCHEMA_VERSION = "ATIF-v1.8"
PREPARED_FILE = next(f for f, name in ATTEMPT_FILES.items() if name == "prepared")
RESULT_FILE = next(f for f, name in ATTEMPT_FILES.items() if name == "result")
# the paths a gateway record of a model call has, by protocol (a count of tokens, a listing of models: no call)
_CHAT, _ANTHROPIC, _RESPONSES = "openai_chat", "anthropic", "openai_responses"
# the items of a Responses request that the model wrote (the history before what is new)
_MODEL_ITEMS = ("function_call", "custom_tool_call", "local_shell_call", "reasoning")
_OUTPUT_ITEMS = ("function_call_output", "custom_tool_call_output", "local_shell_call_output")


def _protocol(path: Any) -> str | None:
    """The protocol of a gateway record's path, or None for one that is no model call."""
    if not isinstance(path, str):
        return None
    path = path.split("?", 1)[0].rstrip("/")
    if path.endswith("/chat/completions"):
        return _CHAT
    if path.endswith("/messages"):
        return _ANTHROPIC
    if path.endswith("/responses"):
        return _RESPONSES
    return None


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _index(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _text(content: Any, depth: int = 0) -> str:
    """The text of a message's content: a string, or the text of each of its parts (joined by newlines), to
    ``DEPTH_LIMIT`` levels of nesting."""
    if isinstance(content, str):
        return content
    if depth > DEPTH_LIMIT:
        return ""
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, dict):
                text = part.get("text") if isinstance(part.get("text"), str) else part.get("refusal")
                if isinstance(text, str):
                    parts.append(text)
                elif part.get("type") == "tool_result":
                    parts.append(_text(part.get("content"), depth + 1))
        return "\n".join(parts)
    if isinstance(content, dict):
        return _text([content], depth + 1)
    return ""


def _arguments(value: Any) -> dict[str, Any]:
    """A tool call's arguments as ATIF has them, an object: JSON text read, anything else as ``{"input": ...}``."""
    if isinstance(value, str):
        try:
            value = json.loads(value) if value.strip() else {}
        except ValueError:
            return {"input": value}
    if isinstance(value, dict):
        return value
    return {} if value is None else {"input": value}


def _usage(usage: Any) -> dict[str, Any] | None:
    """ATIF metrics of a reply's usage: prompt and completion tokens as agentcompass counts them
    (``reply_tokens``, Anthropic's cache reads and writes among the prompt tokens), the cached ones where the
    provider says so; None for a reply without usage."""
    if not isinstance(usage, dict):
        return None
    prompt, completion, _ = reply_tokens(usage)
    metrics: dict[str, Any] = {"prompt_tokens": prompt, "completion_tokens": completion}
    details = usage.get("prompt_tokens_details") or usage.get("input_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else usage.get("cache_read_input_tokens")
    if isinstance(cached, int) and not isinstance(cached, bool) and cached >= 0:
        metrics["cached_tokens"] = cached
    return metrics


def _merged_usage(events: list[Any]) -> Any:
    """The usage of a streamed reply: each event's (its own, its ``message``'s, its ``response``'s) merged in
    order, a later count replacing an earlier one, as the gateway counts it."""
    merged: dict[str, Any] | None = None
    for event in events:
        if not isinstance(event, dict):
            continue
        usage = event.get("usage")
        for key in ("message", "response"):
            inner = event.get(key)
            if usage is None and isinstance(inner, dict):
                usage = inner.get("usage")
        if isinstance(usage, dict):
            merged = {**(merged or {}), **usage}
    return merged


@dataclass
class _Reply:
    """What one answered model call said: text, reasoning, tool calls (id, name, arguments), usage, model."""

    text: str = ""
    reasoning: str = ""
    calls: list[tuple[str | None, str, dict[str, Any]]] = field(default_factory=list)
    usage: Any = None
    model: str | None = None


def _chat_reply(reply: Any) -> _Reply:
    """A chat completion, or the chunks of a streamed one."""
    if isinstance(reply, list):  # a stream: its deltas joined, its tool calls by index
        found = _Reply(usage=_merged_usage(reply))
        calls: dict[int, dict[str, Any]] = {}
        for chunk in reply:
            if not isinstance(chunk, dict):
                continue
            found.model = found.model or (chunk.get("model") if isinstance(chunk.get("model"), str) else None)
            for choice in chunk.get("choices") or ():
                delta = choice.get("delta") if isinstance(choice, dict) else None
                if not isinstance(delta, dict):
                    continue
                found.text += _str(delta.get("content"))
                found.reasoning += _str(delta.get("reasoning_content")) + _str(delta.get("reasoning"))
                for part in delta.get("tool_calls") or ():
                    if not isinstance(part, dict):
                        continue
                    call = calls.setdefault(_index(part.get("index"), len(calls)), {"id": None, "name": "", "arguments": ""})
                    function = _dict(part.get("function"))
                    call["id"] = call["id"] or part.get("id")
                    call["name"] += _str(function.get("name"))
                    call["arguments"] += _str(function.get("arguments"))
        found.calls = [(c["id"], c["name"], _arguments(c["arguments"])) for _, c in sorted(calls.items())]
        return found
    if not isinstance(reply, dict):
        return _Reply()
    found = _Reply(usage=reply.get("usage"), model=reply.get("model") if isinstance(reply.get("model"), str) else None)
    choices = reply.get("choices")
    message = choices[0].get("message") if isinstance(choices, list) and choices and isinstance(choices[0], dict) else None
    if isinstance(message, dict):
        found.text = _text(message.get("content"))
        found.reasoning = next((message[k] for k in ("reasoning_content", "reasoning")
                                if isinstance(message.get(k), str)), "")
        for call in message.get("tool_calls") or ():
            chosen = _dict(call).get("function")
            if isinstance(chosen, dict):
                found.calls.append((call.get("id"), str(chosen.get("name") or ""), _arguments(chosen.get("arguments"))))
    return found


def _anthropic_reply(reply: Any) -> _Reply:
    """An Anthropic Messages reply, or the events of a streamed one."""
    if isinstance(reply, list):  # a stream: its content blocks rebuilt from their starts and deltas
        blocks: dict[int, dict[str, Any]] = {}
        model = None
        for event in reply:
            if not isinstance(event, dict):
                continue
            message = event.get("message")
            if isinstance(message, dict) and isinstance(message.get("model"), str):
                model = message["model"]
            index = _index(event.get("index"), -1)
            if event.get("type") == "content_block_start" and isinstance(event.get("content_block"), dict):
                blocks[index] = {**event["content_block"], "partial_json": ""}
            elif event.get("type") == "content_block_delta" and isinstance(event.get("delta"), dict):
                block, delta = blocks.setdefault(index, {"type": "text", "text": "", "partial_json": ""}), event["delta"]
                for key in ("text", "thinking", "partial_json"):
                    if isinstance(delta.get(key), str):
                        block[key] = (block.get(key) or "") + delta[key]
        content = []
        for _, block in sorted(blocks.items()):
            if block.get("type") in ("tool_use", "server_tool_use") and block["partial_json"]:
                block["input"] = block["partial_json"]
            content.append(block)
        reply = {"content": content, "model": model, "usage": _merged_usage(reply)}
    if not isinstance(reply, dict):
        return _Reply()
    found = _Reply(usage=reply.get("usage"), model=reply.get("model") if isinstance(reply.get("model"), str) else None)
    texts, thoughts = [], []
    for block in reply.get("content") or ():
        if not isinstance(block, dict):
            continue
        if block.get("type") == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif block.get("type") == "thinking" and isinstance(block.get("thinking"), str):
            thoughts.append(block["thinking"])
        elif block.get("type") in ("tool_use", "server_tool_use"):
            found.calls.append((block.get("id"), str(block.get("name") or ""), _arguments(block.get("input"))))
    found.text, found.reasoning = "\n".join(texts), "\n".join(thoughts)
    return found


def _responses_reply(reply: Any) -> _Reply:
    """An OpenAI Responses ``response``, or the events of a streamed one (its last response, else its items)."""
    if isinstance(reply, list):
        final = None
        items = []
        for event in reply:
            if isinstance(event, dict) and isinstance(event.get("response"), dict) and event["response"].get("output"):
                final = event["response"]
            if isinstance(event, dict) and event.get("type") == "response.output_item.done":
                items.append(event.get("item"))
        reply = {**(final or {"output": items}), "usage": _merged_usage(reply)}
    if not isinstance(reply, dict):
        return _Reply()
    found = _Reply(usage=reply.get("usage"), model=reply.get("model") if isinstance(reply.get("model"), str) else None)
    texts, thoughts = [], []
    for item in reply.get("output") or ():
        if not isinstance(item, dict):
            continue
        kind = item.get("type")
        if kind == "message":
            texts.append(_text(item.get("content")))
        elif kind == "reasoning":
            thoughts += [_text(item.get(key)) for key in ("summary", "content") if item.get(key)]
        elif kind in ("function_call", "custom_tool_call", "local_shell_call"):
            found.calls.append((item.get("call_id") or item.get("id"), str(item.get("name") or kind),
                                _arguments(item.get("arguments") or item.get("input") or item.get("action"))))
    found.text, found.reasoning = "\n".join(t for t in texts if t), "\n".join(t for t in thoughts if t)
    return found


_REPLIES = {_CHAT: _chat_reply, _ANTHROPIC: _anthropic_reply, _RESPONSES: _responses_reply}


def _new_input(request: Any, protocol: str) -> tuple[list[tuple[str, str]], list[tuple[str | None, str]]]:
    """What a request adds after the model's last turn: (role, text) messages (system, user) and
    (call id, content) tool results, in order."""
    if not isinstance(request, dict):
        return [], []
    messages: list[tuple[str, str]] = []
    results: list[tuple[str | None, str]] = []
    if protocol == _RESPONSES:
        items = request.get("input")
        items = [{"role": "user", "content": items}] if isinstance(items, str) else items
        items = items if isinstance(items, list) else []
        last = max((i for i, item in enumerate(items) if isinstance(item, dict) and (
            item.get("type") in _MODEL_ITEMS or item.get("role") == "assistant")), default=-1)
        if last < 0 and isinstance(request.get("instructions"), str):
            messages.append(("system", request["instructions"]))
        for item in items[last + 1:]:
            if not isinstance(item, dict):
                continue
            if item.get("type") in _OUTPUT_ITEMS:
                results.append((item.get("call_id"), _text(item.get("output"))))
            elif item.get("role") in ("system", "developer", "user"):
                messages.append(("user" if item["role"] == "user" else "system", _text(item.get("content"))))
        return messages, results
    history = request.get("messages")
    history = history if isinstance(history, list) else []
    last = max((i for i, m in enumerate(history) if isinstance(m, dict) and m.get("role") == "assistant"), default=-1)
    if protocol == _ANTHROPIC and last < 0 and request.get("system"):
        messages.append(("system", _text(request.get("system"))))
    for message in history[last + 1:]:
        if not isinstance(message, dict):
            continue
        role, content = message.get("role"), message.get("content")
        if role == "tool":
            results.append((message.get("tool_call_id"), _text(content)))
        elif role in ("system", "developer", "user") and protocol == _ANTHROPIC and isinstance(content, list):
            said = []
            for block in content:
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    results.append((block.get("tool_use_id"), _text(block.get("content"))))
                else:
                    said.append(block)
            if said:
                messages.append(("user", _text(said)))
        elif role in ("system", "developer", "user"):
            messages.append(("user" if role == "user" else "system", _text(content)))
    return messages, results


def _tool_definitions(request: Any, protocol: str) -> list[dict[str, Any]] | None:
    """The tools a request offered, in OpenAI's function-calling shape (as ATIF has them)."""
    tools = request.get("tools") if isinstance(request, dict) else None
    if not isinstance(tools, list):
        return None
    found = []
    for tool in tools:
        if not isinstance(tool, dict):
            continue
        if isinstance(tool.get("function"), dict):
            found.append(tool)
        elif "name" in tool:  # Anthropic's (input_schema) and the Responses API's (flat) shapes
            schema = tool.get("input_schema") if protocol == _ANTHROPIC else tool.get("parameters")
            found.append({"type": "function", "function": {
                "name": tool["name"], "description": tool.get("description", ""),
                **({"parameters": schema} if isinstance(schema, dict) else {})}})
    return found or None


class _Builder:
    """The steps of one document, built record by record."""

    def __init__(self) -> None:
        self.steps: list[dict[str, Any]] = []
        self.calls: dict[str, int] = {}  # a tool call's id -> the index of the last step that made it
        # (step index, call id) -> the calls of that id the step made, and the results of them seen (a model
        # may give two calls of one reply the same id)
        self.made: Counter[tuple[int, str]] = Counter()
        self.observed: Counter[tuple[int, str]] = Counter()
        self.last_system: str | None = None
        self.tools: list[dict[str, Any]] | None = None
        self.counts = {"skipped_lines": 0, "model_calls": 0, "failed_calls": 0, "judge_calls": 0,
                       "refused_calls": 0, "unmatched_tool_results": 0}

    def message(self, role: str, text: str) -> None:
        if role == "system":
            if text == self.last_system:  # a request that starts again sends the same system prompt
                return
            self.last_system = text
        self.steps.append({"source": role, "message": text})

    def answer(self, reply: _Reply, extra: dict[str, Any]) -> None:
        step: dict[str, Any] = {"source": "agent", "message": reply.text, "llm_call_count": 1}
        if reply.model:
            step["model_name"] = reply.model
        if reply.reasoning:
            step["reasoning_content"] = reply.reasoning
        index = len(self.steps)
        if reply.calls:
            step["tool_calls"] = []
            for n, (call_id, name, arguments) in enumerate(reply.calls, start=1):
                call_id = str(call_id) if call_id else f"call_{index + 1}_{n}"
                step["tool_calls"].append({"tool_call_id": call_id, "function_name": name, "arguments": arguments})
                self.calls[call_id] = index
                self.made[index, call_id] += 1
        metrics = _usage(reply.usage)
        if metrics is not None:
            step["metrics"] = metrics
        if extra:
            step["extra"] = extra
        self.steps.append(step)

    def result(self, call_id: Any, content: str, extra: dict[str, Any] | None = None) -> None:
        """A tool's result: an observation of the step that made the call ``call_id`` (once), else of the last
        agent step (without a call id) when it names no call of any step."""
        key = str(call_id) if call_id else None
        if key is not None and key in self.calls:
            index = self.calls[key]
            if self.observed[index, key] >= self.made[index, key]:  # seen already (a tool_result line, then the
                return  # next request's tool message)
            self.observed[index, key] += 1
        else:
            index = next((i for i in range(len(self.steps) - 1, -1, -1) if self.steps[i]["source"] == "agent"), -1)
            if index < 0 or key is not None:
                self.counts["unmatched_tool_results"] += 1
                if index < 0:
                    return
            key = None
        entry: dict[str, Any] = {"content": content}
        if key is not None:
            entry["source_call_id"] = key
        if extra:
            entry["extra"] = extra
        self.steps[index].setdefault("observation", {"results": []})["results"].append(entry)


def _model_call(builder: _Builder, record: dict[str, Any], protocol: str) -> None:
    """One recorded model call: its request's new input, then its reply as an agent step (an answered call)."""
    reply = record.get("reply")
    if record.get("status") != 200 or record.get("error") is not None or reply is None:
        builder.counts["refused_calls" if str(record.get("error") or "").startswith("refused")
                       or record.get("refused") else "failed_calls"] += 1
        return
    builder.counts["model_calls"] += 1
    request = record.get("request")
    if builder.tools is None:
        builder.tools = _tool_definitions(request, protocol)
    messages, results = _new_input(request, protocol)
    for call_id, content in results:
        builder.result(call_id, content)
    for role, text in messages:
        builder.message(role, text)
    extra: dict[str, Any] = {}
    cache = record.get("cache")
    if isinstance(cache, dict) and cache.get("status") == "hit":
        extra["call_cache"] = "hit"  # answered from agentcompass's call cache: no call sent
    for name, body in (("request", request), ("reply", reply)):
        if isinstance(body, dict) and isinstance(body.get("agentcompass_cut"), str):  # recorded as its head only
            extra[f"{name}_cut"] = body["agentcompass_cut"]
    if isinstance(reply, str):  # a reply that is no JSON: the harness's answer is empty, its text is kept
        builder.answer(_Reply(text=reply), {**extra, "malformed": True})
    else:
        builder.answer(_REPLIES[protocol](reply) if "reply_cut" not in extra else _Reply(), extra)


def _agent_message(builder: _Builder, message: dict[str, Any], has_calls: bool) -> None:
    """An agent's own message (mini-swe-agent's, a command-line agent's): its tool results always; the rest
    only when the attempt recorded no model call (the host's records are the steps when it did)."""
    role = message.get("role")
    if role == "tool":
        builder.result(message.get("tool_call_id"), _text(message.get("content")))
    elif has_calls:
        return
    elif role in ("system", "user"):
        builder.message(role, _text(message.get("content")))
    elif role == "assistant":
        builder.answer(_chat_reply({"choices": [{"message": message}]}), {})


def _record(builder: _Builder, record: dict[str, Any], has_calls: bool) -> None:
    """One line of trajectory.jsonl, into ``builder``."""
    if record.get("type") == "model_call":
        if record.get("judge"):
            builder.counts["judge_calls"] += 1
        else:
            _model_call(builder, record, _CHAT)
    elif record.get("source") == "gateway":
        protocol = _protocol(record.get("path"))
        if protocol is not None and record.get("method", "POST") == "POST":
            _model_call(builder, record, protocol)
        elif str(record.get("error") or "").startswith("refused"):
            builder.counts["refused_calls"] += 1
    elif record.get("type") == "tool_result":
        output = record.get("output")
        builder.result(record.get("tool_call_id"), output if isinstance(output, str) else json.dumps(output),
                       {"error": True} if record.get("error") is True else None)
    elif isinstance(record.get("message"), dict):
        _agent_message(builder, record["message"], has_calls)


# what ``_lines`` gives last when it stopped at a cap with more of the file unread
_CUT = object()


def _lines(path: str) -> Iterator[Any]:
    """The values of the lines of ``path`` (None for a line that is no JSON, or is longer than
    ``LINE_LIMIT``), at most ``STEP_LIMIT`` lines and ``READ_LIMIT`` bytes (then ``_CUT``); never
    through a link."""
    try:
        fd = trees.open_file(path)
    except OSError:
        return
    read = 0
    with os.fdopen(fd, "rb") as handle:
        for number in range(STEP_LIMIT + 1):
            line = handle.readline(LINE_LIMIT + 1)
            if not line:
                return
            read += len(line)
            if read > READ_LIMIT or number == STEP_LIMIT:
                yield _CUT
                return
            if len(line) > LINE_LIMIT:  # the rest of an over-long line, unread
                while line and not line.endswith(b"\n"):
                    line = handle.readline(LINE_LIMIT)
                    read += len(line)
                yield None
                continue
            try:
                yield json.loads(line.decode("utf-8", "replace"))
            except (ValueError, RecursionError):
                yield None


def _records(folder: str) -> tuple[list[dict[str, Any]], int, bool]:
    """The JSON objects of the attempt's trajectory.jsonl, how many lines were skipped, and whether reading
    stopped at a cap."""
    found, skipped, cut = [], 0, False
    for value in _lines(os.path.join(folder, layout.TRAJECTORY)):
        if value is _CUT:
            cut = True
        elif isinstance(value, dict):
            found.append(value)
        else:  # no JSON, JSON that is no object, a line past LINE_LIMIT
            skipped += 1
    return found, skipped, cut


def _read(path: str) -> Any:
    """A JSON file of the attempt (``read_json``: never through a link), or None when it is absent or unreadable."""
    try:
        return read_json(path)
    except (FileNotFoundError, ValueError):
        return None


def _prepared_steps(builder: _Builder, prepared: Any) -> None:
    """The system prompt and the prompt of prepared.json, for an attempt whose model calls show none."""
    given = (prepared or {}).get("input") if isinstance(prepared, dict) else None
    if not isinstance(given, dict):
        return
    if isinstance(given.get("system_prompt"), str) and given["system_prompt"]:
        builder.message("system", given["system_prompt"])
    for message in given.get("messages") or ():
        if isinstance(message, dict) and message.get("role") in ("system", "user"):
            builder.message(message["role"], _text(message.get("content")))
    if isinstance(given.get("prompt"), str) and given["prompt"]:
        builder.message("user", given["prompt"])


def attempt_document(folder: str | Path, identity: Mapping[str, Any], *, agent_version: str = "unknown",
                     result: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The ATIF document of the attempt in ``folder``.

    ``identity`` is the attempt's row (``agentcompass.results.rows``: namespace, run id, request, task id,
    attempt, the harness and model, and the verdict); ``agent_version`` the harness's version (run_info.json);
    ``result`` its result.json when the caller has read it (else it is read here).
    """
    folder = os.fspath(folder)
    result = result if result is not None else (_read(os.path.join(folder, RESULT_FILE)) or {})
    records, skipped, cut = _records(folder)
    builder = _Builder()
    builder.counts["skipped_lines"] = skipped
    calls = [r for r in records if (r.get("type") == "model_call" and not r.get("judge"))
             or (r.get("source") == "gateway" and _protocol(r.get("path")) and r.get("method", "POST") == "POST")]
    if not calls and not any(isinstance(r.get("message"), dict) for r in records):
        _prepared_steps(builder, _read(os.path.join(folder, PREPARED_FILE)))
    for record in records:
        try:
            _record(builder, record, bool(calls))
        except (TypeError, ValueError, AttributeError, RecursionError):  # a shape no writer gives: skipped
            builder.counts["skipped_lines"] += 1
    if not any(s["source"] == "agent" for s in builder.steps) and result.get("answer") is not None:
        answer = result["answer"]
        builder.steps.append({"source": "agent", "message": answer if isinstance(answer, str) else json.dumps(answer),
                              "llm_call_count": 0, "extra": {"answer": True}})
    if not builder.steps:  # ATIF needs one step: what the attempt left
        builder.steps.append({"source": "system", "message": f"the attempt recorded no step: {result.get('error') or ''}".strip()})
    steps = [{"step_id": number, **step} for number, step in enumerate(builder.steps, start=1)]
    metered = [s["metrics"] for s in steps if "metrics" in s]
    final: dict[str, Any] = {
        "total_prompt_tokens": sum(m["prompt_tokens"] for m in metered),
        "total_completion_tokens": sum(m["completion_tokens"] for m in metered),
        "total_steps": len(steps),
    }
    if any("cached_tokens" in m for m in metered):
        final["total_cached_tokens"] = sum(m.get("cached_tokens", 0) for m in metered)
    if isinstance(identity.get("cost_usd"), (int, float)):
        final["total_cost_usd"] = identity["cost_usd"]
    session = "/".join((str(identity.get("namespace")), str(identity.get("run_id")),
                        layout.task_segment(str(identity.get("task_id"))), str(identity.get("attempt"))))
    agent: dict[str, Any] = {"name": str(identity.get("harness") or "unknown"), "version": agent_version}
    if identity.get("model"):
        agent["model_name"] = str(identity["model"])
    if builder.tools:
        agent["tool_definitions"] = builder.tools
    verdict = {key: identity.get(key) for key in ("status", "score", "correct", "failure_class", "error", "error_stage")}
    return {
        "schema_version": SCHEMA_VERSION,
        "session_id": session,
        "trajectory_id": session,
        "agent": agent,
        "steps": steps,
        "final_metrics": final,
        "extra": {"agentcompass": {
            "version": __version__,
            **{key: identity.get(key) for key in ("namespace", "run_id", "request", "task_id", "attempt", "category",
                                                  "benchmark", "environment")},
            "verdict": verdict,
            "usage": result.get("usage") if isinstance(result.get("usage"), dict) else None,
            **({"flagged": identity.get("flagged"), "flags": identity.get("flags")}
               if identity.get("flagged") is not None else {}),
            **builder.counts,
            "truncated": cut,
        }},
    }


def run_documents(run: Run) -> Iterator[tuple[str, dict[str, Any] | None]]:
    """(``<namespace>/<run_id>/<task segment>/<attempt>.json``, its document) of every attempt of ``run`` its
    tasks.json lists; the document is None for an attempt that has not finished (no result.json)."""
    info = _read(layout.run_file(run.path, layout.PLAN_LIST, "run_info")) or {}
    harness = info.get("harness") if isinstance(info, dict) else None
    version = str(harness.get("version")) if isinstance(harness, dict) and harness.get("version") else "unknown"
    # each part one path segment (task_segment escapes a '/' or a '..' of a request.json edited by hand)
    folder = f"{layout.task_segment(run.namespace)}/{layout.task_segment(run.run_id)}"
    for row in rows(run):
        name = f"{folder}/{layout.task_segment(row['task_id'])}/{row['attempt']}.json"
        if row["status"] == MISSING:
            yield name, None
            continue
        yield name, attempt_document(row["attempt_dir"], row, agent_version=version)
