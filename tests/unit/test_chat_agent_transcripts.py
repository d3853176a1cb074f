"""The transcripts of opencode (``run --format json``) and Qwen Code (``-o stream-json``) as trajectory records.

Recorded from the real CLIs (1.18.33, 0.24.4) against a ScriptedEndpoint, texts shortened
(tests/data/agents/): a read of a missing file (a tool error), a shell command, a final text; a 401
from the endpoint; Qwen Code stopped at its turn limit.
"""

from __future__ import annotations

import json
from pathlib import Path

from agentcompass.harnesses.opencode import opencode_transcript
from agentcompass.harnesses.qwen_code import qwen_transcript

DATA = Path(__file__).parent.parent / "data" / "agents"


def recorded(name: str) -> str:
    return (DATA / name).read_text(encoding="utf-8")


def test_opencode_steps_are_messages_with_their_calls_and_results():
    found = opencode_transcript(recorded("opencode-run.jsonl"))
    assert found.answer == "I wrote out.txt." and found.error is None
    messages = [r["message"] for r in found.records if "message" in r]
    assert [[c["function"]["name"] for c in m.get("tool_calls", [])] for m in messages] == [["read"], ["bash"], []]
    assert json.loads(messages[1]["tool_calls"][0]["function"]["arguments"])["command"] == "echo hello > out.txt"
    assert messages[-1]["content"] == "I wrote out.txt."
    results = [r for r in found.records if r.get("type") == "tool_result"]
    assert [(r["name"], r["error"], r["tool_call_id"]) for r in results] == [("read", True, "call_read"),
                                                                            ("bash", False, "call_bash")]
    assert results[0]["output"] == "File not found: /work/ws/missing.txt" and results[1]["output"] == "(no output)"
    # each step's end, with its tokens, kept as an event
    finishes = [r["event"] for r in found.records if r.get("event", {}).get("type") == "step_finish"]
    assert [f["part"]["reason"] for f in finishes] == ["tool-calls", "tool-calls", "stop"]
    assert all(r["source"] == "opencode" for r in found.records)


def test_opencode_error_event_is_the_error_and_no_answer():
    found = opencode_transcript(recorded("opencode-401.jsonl"))
    assert found.answer is None and found.error == "scripted"
    # a step that ended in tool calls with no later step: no answer either
    cut = "".join(line for line in recorded("opencode-run.jsonl").splitlines(keepends=True)
                  if '"reason":"stop"' not in line)
    assert opencode_transcript(cut).answer is None


def test_qwen_code_messages_tool_results_and_the_result():
    found = qwen_transcript(recorded("qwen-code-run.jsonl"))
    assert found.answer == "I wrote out.txt." and found.error is None
    messages = [r["message"] for r in found.records if "message" in r]
    assert [[c["function"]["name"] for c in m.get("tool_calls", [])] for m in messages] == [
        ["read_file"], ["run_shell_command"], []]
    results = [r for r in found.records if r.get("type") == "tool_result"]
    assert [(r["name"], r["error"]) for r in results] == [("read_file", True), ("run_shell_command", False)]
    assert results[1]["arguments"] == {"command": "echo hello > out.txt"} and "Exit Code: 0" in results[1]["output"]
    events = [r["event"]["type"] for r in found.records if "event" in r]
    assert events == ["system", "result"], "its live stream events are left out"


def test_qwen_code_error_result_and_a_run_cut_at_its_turn_limit():
    found = qwen_transcript(recorded("qwen-code-401.jsonl"))
    assert found.answer is None and found.error == "error_during_execution: [API Error: 401 scripted]"
    # stopped by --max-session-turns: a tool call and its result, no result event
    found = qwen_transcript(recorded("qwen-code-max-turns.jsonl"))
    assert found.answer is None and found.error is None
    assert [r.get("type") for r in found.records if "message" not in r and "event" not in r] == ["tool_result"]


def test_output_that_is_not_the_agents_json_is_skipped():
    for parse in (opencode_transcript, qwen_transcript):
        found = parse('not json\n{"type": "text", "part": 5}\n[1, 2]\n{"type": "assistant", "message": "x"}\n{"cut')
        assert found.answer is None and all(isinstance(r, dict) for r in found.records)


def test_json_nested_past_the_bound_is_cut_or_skipped_never_an_error():
    """A model's tool arguments, echoed by the CLI as objects: kept to MAX_DEPTH levels (the scrubber and the
    trajectory's writer recurse), a line past what the parser takes skipped."""
    from agentcompass.harnesses.installed import MAX_DEPTH, NESTED, json_lines
    from agentcompass.secrets import Scrubber

    def step(depth: int) -> str:
        arguments = '{"command": "ls", "extra": ' + "[" * depth + "]" * depth + "}"
        return ('{"type":"tool_use","part":{"type":"tool","tool":"bash","callID":"c","state":{"status":"completed",'
                f'"input":{arguments},"output":"x"}}}}}}')

    lines = [step(2), step(500), step(50_000), '{"type":"text","part":{"text":"done"}}',
             '{"type":"step_finish","part":{"reason":"stop"}}']
    found = opencode_transcript("\n".join(lines))
    assert found.answer == "done"
    results = [r for r in found.records if r.get("type") == "tool_result"]
    assert len(results) == 2, "the line past the parser is skipped"
    assert results[0]["arguments"]["extra"] == [[]] and NESTED in json.dumps(results[1]["arguments"])
    scrubber = Scrubber([{"api_key": "sk-" + "1" * 20}])
    assert all(json.dumps(scrubber.value(r)) for r in found.records)
    deep = json_lines('{"a": ' + "[" * (MAX_DEPTH + 5) + "]" * (MAX_DEPTH + 5) + "}")[0]
    assert json.dumps(deep).count("[") < MAX_DEPTH
