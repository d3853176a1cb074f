"""Secrets by reference: every ${VAR} reaches the component that uses it, and no file."""

from __future__ import annotations

import hashlib
import json
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

from agentcompass.secrets import MissingSecretError, references, resolve_secret, scrub
from agentcompass.testing.endpoint import ScriptedEndpoint, completion
from conftest import clean_env, files_holding, jobs_run, snakemake

DRIVER = Path(__file__).parent / "drivers" / "secrets_workflow.py"


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
    # the fingerprints hash the reference: a new value of the key reruns nothing
    again = snakemake(workdir, "--configfile", str(config), env=clean_env(AGENTCOMPASS_TEST_KEY=key + "-rotated"))
    assert again.returncode == 0, again.stderr[-3000:]
    assert jobs_run(again.stderr) == {} and len(endpoint.requests) == 5


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


# --- every kind of field -----------------------------------------------------------


def _sha(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


def _task(root: Path, verifier_secret_sha: str) -> Path:
    """One Harbor task whose verifier rewards 1 only when it sees the right VERIFIER_SECRET."""
    task = root / "tasks" / "probe"
    (task / "tests").mkdir(parents=True)
    (task / "instruction.md").write_text("Say hello.\n")
    (task / "task.toml").write_text(
        '[verifier]\ntimeout_sec = 60.0\n\n[verifier.env]\nVERIFIER_SECRET = "${AC_SECRET_VERIFIER}"\n'
        'VERIFIER_PLAIN = "plain"\n'
    )
    (task / "tests" / "test.sh").write_text(
        "#!/bin/sh\nmkdir -p /logs/verifier\n"
        'seen=$(printf %s "$VERIFIER_SECRET" | sha256sum | cut -d" " -f1)\n'
        f'if [ "$seen" = "{verifier_secret_sha}" ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n'
    )
    return task.parent


def _docker_engine() -> str | None:
    """Why the docker case cannot run here, or None."""
    from environments.envkit import docker_unavailable

    return docker_unavailable()


def _remove_image(tag: str) -> None:
    import docker

    client = docker.from_env()
    try:
        client.images.remove(tag, force=True)
    except docker.errors.ImageNotFound:
        pass
    finally:
        client.close()


@pytest.mark.parametrize("provider", ["host_process", "docker"])
def test_every_secret_reaches_its_consumer_and_no_file(workdir: Path, tmp_path: Path, provider: str):
    if provider == "docker" and (why := _docker_engine()):
        pytest.skip(why)
    values = {name: f"{name.lower()}-{secrets.token_hex(12)}" for name in (
        "AC_SECRET_KEY", "AC_SECRET_MODEL_PARAM", "AC_SECRET_BENCH", "AC_SECRET_HARNESS", "AC_SECRET_VERIFIER",
        "AC_SECRET_GH_PAT", "AC_SECRET_NPM", "AC_SECRET_HEADER")}
    probes, kept = tmp_path / "probes", tmp_path / "kept"
    probes.mkdir(), kept.mkdir()
    tasks = _task(tmp_path, _sha(values["AC_SECRET_VERIFIER"]))
    if provider == "docker":
        from environments.envkit import TEST_IMAGE

        (tmp_path / "image").mkdir()
        (tmp_path / "image" / "Dockerfile").write_text(
            f"FROM {TEST_IMAGE}\nARG GH_PAT\nARG NPM_TOKEN\n"
            'RUN printf %s "$GH_PAT" | sha256sum | cut -c1-64 > /build-args.sha && '
            'printf %s "$NPM_TOKEN" | sha256sum | cut -c1-64 >> /build-args.sha\n'
        )
        image = f"agentcompass-test-secrets:{secrets.token_hex(4)}"  # removed again below
        environment = (
            f"{{id: docker, params: {{dockerfile: '{tmp_path / 'image' / 'Dockerfile'}', image: '{image}', "
            "build_args: {GH_PAT: '${AC_SECRET_GH_PAT}', NPM_TOKEN: '${AC_SECRET_NPM}'}}}"
        )
        retain = "never"  # a kept container would stay on the engine
    else:
        environment = f"{{id: host_process, params: {{workspace_root: '{kept}'}}}}"
        retain = "always"  # the kept workspace is scanned too
    with ScriptedEndpoint() as endpoint:
        config = workdir / "secrets.yaml"
        config.write_text(
            "requests:\n  probe:\n"
            f"    benchmark: {{id: test_secret_task_dir, params: {{path: '{tasks}', probe: 'bench-${{AC_SECRET_BENCH}}', task_env: [AC_SECRET_VERIFIER]}}}}\n"
            "    harness: {id: test_secret_chat, params: {probe: '${AC_SECRET_HARNESS}', max_model_retries: 0}}\n"
            f"    environment: {environment}\n"
            f"    model: {{id: scripted, base_url: '{endpoint.base_url}', api_key: '${{AC_SECRET_KEY}}', "
            "params: {user: 'tenant ${AC_SECRET_MODEL_PARAM}'}, headers: {X-Tenant-Token: 'Bearer ${AC_SECRET_HEADER}'}}\n"
            f"    execution: {{retain_environments: {retain}}}\n"
        )
        try:
            done = subprocess.run([sys.executable, str(DRIVER), str(workdir), str(config)], cwd=workdir,
                                  env=clean_env(AC_PROBE_DIR=str(probes), **values),
                                  capture_output=True, text=True, timeout=600)
        finally:
            if provider == "docker":
                _remove_image(image)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads((workdir / "results/default/probe/attempts/probe/1/result.json").read_text())
    # each secret reached its consumer
    assert [r.headers["Authorization"] for r in endpoint.requests] == [f"Bearer {values['AC_SECRET_KEY']}"]
    assert endpoint.requests[0].body["user"] == f"tenant {values['AC_SECRET_MODEL_PARAM']}"
    assert endpoint.requests[0].headers["X-Tenant-Token"] == f"Bearer {values['AC_SECRET_HEADER']}"
    assert result["status"] == "completed" and result["score"] == 1.0, result  # the verifier saw its variable
    assert (probes / "benchmark").read_text() == _sha(f"bench-{values['AC_SECRET_BENCH']}")
    assert (probes / "harness").read_text() == _sha(values["AC_SECRET_HARNESS"])
    if provider == "docker":
        built = (probes / "environment").read_text().split()
        assert built == [_sha(values["AC_SECRET_GH_PAT"]), _sha(values["AC_SECRET_NPM"])]
    # ... and no file holds any of them: results, Snakemake's metadata and logs, the kept workspace
    roots = [workdir / "results", workdir / ".snakemake", kept]
    for name, value in values.items():
        holding, scanned = files_holding(value, *roots)
        assert holding == [], f"{name} was written to {holding}"
        assert value not in done.stdout + done.stderr
    assert scanned > 30
    run = workdir / "results/default/probe"
    for written in ("request.json", "run_info.json", "events.jsonl", "attempts/probe/1/plan.json",
                    "attempts/probe/1/trajectory.jsonl", "attempts/probe/1/result.json"):
        assert (run / written).is_file(), written  # among the files scanned
    assert any((workdir / ".snakemake" / "metadata").iterdir())
    if provider == "host_process":
        assert any(p.is_dir() for p in kept.iterdir())  # the workspace was kept, and scanned
    request = json.loads((workdir / "results/default/probe/request.json").read_text())
    assert request["harness"]["params"]["probe"] == "${AC_SECRET_HARNESS}"
    assert request["model"]["params"]["user"] == "tenant ${AC_SECRET_MODEL_PARAM}"
    trajectory = (workdir / "results/default/probe/attempts/probe/1/trajectory.jsonl").read_text()
    assert "tenant ${AC_SECRET_MODEL_PARAM}" in trajectory


# --- the helpers -------------------------------------------------------------------


def test_resolve_secret_replaces_references_anywhere_in_strings_lists_and_mappings(monkeypatch):
    monkeypatch.setenv("AC_T_ONE", "one")
    monkeypatch.setenv("AC_T_TWO", "two")
    value = {"a": "Bearer ${AC_T_ONE}", "b": ["${AC_T_TWO}", 3, None], "c": "$AC_T_ONE stays", "d": "${AC_T_ONE}${AC_T_TWO}"}
    assert resolve_secret(value) == {"a": "Bearer one", "b": ["two", 3, None], "c": "$AC_T_ONE stays", "d": "onetwo"}
    assert references(value) == ["AC_T_ONE", "AC_T_TWO", "AC_T_ONE", "AC_T_TWO"]
    assert resolve_secret(None) is None


def test_resolve_secret_names_an_unset_variable(monkeypatch):
    monkeypatch.delenv("AC_T_UNSET", raising=False)
    with pytest.raises(MissingSecretError, match=r"AC_T_UNSET is not set.*export AC_T_UNSET="):
        resolve_secret("x-${AC_T_UNSET}")


def test_scrub_turns_every_value_back_into_its_reference(monkeypatch):
    monkeypatch.setenv("AC_T_LONG", "abcdefgh")
    monkeypatch.setenv("AC_T_INNER", "cdef")
    monkeypatch.setenv("AC_T_SHORT", "ab")  # too short to scrub without rewriting ordinary text
    text = "got abcdefgh and cdef and ab"
    assert scrub(text, [{"x": ["${AC_T_INNER}", "u-${AC_T_LONG}"]}, "${AC_T_SHORT}"]) == (
        "got ${AC_T_LONG} and ${AC_T_INNER} and ab")
