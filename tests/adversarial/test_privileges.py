"""Root in the sandbox, as an adversary: no device node, no root-only host file, no reroll by ending the sandbox.

Every test runs on both providers: host_process in its bubblewrap sandbox, and
docker (skipped, saying why, when no engine answers). Session tests drive a
provider directly; workflow tests run task folders whose ``solve.sh`` acts as
the agent under ``oracle`` through the real workflow and read each attempt's
result.json.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
from pathlib import Path

import pytest
import yaml
from conftest import snakemake

from agentcompass.benchmarks.task_dir import SHIPPED_TASKS
from agentcompass.environments import bubblewrap
from environments.envkit import TEST_IMAGE, Provider, docker_engine, require_docker, sandboxed_provider

HOST_SHADOW = Path("/etc/shadow")


@pytest.fixture(params=["host_process", "docker"])
def sandboxed(request) -> Provider:
    """A provider whose commands run confined, as root: host_process in its sandbox, or docker."""
    return sandboxed_provider(request.param, as_root=True)


# --- device nodes ---------------------------------------------------------------------------------


def test_root_makes_no_device_node_in_the_sandbox(sandboxed: Provider):
    async def body(s):
        made = {
            kind: await s.exec(f"mknod /tmp/node-{kind} {kind} {numbers}; echo status=$?", shell=True, timeout=30)
            for kind, numbers in (("c", "1 3"), ("b", "7 0"))
        }
        made["workspace"] = await s.exec("mknod ./dev-null c 1 3; echo status=$?", shell=True, timeout=30)
        made["fifo"] = await s.exec("mkfifo ./pipe; echo status=$?", shell=True, timeout=30)  # no device: allowed
        listing = await s.exec("ls -l /tmp . ", shell=True, timeout=30)
        return made, listing

    made, listing = sandboxed.run(body)
    for kind in ("c", "b", "workspace"):
        assert "status=1" in made[kind].stdout and "Operation not permitted" in made[kind].stderr, (kind, made[kind])
    assert "status=0" in made["fifo"].stdout  # the control: the same command makes what needs no capability
    assert "node-" not in listing.stdout and "dev-null" not in listing.stdout and "pipe" in listing.stdout


# --- the host's root-only files -------------------------------------------------------------------


@pytest.fixture
def canaries():
    """A root-only file and a root-only folder under the host's /etc, holding a random secret."""
    if os.geteuid() != 0:
        pytest.skip("planting files under /etc needs root")
    secret = f"canary-{secrets.token_hex(16)}"
    file = Path(f"/etc/agentcompass-canary-{secrets.token_hex(6)}")
    folder = Path(f"/etc/agentcompass-canary-dir-{secrets.token_hex(6)}")
    public = Path(f"/etc/agentcompass-public-{secrets.token_hex(6)}")
    try:
        fd = os.open(file, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        os.write(fd, secret.encode())
        os.close(fd)
        folder.mkdir(mode=0o700)
        (folder / "key").write_text(secret)
        (folder / "key").chmod(0o644)  # readable itself, but inside a folder others cannot enter
        public.write_text(f"public-{secret}")
        public.chmod(0o644)
        bubblewrap.hidden_paths.cache_clear()  # walked once per process: this one planted after
        yield secret, file, folder, public
    finally:
        file.unlink(missing_ok=True)
        shutil.rmtree(folder, ignore_errors=True)
        public.unlink(missing_ok=True)
        bubblewrap.hidden_paths.cache_clear()


def test_root_reads_no_root_only_file_of_the_host(sandboxed: Provider, canaries):
    secret, file, folder, public = canaries

    async def body(s):
        return {
            "canary": await s.exec(["cat", str(file)]),
            "folder": await s.exec(f"ls -A {folder}; cat {folder}/key", shell=True),
            "shadow": await s.exec(["cat", str(HOST_SHADOW)]),
            "public": await s.exec(["cat", str(public)]),
            "write": await s.exec(f"echo x > {file}; echo status=$?", shell=True),
        }

    seen = sandboxed.run(body)
    for name, result in seen.items():
        if name != "public":
            assert secret not in result.stdout + result.stderr, (name, result)
    if HOST_SHADOW.is_file() and HOST_SHADOW.read_bytes().strip():
        assert HOST_SHADOW.read_bytes().decode(errors="replace").strip() not in seen["shadow"].stdout
    assert file.read_text() == secret  # nothing written to the host's file (a container writes its own /etc)
    if sandboxed.name == "host_process":
        assert "status=0" not in seen["write"].stdout  # read-only
        # the same folder shows what an unprivileged user could read: the control
        assert seen["public"].stdout == f"public-{secret}"
        assert seen["canary"].returncode == 0 and seen["canary"].stdout == ""  # an empty file is there
        assert seen["shadow"].returncode == 0 and seen["shadow"].stdout == ""
        assert seen["folder"].stdout == ""  # an empty folder is there


def test_every_root_only_path_of_the_bound_folders_is_empty_in_the_sandbox():
    """By class: whatever the host holds that an unprivileged user could not read, root in the sandbox sees empty
    (host_process only: a container's file system is its image's, and the next test shows nothing of the host is in it)."""
    sandboxed = sandboxed_provider("host_process", as_root=True)
    bubblewrap.hidden_paths.cache_clear()
    hidden = bubblewrap.hidden_paths()
    assert (str(HOST_SHADOW), False) in hidden or not HOST_SHADOW.exists()

    async def body(s):
        script = "".join(
            f"[ -z \"$(ls -A '{p}')\" ] || echo 'not empty: {p}'\n" if is_dir
            else f"[ -s '{p}' ] && echo 'not empty: {p}'\n"
            for p, is_dir in hidden
        )
        return await s.exec(script + "echo checked", shell=True, timeout=60)

    checked = sandboxed.run(body)
    assert checked.stdout == "checked\n", checked.stdout


def test_a_hidden_file_removed_after_the_walk_leaves_sandboxes_working():
    """The walk of what to hide is once per process: a file it found that is gone since (a test's canary,
    a rotated backup of a key) has nothing to hide, and every sandbox still opens."""
    sandboxed = sandboxed_provider("host_process", as_root=True)
    if os.geteuid() != 0:
        pytest.skip("plants a file in /etc: root only")
    gone = Path("/etc") / f"agentcompass-gone-{secrets.token_hex(6)}"
    gone.write_text("x")
    gone.chmod(0o600)
    try:
        bubblewrap.hidden_paths.cache_clear()
        assert (str(gone), False) in bubblewrap.hidden_paths()
    finally:
        gone.unlink()

    async def body(s):
        return await s.exec(["true"])

    try:
        assert sandboxed.run(body).ok
    finally:
        bubblewrap.hidden_paths.cache_clear()


def test_nothing_of_the_host_is_mounted_in_a_container(needs_docker, canaries):
    secret, file, _, _ = canaries

    async def body(s):
        s.container.reload()
        return s.container.attrs, await s.exec(["ls", "-a", "/etc"])

    attrs, listing = Provider("docker", {"image": TEST_IMAGE}).run(body)
    assert attrs["Mounts"] == [] and not attrs["HostConfig"].get("Binds")
    assert file.name not in listing.stdout
    assert "MKNOD" in (attrs["HostConfig"].get("CapDrop") or [])


# --- the agent's own acts -------------------------------------------------------------------------


def test_kill_9_minus_1_ends_the_agents_processes_and_not_the_sandbox(sandboxed: Provider):
    async def body(s):
        started = await s.exec("sh -c 'echo $$ > background.pid; exec sleep 300' >/dev/null 2>&1 &", shell=True)
        killed = await s.exec("kill -9 -1; echo survived", shell=True, timeout=30)
        gone = await s.exec('kill -0 "$(cat background.pid)" 2>/dev/null && echo running || echo gone', shell=True)
        by_program = await s.exec(["kill", "-9", "-1"], timeout=30)  # a kill program, not the shell's builtin
        at_init = await s.exec("kill -9 1; kill -TERM 1; kill -INT 1; kill -HUP 1; echo sent", shell=True, timeout=30)
        after = await s.exec(["echo", "still here"], timeout=30)
        return started, killed, gone, by_program, at_init, after

    started, killed, gone, by_program, at_init, after = sandboxed.run(body)
    assert started.returncode == 0
    assert killed.returncode == 0 and killed.stdout == "survived\n"
    assert gone.stdout == "gone\n"  # the agent's own process did end
    assert by_program.returncode == 0
    assert at_init.stdout == "sent\n"
    assert after.returncode == 0 and after.stdout == "still here\n"


def environment_of(provider: str, tmp_path: Path, **params) -> dict:
    if provider == "docker":
        require_docker()
        return {"id": "docker", "params": params}
    sandboxed_provider("host_process", as_root=True)
    (tmp_path / "sessions").mkdir()
    return {"id": "host_process", "params": {"sandbox": "bubblewrap", "workspace_root": str(tmp_path / "sessions"), **params}}


def run_solutions(tmp_path: Path, workdir: Path, environment: dict, solutions: dict[str, str],
                  task: str = "hello-file", retries: int = 2) -> dict[str, dict]:
    """One copy of the shipped ``task`` per solution (its solve.sh), run by the oracle; first attempts by task."""
    tasks = tmp_path / "tasks"
    for name, solve in solutions.items():
        shutil.copytree(SHIPPED_TASKS / task, tasks / name)
        (tasks / name / "solution" / "solve.sh").write_text("#!/bin/sh\n" + solve)
    config = workdir / "solutions.yaml"
    config.write_text(yaml.safe_dump({"requests": {"solutions": {
        "benchmark": {"id": "task_dir", "params": {"path": str(tasks)}},
        "harness": "oracle",
        "model": {"id": "none"},
        "environment": environment,
        "execution": {"max_retries": retries},
    }}}))
    done = snakemake(workdir, "--configfile", str(config))
    assert done.returncode == 0, done.stderr[-3000:]
    base = workdir / "results" / "default" / "solutions" / "attempts"
    return {p.parent.parent.name: json.loads(p.read_text()) for p in base.glob("*/1/result.json")}


# the shipped solution (task_dir maps /app to the workspace on host_process)
HONEST = (SHIPPED_TASKS / "hello-file" / "solution" / "solve.sh").read_text().partition("\n")[2]


@pytest.mark.parametrize("provider", ["host_process", "docker"])
def test_an_agent_that_ends_its_sandboxs_processes_fails_its_own_attempt_without_a_retry(provider, tmp_path, workdir):
    environment = environment_of(provider, tmp_path)
    results = run_solutions(tmp_path, workdir, environment, {
        # a moment after the kill: time enough for a sandbox that the kill ended to be gone
        "reroll": "kill -9 -1; sleep 1; exit 1\n",
        "kill-then-solve": "kill -9 -1; sleep 1\n" + HONEST,
        "honest": HONEST,
    })
    assert sorted(results) == ["honest", "kill-then-solve", "reroll"]
    reroll = results["reroll"]
    assert reroll["status"] == "run_error" and reroll["retries_used"] == 0, reroll
    assert "solve.sh exited with status 1" in reroll["error"], reroll["error"]
    # the sandbox outlived the agent's kill: the attempt went on and was scored
    survivor = results["kill-then-solve"]
    assert survivor["status"] == "completed" and survivor["correct"] is True and survivor["retries_used"] == 0, (
        survivor["status"], survivor["error"], survivor["metadata"])
    assert results["honest"]["correct"] is True and results["honest"]["retries_used"] == 0


FORK_BOMB = (
    "b() { while :; do b & sleep 0.01; done; }\n"
    "b </dev/null >/dev/null 2>&1 &\n"
    "sleep 3\n"
    "exit 1\n"
)


@pytest.mark.parametrize("provider", ["host_process", "docker"])
def test_a_fork_bomb_under_pids_limit_is_the_attempts_run_error_without_a_retry(provider, tmp_path, workdir):
    environment = environment_of(provider, tmp_path, pids_limit=64)
    if provider == "docker" and docker_engine() == "podman-rootless":
        pytest.skip("rootless Podman on cgroup v1 refuses pids_limit when a session opens "
                    "(tests/environments/test_docker.py checks it): no limit to bomb against")
    results = run_solutions(tmp_path, workdir, environment, {"bomb": FORK_BOMB, "honest": HONEST})
    bomb = results["bomb"]
    assert bomb["status"] == "run_error" and bomb["retries_used"] == 0, bomb
    assert results["honest"]["correct"] is True and results["honest"]["retries_used"] == 0


# --- unit: how a container's death is told apart ---------------------------------------------------


class _Engine:
    """Stands in for the docker client's inspect call: the one State a container reports."""

    def __init__(self, state: dict) -> None:
        self.api = self
        self.state = state

    def inspect_container(self, _id: str) -> dict:
        return {"State": self.state}


class _Container:
    id, name = "c0ffee", "agentcompass-unit"


@pytest.mark.parametrize("state, from_inside", [
    ({"Running": False, "Status": "exited", "ExitCode": 137, "OOMKilled": False}, False),  # docker kill, rm -f
    ({"Running": False, "Status": "exited", "ExitCode": 143, "OOMKilled": False}, False),  # a SIGTERM from outside
    ({"Running": False, "Status": "exited", "ExitCode": 255, "OOMKilled": False}, False),  # the engine lost it
    ({"Running": False, "Status": "exited", "ExitCode": 137, "OOMKilled": True}, True),    # its memory limit
    ({"Running": False, "Status": "exited", "ExitCode": 2, "OOMKilled": False}, True),     # its init could not fork
])
def test_a_container_that_died_of_what_ran_in_it_is_not_retried(state, from_inside):
    from agentcompass.environments.docker import DockerConfig
    from agentcompass.environments.docker.session import DockerSession
    from agentcompass.runtime.base import SandboxDiedError, SandboxEndedFromInsideError, retryable

    session = DockerSession(_Engine(state), _Container(), DockerConfig(image="x"), "/w", "unit")
    with pytest.raises(SandboxDiedError) as raised:
        session._raise_if_dead()
    assert isinstance(raised.value, SandboxEndedFromInsideError) is from_inside
    assert retryable(raised.value) is not from_inside
    assert f"exit code {state['ExitCode']}" in str(raised.value)
