"""Agent-facing model protocols, each translated to and from OpenAI chat completions.

Chat completions is the protocol vLLM, SGLang and llama.cpp serve. Each module
here translates one protocol an agent speaks: Anthropic's Messages API (Claude
Code; the gateway serves it for an ``openai_chat`` Model) and OpenAI's
Responses API (Codex CLI; not served by translation yet: the gateway passes
``/responses`` through to the Model as it is). Pure functions over parsed JSON,
with no I/O, that never trust the shapes they are given (a request is the
agent's, a reply the model's).
"""
