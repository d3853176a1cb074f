"""An attempt's limits hold against the agent and the model: whatever the agent sends once refused, and whatever
usage the model's replies claim.

An upstream on 127.0.0.1 counts its calls and answers each with the usage it is told to claim. Through the
gateway with ``execution.limits`` set: a model that claims absurd usage (negative, not a number, 1e308) is
read within the usage rules and the limit binds at once or never, never by a crash; an agent that calls on
and on once refused reaches the upstream no more, and grows its trajectory by at most ``LIMIT_RECORDS``
lines. In-process over the gateway's socket, and from inside a 'none' sandbox through its relay on both
providers.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from adversarial.test_gateway import LoopbackUpstream, over_socket, parse_reply, raw_request
from agentcompass import spend
from agentcompass.gateway import LIMIT_RECORDS, ModelGateway
from agentcompass.runtime.models.request import LimitsSpec
from agentcompass.testing.endpoint import QuietHandler, send_json
from environments.conftest import isolating_provider, provider  # noqa: F401 (fixtures)
from environments.envkit import Provider

KEY = "sk-limits-adversary-key-41d0"
PRICING = {"input_per_million": 100.0, "output_per_million": 500.0}


class ClaimingUpstream(LoopbackUpstream):
    """Every reply claims ``usage``; ``calls`` counts the calls that reached it."""

    def __init__(self, usage) -> None:
        super().__init__()
        self.usage = usage

    def __enter__(self) -> "ClaimingUpstream":
        upstream = self
        self.calls = 0

        class Handler(QuietHandler):
            def do_POST(self) -> None:  # noqa: N802
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                upstream.calls += 1
                send_json(self, json.dumps({"choices": [{"message": {"role": "assistant", "content": "ok"}}],
                                            "usage": upstream.usage}).encode())
                self.close_connection = True

        return self.serve(Handler)


def call(token: str) -> bytes:
    return raw_request("POST", "/chat/completions", token,
                       json.dumps({"model": "m", "messages": [{"role": "user", "content": "again"}]}))


@pytest.mark.parametrize("usage, binds", [
    ({"prompt_tokens": -50, "completion_tokens": -1}, False),  # negative counts are no tokens
    ({"prompt_tokens": "NaN", "completion_tokens": "lots"}, False),  # unreadable counts: none
    ({"prompt_tokens": 1e308, "completion_tokens": 0}, True),  # an absurd count is a count: past the limit
    ({"prompt_tokens": [1], "completion_tokens": {"x": 1}}, False),
])
def test_what_a_model_claims_is_read_within_the_rules(tmp_path: Path, usage, binds: bool):
    limited = spend.AttemptSpend(LimitsSpec(total_tokens=1000, cost_usd=1.0), PRICING)
    token = spend.ATTEMPT_SPEND.set(limited)
    try:
        with ClaimingUpstream(usage) as upstream, ModelGateway(upstream.base_url, KEY, tmp_path / "t.jsonl") as gateway:
            statuses = [over_socket(gateway, call(gateway.token))[0] for _ in range(3)]
            sent = upstream.calls
    finally:
        spend.ATTEMPT_SPEND.reset(token)
    assert statuses == ([400, 400, 400] if binds else [200, 200, 200])
    assert sent == (1 if binds else 3)
    assert (limited.reached is not None) is binds


def test_an_agent_that_calls_on_once_refused_reaches_nothing_and_grows_no_file(tmp_path: Path):
    limited = spend.AttemptSpend(LimitsSpec(calls=2), PRICING)
    token = spend.ATTEMPT_SPEND.set(limited)
    trajectory = tmp_path / "t.jsonl"
    try:
        with ClaimingUpstream({"prompt_tokens": 10, "completion_tokens": 2}) as upstream, \
                ModelGateway(upstream.base_url, KEY, trajectory) as gateway:
            replies = [over_socket(gateway, call(gateway.token)) for _ in range(200)]
            sent = upstream.calls
    finally:
        spend.ATTEMPT_SPEND.reset(token)
    assert [status for status, _, _ in replies[:2]] == [200, 200]
    assert {status for status, _, _ in replies[2:]} == {400}
    assert "execution.limits.calls (2) is reached" in replies[2][1]["error"]["message"]
    assert sent == 2
    lines = trajectory.read_text().splitlines()
    assert len(lines) == 2 + LIMIT_RECORDS  # the two calls, and the first refusals; the rest are counted
    assert limited.refused == 198 and limited.as_metadata()["refused_calls"] == 198


def test_from_the_sandbox_a_call_past_the_limit_reaches_nothing_on_both_providers(
        isolating_provider: Provider, tmp_path: Path):  # noqa: F811
    limited = spend.AttemptSpend(LimitsSpec(total_tokens=12), PRICING)
    token = spend.ATTEMPT_SPEND.set(limited)
    try:
        with ClaimingUpstream({"prompt_tokens": 10, "completion_tokens": 2}) as upstream, \
                ModelGateway(upstream.base_url, KEY, tmp_path / "t.jsonl") as gateway:
            replies = []
            for _ in range(2):
                async def body(session):
                    host, port = (await session.expose_host_socket(gateway.socket_path)).split(":")
                    return await isolating_provider.connect(session, host, int(port), call(gateway.token).decode())

                replies.append(isolating_provider.run(body, mode="none"))
            sent = upstream.calls
    finally:
        spend.ATTEMPT_SPEND.reset(token)
    first, second = (parse_reply(r.stdout) for r in replies)
    assert first[0] == 200 and second[0] == 400, replies
    assert "execution.limits.total_tokens (12) is reached" in second[1]["error"]["message"]
    assert sent == 1 and KEY not in replies[1].stdout
