"""The model gateway is the one hole in a 'none' sandbox, for every provider.

Checked by what the sandbox sees (its links and routes) and by what it reaches:
the gateway through the relay, and nothing of this machine beside it.
"""

from __future__ import annotations

import json

from agentcompass.gateway import ModelGateway
from agentcompass.testing.endpoint import ScriptedEndpoint

from .envkit import Provider

KEY = "sk-isolation-test-key"


def http_post(token: str | None) -> str:
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]})
    auth = f"Authorization: Bearer {token}\r\n" if token else ""
    return (f"POST /chat/completions HTTP/1.0\r\nHost: gateway\r\nContent-Type: application/json\r\n{auth}"
            f"Content-Length: {len(body)}\r\n\r\n{body}")


def test_a_none_sandbox_has_only_loopback_and_reaches_the_model_only_through_the_gateway(isolating_provider: Provider, tmp_path):
    provider = isolating_provider
    with ScriptedEndpoint() as endpoint, ModelGateway(endpoint.base_url, KEY, tmp_path / "trajectory.jsonl") as gateway:
        endpoint_port = int(endpoint.base_url.split(":")[2].split("/")[0])

        async def body(session):
            host, port = (await session.expose_host_socket(gateway.socket_path)).split(":")
            links = await session.exec("ip -o link", shell=True)
            routes = await session.exec("ip route; ip -6 route; tail -n +2 /proc/net/route", shell=True)
            refused = await provider.connect(session, host, int(port), http_post(None))
            answered = await provider.connect(session, host, int(port), http_post(gateway.token))
            # the endpoint listens on this machine's loopback: the sandbox's own loopback is another one
            direct = await provider.connect(session, "127.0.0.1", endpoint_port, http_post(KEY))
            return host, links, routes, refused, answered, direct

        host, links, routes, refused, answered, direct = provider.run(body, mode="none")
    assert host == "127.0.0.1"
    assert links.ok and [line.split(":")[1].strip() for line in links.stdout.splitlines()] == ["lo"]
    assert routes.ok and routes.stdout.strip() == ""
    assert refused.stdout.startswith("HTTP/1.0 401"), refused
    assert answered.stdout.startswith("HTTP/1.0 200") and "chatcmpl-scripted" in answered.stdout, answered
    assert not direct.ok and "chatcmpl" not in direct.stdout
    # exactly one request reached the Model, with the real key
    assert [r.headers["Authorization"] for r in endpoint.requests] == [f"Bearer {KEY}"]
