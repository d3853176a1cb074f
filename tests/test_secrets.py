"""An API key given as ${VAR} reaches the endpoint and no file."""

from __future__ import annotations

import json
import secrets
from pathlib import Path

from agentcompass.testing.endpoint import ScriptedEndpoint, completion
from conftest import clean_env, files_holding, snakemake


def answers(body) -> tuple[int, dict]:
    question = body["messages"][-1]["content"]
    for needle, reply in (("France", "Paris"), ("Japan", "Tokyo"), ("planet", "Jupiter"), ("water", "H2O")):
        if needle in question:
            return 200, completion(reply)
    return 200, completion("I do not know")


def test_api_key_is_sent_to_the_endpoint_and_written_nowhere(workdir: Path):
    key = "sk-test-" + secrets.token_hex(16)
    with ScriptedEndpoint(answers) as endpoint:
        config = workdir / "chat.yaml"
        config.write_text(
            "requests:\n"
            "  chat-run:\n"
            "    benchmark: example_exact_match\n"
            "    harness: chat\n"
            f"    model: {{id: scripted-model, base_url: '{endpoint.base_url}', api_key: '${{AGENTCOMPASS_TEST_KEY}}', params: {{temperature: 0}}}}\n"
        )
        done = snakemake(workdir, "--configfile", str(config), env=clean_env(AGENTCOMPASS_TEST_KEY=key))
        assert done.returncode == 0, done.stderr[-3000:]
        assert done.stderr.count(key) == 0 and done.stdout.count(key) == 0
    # the key really travelled: every model call carried it
    assert len(endpoint.requests) == 5
    assert {r.headers["Authorization"] for r in endpoint.requests} == {f"Bearer {key}"}
    assert endpoint.requests[0].body["temperature"] == 0
    metrics = json.loads((workdir / "results/default/chat-run/metrics.json").read_text())
    assert metrics["metrics"]["accuracy"] == 0.8  # four of five answered right
    # ... and it is in no file the run left behind, Snakemake's metadata included
    holding, scanned = files_holding(key, workdir / "results", workdir / ".snakemake")
    assert holding == [] and scanned > 30
    request = json.loads((workdir / "results/default/chat-run/request.json").read_text())
    assert request["model"]["api_key"] == "${AGENTCOMPASS_TEST_KEY}"


def test_unreachable_endpoint_is_a_run_error_status_not_a_crash(workdir: Path):
    with ScriptedEndpoint() as endpoint:
        base_url = endpoint.base_url  # closed again before the run: nothing listens there
    config = workdir / "down.yaml"
    config.write_text(
        "requests:\n  down:\n    benchmark: {id: example_exact_match, params: {limit: 2}}\n    harness: chat\n"
        f"    model: {{id: m, base_url: '{base_url}'}}\n"
        "harnesses: {chat: {max_model_retries: 1, retry_backoff: 0}}\n"
    )
    done = snakemake(workdir, "--configfile", str(config))
    assert done.returncode == 0, done.stderr[-3000:]
    metrics = json.loads((workdir / "results/default/down/metrics.json").read_text())
    assert metrics["counts"] == {"run_error": 2}
    result = json.loads((workdir / "results/default/down/attempts/capital-france/1/result.json").read_text())
    assert result["status"] == "run_error" and "model call failed" in result["error"]
    assert "connection failed" in result["error"] and result["usage"]["calls"] == 2  # tried, retried once, gave up
