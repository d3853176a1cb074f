"""The docker environment's session (``DockerSession``): one container, its commands, files and networks.

The container's PID 1 is a keepalive shell (``_KEEPALIVE``). Commands run through ``docker
exec``; the timeout is enforced from here and ends every process the command started, found by
a marker in their environment. Files move with ``put_archive`` and ``get_archive``. A ``none``
phase disconnects the container from every network. At the end of the session the container is
removed unless ``keep`` says otherwise.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import io
import json
import os
import posixpath
import signal
import socket
import tarfile
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Callable

from agentcompass.runtime import EnvironmentSession, ExecResult, NetworkPolicy
from agentcompass.runtime.base import (
    END_PROCESSES_SECONDS,
    InfrastructureError,
    SandboxConnectionError,
    SandboxDiedError,
    SandboxEndedFromInsideError,
    keeps,
)
from agentcompass.errors import DeadlineError

from .. import netns, transfer
from ..leftovers import EXEC_VAR
from .config import _NAME_UNSAFE, KEPT_PREFIX, DockerConfig
from .engine import _in_thread, _lost_engine, _refused, _translated, _where
from .streams import _exec_failed, _not_started, _only_file, _read_frames, _stream_file, _tar_filter, _write_input


# PID 1 of the container: a shell that ignores what it may be sent and reaps every child while it
# waits for its blocker (the commands a timeout kills are reparented to it). The blocker is a fork of
# the shell that reads, forever, a pipe it holds both ends of: once started, PID 1 runs no program of
# the container's file system, which a root agent may have replaced. The kernel delivers no signal
# from inside the container to a PID 1 without a handler for it, so `kill -9 -1` from a command ends
# the blocker, which comes back, and never the container. SIGUSR1 (sent by the engine:
# ``end_processes``) makes it end every other process of the container with its builtin `kill`.
_KEEPALIVE = (
    "trap '' HUP INT QUIT PIPE TERM USR2 ALRM; trap 'kill -9 -1' USR1; "
    "while :; do : | { exec 3<>/proc/self/fd/0; read -r _ <&3; } & wait; done"
)
_END_SIGNAL = "SIGUSR1"
# A command (its argv follows) as the child of a shell that ends every other process the moment it exits.
_RUN_THEN_END_ALL = '"$@"; s=$?; kill -9 -1 2>/dev/null; exit $s'
# How often the engine's process list is read while the container's processes end (``end_processes``).
_END_POLL_SECONDS = 0.05
# How the container's PID 1 ended when it was killed from outside: SIGKILL (docker kill, docker rm
# -f, the engine's own stop) or SIGTERM, or lost by an engine that stopped (255). Any other exit is
# the keepalive shell's own, which only what runs in the container causes (no process left to fork).
_ENDED_FROM_OUTSIDE = (128 + signal.SIGKILL, 128 + signal.SIGTERM, 255)
# Ends every process whose environment carries the command's marker, again until none is left.
# It needs only sh and cat, which command substitution strips of NUL bytes.
_KILL_MARKED = (
    'm="$1"; n=0; while [ "$n" -lt 50 ]; do f=; '
    'for d in /proc/[0-9]*; do case "$(cat "$d/environ" 2>/dev/null)" in '
    '*"$m"*) kill -9 "${d#/proc/}" 2>/dev/null && f=1;; esac; done; '
    '[ -z "$f" ] && exit 0; n=$((n+1)); done'
)
_STREAM_GRACE_SECONDS = 5.0
# How long ending a timed-out command may take: the kill runs programs of the container (sh, cat, kill),
# which a root agent can replace; past it the command's processes are left to the container's removal.
_KILL_TIMEOUT = 30.0
_MODE_DIR = 1 << 31  # Go's os.ModeDir, as the archive stat header reports it
_MODE_SYMLINK = 1 << 27


class DockerSession(EnvironmentSession):
    def __init__(self, client, container, config: DockerConfig, workdir: str, label: str,
                 podman: dict | None = None) -> None:
        self.client = client
        self.container = container
        self.config = config
        self.label = label
        self._workdir = workdir
        self._mode = "public"
        # the name the engine gives the container's network: Podman calls its default network
        # `podman`, whatever name (`bridge`) it was asked for
        attached = list(((getattr(container, "attrs", None) or {}).get("NetworkSettings") or {}).get("Networks") or {})
        self._network = config.network if config.network in attached or len(attached) != 1 else attached[0]
        # rootless Podman's networks live in the user's namespaces: no address on them is reachable from
        # here, so an endpoint is always relayed
        self._unreachable = bool(((podman or {}).get("security") or {}).get("rootless"))
        self._podman = podman is not None
        self._netns: netns.RootSockets | netns.UserNamespaceSockets | None = None
        self._relays: dict[int, netns.TcpRelay] = {}
        self._socket_relays: list[netns.TcpRelay] = []
        self._closed = False
        self.copy_limits = transfer.Limits()  # what one copy into or out of the session may hold

    @property
    def workdir(self) -> str:
        return self._workdir

    @property
    def network_mode(self) -> str:
        return self._mode

    def _path(self, path: str) -> str:
        return posixpath.normpath(posixpath.join(self._workdir, path))

    # --- the engine's faults ------------------------------------------------------------

    def _call(self, doing: str, fn: Callable, *args, **kwargs) -> asyncio.Future:
        """``fn`` on a thread of its own, what it raises translated by ``_fault``."""
        return _in_thread(_translated, functools.partial(self._fault, doing=doing), fn, *args, **kwargs)

    def _fault(self, exc: Exception, doing: str) -> Exception:
        """``exc``, raised by the engine while ``doing``, as the fault it is."""
        import docker

        if isinstance(exc, InfrastructureError):
            return exc
        if _lost_engine(exc):
            return SandboxConnectionError(
                f"docker environment: the connection to the Docker engine at {_where(self.config.docker_host)} dropped "
                f"while {doing} ({exc})"
            )
        if isinstance(exc, docker.errors.APIError):
            # a refusal because the container is gone (404) or stopped (409) is its death
            try:
                self._raise_if_dead()
            except InfrastructureError as fault:
                return fault
            return _refused(exc, doing)
        return exc

    def _raise_if_dead(self) -> None:
        """Raise ``SandboxDiedError`` if the container no longer runs."""
        import docker

        name = self.container.name
        try:
            state = self.client.api.inspect_container(self.container.id)["State"]
        except docker.errors.NotFound:
            raise SandboxDiedError(f"docker environment: container {name} was removed mid-attempt") from None
        except Exception as exc:
            if _lost_engine(exc):
                raise SandboxConnectionError(
                    f"docker environment: the Docker engine at {_where(self.config.docker_host)} stopped answering ({exc})"
                ) from None
            raise
        if not state.get("Running"):
            oom = "; it ran out of memory (OOM killed)" if state.get("OOMKilled") else ""
            message = (f"docker environment: container {name} died mid-attempt: it is {state.get('Status')} "
                       f"with exit code {state.get('ExitCode')}{oom}")
            if state.get("OOMKilled") or state.get("ExitCode") not in _ENDED_FROM_OUTSIDE:
                # the agent's own doing: its memory limit exhausted, or no process left to keep it up
                raise SandboxEndedFromInsideError(f"{message}, ended by what ran in it")
            raise SandboxDiedError(message)

    def _raise_if_dying(self) -> None:
        """Raise ``SandboxDiedError`` if the container's processes are all gone.

        For some milliseconds after a container is killed the engine still reports
        it running; its process list, which in a live container always holds its
        init, is already empty (or refused).
        """
        import docker

        try:
            if self.container.top()["Processes"]:
                return
        except docker.errors.APIError:
            pass  # "is not running"
        except ValueError:
            pass  # Podman answers a container that is going with an empty body
        deadline = time.monotonic() + _STREAM_GRACE_SECONDS
        while time.monotonic() < deadline:
            self._raise_if_dead()
            time.sleep(0.02)
        raise SandboxDiedError(f"docker environment: container {self.container.name} died mid-attempt: no process is left in it")

    # --- commands ------------------------------------------------------------------

    async def exec(self, cmd, *, shell=False, timeout=None, cwd=None, env=None, input=None, user=None) -> ExecResult:
        if shell and not isinstance(cmd, str):
            raise TypeError("exec(shell=True) takes a command string")
        if not shell and not (isinstance(cmd, list) and all(isinstance(c, str) for c in cmd)):
            raise TypeError("exec(shell=False) takes an argv list of strings")
        argv = ["/bin/sh", "-c", cmd] if shell else list(cmd)
        exec_id = uuid.uuid4().hex
        data = input.encode() if isinstance(input, str) else input
        workdir = self._path(cwd) if cwd else self._workdir
        if cwd and not await self.is_dir(workdir):
            raise FileNotFoundError(f"exec: working directory {workdir} does not exist in the container")
        api = self.client.api
        created = await self._call(
            "starting a command", api.exec_create, self.container.id, argv, stdin=data is not None,
            environment={**(env or {}), EXEC_VAR: exec_id}, workdir=workdir, user=str(user) if user is not None else "",
        )
        eid = created["Id"]
        try:
            attached = await self._call("starting a command", api.exec_start, eid, socket=True)
        except RuntimeError as exc:
            # Podman refuses to start a command it cannot run (Docker starts it and reports 126 or 127)
            refused = _not_started(exc)
            if refused is None:
                raise
            return refused
        sock: socket.socket = getattr(attached, "_sock", attached)
        if data is not None:
            threading.Thread(target=_write_input, args=(sock, data), name="agentcompass-docker-stdin", daemon=True).start()
        reading = _in_thread(_read_frames, sock)
        done, _ = await asyncio.wait({reading}, timeout=timeout)
        timed_out = not done
        if timed_out:
            await self._kill_marked(exec_id)
            done, _ = await asyncio.wait({reading}, timeout=_STREAM_GRACE_SECONDS)
            if not done:
                sock.shutdown(socket.SHUT_RDWR)
        out, err = await reading
        stdout, stderr = bytes(out.head), bytes(err.head)  # how the output starts (empty only if there was none)
        sock.close()
        returncode = await self._exit_code(eid)
        if not timed_out and returncode in (None, 128 + signal.SIGKILL):
            # killed: by the agent, or with its whole container (docker kill, docker stop, the engine)
            await self._call("checking the container", self._raise_if_dying)
        if returncode == 126 and stdout.startswith((b"OCI runtime exec failed", b"unable to find user")):
            # the program could not start, or not as that user: report it as a shell (and host_process) would
            return _exec_failed(stdout.decode(errors="replace").strip())
        if returncode == 126 and not stdout and not stderr and user is not None and not timed_out:
            # Docker sometimes ends the stream before its refusal reaches it: whether the user exists
            # decides (`true` as that user is refused too when it does not)
            probe = await self._call("checking a user", self.container.exec_run, ["true"], user=str(user))
            if probe.exit_code == 126:
                return _exec_failed(probe.output.decode(errors="replace").strip() or f"unable to find user {user}")
        return ExecResult(
            returncode=returncode if returncode is not None else 128 + signal.SIGKILL,
            stdout=out.text(),
            stderr=err.text(),
            timed_out=timed_out,
            cut=out.cut + err.cut,
        )

    async def _exit_code(self, eid: str) -> int | None:
        deadline = time.monotonic() + _STREAM_GRACE_SECONDS
        while True:
            info = await self._call("reading a command's exit code", self.client.api.exec_inspect, eid)
            if not info["Running"] or time.monotonic() > deadline:
                return info["ExitCode"]
            await asyncio.sleep(0.02)

    async def _kill_marked(self, exec_id: str) -> None:
        killing = self._call(
            "ending a timed-out command", self.container.exec_run, ["sh", "-c", _KILL_MARKED, "sh", f"{EXEC_VAR}={exec_id}"]
        )
        done, _ = await asyncio.wait({killing}, timeout=_KILL_TIMEOUT)
        if not done:
            killing.cancel()  # its thread ends with the engine's answer, or the container
        elif (error := killing.exception()) is not None:
            raise error

    async def _within(self, call: asyncio.Future, what: str):
        """A file call's engine call within the session's ``call_timeout`` (``DeadlineError`` past it)."""
        seconds = self.call_timeout
        done, _ = await asyncio.wait({call}, timeout=seconds)
        if not done:
            call.cancel()  # its thread ends with the engine's stream, at the latest when the container goes
            raise DeadlineError(f"{what} (a file call in session {self.label})", seconds)
        return call.result()

    async def exec_and_end(self, cmd, *, timeout=None, env=None, cwd=None) -> ExecResult:
        """``exec(cmd)``, then ``end_processes()``; the command runs as the child of a shell (started before
        it, so the image's own) whose builtin ``kill -9 -1`` ends every other process of the container the
        moment the command exits."""
        wrapped = ["sh", "-c", _RUN_THEN_END_ALL, "sh", *cmd]
        ran = await self.exec(wrapped, timeout=timeout, env=env, cwd=cwd)
        await self.end_processes()
        return ran

    async def end_processes(self) -> None:
        """End every process of the container but its init; return once the engine lists none.

        No program of the container runs for it (a root agent may have replaced any): the engine
        sends PID 1 ``_END_SIGNAL``, and the keepalive shell's builtin ``kill -9 -1`` ends every
        other process; the engine's own process list (``top``) shows when only PID 1 and the
        blocker it forked since are left.
        """
        await self._call("ending the container's processes", self._end_processes_now)

    def _end_processes_now(self) -> None:
        self.container.reload()
        init_pid = str(self.container.attrs["State"]["Pid"])
        before = {row[0] for row in self._processes_now()}
        deadline = time.monotonic() + END_PROCESSES_SECONDS
        while True:
            self.container.kill(signal=_END_SIGNAL)
            time.sleep(_END_POLL_SECONDS)
            rows = self._processes_now()
            # PID 1 as the engine numbers it: the host's PID (Docker), or the container's own (Podman)
            init = next((row for row in rows if row[0] in (init_pid, "1")), None)
            if init is None:
                self._raise_if_dead()
                raise SandboxDiedError(f"docker environment: container {self.container.name} has no init left")
            others = [row for row in rows if row is not init]
            if all(pid not in before and ppid == init[0] and cmd == init[2] for pid, ppid, cmd in others):
                return
            if time.monotonic() > deadline:
                shown = ", ".join(f"{pid} ({cmd[:60]})" for pid, _, cmd in others[:5])
                raise RuntimeError(f"docker environment: the processes of container {self.container.name} were "
                                   f"still there {END_PROCESSES_SECONDS} s after they were ended: {shown}")

    def _processes_now(self) -> list[tuple[str, str, str]]:
        """(pid, parent pid, command line) of each process of the container, as the engine lists them."""
        # Podman: its own descriptors, read from the host's /proc (with none, or ones it cannot read, it runs
        # the container's `ps`, a program a root agent may have replaced); Docker runs the host's `ps -ef`
        listed = self.container.top(ps_args="pid,ppid,args") if self._podman else self.container.top()
        titles = [t.upper() for t in listed.get("Titles") or []]
        try:
            pid, ppid = titles.index("PID"), titles.index("PPID")
            cmd = next(i for i, t in enumerate(titles) if t in ("CMD", "COMMAND"))
        except (ValueError, StopIteration):
            raise RuntimeError(f"docker environment: the engine's process list has no PID, PPID and command "
                               f"columns (it has {titles})") from None
        return [(str(row[pid]), str(row[ppid]), str(row[cmd])) for row in listed.get("Processes") or []]

    # --- files -----------------------------------------------------------------------

    def _stat_now(self, path: str) -> dict | None:
        api = self.client.api
        response = api.head(api._url("/containers/{0}/archive", self.container.id), params={"path": path})
        if response.status_code == 404:
            self._raise_if_dead()  # the engine answers 404 for a missing container too
            return None
        api._raise_for_status(response)
        return json.loads(base64.b64decode(response.headers["X-Docker-Container-Path-Stat"]))

    def _resolve_now(self, path: str) -> tuple[str, dict | None]:
        """``path`` with symlinks followed (as the engine reports them), and its stat."""
        for _ in range(40):
            stat = self._stat_now(path)
            if stat is None or not stat["mode"] & _MODE_SYMLINK or not stat.get("linkTarget"):
                return path, stat
            path = stat["linkTarget"]
        raise OSError(f"too many levels of symbolic links: {path}")

    async def exists(self, path: str) -> bool:
        _, stat = await self._within(self._call("reading a file's status", self._resolve_now, self._path(path)),
                                     f"reading the status of {transfer.shown(path)}")
        return stat is not None

    async def is_dir(self, path: str) -> bool:
        _, stat = await self._within(self._call("reading a file's status", self._resolve_now, self._path(path)),
                                     f"reading the status of {transfer.shown(path)}")
        return stat is not None and bool(stat["mode"] & _MODE_DIR)

    def _ensure_dir_now(self, directory: str) -> None:
        """Create ``directory`` and missing parents from an archive: no shell or mkdir needed inside."""
        missing = []
        current = directory
        while True:
            _, stat = self._resolve_now(current)
            if stat is not None:
                if not stat["mode"] & _MODE_DIR:
                    raise NotADirectoryError(f"{current} exists in the container and is not a directory")
                break
            missing.append(posixpath.basename(current))
            current = posixpath.dirname(current)
        if not missing:
            return
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            path = ""
            for name in reversed(missing):
                path = posixpath.join(path, name)
                info = tarfile.TarInfo(path)
                info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, time.time()
                tar.addfile(info)
        self.container.put_archive(current, buffer.getvalue())

    def _put_now(self, target: str, add: Callable[[tarfile.TarFile, str], None]) -> None:
        parent, name = posixpath.split(target)
        self._ensure_dir_now(parent)
        with tempfile.TemporaryFile() as spool:
            with tarfile.open(fileobj=spool, mode="w") as tar:
                add(tar, name)
            spool.seek(0)
            self.container.put_archive(parent, spool)

    async def upload(self, local: Path, remote: str) -> None:
        local = Path(local)
        if not os.path.lexists(local):
            raise FileNotFoundError(str(local))
        what = f"copying {transfer.shown(str(local))} into session {self.label} at {transfer.shown(remote)}"
        skipped: list[str] = []

        def put() -> None:
            if not local.is_dir() and (stat := self._resolve_now(self._path(remote))[1]) is not None and stat["mode"] & _MODE_DIR:
                raise IsADirectoryError(f"{remote} is a directory in the container: a file cannot be uploaded onto it")
            parent, name = posixpath.split(self._path(remote))
            self._ensure_dir_now(parent)
            with tempfile.TemporaryFile() as spool:
                # regular files, folders and links only: the engine would make a device node or FIFO it is sent.
                # The archive lands at the container's root, its names the full paths: Docker refuses a link
                # whose target climbs above the folder it extracts at ("invalid symlink"), and a link is
                # copied as a link whatever its text (the extraction is confined to the container's root)
                local_parent, local_name = transfer.open_parent(str(local))
                try:
                    transfer.pack(spool, local_parent, local_name, name, self.copy_limits, skipped,
                                  under=parent.strip("/") + "/" if parent.strip("/") else "")
                finally:
                    os.close(local_parent)
                spool.seek(0)
                self.container.put_archive("/", spool)

        try:
            await self._within(self._call("copying files in", put), what)
        except transfer.CopyLimitError as exc:
            raise exc.within(what) from None
        transfer.note_skipped(what, skipped)

    async def write_text(self, path: str, text: str) -> None:
        data = text.encode("utf-8")

        def write() -> None:
            target, stat = self._resolve_now(self._path(path))
            if stat is not None and stat["mode"] & _MODE_DIR:
                raise IsADirectoryError(f"{path} is a directory in the container")

            def add(tar: tarfile.TarFile, name: str) -> None:
                info = tarfile.TarInfo(name)
                info.size, info.mtime = len(data), time.time()
                info.mode = stat["mode"] & 0o7777 if stat is not None else 0o644
                tar.addfile(_tar_filter(info), io.BytesIO(data))

            self._put_now(target, add)

        await self._within(self._call("writing a file", write), f"writing {transfer.shown(path)}")

    @contextlib.contextmanager
    def _archive_now(self, path: str, limit: int | None = None, kind: str = "size"):
        """The archive of ``path`` (symlinks followed) as a file the engine streams, and its stat; a file
        larger than ``limit`` is refused (a ``kind`` of ``CopyLimitError``) before anything is read. Closed at
        the end, read to its end or not: the engine stops sending (an archive left unread would hold the
        container)."""
        target, stat = self._resolve_now(path)
        if stat is None:
            raise FileNotFoundError(f"{path} does not exist in the container")
        if limit is not None and not stat["mode"] & _MODE_DIR and stat.get("size", 0) > limit:
            raise transfer.CopyLimitError(kind, transfer.Limits(size=limit), "")
        api = self.client.api
        response = api._get(api._url("/containers/{0}/archive", self.container.id), params={"path": target}, stream=True)
        try:
            if response.status_code == 404:
                self._raise_if_dead()
                raise FileNotFoundError(f"{path} does not exist in the container")
            api._raise_for_status(response)
            yield _stream_file(response.iter_content(1 << 20, False)), stat
        finally:
            response.close()

    async def read_text(self, path: str) -> str:
        def read() -> bytes:
            limits = transfer.Limits(size=transfer.READ_LIMIT)
            with self._archive_now(self._path(path), limits.size, "read") as (stream, stat):
                if stat["mode"] & _MODE_DIR:
                    raise IsADirectoryError(f"{path} is a directory in the container")
                with tarfile.open(fileobj=stream, mode="r|", tarinfo=transfer.bounded_info()) as tar:
                    member, file = _only_file(tar, path)
                    if member.size > limits.size:
                        raise transfer.CopyLimitError("read", limits, "")
                    with file as source:
                        return source.read()

        try:
            data = await self._within(self._call("reading a file", read), f"reading {transfer.shown(path)}")
            return data.decode("utf-8")
        except transfer.CopyLimitError as exc:
            raise exc.within(f"reading {transfer.shown(path)}") from None

    async def download(self, remote: str, local: Path) -> None:
        local = Path(local)
        what = f"copying {transfer.shown(remote)} out of session {self.label}"

        def fetch() -> list[str]:
            with self._archive_now(self._path(remote)) as (stream, _):
                # regular files, folders and links only, never through a link, holes kept, within the limits
                return transfer.extract_local(stream, str(local), self.copy_limits)

        try:
            skipped = await self._within(self._call("copying files out", fetch), what)
        except transfer.CopyLimitError as exc:
            raise exc.within(what) from None
        transfer.note_skipped(what, skipped)

    # --- network -----------------------------------------------------------------------

    def _attached(self) -> dict:
        self.container.reload()
        return self.container.attrs["NetworkSettings"]["Networks"] or {}

    async def set_network(self, policy: NetworkPolicy) -> None:
        """Disconnect from every network for ``none``; join ``network`` again for ``public``."""

        def switch() -> None:
            if policy.mode == "none":
                for name in list(self._attached()):
                    self.client.networks.get(name).disconnect(self.container)
                left = self._attached()
                if left:
                    raise netns.NetworkIsolationError(
                        f"docker environment: the container is still on networks {sorted(left)} after disconnecting"
                    )
            elif self._network not in self._attached():
                self.client.networks.get(self._network).connect(self.container)

        await self._call("switching networks", switch)
        self._mode = policy.mode

    async def endpoint(self, port: int) -> str:
        """``IP:port`` on the container's network; under ``none`` (and on rootless Podman), a relay on the
        host's 127.0.0.1."""
        if self._mode == "none" or self._unreachable:
            return await self._call("opening a relay", self._relay_address, port)
        attached = await self._call("looking up the container's address", self._attached)
        address = (attached.get(self._network) or {}).get("IPAddress")
        if not address:
            raise RuntimeError(f"docker environment: the container has no address on network {self.config.network!r}")
        return f"{address}:{port}"

    def _relay_address(self, port: int) -> str:
        if port not in self._relays:
            if self._netns is None:
                self._netns = self._open_container_netns()
            self._relays[port] = netns.TcpRelay(functools.partial(self._netns.connect, port))
        return self._relays[port].address

    async def expose_host_socket(self, socket_path: Path) -> str:
        """A listener made from here inside the container's network namespace relays to the socket.

        Nothing runs in the container for it, so any image works; it lives in the
        container's own namespace, so it survives a network switch.
        """
        return await self._call("opening a relay", self._socket_relay_address, Path(socket_path))

    def _socket_relay_address(self, socket_path: Path) -> str:
        if self._netns is None:
            self._netns = self._open_container_netns()
        relay = netns.TcpRelay(functools.partial(netns.connect_unix, str(socket_path)), self._netns.listen())
        self._socket_relays.append(relay)
        return relay.address

    def _open_container_netns(self) -> netns.RootSockets | netns.UserNamespaceSockets:
        self.container.reload()
        pid = self.container.attrs["State"]["Pid"]
        try:
            # the PID is the engine's: only a local engine's container process has our container's cgroup,
            # or, where the engine makes no cgroup per container (rootless Podman), its hostname
            local = self.container.id in Path(f"/proc/{pid}/cgroup").read_text() or \
                f"\0HOSTNAME={self.container.id[:12]}\0".encode() in b"\0" + Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            local = False
        if local and os.geteuid() == 0:
            return netns.RootSockets(netns.open_netns(pid))
        if local and self._unreachable and os.stat(f"/proc/{pid}").st_uid == os.geteuid():
            # rootless Podman run by this user: its user namespace is ours to join
            return netns.UserNamespaceSockets(pid)
        raise netns.NetworkIsolationError(
            "docker environment: reaching a service in a container under network 'none', or exposing a "
            "host socket (a model gateway) to it, needs the engine on this machine and root, or rootless "
            "Podman run by the same user as agentcompass (the relay joins the container's network namespace)"
        )

    # --- lifecycle --------------------------------------------------------------------------

    async def close(self, *, failed: bool = False, retain: str | None = None) -> None:
        """Remove the container, unless kept: ``retain`` (the request's retention) or else ``keep``."""
        if self._closed:
            return
        self._closed = True
        for relay in [*self._relays.values(), *self._socket_relays]:
            relay.close()
        self._relays.clear()
        self._socket_relays.clear()
        if self._netns is not None:
            self._netns.close()
            self._netns = None
        keep = keeps(retain, self.config.keep, failed)
        try:
            await self._call("removing the container", self._finish, keep)
        finally:
            self.client.close()

    def _finish(self, keep: bool) -> None:
        import docker

        try:
            if keep:
                safe = _NAME_UNSAFE.sub("_", self.label)[:100]
                self.container.rename(f"{KEPT_PREFIX}{safe}-{self.container.id[:8]}")
            else:
                self.container.remove(force=True, v=True)
        except docker.errors.NotFound:
            pass  # already gone

    async def __aexit__(self, exc_type, exc, tb) -> None:
        await self.close(failed=exc_type is not None)
