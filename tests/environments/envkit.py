"""Providers under test, and the real things the environment tests need around them.

``host_process`` is always tested. ``docker`` is tested when an engine answers
(``DOCKER_HOST``) and holds the test image (``AGENTCOMPASS_TEST_IMAGE``, a
busybox image that ``.ci/docker-up.sh`` builds with ``docker import``);
otherwise its tests are skipped with the reason.
"""

from __future__ import annotations

import asyncio
import functools
import os
import socket
import subprocess
import sys
import threading
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from agentcompass.environments import DockerEnvironment, HostProcessEnvironment
from agentcompass.environments.leftovers import SESSION_VAR, marked_processes
from agentcompass.runtime.models import EnvironmentSpec, NetworkPolicy

TEST_IMAGE = os.environ.get("AGENTCOMPASS_TEST_IMAGE", "local/busybox:latest")
SERVER_GREETING = "hello from the test's host server"

_CONNECT_PY = (
    "import socket, sys\n"
    "s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=3)\n"
    "s.sendall(sys.stdin.buffer.read())\n"
    "s.shutdown(socket.SHUT_WR)\n"
    "out = b''\n"
    "while chunk := s.recv(65536):\n"
    "    out += chunk\n"
    "sys.stdout.write(out.decode())\n"
)


@functools.lru_cache(maxsize=1)
def docker_unavailable() -> str | None:
    """Why the docker provider cannot be tested here, or None when it can."""
    try:
        import docker

        client = docker.from_env(timeout=10)
        client.ping()
    except Exception as exc:  # any failure to reach an engine means: skip, and say why
        return f"no Docker engine answers (DOCKER_HOST={os.environ.get('DOCKER_HOST', 'unset')}): {exc}"
    try:
        client.images.get(TEST_IMAGE)
    except Exception:
        return f"the test image {TEST_IMAGE!r} is not on the engine (.ci/docker-up.sh builds it; AGENTCOMPASS_TEST_IMAGE names it)"
    finally:
        client.close()
    return None


@functools.lru_cache(maxsize=1)
def docker_engine() -> str:
    """Which engine answers at DOCKER_HOST: 'docker', 'podman-root' or 'podman-rootless'."""
    import docker

    from agentcompass.environments.docker.engine import podman_host

    client = docker.from_env(timeout=10)
    try:
        host = podman_host(client)
    finally:
        client.close()
    if host is None:
        return "docker"
    return "podman-rootless" if host["security"]["rootless"] else "podman-root"


def require_docker() -> None:
    """Skip the test, saying why, when no Docker engine answers; a test must be in the docker tier to ask."""
    from conftest import require_tier

    require_tier("docker", "uses a Docker engine")
    reason = docker_unavailable()
    if reason:
        pytest.skip(reason)


def sandboxed_provider(kind: str, *, as_root: bool = False) -> "Provider":
    """A provider whose commands run confined: ``docker`` (the test image, as root), or ``host_process`` in its
    bubblewrap sandbox; skip, saying why, where that cannot be made (with ``as_root``: where agentcompass does
    not run as root, so root in the sandbox cannot be had)."""
    if kind == "docker":
        require_docker()
        return Provider("docker", {"image": TEST_IMAGE})
    from agentcompass.environments.bubblewrap import sandbox_support

    available, reason = sandbox_support()
    if not available:
        pytest.skip(f"host_process cannot make its sandbox here: {reason}")
    if as_root and os.geteuid() != 0:
        pytest.skip("root in the sandbox needs agentcompass to run as root")
    return Provider("host_process", {"sandbox": "bubblewrap"})


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment for a workflow run in a child: no Snakemake state, no user config."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SNAKEMAKE")}
    env["AGENTCOMPASS_USER_CONFIG"] = ""
    env.update(extra)
    return env


def unique_label(kind: str = "ctest") -> str:
    return f"{kind}{uuid.uuid4().hex[:10]}-task-1-run"


@dataclass
class Provider:
    """One provider as the suite drives it, with what differs between providers spelled out."""

    name: str
    params: dict = field(default_factory=dict)

    @property
    def environment(self):
        return HostProcessEnvironment() if self.name == "host_process" else DockerEnvironment()

    def spec(self, **params) -> EnvironmentSpec:
        return EnvironmentSpec(id=self.name, params={**self.params, **params})

    async def open(self, mode: str = "public", label: str | None = None, **params):
        return await self.environment.open(self.spec(**params), NetworkPolicy(mode=mode), label or unique_label())

    def run(self, body, mode: str = "public", **params):
        """Open a session, ``await body(session)``, close it; return what ``body`` returned."""

        async def main():
            session = await self.open(mode, **params)
            try:
                return await body(session)
            finally:
                await session.close()

        return asyncio.run(main())

    @property
    def host_address(self) -> str:
        """A local address of this machine that a 'public' session reaches."""
        if self.name == "host_process":
            return "127.0.0.1"
        import docker

        if docker_engine() == "podman-rootless":
            # its bridge lives in the user's namespaces; a container reaches this machine through
            # slirp4netns, at this machine's own address (the one of its default route)
            route = subprocess.run(["ip", "-4", "-o", "route", "show", "default"], capture_output=True, text=True, check=True)
            device = route.stdout.split(" dev ")[1].split()[0]
            shown = subprocess.run(["ip", "-4", "-o", "addr", "show", "dev", device], capture_output=True, text=True, check=True)
            return shown.stdout.split()[3].split("/")[0]
        client = docker.from_env()
        try:
            bridge = client.networks.get("bridge").attrs
        finally:
            client.close()
        gateway = (bridge["IPAM"]["Config"] or [{}])[0].get("Gateway")
        if gateway:
            return gateway
        # the default bridge's gateway is the address of its interface on this machine
        device = bridge["Options"].get("com.docker.network.bridge.name", "docker0")
        shown = subprocess.run(["ip", "-4", "-o", "addr", "show", "dev", device], capture_output=True, text=True, check=True)
        return shown.stdout.split()[3].split("/")[0]

    def connect_command(self, host: str, port: int) -> str:
        """A shell command that sends its stdin to host:port and prints the reply; it fails if it cannot connect."""
        if self.name == "host_process":
            return f"{sys.executable} -c \"$AC_CONNECT\" {host} {port}"
        return f"nc -w 3 {host} {port}"

    async def connect(self, session, host: str, port: int, data: str = ""):
        """Run the connect command in ``session``; its ExecResult."""
        env = {"AC_CONNECT": _CONNECT_PY} if self.name == "host_process" else {}
        return await session.exec(self.connect_command(host, port), shell=True, env=env, input=data, timeout=30)

    def free_port(self) -> int:
        """A port for a service in a session: free on this machine, where host_process serves."""
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            return probe.getsockname()[1]

    def serve_command(self, port: int, directory: str) -> str:
        """A shell command that starts an HTTP server of ``directory`` on ``port`` in the background."""
        if self.name == "host_process":
            return f"{sys.executable} -m http.server --bind 127.0.0.1 {port} --directory {directory} >/dev/null 2>&1 &"
        return f"httpd -p {port} -h {directory}"

    def leftovers(self, session) -> list[str]:
        """What of ``session`` still exists after close: processes, holders or containers."""
        if self.name == "host_process":
            return [f"process {pid}" for pid in marked_processes(SESSION_VAR, session.session_id)]
        import docker

        client = docker.from_env()
        try:
            found = client.containers.list(all=True, filters={"label": f"agentcompass.label={session.label}"})
            return [f"container {c.name}" for c in found]
        finally:
            client.close()


class HostServer:
    """A TCP server on this machine that greets every connection, counting them."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.start(socket.create_server((address, 0)))
        self.port = self.sock.getsockname()[1]

    def start(self, sock: socket.socket) -> None:
        """Serve the greeting on every connection to ``sock`` (listening), in a thread."""
        self.sock = sock
        self.connections = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            with conn:
                conn.sendall(SERVER_GREETING.encode() + b"\n")

    def close(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


def snapshot(root: Path) -> dict[str, object]:
    """Every path under ``root`` with its bytes (files), link target (symlinks) or None (dirs)."""
    out: dict[str, object] = {}
    for p in sorted(root.rglob("*")):
        rel = str(p.relative_to(root))
        if p.is_symlink():
            out[rel] = ("link", os.readlink(p))
        elif p.is_file():
            out[rel] = (p.read_bytes(), os.access(p, os.X_OK))
        else:
            out[rel] = None
    return out
