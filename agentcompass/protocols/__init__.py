"""Agent-facing model protocols, each translated to and from OpenAI chat completions.

Chat completions is the protocol vLLM, SGLang and llama.cpp serve. Each module
here translates one protocol an agent speaks: Anthropic's Messages API (Claude
Code) and OpenAI's Responses API (Codex CLI); the gateway serves both by
translation for an ``openai_chat`` Model, and passes them through to an
``anthropic`` or ``openai_responses`` Model. Pure functions over parsed JSON,
with no I/O, that never trust the shapes they are given (a request is the
agent's, a reply the model's).
"""

from __future__ import annotations

import hashlib
from typing import Any, Callable

from agentcompass.callcache import request_digest

# the hex digits of an id the gateway makes for a tool call the Model named none for
CALL_ID_DIGITS = 24


def call_ids(prefix: str, request: Any, reply: Any) -> Callable[[int], str]:
    """The ids of the tool calls of the chat ``reply`` to the agent's ``request`` that the Model named none
    for, by index: made from the request (less the fields that name a session, ``callcache.VOLATILE``) and
    the reply, not drawn at random. The same reply to the same request gets the same ids, so the agent's next
    call, which names them, is the same call again (a replay from the call cache finds it); another turn's
    request gets others. Both are digested once, at the first id asked for, however many calls there are."""
    seed: list[str] = []

    def made(index: int) -> str:
        if not seed:
            seed.append(f"{request_digest(request)}:{request_digest(reply)}")
        return prefix + hashlib.sha256(f"{seed[0]}:{index}".encode()).hexdigest()[:CALL_ID_DIGITS]

    return made
