"""Agent-facing model protocols, each translated to and from OpenAI chat completions.

Chat completions is the protocol vLLM, SGLang and llama.cpp serve. Each module
here translates one protocol an agent speaks: Anthropic's Messages API (Claude
Code) and OpenAI's Responses API (Codex CLI); the gateway serves both by
translation for an ``openai_chat`` Model, and passes them through to an
``anthropic`` or ``openai_responses`` Model. Pure functions over parsed JSON,
with no I/O, that never trust the shapes they are given (a request is the
agent's, a reply the model's).
"""
