"""What only host_process does for a 'none' phase: the holder of its namespaces, its capabilities, and its end.

Each test runs without the sandbox (``sandbox: off``: a network namespace only) and in it (``sandbox:
bubblewrap``, where bubblewrap works here).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from agentcompass.environments.leftovers import LABEL_VAR, SESSION_VAR, environment_markers, marked_processes
from agentcompass.environments.bubblewrap import _mask_sources, hidden_paths, sandbox_support
from agentcompass.environments.netns import network_isolation
from agentcompass.runtime.models import NetworkPolicy

from .envkit import Provider, unique_label

pytestmark = pytest.mark.skipif(not network_isolation()[0], reason=f"host_process cannot isolate here: {network_isolation()[1]}")


@pytest.fixture(params=["off", "bubblewrap"])
def host(request) -> Provider:
    if request.param == "bubblewrap" and not sandbox_support()[0]:
        pytest.skip(f"host_process cannot make its sandbox here: {sandbox_support()[1]}")
    return Provider("host_process", {"sandbox": request.param})


def holder_of(session):
    """The process that holds the session's namespaces."""
    return (session._sandbox or session._isolated).holder


def gone(pid: int) -> bool:
    try:
        state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")


def wait_gone(pids, seconds: float = 5.0) -> list[int]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not all(gone(p) for p in pids):
        time.sleep(0.05)
    return [p for p in pids if not gone(p)]


def test_commands_under_none_share_one_namespace_that_is_not_the_hosts(host):
    async def body(s):
        first = await s.exec(["readlink", "/proc/self/ns/net"])
        second = await s.exec("readlink /proc/self/ns/net", shell=True)
        return first.stdout, second.stdout

    first, second = host.run(body, mode="none")
    assert first == second
    assert first.strip() != os.readlink("/proc/self/ns/net")


@pytest.mark.skipif(os.geteuid() != 0, reason="the capability drop applies to commands run as root")
def test_a_root_command_under_none_cannot_enter_the_host_network_again(host):
    async def body(s):
        return (
            await s.exec(["nsenter", "--net=/proc/1/ns/net", "cat", "/proc/net/route"]),
            await s.exec(["unshare", "--net", "true"]),
            await s.exec(["ip", "link", "add", "ac-veth0", "type", "veth", "peer", "name", "ac-veth1"]),
            await s.exec(["sh", "-c", "echo still root > owned.txt && cat owned.txt"]),
        )

    enter, unshare, veth, write = host.run(body, mode="none")
    # without the sandbox /proc/1 is the host's init (its namespace cannot be opened); in it, the
    # sandbox's own init (its namespace cannot be entered without sys_admin)
    assert enter.returncode != 0 and ("ermission denied" in enter.stderr or "not permitted" in enter.stderr)
    assert unshare.returncode != 0
    assert veth.returncode != 0
    assert write.ok and write.stdout == "still root\n"


def test_switching_to_none_ends_processes_that_have_the_host_network(host):
    async def body(s):
        await s.exec("sleep 300 >/dev/null 2>&1 &", shell=True)
        holder = holder_of(s).pid if s._sandbox else None
        # as this machine numbers them (in the sandbox, the PIDs a command sees are its namespace's)
        started = [p for p in marked_processes(SESSION_VAR, s.session_id) if p != holder]
        await s.set_network(NetworkPolicy(mode="none"))
        return started

    started = host.run(body, mode="public")
    assert started
    assert wait_gone(started) == []


def test_switching_to_public_stops_the_holder(host):
    async def body(s):
        holder = holder_of(s).pid
        await s.set_network(NetworkPolicy(mode="public"))
        return holder, await s.exec(["readlink", "/proc/self/ns/net"])

    holder, ns = host.run(body, mode="none")
    assert wait_gone([holder]) == []
    assert ns.stdout.strip() == os.readlink("/proc/self/ns/net")


OWNER = """
import asyncio, sys
from agentcompass.environments import HostProcessEnvironment
from agentcompass.runtime.models import EnvironmentSpec, NetworkPolicy

async def main():
    spec = EnvironmentSpec(params={"sandbox": sys.argv[2]})
    session = await HostProcessEnvironment().open(spec, NetworkPolicy(mode="none"), sys.argv[1])
    await session.exec("setsid sleep 300 >/dev/null 2>&1 &", shell=True)
    print((session._sandbox or session._isolated).holder.pid, session.session_id, session.workdir, flush=True)
    await asyncio.sleep(600)

asyncio.run(main())
"""


def sandbox_folders(pid: int) -> list[Path]:
    """The bubblewrap sandbox folders (``agentcompass-mask-*``) that the process ``pid`` made."""
    from agentcompass.environments.leftovers import MASK_PREFIX, MASK_RECORD

    found = []
    for folder in Path(tempfile.gettempdir()).glob(f"{MASK_PREFIX}*"):
        try:
            owner = json.loads((folder / MASK_RECORD).read_text())["owner"]
        except (OSError, ValueError, KeyError):
            continue
        if owner.split(":")[1] == str(pid):
            found.append(folder)
    return found


def test_holder_dies_with_its_owner_and_clean_ends_the_commands_left(host):
    label = unique_label("hostkill")
    run_id = label.split("-")[0]
    owner = subprocess.Popen([sys.executable, "-c", OWNER, label, host.params["sandbox"]], stdout=subprocess.PIPE, text=True)
    try:
        holder, session_id, workspace = owner.stdout.readline().split()
        left = marked_processes(SESSION_VAR, session_id)
        assert int(holder) in left and len(left) >= 2
        # the sandbox's folder of masks (unreadable host files hidden), one per process: the killed owner's
        # is removed by clean, a live one's (this process's) is not
        masks = sandbox_folders(owner.pid)
        assert len(masks) == (1 if host.params["sandbox"] == "bubblewrap" and hidden_paths() else 0), masks
        live = Path(_mask_sources()[0]).parent if hidden_paths() else None
        owner.kill()
        owner.wait()
        assert wait_gone([int(holder)]) == [], "the holder outlived the process that owned it"
        orphans = [p for p in marked_processes(SESSION_VAR, session_id) if not gone(p)]
        if host.params["sandbox"] == "bubblewrap":
            # the holder's PID namespace ended with it, and with it every process the session started
            assert wait_gone(orphans) == [], "a command outlived its sandbox"
        else:
            assert orphans, "the detached command is what clean must find"
            assert all(environment_markers(p)[LABEL_VAR] == label for p in orphans)

        cleaned = subprocess.run(
            [sys.executable, "-m", "agentcompass.cli", "clean", "--run", run_id],
            capture_output=True, text=True, timeout=120,
        )
        assert cleaned.returncode == 0, cleaned.stderr
        assert label in cleaned.stdout
        assert wait_gone(orphans) == []
        assert not os.path.exists(workspace), "clean removes the workspace of a session that never closed"
        assert [str(m) for m in masks if m.exists()] == [], "clean removes the sandbox folder of a dead owner"
        assert all(f"removed sandbox folder {m} (owner " in cleaned.stdout for m in masks), cleaned.stdout
        assert live is None or live.is_dir(), "clean spares the sandbox folder of a live owner"
    finally:
        owner.kill()
        owner.wait()
        from agentcompass.environments.leftovers import kill_marked

        kill_marked(LABEL_VAR, label)


def test_clean_leaves_the_processes_of_a_live_owner_alone(host):
    label = unique_label("hostlive")

    async def body(s):
        await s.exec("sleep 300 >/dev/null 2>&1 &", shell=True)
        cleaned = await asyncio.to_thread(
            subprocess.run, [sys.executable, "-m", "agentcompass.cli", "clean", "--run", label.split("-")[0]],
            capture_output=True, text=True, timeout=120,
        )
        return cleaned, marked_processes(SESSION_VAR, s.session_id)

    async def main():
        session = await host.open("none", label=label)
        try:
            return await body(session)
        finally:
            await session.close()

    cleaned, alive = asyncio.run(main())
    assert cleaned.returncode == 0
    assert "nothing to clean" in cleaned.stdout
    assert len(alive) >= 2  # the holder and the command


def test_every_exit_status_survives_many_isolated_sessions_at_once(host, caplog):
    """HumanEval's evaluation, many attempts at once: each in its own thread's event loop, as
    Snakemake's job threads run them, opens a 'none' session, runs a program and closes it.

    Each program exits with its own status, and each namespace holder is killed at close: both
    must come back as they were. Were a child reaped by anything but asyncio's child watcher,
    the watcher would log "Unknown child process" and report 255 in its place.
    """
    codes = list(range(96))

    def attempt(code: int) -> tuple[int, int]:
        async def main():
            session = await host.open("none")
            try:
                ran = await session.exec([sys.executable, "-"], input=f"import sys; sys.exit({code})", timeout=60)
                holder = holder_of(session)
            finally:
                await session.close()
            return ran.returncode, holder.returncode

        return asyncio.run(main())

    caplog.set_level(logging.WARNING, logger="asyncio")
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        outcomes = list(pool.map(attempt, codes))
    assert [ran for ran, _ in outcomes] == codes
    lost = {code: holder for code, (_, holder) in zip(codes, outcomes) if holder != -signal.SIGKILL}
    assert lost == {}, "these sessions' holders, killed at close, came back with another status"
    assert [r.getMessage() for r in caplog.records if "child process" in r.getMessage()] == []
