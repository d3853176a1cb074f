"""agentcompass.atif: each trajectory shape a harness writes, from small hand-made lines, as ATIF steps."""

from __future__ import annotations

import json
from pathlib import Path

from agentcompass import atif

IDENTITY = {"namespace": "default", "run_id": "r", "request": "r", "task_id": "t/1", "attempt": 2, "harness": "h",
            "model": "m", "status": "completed", "score": 1.0, "correct": True, "failure_class": None}


def folder_with(tmp_path: Path, lines: list, result: dict | None = None, prepared: dict | None = None) -> Path:
    folder = tmp_path / "attempt"
    folder.mkdir()
    (folder / "trajectory.jsonl").write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n"
                                                     for line in lines))
    (folder / "result.json").write_text(json.dumps(result or {"status": "completed", "usage": {}}))
    if prepared is not None:
        (folder / "prepared.json").write_text(json.dumps(prepared))
    return folder


def usage(prompt: int, completion: int, **more) -> dict:
    return {"prompt_tokens": prompt, "completion_tokens": completion, **more}


def chat_reply(text: str | None, *calls: tuple[str, str, dict], usage_: dict | None = None, model: str = "m-1") -> dict:
    message: dict = {"role": "assistant", "content": text}
    if calls:
        message["tool_calls"] = [{"id": i, "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
                                 for i, n, a in calls]
    return {"model": model, "choices": [{"message": message}], "usage": usage_ or usage(10, 2)}


SYSTEM, PROMPT = {"role": "system", "content": "be brief"}, {"role": "user", "content": "capital of France?"}


def shape(document: dict) -> list[tuple]:
    return [(s["source"], s["message"], [c["function_name"] for c in s.get("tool_calls") or []],
             [(r.get("source_call_id"), r["content"]) for r in (s.get("observation") or {}).get("results", [])])
            for s in document["steps"]]


def test_tool_agent_lines_a_tool_call_matched_to_its_result_usage_per_step_and_a_malformed_line_skipped(tmp_path):
    first = chat_reply("Looking.", ("c1", "bash", {"command": "echo Paris"}), usage_=usage(10, 2))
    second = chat_reply(None, ("c2", "submit", {"answer": "Paris"}),
                        usage_=usage(30, 4, prompt_tokens_details={"cached_tokens": 8}))
    tool = {"role": "tool", "tool_call_id": "c1", "content": "Paris\n"}
    lines = [
        {"type": "model_call", "step": 1, "try": 1, "status": 503, "error": "HTTP 503", "request": {"messages": [SYSTEM, PROMPT]}},
        {"type": "model_call", "step": 1, "try": 2, "status": 200, "reply": first, "request": {
            "messages": [SYSTEM, PROMPT], "tools": [{"type": "function", "function": {"name": "bash"}}]}},
        {"type": "tool_result", "step": 1, "tool_call_id": "c1", "name": "bash", "arguments": {}, "output": "Paris\n",
         "error": False},
        "{not json",
        "[1, 2]",
        {"type": "model_call", "step": 2, "try": 1, "status": 200, "reply": second,
         "request": {"messages": [SYSTEM, PROMPT, first["choices"][0]["message"], tool]}},
        {"type": "tool_result", "step": 2, "tool_call_id": "c2", "name": "submit", "output": "submitted", "error": True},
        {"type": "model_call", "judge": True, "status": 200, "reply": chat_reply("correct"), "request": {}},
    ]
    document = atif.attempt_document(folder_with(tmp_path, lines), IDENTITY, agent_version="1")
    assert document["schema_version"] == atif.SCHEMA_VERSION == "ATIF-v1.8"
    assert shape(document) == [
        ("system", "be brief", [], []),
        ("user", "capital of France?", [], []),
        ("agent", "Looking.", ["bash"], [("c1", "Paris\n")]),  # once: the next request's tool message is the same
        ("agent", "", ["submit"], [("c2", "submitted")]),
    ]
    steps = document["steps"]
    assert [s["step_id"] for s in steps] == [1, 2, 3, 4]
    assert steps[2]["tool_calls"][0] == {"tool_call_id": "c1", "function_name": "bash", "arguments": {"command": "echo Paris"}}
    assert steps[2]["metrics"] == {"prompt_tokens": 10, "completion_tokens": 2}
    assert steps[3]["metrics"] == {"prompt_tokens": 30, "completion_tokens": 4, "cached_tokens": 8}
    assert steps[3]["observation"]["results"][0]["extra"] == {"error": True}
    assert steps[2]["model_name"] == "m-1" and steps[2]["llm_call_count"] == 1
    assert document["final_metrics"] == {"total_prompt_tokens": 40, "total_completion_tokens": 6, "total_steps": 4,
                                         "total_cached_tokens": 8}
    assert document["agent"] == {"name": "h", "version": "1", "model_name": "m",
                                 "tool_definitions": [{"type": "function", "function": {"name": "bash"}}]}
    assert document["session_id"] == "default/r/t%2F1/2"
    extra = document["extra"]["agentcompass"]
    assert extra["verdict"]["status"] == "completed" and extra["verdict"]["correct"] is True
    assert (extra["task_id"], extra["attempt"]) == ("t/1", 2)
    assert extra["skipped_lines"] == 2 and extra["failed_calls"] == 1 and extra["model_calls"] == 2
    assert extra["judge_calls"] == 1  # the evaluate stage's judge is no step of the agent


def test_ids_a_model_repeats_match_each_result_once(tmp_path):
    """A model that numbers its calls afresh each turn, and gives two calls of one reply the same id."""
    first = chat_reply(None, ("call_0", "bash", {"command": "a"}), ("call_0", "bash", {"command": "b"}))
    second = chat_reply(None, ("call_0", "bash", {"command": "c"}))
    results = [{"type": "tool_result", "tool_call_id": "call_0", "output": out} for out in ("A", "B")]
    lines = [
        {"type": "model_call", "status": 200, "reply": first, "request": {"messages": [PROMPT]}},
        *results,
        {"type": "model_call", "status": 200, "reply": second, "request": {"messages": [
            PROMPT, first["choices"][0]["message"], *({"role": "tool", "tool_call_id": "call_0", "content": out}
                                                      for out in ("A", "B"))]}},
        {"type": "tool_result", "tool_call_id": "call_0", "output": "C"},
    ]
    document = atif.attempt_document(folder_with(tmp_path, lines), IDENTITY)
    assert [r for s in shape(document) for r in s[3]] == [("call_0", "A"), ("call_0", "B"), ("call_0", "C")]
    assert shape(document)[2][3] == [("call_0", "C")]


def test_chat_follow_ups_are_user_steps(tmp_path):
    first = chat_reply("Paris")
    lines = [
        {"type": "model_call", "turn": 1, "status": 200, "reply": first, "request": {"messages": [PROMPT]}},
        {"type": "model_call", "turn": 2, "status": 200, "reply": chat_reply("Yes, Paris."), "request": {
            "messages": [PROMPT, first["choices"][0]["message"], {"role": "user", "content": "Sure?"}]}},
    ]
    document = atif.attempt_document(folder_with(tmp_path, lines), IDENTITY)
    assert shape(document) == [("user", "capital of France?", [], []), ("agent", "Paris", [], []),
                               ("user", "Sure?", [], []), ("agent", "Yes, Paris.", [], [])]
    assert document["agent"]["version"] == "unknown" and "tool_definitions" not in document["agent"]


def test_gateway_chat_records_and_mini_swe_agents_messages_give_the_last_commands_output(tmp_path):
    first = chat_reply("Step 0.", ("call_0", "bash", {"command": "echo Paris > a"}))
    second = chat_reply("Step 1.", ("call_1", "bash", {"command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"}))
    gateway = {"source": "gateway", "method": "POST", "path": "/chat/completions", "status": 200}
    lines = [
        {"source": "gateway", "method": "GET", "path": "/models", "status": 200, "reply": {"data": []}},
        {**gateway, "request": {"messages": [SYSTEM, PROMPT]}, "reply": first},
        {**gateway, "status": 429, "request": {}, "reply": {"error": "slow down"}, "rate_limited": True},
        {**gateway, "request": {"messages": [SYSTEM, PROMPT, first["choices"][0]["message"],
                                             {"role": "tool", "tool_call_id": "call_0", "content": "rc 0"}]},
         "reply": second},
        {"source": "gateway", "method": "POST", "path": "/v1/messages", "status": 400, "error": "refused: too many"},
        *({"source": "mini_swe_agent", "message": m} for m in [
            SYSTEM, PROMPT, first["choices"][0]["message"], {"role": "tool", "tool_call_id": "call_0", "content": "rc 0"},
            second["choices"][0]["message"], {"role": "tool", "tool_call_id": "call_1", "content": "Paris"},
            {"role": "exit", "content": "Submitted"}]),
        {"source": "mini_swe_agent", "info": {"exit_status": "Submitted"}},
    ]
    document = atif.attempt_document(folder_with(tmp_path, lines), IDENTITY)
    assert shape(document) == [
        ("system", "be brief", [], []), ("user", "capital of France?", [], []),
        ("agent", "Step 0.", ["bash"], [("call_0", "rc 0")]),
        ("agent", "Step 1.", ["bash"], [("call_1", "Paris")]),  # from the agent's own messages
    ]
    extra = document["extra"]["agentcompass"]
    assert extra["failed_calls"] == 1 and extra["refused_calls"] == 1 and extra["model_calls"] == 2


def test_anthropic_messages_through_the_gateway_tool_use_and_tool_result_blocks_and_cache_reads(tmp_path):
    reply = {"type": "message", "model": "claude-x", "content": [
        {"type": "thinking", "thinking": "a file"}, {"type": "text", "text": "Reading."},
        {"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {"file_path": "a.txt"}}],
        "usage": {"input_tokens": 5, "cache_read_input_tokens": 20, "output_tokens": 3}}
    done = {"type": "message", "content": [{"type": "text", "text": "Paris"}], "usage": {"input_tokens": 40, "output_tokens": 1}}
    gateway = {"source": "gateway", "method": "POST", "path": "/v1/messages", "status": 200}
    lines = [
        {**gateway, "request": {"system": [{"type": "text", "text": "you code"}], "messages": [PROMPT],
                                "tools": [{"name": "Read", "description": "reads", "input_schema": {"type": "object"}}]},
         "reply": reply},
        {"source": "gateway", "method": "POST", "path": "/v1/messages/count_tokens", "status": 200, "reply": {"input_tokens": 9}},
        {**gateway, "request": {"system": "you code", "messages": [
            PROMPT, {"role": "assistant", "content": reply["content"]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                          "content": [{"type": "text", "text": "Paris"}]}]}]}, "reply": done},
        {"source": "claude_code", "type": "tool_result", "name": "Read", "arguments": {}, "output": "Paris",
         "tool_call_id": "toolu_1", "error": False},
    ]
    document = atif.attempt_document(folder_with(tmp_path, lines), IDENTITY)
    assert shape(document) == [("system", "you code", [], []), ("user", "capital of France?", [], []),
                               ("agent", "Reading.", ["Read"], [("toolu_1", "Paris")]), ("agent", "Paris", [], [])]
    step = document["steps"][2]
    assert step["reasoning_content"] == "a file" and step["model_name"] == "claude-x"
    assert step["metrics"] == {"prompt_tokens": 25, "completion_tokens": 3, "cached_tokens": 20}
    assert document["agent"]["tool_definitions"] == [
        {"type": "function", "function": {"name": "Read", "description": "reads", "parameters": {"type": "object"}}}]
    assert document["final_metrics"]["total_prompt_tokens"] == 65


def test_streamed_replies_are_joined_responses_and_chat_chunks(tmp_path):
    responses = [
        {"type": "response.created", "response": {"output": []}},
        {"type": "response.completed", "response": {"model": "gpt-x", "output": [
            {"type": "reasoning", "summary": [{"type": "summary_text", "text": "list it"}]},
            {"type": "function_call", "call_id": "fc_1", "name": "shell", "arguments": "{\"cmd\": \"ls\"}"}],
            "usage": {"input_tokens": 12, "output_tokens": 5, "input_tokens_details": {"cached_tokens": 0}}}},
    ]
    chunks = [
        {"model": "chat-x", "choices": [{"delta": {"content": "Pa"}}]},
        {"choices": [{"delta": {"content": "ris", "tool_calls": [
            {"index": 0, "id": "k1", "function": {"name": "sub", "arguments": "{\"a\""}}]}}]},
        {"choices": [{"delta": {"tool_calls": [{"index": 0, "function": {"name": "mit", "arguments": ": 1}"}}]}}]},
        {"choices": [], "usage": {"prompt_tokens": 20, "completion_tokens": 4}},
    ]
    lines = [
        {"source": "gateway", "method": "POST", "path": "/v1/responses", "status": 200,
         "request": {"instructions": "sys", "input": "list"}, "reply": responses},
        {"source": "gateway", "method": "POST", "path": "/v1/responses", "status": 200, "request": {"input": [
            {"type": "function_call", "call_id": "fc_1", "name": "shell", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "fc_1", "output": "a b"}]},
         "reply": {"output": [{"type": "message", "content": [{"type": "output_text", "text": "done"}]}]}},
        {"source": "gateway", "method": "POST", "path": "/chat/completions", "status": 200,
         "request": {"messages": [{"role": "user", "content": "again"}]}, "reply": chunks},
    ]
    document = atif.attempt_document(folder_with(tmp_path, lines), IDENTITY)
    assert shape(document) == [("system", "sys", [], []), ("user", "list", [], []),
                               ("agent", "", ["shell"], [("fc_1", "a b")]), ("agent", "done", [], []),
                               ("user", "again", [], []), ("agent", "Paris", ["submit"], [])]
    steps = document["steps"]
    assert steps[2]["reasoning_content"] == "list it" and steps[2]["tool_calls"][0]["arguments"] == {"cmd": "ls"}
    assert steps[2]["metrics"] == {"prompt_tokens": 12, "completion_tokens": 5, "cached_tokens": 0}
    assert "metrics" not in steps[3]  # a reply without usage
    assert steps[5]["tool_calls"][0] == {"tool_call_id": "k1", "function_name": "submit", "arguments": {"a": 1}}
    assert steps[5]["metrics"] == {"prompt_tokens": 20, "completion_tokens": 4} and steps[5]["model_name"] == "chat-x"


def test_an_attempt_without_model_calls_has_its_prompt_and_its_answer(tmp_path):
    prepared = {"input": {"system_prompt": "sys", "prompt": "capital?", "messages": []}}
    folder = folder_with(tmp_path, [], {"status": "completed", "answer": "Paris"}, prepared)
    document = atif.attempt_document(folder, IDENTITY)
    assert shape(document) == [("system", "sys", [], []), ("user", "capital?", [], []), ("agent", "Paris", [], [])]
    assert document["steps"][2]["llm_call_count"] == 0 and "metrics" not in document["steps"][2]
    assert document["final_metrics"]["total_prompt_tokens"] == 0

    (folder / "prepared.json").unlink()
    (folder / "result.json").write_text(json.dumps({"status": "run_error", "error": "no endpoint"}))
    assert shape(atif.attempt_document(folder, IDENTITY)) == [("system", "the attempt recorded no step: no endpoint", [], [])]


def test_a_link_in_place_of_the_trajectory_is_not_followed(tmp_path):
    secret = tmp_path / "elsewhere.jsonl"
    secret.write_text(json.dumps({"type": "model_call", "status": 200, "reply": chat_reply("secret"),
                                  "request": {"messages": [PROMPT]}}) + "\n")
    folder = folder_with(tmp_path, [])
    (folder / "trajectory.jsonl").unlink()
    (folder / "trajectory.jsonl").symlink_to(secret)
    document = atif.attempt_document(folder, IDENTITY)
    assert "secret" not in json.dumps(document)


def test_odd_shapes_are_skipped_never_an_error(tmp_path):
    lines = [
        {"type": "model_call", "status": 200, "reply": {"choices": "no"}, "request": {"messages": "no"}},
        {"type": "model_call", "status": 200, "reply": {"choices": [{"message": {"content": 5, "tool_calls": [
            {"id": 7, "function": {"name": None, "arguments": "[1]"}}]}}], "usage": "lots"}, "request": None},
        {"type": "tool_result", "tool_call_id": "nowhere", "output": {"a": 1}},
        {"source": "gateway", "method": "POST", "path": "/v1/messages", "status": 200, "reply": [1, "x", {"index": "y"}]},
        {"source": "x", "message": {"role": "tool", "content": [{"type": "tool_result", "content": {"type": "tool_result"}}]}},
    ]
    document = atif.attempt_document(folder_with(tmp_path, lines), IDENTITY)
    agent = [s for s in document["steps"] if s["source"] == "agent"]
    assert len(agent) == 3
    assert agent[1]["tool_calls"] == [{"tool_call_id": "7", "function_name": "", "arguments": {"input": [1]}}]
    assert document["extra"]["agentcompass"]["unmatched_tool_results"] == 1


def test_a_reply_that_is_no_json_and_a_reply_recorded_cut_are_steps_that_say_so(tmp_path):
    lines = [
        {"type": "model_call", "status": 200, "reply": "<html>oops", "malformed": "the reply is not a JSON object",
         "request": {"messages": [PROMPT]}},
        {"type": "model_call", "status": 200, "reply": {"agentcompass_cut": "2000000 bytes", "head": "{"},
         "request": {"agentcompass_cut": "3000000 bytes", "head": "{"}},
    ]
    steps = atif.attempt_document(folder_with(tmp_path, lines), IDENTITY)["steps"]
    assert [(s["source"], s["message"]) for s in steps] == [("user", "capital of France?"), ("agent", "<html>oops"),
                                                           ("agent", "")]
    assert steps[1]["extra"] == {"malformed": True}
    assert steps[2]["extra"] == {"request_cut": "3000000 bytes", "reply_cut": "2000000 bytes"}


def test_reading_stops_at_the_scanners_caps_and_says_so(tmp_path, monkeypatch):
    monkeypatch.setattr(atif, "STEP_LIMIT", 2)
    monkeypatch.setattr(atif, "LINE_LIMIT", 400)
    lines = [{"type": "model_call", "status": 200, "reply": chat_reply("one"), "request": {"messages": [PROMPT]}},
             "x" * 900, {"type": "model_call", "status": 200, "reply": chat_reply("two"), "request": {}}]
    document = atif.attempt_document(folder_with(tmp_path, lines), IDENTITY)
    assert [s["message"] for s in document["steps"]] == ["capital of France?", "one"]
    extra = document["extra"]["agentcompass"]
    assert extra["skipped_lines"] == 1 and extra["truncated"] is True

    monkeypatch.setattr(atif, "STEP_LIMIT", 3)
    assert atif.attempt_document(tmp_path / "attempt", IDENTITY)["extra"]["agentcompass"]["truncated"] is False
