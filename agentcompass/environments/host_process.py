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
import time
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


_PIPE_GRACE_SECONDS = 1.0


async def _drain(stream: asyncio.StreamReader, buffer: bytearray) -> None:
    while chunk := await stream.read(65536):
        buffer.extend(chunk)


async def _exited(proc: asyncio.subprocess.Process) -> int:
    """The process's own exit; ``proc.wait()`` would also wait for every pipe to close."""
    delay = 0.001
    while proc.returncode is None:
        await asyncio.sleep(delay)
        delay = min(delay * 2, 0.02)
    return proc.returncode


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


class HostProcessSession(EnvironmentSession):
    def __init__(self, root: Path, keep: bool) -> None:
        self.root = root
        self.keep = keep
        # process groups started here; close() ends whatever is left of them
        self._groups: set[int] = set()

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
        started = time.monotonic()
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
        self._groups.add(proc.pid)
        data = input.encode() if isinstance(input, str) else input
        out, err = bytearray(), bytearray()
        readers = asyncio.gather(_drain(proc.stdout, out), _drain(proc.stderr, err))
        if data is not None:
            proc.stdin.write(data)
            await proc.stdin.drain()
            proc.stdin.close()
        exited = asyncio.ensure_future(_exited(proc))
        done, _ = await asyncio.wait({exited, readers}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        if readers in done and exited not in done:
            # output closed first: the process is about to exit (or closed its pipes early)
            await asyncio.wait({exited}, timeout=None if timeout is None else max(timeout - (time.monotonic() - started), 0))
        timed_out = not exited.done()
        if timed_out:
            # The command runs in its own process group: kill the whole tree.
            _kill_group(proc.pid)
            await exited
        # A background child may still hold the pipes: give it a moment, then stop reading.
        if not readers.done():
            await asyncio.wait({readers}, timeout=_PIPE_GRACE_SECONDS)
        if not readers.done():
            readers.cancel()
            transport = getattr(proc, "_transport", None)
            if transport is not None:
                transport.close()
        if not _group_alive(proc.pid):
            # nothing left in the group: forget it, so close() never signals a reused id
            self._groups.discard(proc.pid)
        return ExecResult(
            returncode=proc.returncode,
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
        for pgid in self._groups:
            _kill_group(pgid)
        self._groups.clear()
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
