"""The call cache keeps no secret and serves no reply across attempts, whatever the agent sends and the model
echoes.

An upstream on 127.0.0.1 echoes what it received (the real ``Authorization``, a ``${VAR}`` header of the
Model, the request body) into its reply. An agent puts the gateway's per-attempt token into its request body,
as an agent that reads its environment and pastes it into a prompt would. Through the gateway with the cache
on, the entry written holds neither the key, nor the header's value, nor the token; the next attempt's agent
(another token) sending the same request is answered from the entry without a call; another attempt number
is a call of its own. In-process over the gateway's socket, and from inside a 'none' sandbox through its
relay on both providers.
"""

from __future__ import annotations

import json
from pathlib import Path

from adversarial.test_gateway import LoopbackUpstream, over_socket, parse_reply, raw_request
from agentcompass import callcache
from agentcompass.gateway import ModelGateway
from agentcompass.secrets import resolve_secret
from agentcompass.testing.endpoint import QuietHandler, send_json
from environments.conftest import isolating_provider, provider  # noqa: F401 (fixtures)
from environments.envkit import Provider

KEY = "sk-cache-adversary-key-7d41c0"
ORG_VAR, ORG_VALUE = "CACHE_TEST_ORG_TOKEN", "org-token-cached-9e27b5"


class EchoingUpstream(LoopbackUpstream):
    """Every reply repeats the request's headers and body in the model's text; ``calls`` counts them."""

    def __enter__(self) -> "EchoingUpstream":
        upstream = self
        self.calls = 0

        class Handler(QuietHandler):
            def do_POST(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode()
                upstream.calls += 1
                text = f"you sent {dict(self.headers.items())!r} and {body}"
                send_json(self, json.dumps({
                    "choices": [{"message": {"role": "assistant", "content": text}}],
                    "usage": {"prompt_tokens": 3, "completion_tokens": 5},
                }).encode())
                self.close_connection = True

        return self.serve(Handler)


def calls_view(store: Path, attempt: int = 1) -> callcache.AttemptCalls:
    return callcache.AttemptCalls(callcache.CallStore(store), "on", attempt, "run")


def agent_request(token: str) -> bytes:
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": f"my token is {token}"}]})
    return raw_request("POST", "/chat/completions", token, body)


def secrets_in(folder: Path, *values: str) -> list[str]:
    found = []
    for path in folder.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            found += [f"{path.name}: {value}" for value in values if value.encode() in data]
    return found


def test_an_entry_holds_no_secret_and_answers_the_next_attempt_only(tmp_path: Path, monkeypatch):
    monkeypatch.setenv(ORG_VAR, ORG_VALUE)
    headers = resolve_secret({"X-Org-Token": f"${{{ORG_VAR}}}"})
    store = tmp_path / "cache"
    tokens = []
    with EchoingUpstream() as upstream:
        replies = []
        for attempt in (1, 1, 2):  # a first run, its rerun, and another attempt
            token = callcache.ATTEMPT_CALLS.set(calls_view(store, attempt))
            try:
                with ModelGateway(upstream.base_url, KEY, tmp_path / f"t{len(replies)}.jsonl",
                                  headers=headers) as gateway:
                    tokens.append(gateway.token)
                    status, body, _ = over_socket(gateway, agent_request(gateway.token))
                    replies.append((status, body, gateway.usage()))
            finally:
                callcache.ATTEMPT_CALLS.reset(token)
        calls = upstream.calls
    assert [status for status, _, _ in replies] == [200, 200, 200]
    # the rerun's agent (another token in its body) was answered from the entry; the other attempt was not
    assert calls == 2
    assert replies[1][2]["calls"] == 0 and replies[1][2]["cached_calls"] == 1
    assert replies[2][2]["calls"] == 1 and "cached_calls" not in replies[2][2]
    entries = list(callcache.CallStore(store).entries())
    assert len(entries) == 2
    # what the model echoed of the key, the header and the token reached no entry
    assert secrets_in(store, KEY, ORG_VALUE, *tokens) == []
    kept = json.loads(entries[0][0].read_text())["body"]
    assert "<gateway-token>" in kept and "[model api_key]" in kept


def test_from_the_sandbox_the_cache_keeps_no_secret_on_both_providers(
        isolating_provider: Provider, tmp_path: Path, monkeypatch):  # noqa: F811
    monkeypatch.setenv(ORG_VAR, ORG_VALUE)
    headers = resolve_secret({"X-Org-Token": f"${{{ORG_VAR}}}"})
    store = tmp_path / "cache"
    tokens, replies = [], []
    with EchoingUpstream() as upstream:
        for run in range(2):  # an attempt, and its rerun
            view = callcache.ATTEMPT_CALLS.set(calls_view(store))
            try:
                with ModelGateway(upstream.base_url, KEY, tmp_path / f"t{run}.jsonl", headers=headers) as gateway:
                    tokens.append(gateway.token)

                    async def body(session, gateway=gateway):
                        host, port = (await session.expose_host_socket(gateway.socket_path)).split(":")
                        return await isolating_provider.connect(session, host, int(port),
                                                                agent_request(gateway.token).decode())

                    replies.append((isolating_provider.run(body, mode="none"), gateway.usage()))
            finally:
                callcache.ATTEMPT_CALLS.reset(view)
        calls = upstream.calls
    for reply, _ in replies:
        status, parsed, _ = parse_reply(reply.stdout)
        assert status == 200 and parsed is not None, reply
        assert KEY not in reply.stdout and ORG_VALUE not in reply.stdout
    assert calls == 1 and replies[1][1]["cached_calls"] == 1
    assert secrets_in(store, KEY, ORG_VALUE, *tokens) == []
