"""``docker``: one container per session on a real Docker engine, through the docker SDK.

The container starts on a Docker network and a ``none`` phase disconnects it
from every network (a container created with ``network_mode='none'`` could
never join one later). Commands run through ``docker exec``; the timeout is
enforced from here and ends every process the command started, found by a
marker in their environment. Files move with ``put_archive`` and
``get_archive``. At the end of the session the container is removed unless
``keep`` says otherwise. Nothing is pulled from a registry: the image must be
on the engine or built from a Dockerfile.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import hashlib
import io
import json
import os
import posixpath
import re
import secrets
import signal
import socket
import struct
import tarfile
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Callable

from agentcompass.runtime import (
    ENVIRONMENTS,
    BaseEnvironment,
    EnvironmentSession,
    EnvironmentSpec,
    ExecResult,
    NetworkPolicy,
)
from agentcompass.runtime.base import (
    CappedOutput,
    END_PROCESSES_SECONDS,
    EnvironmentUnavailableError,
    ImageBuildError,
    ImageMissingError,
    InfrastructureError,
    SandboxConnectionError,
    SandboxDiedError,
    SandboxEndedFromInsideError,
    keeps,
)
from agentcompass import tools
from agentcompass.errors import DeadlineError
from agentcompass.runtime.config import ComponentConfig, ConfigError, config_field
from agentcompass.secrets import MissingSecretError, resolve_secret, scrub
from agentcompass._util.trees import confined

from . import netns, transfer
from .cgroups import LimitsUnavailableError, check_limits
from .leftovers import EXEC_VAR, CleanReport, label_selected, owner_alive, owner_token

LABEL_ROOT = "agentcompass"
LABEL = "agentcompass.label"
LABEL_OWNER = "agentcompass.owner"
KEPT_PREFIX = "agentcompass-kept-"

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
# What a command cannot do even as root, beyond Docker's defaults: make a device node (one in the
# workspace would be recreated or opened on the host when the workspace is copied out).
_DROPPED_CAPABILITIES = ["MKNOD"]
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
_NAME_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


@dataclass(slots=True)
class DockerConfig(ComponentConfig):
    image: str | None = config_field(
        default=None,
        description="Image each session's container runs. It must already be on the engine: nothing is "
        "pulled (build one with `docker build` or `docker import`). With `dockerfile`, the tag of the built image.",
    )
    dockerfile: str | None = config_field(
        default=None,
        description="Dockerfile to build the image from, before the first session (path, relative to the "
        "working directory). Docker's build cache makes later builds quick. Base images must be on the engine: a "
        "missing one ends the session's opening with an error naming it, and the engine is never asked to pull it.",
    )
    context: str | None = config_field(
        default=None, description="Build context directory for `dockerfile` (default: the Dockerfile's directory)."
    )
    build_args: dict[str, str] = config_field(
        default={},
        description="Build arguments (ARG values) for `dockerfile`. A value may hold ${VAR} references: they "
        "are resolved only for the build itself, and every record keeps the reference.",
    )
    workdir: str | None = config_field(
        default=None,
        description="Directory in the container that commands start in and relative paths resolve against "
        "(default: the image's WORKDIR, else /workspace); created if missing.",
    )
    memory: str | None = config_field(
        default=None, description="Memory limit of the container, e.g. '512m' or '2g' (docker --memory); null: no limit."
    )
    cpus: float | None = config_field(
        default=None, description="CPU limit in cores, e.g. 1.5 (docker --cpus); null: no limit."
    )
    pids_limit: int | None = config_field(
        default=None, description="Most processes the container may hold at once (docker --pids-limit); null: no limit."
    )
    docker_host: str | None = config_field(
        default=None,
        description="The engine's API socket, e.g. 'unix:///run/user/1000/podman/podman.sock' for a rootless "
        "Podman (`podman system service`) or 'unix:///var/run/docker.sock'; null: DOCKER_HOST, else Docker's "
        "default socket.",
    )
    network: str = config_field(
        default="bridge",
        description="Docker network the container is on in a 'public' phase; a 'none' phase disconnects it "
        "from every network and a switch back reconnects it.",
    )
    missing_image_hint: str | None = config_field(
        default=None,
        description="What the error for an `image` that is not on the engine tells the user to do (the command "
        "that pulls or builds it); a Recipe sets it for the images it names. null: a generic hint.",
    )
    keep: str = config_field(
        default="never",
        choices=["never", "on_failure", "always"],
        description="What happens to the container when the session closes: 'never' removes it; 'on_failure' "
        "keeps it when the session ends failed (an exception leaves `async with`, or close(failed=True)); "
        "'always' keeps it. A kept container keeps running, renamed agentcompass-kept-<label>, for "
        "`docker exec`; `agentcompass clean --all` removes it.",
    )

    def __post_init__(self) -> None:
        # `image` or `dockerfile` may come from a Recipe (a task's own Dockerfile): checked per plan
        check_limits(self)
        if not isinstance(self.build_args, dict):
            raise ConfigError(f"build_args must be a mapping of names to values, got {self.build_args!r}")
        self.build_args = {str(k): str(v) for k, v in self.build_args.items()}
        if self.network in ("none", "host", ""):
            raise ConfigError(
                f"network {self.network!r} cannot be used: name a bridge network (default 'bridge'); "
                "a 'none' phase is set with the phase's network policy"
            )
        if self.workdir is not None and not posixpath.isabs(self.workdir):
            raise ConfigError(f"workdir must be an absolute path in the container, got {self.workdir!r}")


def _in_thread(fn: Callable, *args, **kwargs) -> asyncio.Future:
    """``fn`` on a thread of its own: engine calls may block for as long as a command runs."""
    loop = asyncio.get_running_loop()
    future = loop.create_future()

    def settle(result: Any, error: BaseException | None) -> None:
        if future.cancelled():
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)

    def work() -> None:
        try:
            result, error = fn(*args, **kwargs), None
        except BaseException as exc:  # handed to the awaiting coroutine
            result, error = None, exc
        try:
            loop.call_soon_threadsafe(settle, result, error)
        except RuntimeError:
            pass  # the loop has closed: nobody waits any more

    threading.Thread(target=work, name="agentcompass-docker", daemon=True).start()
    return future


def _where(host: str | None = None) -> str:
    return host or os.environ.get("DOCKER_HOST") or "the default socket"


def _engine(host: str | None = None):
    import docker

    try:
        if host:
            client = docker.DockerClient(base_url=host, timeout=120)
            client.ping()
            return client
        return docker.from_env(timeout=120)
    except (docker.errors.DockerException, OSError) as exc:
        raise EnvironmentUnavailableError(
            f"docker environment: no Docker engine answers at {_where(host)} ({exc}); start one "
            "(e.g. .ci/docker-up.sh, or `podman system service` for Podman) and set `docker_host` or "
            "DOCKER_HOST, or use the host_process environment"
        ) from None


# The engine's faults are told apart here, where the docker SDK is called, and
# leave this module as the types of runtime.base: the run stage decides retries by type.


def _lost_engine(exc: BaseException) -> bool:
    """Whether ``exc`` means the engine stopped answering: a refused, reset or timed-out connection."""
    import requests

    return isinstance(exc, (
        requests.exceptions.ConnectionError, requests.exceptions.Timeout,
        requests.exceptions.ChunkedEncodingError, ConnectionError,
    ))


def _refused(exc: BaseException, doing: str) -> RuntimeError:
    # the engine answered and said no: a request it will refuse again, not a fault
    return RuntimeError(f"docker environment: the engine refused {doing}: {getattr(exc, 'explanation', None) or exc}")


def _opening_fault(exc: Exception, doing: str, host: str | None = None) -> Exception:
    """``exc``, raised while a session was being opened (``doing``), as the fault it is."""
    import docker

    if isinstance(exc, InfrastructureError):
        return exc
    if _lost_engine(exc):
        return EnvironmentUnavailableError(
            f"docker environment: the Docker engine at {_where(host)} stopped answering while {doing} ({exc})"
        )
    if isinstance(exc, docker.errors.APIError):
        if exc.is_server_error():
            return EnvironmentUnavailableError(
                f"docker environment: the engine failed while {doing}: {exc.explanation or exc}"
            )
        return _refused(exc, doing)
    return exc


def _translated(fault: Callable[[Exception], Exception], fn: Callable, *args, **kwargs) -> Any:
    """``fn(*args, **kwargs)``; what it raises leaves as ``fault`` translates it."""
    try:
        return fn(*args, **kwargs)
    except Exception as exc:
        translated = fault(exc)
        if translated is exc:
            raise
        raise translated from exc


# Each limit and the cgroup controller that enforces it.
_LIMIT_CONTROLLERS = (("memory", "memory"), ("cpus", "cpu"), ("pids_limit", "pids"))


def podman_host(client) -> dict | None:
    """What a Podman engine says of its host (``security.rootless``, ``cgroupVersion``,
    ``cgroupManager``, ``cgroupControllers``); None when the engine is Docker's."""
    components = client.version().get("Components") or []
    if not any(c.get("Name") == "Podman Engine" for c in components):
        return None
    api = client.api
    # the libpod API beside the Docker-compatible one: its info says what the compatible one does not
    response = api._get(f"{api.base_url}/v4.0.0/libpod/info")
    api._raise_for_status(response)
    return response.json()["host"]


def _refuse_unenforced_limits(config: DockerConfig, host: dict | None) -> None:
    """Refuse limits a Podman engine would accept and not enforce (rootless without delegated cgroups)."""
    wanted = [(name, controller) for name, controller in _LIMIT_CONTROLLERS if getattr(config, name) is not None]
    if host is None or not wanted:
        return  # Docker enforces each limit it accepts
    controllers = set(host.get("cgroupControllers") or [])
    missing = [name for name, controller in wanted if controller not in controllers]
    if not missing:
        return
    rootless = "rootless " if (host.get("security") or {}).get("rootless") else ""
    raise LimitsUnavailableError(
        f"docker environment: the engine at {_where(config.docker_host)} is {rootless}Podman on cgroup {host.get('cgroupVersion')} "
        f"with the {host.get('cgroupManager')} cgroup manager, which has no cgroup controller for "
        f"{', '.join(missing)} (it would run the container without the limit)",
        tuple(missing),
        "run Podman as root, or rootless on cgroup v2 with the systemd cgroup manager and the memory, cpu "
        "and pids controllers delegated to the user",
    )


_built: dict[tuple, str] = {}
_build_lock = threading.Lock()


_NO_IMAGE = (
    "set `image` (an image on the engine) or `dockerfile` (to build one); a task that carries its own "
    "Dockerfile (a task_dir task folder) sets them itself"
)


def _only_file(tar: tarfile.TarFile, path: str) -> tuple[tarfile.TarInfo, IO[bytes]]:
    """The one regular file of an archive the engine made of ``path`` (a file, not a folder)."""
    member = tar.next()
    file = tar.extractfile(member) if member is not None else None
    if member is None or file is None:
        raise IsADirectoryError(f"{path} is not a regular file in the container")
    return member, file


def _image(client, config: DockerConfig) -> str:
    import docker

    if config.dockerfile:
        return _build(client, config, config.dockerfile)
    if not config.image:
        raise RuntimeError(f"docker environment: no image to run: {_NO_IMAGE}")
    try:
        client.images.get(config.image)
    except docker.errors.ImageNotFound:
        raise ImageMissingError(
            f"docker environment: image {config.image!r} is not on the engine, and nothing is pulled; "
            + (config.missing_image_hint or "build it first (docker build, or docker import of a root filesystem) "
               "or set `dockerfile`")
        ) from None
    return config.image


_VARIABLE = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)(?::([-+])([^}]*))?\}|([A-Za-z_][A-Za-z0-9_]*))")


def base_images(dockerfile: str, build_args: dict[str, str]) -> list[str]:
    """The images a Dockerfile's ``FROM`` lines start from: neither its own stages nor ``scratch``, with
    the ``ARG`` values declared before the first ``FROM`` (``build_args`` overriding their defaults) put
    in. A name that still holds a variable without a value is left out (the engine reports it)."""
    escape = "\\"
    if directive := re.match(r"\s*#\s*escape\s*=\s*(\S)", dockerfile):
        escape = directive.group(1)
    instructions, current = [], ""
    for line in dockerfile.splitlines():
        if line.lstrip().startswith("#"):
            continue  # a comment, also between continued lines
        if line.rstrip().endswith(escape):
            current += line.rstrip()[:-1] + " "
            continue
        instructions.append(current + line)
        current = ""
    instructions.append(current)
    args: dict[str, str | None] = {}
    stages: set[str] = set()
    bases: list[str] = []
    started = False

    def value(match: re.Match) -> str:
        name = match.group(1) or match.group(4)
        known = args.get(name)
        if match.group(2) == "-" and not known:
            return match.group(3)
        if match.group(2) == "+":
            return match.group(3) if known else ""
        if known is None:
            raise KeyError(name)
        return known

    for instruction in instructions:
        words = instruction.split()
        keyword = words[0].upper() if words else ""
        if keyword == "ARG" and not started:
            for word in words[1:]:
                name, given, default = word.partition("=")
                args[name] = build_args.get(name, default.strip("\"'") if given else None)
        elif keyword == "FROM":
            started = True
            named = [word for word in words[1:] if not word.startswith("--")]
            if not named:
                continue
            try:
                image = _VARIABLE.sub(value, named[0])
            except KeyError:
                image = ""
            if image and image.lower() not in stages and image != "scratch" and image not in bases:
                bases.append(image)
            if len(named) >= 3 and named[1].upper() == "AS":
                stages.add(named[2].lower())
    return bases


def _check_bases(client, config: DockerConfig, dockerfile: Path, buildargs: dict[str, str]) -> None:
    """Refuse a build whose base image is not on the engine (``ImageBuildError``, as every build that
    cannot succeed): the engine would try to pull it (Docker's builder and Podman's pull a missing
    ``FROM`` image whatever ``pull=False`` says)."""
    import docker

    for base in base_images(dockerfile.read_text(encoding="utf-8", errors="replace"), buildargs):
        try:
            client.images.get(base)
        except docker.errors.ImageNotFound:
            raise ImageBuildError(scrub(
                f"docker environment: {str(dockerfile)!r} starts FROM {base!r}, which is not on the engine, and "
                f"nothing is pulled; put it there first (`docker pull {base}` where a registry is reachable, "
                "`docker load` of a saved image or `docker import` of a root filesystem; `podman` the same), "
                "then run again",
                config.build_args.values(),
            )) from None
        except docker.errors.APIError:
            pass  # a name the engine cannot read: the build reports it


def _build(client, config: DockerConfig, path: str) -> str:
    import docker

    dockerfile = Path(path).resolve()
    if not dockerfile.is_file():
        raise RuntimeError(f"docker environment: dockerfile {str(dockerfile)!r} does not exist")
    context = Path(config.context).resolve() if config.context else dockerfile.parent
    digest = hashlib.sha256(f"{context}\0{dockerfile}\0{sorted(config.build_args.items())}".encode()).hexdigest()
    tag = config.image or f"agentcompass-built:{digest[:16]}"
    key = (client.api.base_url, str(context), str(dockerfile), tag, tuple(sorted(config.build_args.items())),
           dockerfile.stat().st_mtime_ns)
    with _build_lock:  # one build per Dockerfile and process, however many sessions open at once
        if key not in _built:
            # the client tars the context following its links to folders (and reads .dockerignore through
            # one): nothing of it may lead out of the context, nor be a FIFO or a device
            problem = confined(context, folder_links=False)
            if problem is not None:
                raise ImageBuildError(f"docker environment: build context {str(context)!r}: {problem}; a build "
                                      "context must hold what the build copies (replace the link by the file)")
            try:
                # the tag and key above hash the references; the values exist only for this call
                buildargs = resolve_secret(config.build_args)
            except MissingSecretError as exc:
                raise ImageBuildError(f"docker environment: build_args: {exc}") from None
            _check_bases(client, config, dockerfile, buildargs)
            try:
                image, _ = client.images.build(
                    path=str(context), dockerfile=str(dockerfile), tag=tag, buildargs=buildargs,
                    pull=False, rm=True, forcerm=True,
                )
            except docker.errors.BuildError as exc:
                log = "".join(str(line.get("stream") or line.get("error") or "") for line in exc.build_log)
                raise ImageBuildError(scrub(
                    f"docker environment: building {str(dockerfile)!r} failed: {exc.msg}\n{log[-2000:]}",
                    config.build_args.values(),
                )) from None
            except docker.errors.APIError as exc:
                # e.g. a Dockerfile the engine cannot parse
                raise ImageBuildError(scrub(
                    f"docker environment: the engine refused to build {str(dockerfile)!r}: {exc.explanation or exc}",
                    config.build_args.values(),
                )) from None
            _built[key] = image.id
        return _built[key]


def _tar_filter(info: tarfile.TarInfo) -> tarfile.TarInfo:
    # files arrive owned by root whoever owns them here
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    return info


class _Chunks(io.RawIOBase):
    """The chunks an engine streams, read as a file (for ``tarfile``'s stream mode)."""

    def __init__(self, chunks) -> None:
        super().__init__()
        self._chunks = iter(chunks)
        self._left = b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        while not self._left:
            chunk = next(self._chunks, None)
            if chunk is None:
                return 0
            self._left = chunk
        n = min(len(buffer), len(self._left))
        buffer[:n] = self._left[:n]
        self._left = self._left[n:]
        return n


def _stream_file(chunks) -> io.BufferedReader:
    return io.BufferedReader(_Chunks(chunks), 1 << 20)


def _read_frames(sock: socket.socket) -> tuple[CappedOutput, CappedOutput]:
    """Read a multiplexed exec stream to its end: 8-byte headers (stream, size) then payload, each frame's
    payload passed on as it comes (a frame may be larger than what is kept of its stream)."""
    streams = {1: CappedOutput(), 2: CappedOutput()}
    header = bytearray()
    kind, left = 1, 0  # the stream of the frame being read, and how much of its payload is still to come
    while True:
        try:
            chunk = sock.recv(65536)
        except OSError:
            chunk = b""
        if not chunk:
            break
        view = memoryview(chunk)
        while view:
            if left:
                part, view = view[:left], view[left:]
                streams.get(kind, streams[1]).add(bytes(part))
                left -= len(part)
                continue
            needed = 8 - len(header)
            header += view[:needed]
            view = view[needed:]
            if len(header) == 8:
                kind, left = struct.unpack(">BxxxL", header)
                header.clear()
    return streams[1], streams[2]


def _exec_failed(message: str) -> ExecResult:
    """A command the engine could not start (no such program, no such user), as a shell reports it."""
    missing = "unable to find user" not in message and ("not found" in message or "no such file" in message)
    return ExecResult(returncode=127 if missing else 126, stdout="", stderr=message + "\n")


def _not_started(refusal: RuntimeError) -> ExecResult | None:
    """Podman's refusal to start a command (the engine's own answer, which ``_refused`` wrapped), as the
    result Docker gives; None if the refusal is about something else."""
    import docker

    answer = refusal.__cause__
    if not isinstance(answer, docker.errors.APIError):
        return None
    message = str(answer.explanation or answer)
    lowered = message.lower()
    if "unable to find user" in lowered or "executable file not found" in lowered or "no such file or directory" in lowered \
            or "permission denied" in lowered:
        return _exec_failed(message.strip())
    return None


def _write_input(sock: socket.socket, data: bytes) -> None:
    try:
        sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)  # the command's stdin ends here
    except OSError:
        pass  # the command stopped reading: what it got is its input


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


@ENVIRONMENTS.register()
class DockerEnvironment(BaseEnvironment):
    """One container per session on a Docker engine: limits, network switching, copy in and out."""

    id = "docker"
    config_class = DockerConfig

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
