"""Ending a sandbox from outside while a command runs in it, as a crashed engine or a cleaner would.

Used by ``flaky_workflow.py``'s ``test_sandbox_fault`` harness and by the
environment tests that call a provider directly.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

from agentcompass.environments.bubblewrap import INIT_NAME
from agentcompass.environments.leftovers import SESSION_VAR, marked_processes


def poll(found, what: str, seconds: float = 30.0):
    """``found()``'s first true value, asked again until it comes."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if value := found():
            return value
        time.sleep(0.02)
    raise AssertionError(f"{what} did not happen within {seconds} s")


def cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")[:-1]
    except OSError:
        return []


def zombie_or_gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except OSError:
        return True


def kill_container(container_id: str, command: list[str]) -> None:
    """``docker kill`` of the container once ``command`` runs in it."""
    import docker

    client = docker.from_env()
    try:
        container = client.containers.get(container_id)
        shown = " ".join(command)
        poll(lambda: any(shown in row[-1] for row in container.top()["Processes"]), f"{shown!r} starting")
        container.kill()
    finally:
        client.close()


def drop_session(session_id: str, command: list[str]) -> None:
    """End a host_process 'none' session once ``command`` runs in it: the process group of its
    namespace holder, then the command's (``agentcompass clean --all`` kills them all). In the
    sandbox, the command has already ended with the holder's PID namespace."""

    def marked(argv: list[str]) -> list[int]:
        return [p for p in marked_processes(SESSION_VAR, session_id) if cmdline(p) == argv]

    def holders() -> list[int]:
        # the sandbox's init (PID 1 of its namespace), or the network namespace's sleep
        return [p for p in marked_processes(SESSION_VAR, session_id)
                if cmdline(p)[-1:] == [INIT_NAME] or cmdline(p) == ["sleep", "infinity"]]

    running = poll(lambda: marked(command), f"{command} starting")[0]
    holder = poll(holders, "finding the namespace holder")[0]
    os.killpg(holder, signal.SIGKILL)
    poll(lambda: zombie_or_gone(holder), "the holder dying")
    with contextlib.suppress(ProcessLookupError):
        os.killpg(running, signal.SIGKILL)
