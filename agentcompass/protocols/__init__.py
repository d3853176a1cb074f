"""Agent-facing model protocols, each translated to and from OpenAI chat completions (what vLLM, SGLang and llama.cpp serve)."""
