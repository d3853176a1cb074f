"""The agent-facing protocols the gateway speaks besides OpenAI chat completions.

Each module translates one protocol an agent speaks (Anthropic's Messages API
for Claude Code, OpenAI's Responses API for Codex CLI) to and from OpenAI chat completions, the protocol that
vLLM, SGLang and llama.cpp serve: pure functions over parsed JSON, with no I/O,
that never trust the shapes they are given (a request is the agent's, a reply
the model's).
"""
