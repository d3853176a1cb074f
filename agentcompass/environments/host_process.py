"""``host_process``: a per-attempt workspace directory and host subprocesses.

Network isolation is not enforced yet, so a ``none`` phase is refused rather
than run open.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import tempfile
from dataclasses import dataclass
from pathlib import Path

from agentcompass.runtime import (
    ENVIRONMENTS,
    BaseEnvironment,
    EnvironmentSession,
    EnvironmentSpec,
    ExecResult,
    NetworkPolicy,
)
from agentcompass.runtime.config import ComponentConfig, ConfigError, config_field


@dataclass(slots=True)
class HostProcessConfig(ComponentConfig):
    workspace_root: str | None = config_field(
        default=None,
        description="Directory under which per-attempt workspaces are created (default: the system temp dir).",
    )
    keep_workspace: bool = config_field(default=False, description="Leave the workspace behind after the session closes.")


class HostProcessSession(EnvironmentSession):
    def __init__(self, root: Path, keep: bool) -> None:
        self.root = root
        self.keep = keep

    @property
    def workdir(self) -> str:
        return str(self.root)

    def _path(self, path: str) -> Path:
        p = Path(path)
        return p if p.is_absolute() else self.root / p

    async def exec(self, cmd, *, shell=False, timeout=None, cwd=None, env=None, input=None) -> ExecResult:
        if shell and not isinstance(cmd, str):
            raise TypeError("exec(shell=True) takes a command string")
        if not shell and not (isinstance(cmd, list) and all(isinstance(c, str) for c in cmd)):
            raise TypeError("exec(shell=False) takes an argv list of strings")
        full_env = {**os.environ, **(env or {})}
        workdir = str(self._path(cwd)) if cwd else str(self.root)
        stdin = asyncio.subprocess.PIPE if input is not None else asyncio.subprocess.DEVNULL
        if shell:
            proc = await asyncio.create_subprocess_shell(
                cmd, cwd=workdir, env=full_env, stdin=stdin,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, start_new_session=True,
            )
        else:
            proc = await asyncio.create_subprocess_exec(
                *cmd, cwd=workdir, env=full_env, stdin=stdin,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, start_new_session=True,
            )
        data = input.encode() if isinstance(input, str) else input
        try:
            out, err = await asyncio.wait_for(proc.communicate(data), timeout)
            timed_out = False
        except asyncio.TimeoutError:
            # The command runs in its own process group: kill the whole tree.
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            out, err = await proc.communicate()
            timed_out = True
        return ExecResult(
            returncode=proc.returncode if proc.returncode is not None else -9,
            stdout=out.decode(errors="replace"),
            stderr=err.decode(errors="replace"),
            timed_out=timed_out,
        )

    async def upload(self, local: Path, remote: str) -> None:
        target = self._path(remote)
        target.parent.mkdir(parents=True, exist_ok=True)
        if Path(local).is_dir():
            shutil.copytree(local, target, dirs_exist_ok=True)
        else:
            shutil.copy2(local, target)

    async def download(self, remote: str, local: Path) -> None:
        source = self._path(remote)
        Path(local).parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, local, dirs_exist_ok=True)
        else:
            shutil.copy2(source, local)

    async def read_text(self, path: str) -> str:
        return self._path(path).read_text()

    async def write_text(self, path: str, text: str) -> None:
        target = self._path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)

    async def exists(self, path: str) -> bool:
        return self._path(path).exists()

    async def is_dir(self, path: str) -> bool:
        return self._path(path).is_dir()

    async def endpoint(self, port: int) -> str:
        return f"127.0.0.1:{port}"

    async def set_network(self, policy: NetworkPolicy) -> None:
        HostProcessEnvironment.check_policy(policy)

    async def close(self) -> None:
        if not self.keep:
            shutil.rmtree(self.root, ignore_errors=True)


@ENVIRONMENTS.register()
class HostProcessEnvironment(BaseEnvironment):
    """Host subprocesses in a per-attempt workspace directory (the embedded default)."""

    id = "host_process"
    config_class = HostProcessConfig

    @staticmethod
    def check_policy(policy: NetworkPolicy) -> None:
        if policy.mode != "public":
            raise ConfigError(
                f"host_process cannot enforce network policy {policy.mode!r} yet, and it never runs "
                "such a phase open; use network policy 'public' with host_process"
            )

    def resolve_network_policy(self, policy: NetworkPolicy, phase: str) -> NetworkPolicy:
        self.check_policy(policy)
        return policy

    async def open(self, spec: EnvironmentSpec, network: NetworkPolicy, label: str) -> HostProcessSession:
        config = self.build_config(spec)
        self.check_policy(network)
        safe = re.sub(r"[^A-Za-z0-9._-]+", "_", label)[:40]
        root = Path(tempfile.mkdtemp(prefix=f"agentcompass-{safe}-", dir=config.workspace_root))
        return HostProcessSession(root, keep=config.keep_workspace)
