"""The docker environment's provider (``DockerEnvironment``, registered as ``docker``): it opens a
session's container, with the harness's tools mounted, and names what ``agentcompass clean``
removes of its sessions (``cleanup``).
"""

from __future__ import annotations

import asyncio
import functools
import posixpath
import secrets
from pathlib import Path

from agentcompass.runtime import ENVIRONMENTS, BaseEnvironment, EnvironmentSpec, NetworkPolicy
from agentcompass.runtime.base import CleanReport
from agentcompass import tools
from agentcompass.runtime.config import ConfigError

from ..leftovers import owner_token
from .cleanup import clean_containers
from .config import _NAME_UNSAFE, _NO_IMAGE, LABEL, LABEL_OWNER, LABEL_ROOT, DockerConfig
from .engine import _engine, _in_thread, _opening_fault, _refuse_unenforced_limits, _translated, podman_host
from .images import _image
from .session import _KEEPALIVE, DockerSession

# What a command cannot do even as root, beyond Docker's defaults: make a device node (one in the
# workspace would be recreated or opened on the host when the workspace is copied out).
_DROPPED_CAPABILITIES = ["MKNOD"]


@ENVIRONMENTS.register()
class DockerEnvironment(BaseEnvironment):
    """One container per session on a Docker engine: limits, network switching, copy in and out."""

    id = "docker"
    config_class = DockerConfig

    @classmethod
    def clean_leftovers(cls, run_id: str | None, include_live: bool, dry_run: bool, report: CleanReport) -> None:
        """The containers of sessions whose agentcompass process is gone (``include_live``: all, kept ones
        too), on Docker's engine and Podman's (``cleanup``)."""
        clean_containers(run_id, include_live, dry_run, report)

    def validate_spec(self, spec: EnvironmentSpec) -> None:
        config = self.build_config(spec)
        if not config.image and not config.dockerfile:
            raise ConfigError(f"environment 'docker' params: {_NO_IMAGE}")

    async def open(self, spec: EnvironmentSpec, network: NetworkPolicy, label: str) -> DockerSession:
        config = self.build_config(spec)
        # the harness's programs: installed once per version in the tool cache, bound read-only into the container
        installed = await asyncio.to_thread(tools.install_all, list(spec.tools))
        mounts = {key: posixpath.join(tools.SANDBOX_TOOL_ROOT, key) for key in installed}
        client = await _in_thread(_engine, config.docker_host)
        try:
            container, workdir, podman = await _in_thread(
                _translated, functools.partial(_opening_fault, doing="starting a container", host=config.docker_host),
                self._start, client, config, label,
                {str(folder): {"bind": mounts[key], "mode": "ro"} for key, folder in installed.items()},
            )
        except BaseException as exc:
            client.close()
            refused = _mount_refused(exc, installed)
            if refused is not None:
                raise refused from exc
            raise
        session = DockerSession(client, container, config, workdir, label, podman)
        session.tools = mounts
        try:
            await _check_mounts(session, installed)
            if network.mode == "none":
                await session.set_network(network)
        except BaseException:
            await session.close()
            raise
        return session

    @staticmethod
    def _start(client, config: DockerConfig, label: str, volumes: dict[str, dict[str, str]] | None = None):
        podman = podman_host(client)
        _refuse_unenforced_limits(config, podman)
        image = _image(client, config)
        workdir = config.workdir or client.images.get(image).attrs["Config"].get("WorkingDir") or "/workspace"
        name = f"agentcompass-{_NAME_UNSAFE.sub('_', label)[:100]}-{secrets.token_hex(3)}"
        container = client.containers.create(
            image,
            entrypoint=["/bin/sh", "-c", _KEEPALIVE],
            name=name,
            labels={LABEL_ROOT: "1", LABEL: label, LABEL_OWNER: owner_token()},
            working_dir=workdir,
            init=False,
            cap_drop=_DROPPED_CAPABILITIES,
            network=config.network,
            mem_limit=config.memory,
            nano_cpus=int(config.cpus * 1e9) if config.cpus else None,
            pids_limit=config.pids_limit,
            volumes=volumes or None,
            detach=True,
        )
        try:
            container.start()
            container.reload()
        except BaseException:
            container.remove(force=True, v=True)
            raise
        return container, workdir, podman


async def _check_mounts(session: DockerSession, installed: dict[str, Path]) -> None:
    """Raise ``ToolMountError`` unless the container reads each tool's manifest through its mount: an
    engine whose user cannot read the cache (rootless Podman's user, a folder under a private home)
    mounts an unreadable or empty folder instead of failing."""
    for key in installed:
        manifest = posixpath.join(session.tools[key], tools.MANIFEST)
        ran = await session.exec(["test", "-r", manifest], timeout=session.call_timeout)
        if not ran.ok:
            raise _unreadable(key, installed[key], f"the container cannot read {manifest}")


def _unreadable(key: str, folder: Path, what: str) -> tools.ToolMountError:
    return tools.ToolMountError(
        f"tool {key}: {what}, the mount of {folder}: the container engine's user must be able to enter every "
        f"folder above the tool cache and read it (rootless Podman runs as your user; a cache under a folder of "
        f"mode 0700 of another user is unreadable). Set AGENTCOMPASS_TOOL_CACHE to a folder the engine can read, "
        f"e.g. one of mode 0755")


def _mount_refused(exc: BaseException, installed: dict[str, Path]) -> tools.ToolMountError | None:
    """The engine's refusal to start a container because it cannot reach a tool folder (rootless Podman
    cannot enter a folder above it: its error names that folder), as a ``ToolMountError``; else None."""
    text = str(exc)
    for key, folder in installed.items():
        if any(str(place) in text for place in (folder, *folder.parents) if str(place) != "/"):
            return _unreadable(key, folder, f"the engine refused to mount it ({text[:300]})")
    return None
