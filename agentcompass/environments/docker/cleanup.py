"""What ``agentcompass clean`` removes of the docker environment's sessions: the containers whose
agentcompass process is gone, on each engine ``_clean_hosts`` names (Docker's, and Podman's API
sockets: one provider serves both, and labels its containers alike).
"""

from __future__ import annotations

import os

from agentcompass.runtime.base import CleanReport

from ..leftovers import label_selected, owner_alive
from .config import KEPT_PREFIX, LABEL, LABEL_OWNER, LABEL_ROOT
from .engine import _where


def _clean_hosts() -> list[str | None]:
    """The engines ``agentcompass clean`` checks: DOCKER_HOST (else Docker's default socket), and the sockets
    Podman's API service listens on by default (rootless, then as root) where they exist."""
    hosts: list[str | None] = [None]
    runtime_dir = os.environ.get("XDG_RUNTIME_DIR") or f"/run/user/{os.getuid()}"
    for path in (f"{runtime_dir}/podman/podman.sock", "/run/podman/podman.sock"):
        host = f"unix://{path}"
        if os.path.exists(path) and host not in hosts and host != os.environ.get("DOCKER_HOST"):
            hosts.append(host)
    return hosts


def clean_containers(run_id: str | None, include_live: bool, dry_run: bool, report: CleanReport) -> None:
    """Remove agentcompass containers whose owner is gone (``include_live``: all, kept ones too), on each
    engine of ``_clean_hosts`` (a run on Podman labels its containers as one on Docker does)."""
    for host in _clean_hosts():
        _clean_engine(host, run_id, include_live, dry_run, report)


def _clean_engine(host: str | None, run_id: str | None, include_live: bool, dry_run: bool, report: CleanReport) -> None:
    import docker

    try:
        client = docker.DockerClient(base_url=host, timeout=30) if host else docker.from_env(timeout=30)
        client.ping()
    except (docker.errors.DockerException, OSError) as exc:
        report.notes.append(f"no engine answers at {_where(host)} ({exc}); its containers were not checked")
        return
    try:
        # ignore_removed: a container removed between the listing and its lookup (its own run ending, another
        # clean) is gone, not an error
        for container in client.containers.list(all=True, filters={"label": f"{LABEL_ROOT}=1"},
                                                 ignore_removed=True):
            label = container.labels.get(LABEL, "")
            if not label_selected(label, run_id):
                continue
            kept = container.name.startswith(KEPT_PREFIX)
            if not include_live and (kept or owner_alive(container.labels.get(LABEL_OWNER, ""))):
                continue
            report.containers.append(f"container {container.name} ({label})")
            if not dry_run:
                try:
                    container.remove(force=True, v=True)
                except docker.errors.NotFound:
                    pass
    finally:
        client.close()
