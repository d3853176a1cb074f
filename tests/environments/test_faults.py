"""Infrastructure faults by type: what each provider raises when its sandbox fails, and what the run stage retries.

Session tests end a real sandbox from outside (``docker kill``, ``docker rm``,
killing a host_process session's processes) or point the docker provider at a
socket where no engine listens. Workflow tests run the real workflow in a child
process (``tests/drivers/flaky_workflow.py``) and read the attempt's result:
``retries_used`` says whether the fault was retried.
"""

from __future__ import annotations

import asyncio
import json
import re
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from drivers.sandbox_faults import drop_session, kill_container

from agentcompass.environments import DockerEnvironment
from agentcompass.environments.netns import network_isolation
from agentcompass.runtime.base import EnvironmentUnavailableError, SandboxDiedError
from agentcompass.runtime.models import EnvironmentSpec, NetworkPolicy

from .envkit import TEST_IMAGE, Provider, clean_env, unique_label

DRIVER = Path(__file__).resolve().parents[1] / "drivers" / "flaky_workflow.py"

needs_isolation = pytest.mark.skipif(
    not network_isolation()[0], reason=f"host_process cannot isolate here: {network_isolation()[1]}"
)


def silent_socket(directory: Path) -> Path:
    """A Unix socket file that nothing listens on: connecting to it is refused."""
    path = directory / "no-engine.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.bind(str(path))
    return path


def containers_labelled(prefix: str) -> list[str]:
    import docker

    client = docker.from_env()
    try:
        return [c.name for c in client.containers.list(all=True, filters={"label": "agentcompass=1"}, ignore_removed=True)
                if c.labels.get("agentcompass.label", "").startswith(prefix)]
    finally:
        client.close()


def run_workflow(workdir: Path, name: str, harness: dict, environment: dict, max_retries: int,
                 env: dict | None = None) -> dict:
    """Run one attempt of one task through the real workflow; its result.json."""
    config = workdir / "faults.json"
    config.write_text(json.dumps({"requests": {name: {
        "benchmark": {"id": "example_exact_match", "params": {"limit": 1}},
        "harness": harness,
        "model": {"id": "none"},
        "environment": environment,
        "execution": {"max_retries": max_retries},
    }}}))
    done = subprocess.run([sys.executable, str(DRIVER), str(workdir), str(config)], cwd=workdir,
                          env=env or clean_env(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    [result] = [json.loads(p.read_text()) for p in (workdir / "results/default" / name / "attempts").glob("*/1/result.json")]
    return result


# --- docker ------------------------------------------------------------------------------


def test_an_engine_that_does_not_answer_is_environment_unavailable(monkeypatch, tmp_path):
    where = f"unix://{silent_socket(tmp_path)}"
    monkeypatch.setenv("DOCKER_HOST", where)

    async def main():
        await DockerEnvironment().open(EnvironmentSpec(id="docker", params={"image": TEST_IMAGE}), NetworkPolicy(),
                                       unique_label("noengine"))

    with pytest.raises(EnvironmentUnavailableError, match=f"no Docker engine answers at {where}"):
        asyncio.run(main())


def test_an_unreachable_engine_is_retried_and_ends_as_run_error_naming_the_fault(workdir):
    where = f"unix://{silent_socket(workdir)}"
    result = run_workflow(
        workdir, f"noengine{time.time_ns()}", {"id": "test_flaky_sandbox", "params": {"failures": 0}},
        {"id": "docker", "params": {"image": TEST_IMAGE}}, max_retries=2, env=clean_env(DOCKER_HOST=where),
    )
    assert result["status"] == "run_error"
    assert result["retries_used"] == 2
    assert result["error"].startswith(f"EnvironmentUnavailableError: docker environment: no Docker engine answers at {where}")
    assert result["failure_class"] == "infrastructure"


def test_a_container_killed_mid_command_is_sandbox_died_then_and_after(needs_docker):
    provider = Provider("docker", {"image": TEST_IMAGE})

    async def body(s):
        killing = asyncio.ensure_future(asyncio.to_thread(kill_container, s.container.id, ["sleep", "30"]))
        try:
            with pytest.raises(SandboxDiedError, match="died mid-attempt: it is (exited|stopped) with exit code 137"):
                await s.exec(["sleep", "30"])
        finally:
            await killing
        with pytest.raises(SandboxDiedError, match="died mid-attempt"):
            await s.exec(["true"])
        return s.label

    label = provider.run(body)
    assert containers_labelled(label) == []


def test_every_call_on_a_removed_container_is_sandbox_died(needs_docker, tmp_path):
    provider = Provider("docker", {"image": TEST_IMAGE})
    (tmp_path / "file.txt").write_text("x")

    async def body(s):
        s.container.remove(force=True)
        calls = {
            "exec": s.exec(["true"]),
            "exists": s.exists("file.txt"),
            "read_text": s.read_text("file.txt"),
            "write_text": s.write_text("deep/er/file.txt", "x"),
            "upload": s.upload(tmp_path / "file.txt", "file.txt"),
            "download": s.download("/bin", tmp_path / "out"),
        }
        raised = {}
        for name, call in calls.items():
            try:
                await asyncio.wait_for(call, 60)
                raised[name] = "nothing"
            except Exception as exc:
                raised[name] = f"{type(exc).__name__}: {exc}"
        return s.container.name, raised

    name, raised = provider.run(body)
    removed = f"SandboxDiedError: docker environment: container {name} was removed mid-attempt"
    assert raised == {call: removed for call in raised}


def test_a_container_killed_mid_attempt_is_retried_and_the_attempt_succeeds(needs_docker, workdir):
    name = f"dockerkill{time.time_ns()}"
    result = run_workflow(
        workdir, name, {"id": "test_sandbox_fault", "params": {"fault": "kill_container", "faults": 1}},
        {"id": "docker", "params": {"image": TEST_IMAGE}}, max_retries=1,
    )
    assert result["status"] == "completed" and result["correct"] is True
    assert result["retries_used"] == 1
    assert containers_labelled(f"{name}-") == []


def test_a_failed_image_build_is_an_image_build_error_and_not_retried(needs_docker, workdir):
    context = workdir / "image"
    context.mkdir()
    (context / "Dockerfile").write_text(textwrap.dedent(f"""\
        FROM {TEST_IMAGE}
        RUN echo building the broken image && exit 3
        """))
    result = run_workflow(
        workdir, f"badbuild{time.time_ns()}", {"id": "test_flaky_sandbox", "params": {"failures": 0}},
        {"id": "docker", "params": {"dockerfile": str(context / "Dockerfile")}}, max_retries=2,
    )
    assert result["status"] == "run_error"
    assert result["retries_used"] == 0
    assert result["error"].startswith(f"ImageBuildError: docker environment: building '{context / 'Dockerfile'}' failed")
    # Docker: "returned a non-zero code: 3"; Podman: "exit status 3"
    assert re.search(r"(returned a non-zero code: |exit status )3\b", result["error"]), result["error"]
    assert "building the broken image" in result["error"]  # the end of the build log
    assert result["failure_class"] == "infrastructure"  # the image, not the agent


# --- host_process -------------------------------------------------------------------------


@needs_isolation
def test_a_host_process_session_dropped_mid_command_is_sandbox_died_then_and_after():
    provider = Provider("host_process")

    async def body(s):
        dropping = asyncio.ensure_future(asyncio.to_thread(drop_session, s.session_id, ["sleep", "30"]))
        try:
            with pytest.raises(SandboxDiedError, match="namespace holder of session .* died mid-attempt"):
                await s.exec(["sleep", "30"])
        finally:
            await dropping
        with pytest.raises(SandboxDiedError):
            await s.exec(["true"])
        return s

    session = provider.run(body, mode="none")
    assert provider.leftovers(session) == []


@needs_isolation
def test_a_host_process_session_dropped_mid_attempt_is_retried_and_the_attempt_succeeds(workdir):
    result = run_workflow(
        workdir, f"hostdrop{time.time_ns()}", {"id": "test_sandbox_fault", "params": {"fault": "drop_session", "faults": 1}},
        {"id": "host_process", "run_network": "none"}, max_retries=1,
    )
    assert result["status"] == "completed" and result["correct"] is True
    assert result["retries_used"] == 1
