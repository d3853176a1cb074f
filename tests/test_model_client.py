"""The Model client against a real HTTP endpoint on 127.0.0.1: retries, faults, usage, tool calls."""

from __future__ import annotations

import asyncio
import email.utils
import json
import random
import time
from pathlib import Path

import pytest

from agentcompass.runtime.config import ConfigError
from agentcompass.runtime.model_client import (
    ModelCallConfig,
    ModelCallError,
    ModelClient,
    Trajectory,
    retry_after_seconds,
    tls_context,
    token_count,
)
from agentcompass.runtime.models import ModelSpec
from agentcompass.testing.endpoint import (
    Drop,
    Hang,
    Reply,
    ScriptedEndpoint,
    completion,
    malformed,
    rate_limited,
    server_error,
    tool_call,
    tool_call_reply,
    tool_calls_reply,
)

FAST = {"retry_backoff": 0.01, "retry_backoff_max": 0.05}


def call(endpoint, *, messages=None, tools=None, model=None, trajectory=None, **config):
    """One ``complete`` through a fresh client; (reply or error, usage, seconds)."""
    spec = model or ModelSpec(id="m", base_url=endpoint.base_url)
    client = ModelClient(spec, ModelCallConfig(**{**FAST, **config}), trajectory=trajectory)

    async def go():
        async with client:
            return await client.complete(messages or [{"role": "user", "content": "hi"}], tools, turn=1)

    started = time.monotonic()
    try:
        outcome = asyncio.run(go())
    except ModelCallError as exc:
        outcome = exc
    return outcome, client.usage.as_dict(), time.monotonic() - started


def test_clients_of_one_process_share_one_tls_context():
    """httpx would read every CA certificate again for each client (57 ms of CPU an attempt)."""
    spec = ModelSpec(id="m", base_url="https://models.invalid/v1")

    async def contexts():
        found = []
        for _ in range(2):
            async with ModelClient(spec, ModelCallConfig(**FAST)) as client:
                found.append(client._http._transport._pool._ssl_context)
        return found

    first, second = asyncio.run(contexts())
    assert first is second is tls_context()
    assert first.verify_mode.name == "CERT_REQUIRED" and first.check_hostname


def test_429_twice_then_an_answer_costs_three_calls_and_no_retry():
    with ScriptedEndpoint(script=[rate_limited(0), server_error(503), completion("Paris")]) as endpoint:
        reply, usage, _ = call(endpoint, max_model_retries=0)
    assert reply.text == "Paris" and reply.malformed is None
    assert usage["calls"] == 3 and usage["retries"] == 0 and usage["rate_limited"] == 2
    assert usage["prompt_tokens"] == 10 and usage["completion_tokens"] == 2  # only the reply that arrived
    assert len(endpoint.requests) == 3


def test_retry_after_sets_the_wait_and_is_capped():
    with ScriptedEndpoint(script=[rate_limited(0.5), completion("ok")]) as endpoint:
        reply, _, seconds = call(endpoint, retry_backoff=0)
    assert reply.text == "ok" and seconds >= 0.5
    with ScriptedEndpoint(script=[rate_limited(3600), completion("ok")]) as endpoint:
        reply, _, seconds = call(endpoint, retry_after_max=0.2)
    assert reply.text == "ok" and seconds < 5


def test_retry_after_reads_seconds_and_http_dates():
    assert retry_after_seconds("2") == 2.0
    assert retry_after_seconds("0.5") == 0.5
    assert retry_after_seconds(None) is None and retry_after_seconds("soon") is None
    assert retry_after_seconds("nan") is None and retry_after_seconds("-3") == 0.0
    in_ten = email.utils.formatdate(time.time() + 10, usegmt=True)
    assert 8 <= retry_after_seconds(in_ten) <= 10


def test_a_500_is_retried():
    with ScriptedEndpoint(script=[server_error(500), server_error(503), completion("fine")]) as endpoint:
        reply, usage, _ = call(endpoint)
    assert reply.text == "fine" and usage["calls"] == 3


def test_when_retries_run_out_the_error_names_the_last_failure():
    with ScriptedEndpoint(script=[Drop(), server_error(502)]) as endpoint:
        error, usage, _ = call(endpoint, max_model_retries=1)
    assert isinstance(error, ModelCallError)
    assert "after 2 tries" in str(error) and "HTTP 502" in str(error) and "scripted server error" in str(error)
    assert usage["calls"] == 2 and usage["retries"] == 1


def test_a_reply_hanging_past_the_timeout_is_retried():
    with ScriptedEndpoint(script=[Hang(30), completion("late but here")]) as endpoint:
        reply, usage, seconds = call(endpoint, timeout=0.5)
    assert reply.text == "late but here"
    assert usage["calls"] == 2 and 0.5 <= seconds < 5
    with ScriptedEndpoint(reply=lambda body: Hang(30)) as endpoint:
        error, usage, _ = call(endpoint, timeout=0.3, max_model_retries=2)
    assert isinstance(error, ModelCallError) and "timeout" in str(error)
    assert usage["calls"] == 3


def test_a_dropped_connection_is_retried():
    with ScriptedEndpoint(script=[Drop(), completion("after the drop")]) as endpoint:
        reply, usage, _ = call(endpoint)
    assert reply.text == "after the drop" and usage["calls"] == 2
    with ScriptedEndpoint(reply=lambda body: Drop()) as endpoint:
        error, _, _ = call(endpoint, max_model_retries=1)
    assert isinstance(error, ModelCallError) and "connection failed" in str(error)


def test_malformed_json_is_an_empty_answer_not_an_error():
    with ScriptedEndpoint(script=[malformed()]) as endpoint:
        reply, usage, _ = call(endpoint)
    assert reply.text == "" and reply.tool_calls == []
    assert reply.malformed == "the reply is not a JSON object" and reply.raw.startswith('{"choices"')
    assert usage["calls"] == 1 and usage["retries"] == 0  # a reply arrived: the model's answer, not a fault


@pytest.mark.parametrize("body, why", [
    ({"choices": []}, "no choices"),
    ({"id": "x"}, "no choices"),
    ({"choices": [{"index": 0}]}, "no message"),
    ({"choices": [{"message": {"role": "assistant", "content": None}}]}, "neither content nor tool calls"),
    ([1, 2], "not a JSON object"),
])
def test_empty_replies_are_empty_answers(body, why):
    with ScriptedEndpoint(script=[Reply(200, body)]) as endpoint:
        reply, usage, _ = call(endpoint)
    assert reply.text == "" and why in reply.malformed and usage["calls"] == 1


def test_a_refused_request_is_not_retried():
    with ScriptedEndpoint(reply=lambda body: (401, {"error": {"message": "bad key"}})) as endpoint:
        error, usage, _ = call(endpoint)
    assert isinstance(error, ModelCallError) and "HTTP 401" in str(error) and "bad key" in str(error)
    assert usage["calls"] == 1


def test_params_and_key_reach_the_endpoint(monkeypatch):
    monkeypatch.setenv("AC_CLIENT_TEST_KEY", "sk-client-test-123")
    model = ModelSpec(id="my-model", base_url=None, api_key="${AC_CLIENT_TEST_KEY}",
                      params={"temperature": 0.2, "max_tokens": 7, "model": "not-this", "seed": 1})
    with ScriptedEndpoint() as endpoint:
        model.base_url = endpoint.base_url + "/"
        tools = [tool_call_reply("f", {})["choices"][0]["message"]["tool_calls"][0]]  # any JSON list will do
        call(endpoint, model=model, tools=tools)
    request = endpoint.requests[0]
    assert request.path == "/v1/chat/completions"
    assert request.headers["Authorization"] == "Bearer sk-client-test-123"
    assert request.body["model"] == "my-model"  # a param cannot replace what the call fixes
    assert {k: request.body[k] for k in ("temperature", "max_tokens", "seed")} == {"temperature": 0.2, "max_tokens": 7, "seed": 1}
    assert request.body["tools"] == tools and request.body["messages"] == [{"role": "user", "content": "hi"}]


def test_tool_calls_are_parsed_in_order_and_bad_arguments_kept_raw():
    calls = [tool_call("get_weather", {"city": "Paris"}, "c1"), tool_call("lookup", "{not json", "c2")]
    with ScriptedEndpoint(script=[tool_calls_reply(calls)]) as endpoint:
        reply, _, _ = call(endpoint)
    assert [c.as_answer() for c in reply.tool_calls] == [
        {"name": "get_weather", "arguments": {"city": "Paris"}},
        {"name": "lookup", "arguments": "{not json"},
    ]
    assert reply.malformed is None and reply.text == ""
    assert [c["id"] for c in reply.message["tool_calls"]] == ["c1", "c2"]


def test_backoff_doubles_with_jitter_up_to_its_cap():
    client = ModelClient(ModelSpec(id="m", base_url="http://127.0.0.1:9/v1"),
                         ModelCallConfig(retry_backoff=1, retry_backoff_max=5), rng=random.Random(7))
    for number, ceiling in ((1, 1), (2, 2), (3, 4), (4, 5), (9, 5)):
        delays = [client._delay(number, None) for _ in range(50)]
        assert all(ceiling / 2 <= d <= ceiling for d in delays)
        assert len(set(delays)) > 1  # jitter: concurrent attempts do not retry in lockstep
    assert client._delay(1, 3.0) == 3.0 and client._delay(1, 999.0) == 60.0


def test_bad_call_settings_are_refused_with_the_name():
    with pytest.raises(ConfigError, match="timeout"):
        ModelCallConfig(timeout=0)
    with pytest.raises(ConfigError, match="max_model_retries"):
        ModelCallConfig(max_model_retries=-1)
    with pytest.raises(ConfigError, match="retry_backoff"):
        ModelCallConfig(retry_backoff="soon")


def test_a_model_without_base_url_is_an_error_that_says_so():
    with pytest.raises(ModelCallError, match="base_url"):
        ModelClient(ModelSpec(id="m"))


def lines(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_every_try_is_a_trajectory_line_failed_ones_with_their_error(tmp_path):
    path = tmp_path / "trajectory.jsonl"
    with ScriptedEndpoint(script=[server_error(500), rate_limited(0), completion("Paris")]) as endpoint:
        reply, usage, _ = call(endpoint, trajectory=Trajectory(path))
    assert reply.text == "Paris" and usage["calls"] == 3
    records = lines(path)
    assert [(r["type"], r["turn"], r["try"], r["status"]) for r in records] == [
        ("model_call", 1, 1, 500), ("model_call", 1, 2, 429), ("model_call", 1, 3, 200)]
    assert [r.get("retried") for r in records] == [True, True, None]
    assert "HTTP 500" in records[0]["error"] and "HTTP 429" in records[1]["error"]
    assert "reply" not in records[0] and records[2]["reply"]["choices"][0]["message"]["content"] == "Paris"
    assert all(r["request"]["messages"] == [{"role": "user", "content": "hi"}] for r in records)


def test_a_call_that_fails_for_good_leaves_every_try_and_a_refusal_its_status(tmp_path):
    path = tmp_path / "trajectory.jsonl"
    with ScriptedEndpoint(script=[server_error(503), server_error(503)]) as endpoint:
        error, _, _ = call(endpoint, trajectory=Trajectory(path), max_model_retries=1, rate_limit_patience=0)
    assert isinstance(error, ModelCallError)
    assert [(r["try"], r["status"], r["retried"]) for r in lines(path)] == [(1, 503, True), (2, 503, False)]
    path.unlink()
    with ScriptedEndpoint(reply=lambda body: (401, {"error": {"message": "bad key"}})) as endpoint:
        call(endpoint, trajectory=Trajectory(path))
    [refused] = lines(path)
    assert refused["status"] == 401 and "bad key" in refused["error"] and refused["retried"] is False


@pytest.mark.parametrize("reported, prompt, completion_tokens, unreadable", [
    ({"prompt_tokens": 12.0, "completion_tokens": 3.6}, 12, 4, None),
    ({"prompt_tokens": "7", "completion_tokens": 2}, 7, 2, None),
    ({"prompt_tokens": "many", "completion_tokens": [1]}, 0, 0, "prompt_tokens is not a number"),
    ({"input_tokens": 5, "output_tokens": 1}, 5, 1, None),
    ("lots", 0, 0, "usage is not an object"),
])
def test_token_counts_are_whole_numbers_and_unreadable_ones_are_noted(tmp_path, reported, prompt, completion_tokens,
                                                                        unreadable):
    path = tmp_path / "trajectory.jsonl"
    body = {**completion("ok"), "usage": reported}
    with ScriptedEndpoint(script=[body, body]) as endpoint:
        spec = ModelSpec(id="m", base_url=endpoint.base_url)
        client = ModelClient(spec, ModelCallConfig(**FAST), trajectory=Trajectory(path))

        async def twice():
            async with client:
                for _ in range(2):
                    await client.complete([{"role": "user", "content": "hi"}])

        asyncio.run(twice())
    usage = client.usage.as_dict()
    assert (usage["prompt_tokens"], usage["completion_tokens"]) == (2 * prompt, 2 * completion_tokens)
    assert usage["total_tokens"] == 2 * (prompt + completion_tokens)
    assert all(type(usage[k]) is int for k in ("prompt_tokens", "completion_tokens", "total_tokens"))
    notes = [r.get("usage_unreadable") for r in lines(path)]
    assert all((n is None) if unreadable is None else (unreadable in n) for n in notes)


def test_token_count_rounds_floats_and_refuses_what_is_not_a_number():
    assert [token_count(v) for v in (3, 2.5, 3.5, "4", True, None, float("nan"), -2)] == [3, 2, 4, 4, None, None, None, 0]


def test_references_in_base_url_and_params_resolve_on_the_wire_and_stay_in_the_record(tmp_path, monkeypatch):
    path = tmp_path / "trajectory.jsonl"
    monkeypatch.setenv("AC_CLIENT_TEST_USER", "user-value-8841")
    with ScriptedEndpoint() as endpoint:
        host = endpoint.base_url.split("//")[1].split("/")[0]
        monkeypatch.setenv("AC_CLIENT_TEST_HOST", host)
        model = ModelSpec(id="m", base_url="http://${AC_CLIENT_TEST_HOST}/v1",
                          params={"user": "tenant-${AC_CLIENT_TEST_USER}"})
        reply, _, _ = call(endpoint, model=model, trajectory=Trajectory(path),
                           messages=[{"role": "user", "content": "echo ${AC_CLIENT_TEST_USER}"}])
    assert reply.text == "ok"
    sent = endpoint.requests[0].body
    assert sent["user"] == "tenant-user-value-8841"
    assert sent["messages"][0]["content"] == "echo ${AC_CLIENT_TEST_USER}"  # the task's text is never resolved
    assert "user-value-8841" not in path.read_text() and "${AC_CLIENT_TEST_USER}" in path.read_text()


def test_an_unset_variable_at_call_time_is_a_model_call_error_naming_it(monkeypatch):
    monkeypatch.delenv("AC_CLIENT_TEST_GONE", raising=False)
    with ScriptedEndpoint() as endpoint:
        error, usage, _ = call(endpoint, model=ModelSpec(id="m", base_url=endpoint.base_url,
                                                        api_key="${AC_CLIENT_TEST_GONE}"))
    assert isinstance(error, ModelCallError) and "AC_CLIENT_TEST_GONE" in str(error)
    assert usage["calls"] == 0 and endpoint.requests == []


# --- complete records through the real workflow -----------------------------------------


def _run(workdir: Path, request: dict) -> Path:
    import yaml

    from conftest import snakemake

    path = workdir / "run.yaml"
    path.write_text(yaml.safe_dump({"requests": {"r": request}}))
    done = snakemake(workdir, "--configfile", str(path))
    assert done.returncode == 0, done.stderr[-3000:]
    return workdir / "results/default/r"


def test_a_retried_call_is_every_try_in_the_attempts_trajectory_and_its_usage_whole_numbers(workdir):
    answer = {**completion("Paris"), "usage": {"prompt_tokens": 10.0, "completion_tokens": 2.4}}
    with ScriptedEndpoint(script=[server_error(500), rate_limited(0), answer]) as endpoint:
        run = _run(workdir, {
            "benchmark": {"id": "example_exact_match", "params": {"limit": 1}},
            "harness": {"id": "chat", "params": {"retry_backoff": 0}},
            "model": {"id": "scripted", "base_url": endpoint.base_url},
        })
    attempt = run / "attempts/capital-france/1"
    result = json.loads((attempt / "result.json").read_text())
    assert result["correct"] is True and result["usage"]["calls"] == 3
    assert {k: result["usage"][k] for k in ("prompt_tokens", "completion_tokens", "total_tokens")} == {
        "prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12}
    assert all(type(result["usage"][k]) is int for k in ("prompt_tokens", "completion_tokens", "total_tokens"))
    records = lines(attempt / "trajectory.jsonl")
    assert [(r["turn"], r["try"], r["status"], r.get("retried")) for r in records] == [
        (1, 1, 500, True), (1, 2, 429, True), (1, 3, 200, None)]


def test_a_harness_free_benchmarks_calls_are_lines_of_its_trajectory_failed_tries_too(workdir):
    # majority_vote asks each question `samples` times; the first request fails once and is retried
    with ScriptedEndpoint(script=[server_error(500), completion("1142"), completion("1142")]) as endpoint:
        run = _run(workdir, {
            "benchmark": {"id": "majority_vote", "params": {"num_tasks": 1, "samples": 2}},
            "harness": "none",
            "model": {"id": "scripted", "base_url": endpoint.base_url},
        })
    attempt = run / "attempts/arith-0/1"
    result = json.loads((attempt / "result.json").read_text())
    assert result["usage"]["calls"] == 3 and result["usage"]["retries"] == 1
    records = lines(attempt / "trajectory.jsonl")
    assert sorted((r["sample"], r["try"], r["status"]) for r in records) in (
        [(1, 1, 500), (1, 2, 200), (2, 1, 200)], [(1, 1, 200), (2, 1, 500), (2, 2, 200)])
    failed = next(r for r in records if r["status"] == 500)
    assert "HTTP 500" in failed["error"] and failed["retried"] is True
    assert all(r["request"]["messages"][0]["content"].startswith("What is") for r in records)


def test_model_headers_are_sent_resolved_and_a_literal_credential_header_is_refused(monkeypatch):
    from agentcompass.runtime.models.codec import ContractError

    monkeypatch.setenv("AC_CLIENT_TEST_TOKEN", "tok-5521")
    with ScriptedEndpoint() as endpoint:
        model = ModelSpec(id="m", base_url=endpoint.base_url,
                          headers={"X-Api-Token": "Bearer ${AC_CLIENT_TEST_TOKEN}", "X-Org": "acme"})
        reply, _, _ = call(endpoint, model=model)
    assert reply.text == "ok"
    sent = endpoint.requests[0].headers
    assert sent["X-Api-Token"] == "Bearer tok-5521" and sent["X-Org"] == "acme"
    with pytest.raises(ContractError, match="X-Api-Token carries a credential"):
        ModelSpec(id="m", headers={"X-Api-Token": "Bearer tok-5521"})
    with pytest.raises(ContractError, match="not an HTTP header name"):
        ModelSpec(id="m", headers={"X Org": "acme"})
