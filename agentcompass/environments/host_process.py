"""``host_process``: a per-attempt workspace directory and host subprocesses.

Each command runs in its own process group and carries the session's markers
(``leftovers``), so a timeout or ``close()`` ends every process it started.
Where bubblewrap works (``sandbox``: ``auto`` or ``bubblewrap``), every
command runs in the session's sandbox (``bubblewrap``): its own processes
only, the host's system folders read-only, no Unix socket of the host, and
under network policy ``none`` nothing but loopback. With ``sandbox: off``
commands are plain host processes, and a ``none`` phase gets a network
namespace only (``netns``). Isolation a phase asks for is refused where it
cannot be made, never run weaker.
"""

from __future__ import annotations

import asyncio
import errno
import functools
import io
import json
import logging
import os
import pwd
import re
import select
import signal
import sys
import tempfile
import threading
import time
import uuid
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
from agentcompass._util.aio import child_running
from agentcompass._util.trees import remove_tree
from agentcompass import tools
from agentcompass.errors import DeadlineError
from agentcompass.runtime.base import (
    END_PROCESSES_SECONDS, CappedOutput, CleanReport, EnvironmentUnavailableError, SandboxDiedError, keeps,
)
from agentcompass.runtime.config import ComponentConfig, config_field

from . import netns, transfer
from .bubblewrap import Sandbox, require_sandbox, sandbox_support
from .cgroups import Limits, SessionCgroup, check_limits, memory_bytes, require_limits
from .leftovers import (
    EXEC_VAR,
    LABEL_VAR,
    OWNER_VAR,
    SESSION_VAR,
    clean_processes,
    clean_sandbox_folders,
    clean_workspaces,
    forget_session,
    kill_marked,
    owner_token,
    record_session,
)


# What a sandboxed command inherits from the job: enough to find programs and
# behave like a login shell. Not the rest: the job's environment holds the API
# keys ${VAR} references resolve to, and an agent's bash must not read them.
INHERITED_VARIABLES = ("PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ", "TERM", "TMPDIR")


def sandbox_environment() -> dict[str, str]:
    """The job's variables a host_process command sees (before the caller's own ``env``)."""
    return {
        k: v for k, v in os.environ.items()
        if k in INHERITED_VARIABLES or k.startswith("LC_")
    }


@dataclass(slots=True)
class HostProcessConfig(ComponentConfig):
    workspace_root: str | None = config_field(
        default=None,
        description="Directory under which per-attempt workspaces are created (default: the system temp dir).",
    )
    keep_workspace: bool = config_field(default=False, description="Leave the workspace behind after the session closes.")
    sandbox: str = config_field(
        default="auto",
        choices=["auto", "bubblewrap", "off"],
        description="How commands are confined. 'bubblewrap': in a bubblewrap sandbox (own processes only, the "
        "host's system folders read-only, no host Unix socket; only loopback under 'none'), refused where it "
        "cannot be made. 'auto': the sandbox where it can be made; elsewhere a 'public' phase runs plain host "
        "processes (with a warning) and a 'none' phase is refused. 'off': plain host processes, and a 'none' "
        "phase in a network namespace only (host Unix sockets stay reachable); the session's file calls are then "
        "confined to the workspace (no link followed), the agent's commands are not.",
    )
    memory: str | None = config_field(
        default=None, description="Memory limit of the session's processes together, e.g. '512m' or '2g' (a cgroup, "
        "as docker's --memory); null: no limit.",
    )
    cpus: float | None = config_field(
        default=None, description="CPU limit of the session's processes together, in cores, e.g. 1.5 (a cgroup); "
        "null: no limit.",
    )
    pids_limit: int | None = config_field(
        default=None, description="Most processes the session may hold at once, its own helpers included (a cgroup, "
        "as docker's --pids-limit); null: no limit.",
    )

    def __post_init__(self) -> None:
        check_limits(self)

    @property
    def limits(self) -> Limits:
        return Limits(
            memory=memory_bytes(self.memory) if self.memory is not None else None,
            cpus=self.cpus, pids=self.pids_limit,
        )


_PIPE_GRACE_SECONDS = 1.0
# The most a file call's report (a status, the list of what a copy skipped) may hold; past it, it is cut
_REPORT_LIMIT = 1 << 20
# Run in the sandbox by ``end_processes`` (``python -I -S``, from the host's read-only folders): SIGKILL to
# every process of the sandbox's PID namespace but its init and itself (``kill(-1)``: whatever a process did
# to its environment, process group or session, in a namespace nested in it too), again until /proc shows
# none alive (a zombie is dead; the sandbox's init reaps it).
_END_ALL = (
    "import os, signal, time\n"
    "me = str(os.getpid())\n"
    "while True:\n"
    "    try:\n"
    "        os.kill(-1, signal.SIGKILL)\n"
    "    except OSError:\n"
    "        pass\n"
    "    alive = 0\n"
    "    for p in os.listdir('/proc'):\n"
    "        if p.isdigit() and p not in ('1', me):\n"
    "            try:\n"
    "                with open('/proc/' + p + '/stat') as f:\n"
    "                    state = f.read().rsplit(')', 1)[1].split()[0]\n"
    "            except (OSError, IndexError):\n"
    "                continue\n"
    "            alive += state not in ('Z', 'X')\n"
    "    if not alive:\n"
    "        break\n"
    "    time.sleep(0.01)\n"
)
# Run in the sandbox by ``exec_and_end``: the command (its argv follows) as a child, and the moment it exits
# ``_END_ALL``, then its exit status (128+N for a signal N), so nothing it started gets time to act after it.
_RUN_THEN_END_ALL = (
    "import os, signal, sys\n"
    "child = os.fork()\n"
    "if child == 0:\n"
    "    for s in (signal.SIGPIPE, signal.SIGXFSZ):\n"
    "        signal.signal(s, signal.SIG_DFL)\n"
    "    try:\n"
    "        os.execvp(sys.argv[1], sys.argv[1:])\n"
    "    except OSError as exc:\n"
    "        os.write(2, f'{sys.argv[1]}: {exc.strerror}\\n'.encode())\n"
    "        os._exit(127 if isinstance(exc, FileNotFoundError) else 126)\n"
    "status = os.waitpid(child, 0)[1]\n"
    + _END_ALL +
    "code = os.waitstatus_to_exitcode(status)\n"
    "os._exit(128 - code if code < 0 else code)\n"
)
_RELAY_START_TIMEOUT = 10.0
_SOCKET_RELAY = str(Path(__file__).with_name("socket_relay.py"))
_TRANSFER = str(Path(__file__).with_name("transfer.py"))


async def _drain(stream: asyncio.StreamReader, output: CappedOutput) -> None:
    """Read ``stream`` to its end, keeping its head and tail (``OUTPUT_LIMIT``)."""
    while chunk := await stream.read(65536):
        output.add(chunk)


async def _drain_capped(stream: asyncio.StreamReader, buffer: bytearray, cap: int) -> None:
    """Read ``stream`` to its end, keeping at most ``cap`` bytes (the rest is read and dropped)."""
    while chunk := await stream.read(65536):
        buffer.extend(chunk[: max(cap - len(buffer), 0)])


# After a file helper exited, how long what it wrote may still take to be read: a pipe end that stays
# open longer is held by another process of the sandbox, and the call fails rather than wait for it.
_HELD_PIPE_GRACE_SECONDS = 10.0
# How often a copy thread that waits on a helper's pipe looks whether its call was given up.
_POLL_SECONDS = 0.2


class _PipeEnd(io.RawIOBase):
    """Our end of a pipe to a file helper, read or written in a thread that gives up (``OSError``
    ETIMEDOUT) once ``stop`` is set: a helper the agent stopped, or a pipe end it holds open, never
    holds the thread past its call."""

    def __init__(self, fd: int, writing: bool, stop: threading.Event) -> None:
        super().__init__()
        os.set_blocking(fd, False)  # our end only: the helper's end is its own open file
        self._fd, self._writing, self._stop = fd, writing, stop

    def readable(self) -> bool:
        return not self._writing

    def writable(self) -> bool:
        return self._writing

    def fileno(self) -> int:
        return self._fd

    def _ready(self, event: int) -> None:
        poller = select.poll()
        poller.register(self._fd, event)
        while not self._stop.is_set():
            if poller.poll(int(_POLL_SECONDS * 1000)):
                return
        raise OSError(errno.ETIMEDOUT, "the file call was given up")

    def readinto(self, buffer) -> int:
        while True:
            if self._stop.is_set():
                raise OSError(errno.ETIMEDOUT, "the file call was given up")
            try:
                return os.readv(self._fd, [buffer])
            except BlockingIOError:
                self._ready(select.POLLIN)

    def write(self, data) -> int:
        while True:
            if self._stop.is_set():
                raise OSError(errno.ETIMEDOUT, "the file call was given up")
            try:
                return os.write(self._fd, data)
            except BlockingIOError:
                self._ready(select.POLLOUT)

    def close(self) -> None:
        if not self.closed:
            try:
                os.close(self._fd)
            finally:
                super().close()


def _retrieved(future: asyncio.Future) -> None:
    if not future.cancelled():
        future.exception()


def _through(use, fd: int, writing: bool, stop: threading.Event):
    """``use`` of a pipe end as a buffered file that gives up at ``stop``, closed after."""
    raw = _PipeEnd(fd, writing, stop)
    with (io.BufferedWriter(raw, 1 << 20) if writing else io.BufferedReader(raw, 1 << 20)) as file:
        return use(file)


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


def _exit_status(returncode: int) -> int:
    """A command killed by signal N exits with 128+N, as a shell and docker report it."""
    return 128 - returncode if returncode < 0 else returncode


def _user_change(user: str) -> list[str]:
    """``setpriv`` options that run a command as ``user`` (a name or a numeric uid of this machine)."""
    try:
        entry = pwd.getpwuid(int(user)) if user.isdigit() else pwd.getpwnam(user)
    except (KeyError, ValueError):
        raise LookupError(f"unable to find user {user}: no matching entries in passwd file") from None
    return ["--reuid", str(entry.pw_uid), "--regid", str(entry.pw_gid), "--init-groups"]


class HostProcessSession(EnvironmentSession):
    def __init__(self, root: Path, keep: bool, label: str, sandboxed: bool = False, limits: Limits = Limits()) -> None:
        self.root = root
        self.sandboxed = sandboxed
        self.limits = limits
        self._cgroup: SessionCgroup | None = None
        self.keep = keep
        # what one copy into or out of the session may hold, and the file calls made without the sandbox
        self.copy_limits = transfer.Limits()
        self._confined = transfer.Confined(str(root), self.copy_limits)
        self.label = label
        self.session_id = uuid.uuid4().hex
        self._markers = {SESSION_VAR: self.session_id, OWNER_VAR: owner_token(), LABEL_VAR: label}
        # process groups started here; close() ends whatever is left of them
        self._groups: set[int] = set()
        self._started_any = False
        self._mode = "public"
        self._isolated: netns.IsolatedNetwork | None = None
        self._sandbox: Sandbox | None = None
        self._relays: list[asyncio.subprocess.Process] = []

    @property
    def workdir(self) -> str:
        return str(self.root)

    @property
    def network_mode(self) -> str:
        return self._mode

    def _path(self, path: str) -> Path:
        p = Path(path)
        return p if p.is_absolute() else self.root / p

    async def exec(self, cmd, *, shell=False, timeout=None, cwd=None, env=None, input=None, user=None) -> ExecResult:
        if shell and not isinstance(cmd, str):
            raise TypeError("exec(shell=True) takes a command string")
        if not shell and not (isinstance(cmd, list) and all(isinstance(c, str) for c in cmd)):
            raise TypeError("exec(shell=False) takes an argv list of strings")
        started = time.monotonic()
        exec_id = uuid.uuid4().hex
        # in the sandbox the job's own temporary folder is not there: its private /tmp is
        private = {"TMPDIR": "/tmp"} if self._sandbox is not None and "TMPDIR" in os.environ else {}
        full_env = {**sandbox_environment(), **private, **(env or {}), **self._markers, EXEC_VAR: exec_id}
        workdir = str(self._path(cwd)) if cwd else str(self.root)
        stdin = asyncio.subprocess.PIPE if input is not None else asyncio.subprocess.DEVNULL
        argv = ["/bin/sh", "-c", cmd] if shell else list(cmd)
        if not os.path.isdir(workdir):
            raise FileNotFoundError(f"exec: working directory {workdir} does not exist")
        if user is not None:
            if os.geteuid() != 0:
                raise PermissionError(
                    f"host_process: running a command as user {user!r} needs agentcompass to run as root; "
                    "run it as root, use the docker environment, or leave `user` unset"
                )
            try:
                change = _user_change(str(user))
            except LookupError as exc:
                return ExecResult(returncode=126, stdout="", stderr=f"{exc}\n")
        else:
            change = []
        self._check_network()
        try:
            proc = await self._start(argv, workdir, full_env, stdin=stdin, user_change=change)
        except (FileNotFoundError, PermissionError) as exc:
            # as a shell reports it, and as under 'none' (where nsenter execs the program)
            code = 127 if isinstance(exc, FileNotFoundError) else 126
            return ExecResult(returncode=code, stdout="", stderr=f"{argv[0]}: {exc.strerror}\n")
        data = input.encode() if isinstance(input, str) else input
        out, err = CappedOutput(), CappedOutput()
        assert proc.stdout is not None and proc.stderr is not None  # _start pipes both
        readers: asyncio.Future = asyncio.gather(_drain(proc.stdout, out), _drain(proc.stderr, err))
        writer = asyncio.ensure_future(self._feed(proc, data)) if data is not None else None
        exited: asyncio.Future = asyncio.ensure_future(_exited(proc))
        done, _ = await asyncio.wait({exited, readers}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        if readers in done and exited not in done:
            # output closed first: the process is about to exit (or closed its pipes early)
            await asyncio.wait({exited}, timeout=None if timeout is None else max(timeout - (time.monotonic() - started), 0))
        timed_out = not exited.done()
        if timed_out:
            # the group holds the command's tree; the marker also finds what left the group
            _kill_group(proc.pid)
            kill_marked(EXEC_VAR, exec_id)
            await exited
        # A background child may still hold the pipes: give it a moment, then stop reading.
        if not readers.done():
            await asyncio.wait({readers}, timeout=_PIPE_GRACE_SECONDS)
        if not readers.done():
            readers.cancel()
            transport = getattr(proc, "_transport", None)
            if transport is not None:
                transport.close()
        if writer is not None:
            writer.cancel()
        if not _group_alive(proc.pid):
            # nothing left in the group: forget it, so close() never signals a reused id
            self._groups.discard(proc.pid)
        assert proc.returncode is not None  # it exited, or was killed and waited for
        if proc.returncode < 0 and not timed_out:
            # killed by a signal: by the agent, or with the whole session (its holder too)
            self._check_network()
        return ExecResult(
            returncode=_exit_status(proc.returncode),
            stdout=out.text(),
            stderr=err.text(),
            timed_out=timed_out,
            cut=out.cut + err.cut,
        )

    def _check_network(self) -> None:
        """Raise ``SandboxDiedError`` if the sandbox's or the isolated network's holder died: the
        session was ended from outside (its processes killed, as ``agentcompass clean --all`` does)."""
        if self._sandbox is not None and not child_running(self._sandbox.holder):
            raise SandboxDiedError(
                f"host_process: the namespace holder of session {self.label} (its sandbox) died mid-attempt: "
                "its processes were killed from outside"
            )
        if self._isolated is not None and not child_running(self._isolated.holder):
            raise SandboxDiedError(
                f"host_process: the network namespace holder of session {self.label} died mid-attempt: "
                "its processes were killed from outside"
            )

    async def _start(
        self, argv: list[str], cwd: str, env: dict[str, str], stdin, user_change: list[str] | None = None,
        network_only: bool = False, stdout=asyncio.subprocess.PIPE, helper: bool = False,
    ) -> asyncio.subprocess.Process:
        """``argv`` in the session's sandbox (or with ``network_only``, in its network only: a relay to a
        host socket), in a process group of its own that close() ends. A ``helper`` (a file call) runs
        outside the sandbox's processes (``Sandbox.wrap``): none of them can see, signal or write to it."""
        pass_fds: tuple[int, ...] = ()
        network = self._sandbox.network if self._sandbox is not None else self._isolated
        entered = self._sandbox is not None and not network_only or network is not None  # through nsenter
        if self._sandbox is not None and not network_only:
            argv, pass_fds = self._sandbox.wrap(argv, cwd, user_change or [], helper=helper), self._sandbox.pass_fds
        elif network is not None:
            if user_change:
                argv = ["setpriv", *user_change, "--", *argv]
            argv, pass_fds = network.wrap(argv), network.pass_fds
        elif user_change:
            argv = ["setpriv", *user_change, "--", *argv]
        if self._cgroup is not None:
            argv = self._cgroup.wrap(argv)
        if entered:
            # nsenter stays on the host, and stops itself when the command it waits for is stopped: it is
            # killed with the thread that started it, so a job killed mid-call leaves none behind
            argv = ["setpriv", "--pdeathsig", "KILL", "--", *argv]
        self._started_any = True
        proc = await asyncio.create_subprocess_exec(
            *argv, cwd=cwd, env=env, stdin=stdin, pass_fds=pass_fds,
            stdout=stdout, stderr=asyncio.subprocess.PIPE, start_new_session=True,
        )
        self._groups.add(proc.pid)
        return proc

    async def expose_host_socket(self, socket_path: Path) -> str:
        """A relay process in the session's network (``socket_relay``) listens on its 127.0.0.1."""
        # the relay needs no more of the job's environment than a path and the session's markers
        env = {"PATH": os.environ.get("PATH", os.defpath), **self._markers}
        argv = [sys.executable, "-I", _SOCKET_RELAY, str(socket_path)]
        relay = await self._start(argv, str(self.root), env, stdin=asyncio.subprocess.DEVNULL, network_only=True)
        self._relays.append(relay)
        assert relay.stdout is not None and relay.stderr is not None  # _start pipes both
        try:
            line = await asyncio.wait_for(relay.stdout.readline(), _RELAY_START_TIMEOUT)
        except asyncio.TimeoutError:
            line = b""
        if not line.strip().isdigit():
            _kill_group(relay.pid)
            err = (await relay.stderr.read()).decode(errors="replace").strip()
            raise EnvironmentUnavailableError(f"host_process: the relay to {socket_path} did not start: {err or 'no output'}")
        return f"127.0.0.1:{int(line)}"

    async def _reap_relays(self) -> None:
        # ended with their process groups; waited for so that no transport outlives the session
        relays, self._relays = self._relays, []
        for relay in relays:
            if relay.returncode is None:
                _kill_group(relay.pid)
            await relay.wait()

    @staticmethod
    async def _feed(proc: asyncio.subprocess.Process, data: bytes) -> None:
        # written while the output is read, so a large input cannot deadlock on a full pipe
        assert proc.stdin is not None  # piped when there is input
        try:
            proc.stdin.write(data)
            await proc.stdin.drain()
            proc.stdin.close()
        except (BrokenPipeError, ConnectionResetError):
            pass  # the command stopped reading: what it got is its input

    # --- files -----------------------------------------------------------------------
    # In the sandbox every file call runs there (``transfer.main`` in a process entered as a command
    # is), so a path means what it means to a command there, and no host path is ever opened for it.
    # Without the sandbox, paths are confined to the workspace and no link is followed (``Confined``).
    # Copies out land on the host through ``transfer.extract``: regular files, folders and links only.

    def _target(self, path: str) -> str:
        if not isinstance(path, str) or not path:
            raise ValueError(f"a session path must be a non-empty string, got {path!r}")
        if "\0" in path:
            raise ValueError(f"{transfer.shown(path)}: a path cannot hold a NUL character")
        return str(self._path(path))

    async def _file_call(self, op: str, path: str, what: str, *, feed=None, consume=None) -> bytes:
        """Run ``transfer.main`` OP on ``path`` in the sandbox; ``feed(writer)`` writes its stdin and
        ``consume(reader)`` reads its stdout, each in a thread; without ``consume`` its stdout is returned."""
        exec_id = uuid.uuid4().hex
        private = {"TMPDIR": "/tmp"} if "TMPDIR" in os.environ else {}
        env = {**sandbox_environment(), **private, **self._markers, EXEC_VAR: exec_id}
        limits = transfer.Limits(size=transfer.READ_LIMIT) if op == "read" else self.copy_limits
        argv = [sys.executable, "-I", "-S", _TRANSFER, op, path, *limits.args()]
        self._check_network()
        ends: list[int] = []
        stdin, stdout = asyncio.subprocess.DEVNULL, asyncio.subprocess.PIPE
        if feed is not None:
            stdin, write = os.pipe()
            ends += [stdin, write]
        if consume is not None:
            read, stdout = os.pipe()
            ends += [read, stdout]
        try:
            proc = await self._start(argv, str(self.root), env, stdin=stdin, stdout=stdout, helper=True)
        except BaseException:
            for fd in ends:
                os.close(fd)
            raise
        if feed is not None:
            os.close(stdin)
        if consume is not None:
            os.close(stdout)
        # Within the session's call_timeout: the helper runs where the agent is root, which may stop it
        # (SIGSTOP) or hold its pipes open. Past it, or when the call is cancelled (the attempt's own
        # time limit), the helper's group and marked processes are killed and the threads give up.
        seconds = self.call_timeout
        deadline = time.monotonic() + seconds
        stop = threading.Event()
        err = bytearray()
        out = bytearray()
        assert proc.stderr is not None  # _start pipes it
        work: list[asyncio.Future] = [asyncio.ensure_future(_drain_capped(proc.stderr, err, 1 << 16))]
        if feed is not None:
            work.append(asyncio.ensure_future(asyncio.to_thread(_through, feed, write, True, stop)))
        if consume is not None:
            work.append(asyncio.ensure_future(asyncio.to_thread(_through, consume, read, False, stop)))
        else:
            assert proc.stdout is not None
            # a file's bytes (at most READ_LIMIT, and one more: a file that grew past it is seen to), else a report
            cap = limits.size + 1 if op == "read" else _REPORT_LIMIT
            work.append(asyncio.ensure_future(_drain_capped(proc.stdout, out, cap)))
        everything: asyncio.Future = asyncio.gather(*work, return_exceptions=True)
        exited: asyncio.Future = asyncio.ensure_future(_exited(proc))
        held = False
        try:
            await asyncio.wait({everything, exited}, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
            if everything.done() and any(isinstance(o, BaseException) for o in everything.result()):
                _kill_group(proc.pid)  # a side stopped early: the other must not wait for it
            left = max(deadline - time.monotonic(), 0.0)
            if exited.done() and not everything.done():
                # the helper is gone and what it wrote is in the pipe: a pipe end still open is held by another
                # process of the sandbox
                left = min(left, _HELD_PIPE_GRACE_SECONDS)
            await asyncio.wait({everything, exited}, timeout=left)
            held = exited.done() and not everything.done() and time.monotonic() < deadline
        finally:
            if not (everything.done() and exited.done()):  # past the deadline, or cancelled
                stop.set()
                _kill_group(proc.pid)
                kill_marked(EXEC_VAR, exec_id)
                everything.cancel()
                everything.add_done_callback(_retrieved)  # what the cancelled side raised is not news
                exited.cancel()
                transport = getattr(proc, "_transport", None)
                if transport is not None:
                    transport.close()
                unfinished = True
            else:
                unfinished = False
            if not _group_alive(proc.pid):
                self._groups.discard(proc.pid)
        if unfinished:
            if held:
                raise OSError(errno.EIO, f"{what}: a pipe of the file call was held open in the sandbox after "
                              "its helper ended")
            raise DeadlineError(f"{what} (a file call in session {self.label})", seconds)
        outcomes = everything.result()
        code = proc.returncode
        assert code is not None  # waited for
        failures = [o for o in outcomes[1:] if isinstance(o, BaseException)]
        if code in (2, 3):
            raise self._helper_error(code, bytes(err), path, what, limits)
        if code != 0:
            self._check_network()  # the whole sandbox was ended from outside
            if failures and not isinstance(failures[0], BrokenPipeError):
                raise failures[0]
            raise OSError(errno.EIO, f"{what}: the file call was killed in the sandbox (status {_exit_status(code)})")
        if failures:
            raise failures[0]
        return bytes(out)

    def _helper_error(self, code: int, err: bytes, path: str, what: str, limits: transfer.Limits) -> OSError:
        try:
            report = json.loads(err.decode(errors="replace").strip().splitlines()[-1])
        except (ValueError, IndexError):
            report = {}
        if not isinstance(report, dict):
            report = {}
        if code == 3:
            kind = str(report.get("limit", "size"))
            return transfer.CopyLimitError(kind, limits, str(report.get("at", ""))[:300], what)
        given = report.get("errno")
        number = given if isinstance(given, int) else errno.EIO
        reason = str(report.get("reason") or os.strerror(number))[:500]
        shown = transfer.shown(path)
        message = {
            errno.ENOENT: f"{shown} does not exist in the sandbox",
            errno.EISDIR: f"{shown} is a directory in the sandbox",
            errno.ENOTDIR: f"{shown}: a folder on its way is not a folder in the sandbox",
        }.get(number, f"{what}: {reason} (in the sandbox)")
        return OSError(number, message)

    async def upload(self, local: Path, remote: str) -> None:
        local = Path(local)
        if not os.path.lexists(local):
            raise FileNotFoundError(str(local))
        target = self._target(remote)
        what = f"copying {transfer.shown(str(local))} into session {self.label} at {transfer.shown(remote)}"
        limits = self.copy_limits
        try:
            if self._sandbox is None:
                skipped = await asyncio.to_thread(self._confined.upload, str(local), target)
            else:
                out = await self._file_call(
                    "unpack", target, what, feed=lambda writer: transfer.pack_local(writer, str(local), limits))
                skipped = json.loads(out or b"{}").get("skipped", [])
        except transfer.CopyLimitError as exc:
            raise exc.within(what) from None
        transfer.note_skipped(what, [str(s)[:400] for s in skipped])

    async def download(self, remote: str, local: Path) -> None:
        local = Path(local)
        target = self._target(remote)
        what = f"copying {transfer.shown(remote)} out of session {self.label}"
        limits = self.copy_limits
        skipped: list[str] = []
        try:
            if self._sandbox is None:
                skipped = await asyncio.to_thread(self._confined.download, target, str(local))
            else:
                def land(reader) -> None:
                    skipped.extend(transfer.extract_local(reader, str(local), limits))

                await self._file_call("pack", target, what, consume=land)
        except transfer.CopyLimitError as exc:
            raise exc.within(what) from None
        transfer.note_skipped(what, skipped)

    async def read_text(self, path: str) -> str:
        target = self._target(path)
        if self._sandbox is None:
            try:
                data = await asyncio.to_thread(self._confined.read, target)
            except transfer.CopyLimitError as exc:
                raise exc.within(f"reading {transfer.shown(path)}") from None
        else:
            data = await self._file_call("read", target, f"reading {transfer.shown(path)}")
            if len(data) > transfer.READ_LIMIT:  # it grew past the limit while it was read
                raise transfer.CopyLimitError("read", transfer.Limits(size=transfer.READ_LIMIT), "",
                                              f"reading {transfer.shown(path)}")
        return data.decode("utf-8")

    async def write_text(self, path: str, text: str) -> None:
        target = self._target(path)
        data = text.encode("utf-8")
        if self._sandbox is None:
            await asyncio.to_thread(self._confined.write, target, data)
            return

        def feed(writer) -> None:
            writer.write(data)

        await self._file_call("write", target, f"writing {transfer.shown(path)}", feed=feed)

    async def _status(self, path: str) -> tuple[bool, bool]:
        target = self._target(path)
        if self._sandbox is None:
            return await asyncio.to_thread(self._confined.status, target)
        report = json.loads(await self._file_call("stat", target, f"reading the status of {transfer.shown(path)}"))
        return bool(report.get("exists")), bool(report.get("dir"))

    async def exists(self, path: str) -> bool:
        return (await self._status(path))[0]

    async def is_dir(self, path: str) -> bool:
        return (await self._status(path))[1]

    async def endpoint(self, port: int) -> str:
        network = self._sandbox.network if self._sandbox is not None else self._isolated
        if network is not None:
            return network.endpoint(port)
        return f"127.0.0.1:{port}"

    async def start(self, network: NetworkPolicy) -> None:
        """Make the session's cgroup (if it has limits) and its sandbox or network."""
        if self.limits:
            self._cgroup = SessionCgroup.create(self.limits, f"agentcompass-{self.session_id}")
        await self.set_network(network)

    async def set_network(self, policy: NetworkPolicy) -> None:
        """Switch the network of the commands started from now on.

        Switching to ``none`` first ends the processes the session started: they
        run on the host's network and must not carry it into an isolated phase.
        In the sandbox, every switch ends them and starts a new sandbox (with a
        fresh ``/tmp``); the workspace stays. Without it, processes started
        under ``none`` stay in their namespace after a switch to ``public``.
        """
        if policy.mode == self._mode and (self._sandbox is not None or not self.sandboxed):
            return
        if policy.mode == "none":
            netns.require_isolation("host_process")
        if self.sandboxed:
            self._end_processes()
            await self._reap_relays()
            await self._release_network()
            self._sandbox = await Sandbox.create(
                str(self.root), policy.mode == "none", {**sandbox_environment(), **self._markers}, "host_process",
                tuple(self.tools.values()),
            )  # the holder stays out of the session's cgroup: no memory shortage of the agent's kills it
        elif policy.mode == "none":
            self._end_processes()
            await self._reap_relays()
            self._isolated = await netns.IsolatedNetwork.create(
                {**sandbox_environment(), **self._markers}, "host_process"
            )
        else:
            await self._release_network()
            await self._reap_relays()  # they listened in the namespace that is gone
        self._mode = policy.mode

    async def end_processes(self) -> None:
        """End every process of the session but the sandbox's init (the relays to host sockets stay).

        In the sandbox a command sends SIGKILL to every other process of its PID namespace
        (``_END_ALL``), so no process the agent's code started survives, whatever it did to its
        environment or process group. With ``sandbox: off``: every process group the session started
        and every process carrying its marker (a process that dropped both is not found).
        """
        if self._sandbox is None:
            self._end_processes(spare=frozenset(relay.pid for relay in self._relays))
            return
        ended = await self.exec([sys.executable, "-I", "-S", "-c", _END_ALL], timeout=END_PROCESSES_SECONDS)
        if ended.timed_out or ended.returncode != 0:
            why = f"they were still there after {END_PROCESSES_SECONDS} s" if ended.timed_out else (
                f"status {ended.returncode}: {ended.stderr.strip()[-300:]}")
            raise RuntimeError(f"host_process: could not end the processes of session {self.label} ({why})")
        self._groups = {pgid for pgid in self._groups if _group_alive(pgid)}

    async def exec_and_end(self, cmd, *, timeout=None, env=None, cwd=None) -> ExecResult:
        """``exec(cmd)``, then ``end_processes()``; in the sandbox the command runs as the child of a helper
        that ends every other process of the sandbox the moment the command exits (``_RUN_THEN_END_ALL``)."""
        if self._sandbox is not None:
            cmd = [sys.executable, "-I", "-S", "-c", _RUN_THEN_END_ALL, *cmd]
        ran = await self.exec(cmd, timeout=timeout, env=env, cwd=cwd)
        await self.end_processes()
        return ran

    def _end_processes(self, spare: frozenset[int] = frozenset()) -> None:
        for pgid in self._groups - spare:
            _kill_group(pgid)
        self._groups &= spare
        if self._started_any:
            kill_marked(SESSION_VAR, self.session_id, spare=spare)

    async def _release_network(self) -> None:
        if self._sandbox is not None:
            sandbox, self._sandbox = self._sandbox, None
            await sandbox.close()
        if self._isolated is not None:
            isolated, self._isolated = self._isolated, None
            await isolated.close()

    async def close(self, *, failed: bool = False, retain: str | None = None) -> None:
        """End every process of the session and remove the workspace unless ``keep_workspace``.

        ``failed`` is accepted as docker's ``close`` accepts it; the workspace's
        fate depends on ``keep_workspace`` alone.
        """
        self._end_processes()
        await self._reap_relays()
        await self._release_network()
        if self._cgroup is not None:
            await asyncio.to_thread(self._cgroup.remove)
            self._cgroup = None
        if not keeps(retain, "always" if self.keep else "never", failed):
            remove_tree(self.root, ignore_errors=True)  # any depth, names, links and modes the agent left
        forget_session(self.root)


@ENVIRONMENTS.register()
class HostProcessEnvironment(BaseEnvironment):
    """Host subprocesses in a per-attempt workspace directory (the embedded default)."""

    id = "host_process"
    # 2: commands run in the sandbox where it can be made; a command killed by a signal exits 128+N
    version = "2"
    config_class = HostProcessConfig

    @classmethod
    def clean_leftovers(cls, run_id: str | None, include_live: bool, dry_run: bool, report: CleanReport) -> None:
        """Processes of sessions whose agentcompass process is gone, their workspaces (looked for in the
        system temp directory, where sessions make them unless ``workspace_root`` says otherwise), and the
        bubblewrap sandboxes' folders of processes that are gone."""
        clean_processes(run_id, include_live, dry_run, report)
        clean_workspaces(Path(tempfile.gettempdir()), run_id, include_live, dry_run, report)
        clean_sandbox_folders(Path(tempfile.gettempdir()), dry_run, report)

    def build_config(self, spec: EnvironmentSpec) -> HostProcessConfig:
        """The params, refused when the isolation they and the spec's phase policies ask for cannot be made."""
        config = super().build_config(spec)
        none_phases = [
            phase for phase in ("baseline", "run", "evaluation")
            if (policy := getattr(spec, f"{phase}_network", None)) is not None and policy.mode == "none"
        ]
        if none_phases:
            self._sandboxed(config, f"the {', '.join(none_phases)} phase")
        else:
            self._sandboxed(config, None)
        if config.limits:
            require_limits(tuple(config.limits.controllers()))
        return config

    @staticmethod
    def _sandboxed(config: HostProcessConfig, isolated: str | None) -> bool:
        """Whether sessions run in the sandbox, given what runs under network policy 'none' (``isolated``,
        e.g. 'the run phase'; None: nothing); raise if what is asked for cannot be made here."""
        if config.sandbox == "off":
            if isolated:
                netns.require_isolation(f"host_process ({isolated})")
            return False
        if config.sandbox == "bubblewrap":
            require_sandbox("host_process (sandbox: bubblewrap)")
            return True
        if sandbox_support()[0]:
            return True
        if isolated:
            require_sandbox(f"host_process (network policy 'none' in {isolated})")
        return False

    def resolve_network_policy(self, policy: NetworkPolicy, phase: str) -> NetworkPolicy:
        # whether the sandbox can be made is checked with the params (build_config)
        if policy.mode == "none":
            netns.require_isolation(f"host_process ({phase} phase)")
        return policy

    async def open(self, spec: EnvironmentSpec, network: NetworkPolicy, label: str) -> HostProcessSession:
        config = self.build_config(spec)
        if network.mode == "none":
            netns.require_isolation("host_process")
        sandboxed = self._sandboxed(config, "this session" if network.mode == "none" else None)
        if not sandboxed and config.sandbox == "auto":
            _warn_unconfined()
        safe = re.sub(r"[^A-Za-z0-9._-]+", "_", label)[:40]
        root = Path(tempfile.mkdtemp(prefix=f"agentcompass-{safe}-", dir=config.workspace_root))
        # beside the workspace, not in it: the agent's files stay its own
        record_session(root, label)
        session = HostProcessSession(root, keep=config.keep_workspace, label=label, sandboxed=sandboxed, limits=config.limits)
        try:
            # the harness's programs: installed once per version in the tool cache, then bound read-only at
            # their host paths (without the sandbox, the host paths as they are)
            installed = await asyncio.to_thread(tools.install_all, list(spec.tools))
            session.tools = {key: str(folder) for key, folder in installed.items()}
            await session.start(network)
        except BaseException:
            await session.close()
            raise
        return session


@functools.lru_cache(maxsize=1)
def _warn_unconfined() -> None:
    logging.getLogger(__name__).warning(
        "host_process: commands run as plain host processes, not in a sandbox: %s (set `sandbox: off` to "
        "silence this, or `sandbox: bubblewrap` to refuse to run without it)", sandbox_support()[1],
    )
