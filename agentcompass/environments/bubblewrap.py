"""The host_process sandbox: one bubblewrap holder per session, every command entered with ``nsenter``.

The holder (``bwrap ... --as-pid-1 python -I -S -c INIT``) owns the session's
namespaces: a PID namespace with a fresh ``/proc`` (a command sees the
session's processes only), an IPC namespace, and a mount namespace whose root
is an empty tmpfs holding only read-only binds of the host's system folders
(``HOST_FOLDERS``, the Python installation and agentcompass's own package),
the workspace (read-write, at its host path) and fresh tmpfs for ``/tmp``,
``/var/tmp``, ``/run``, ``/dev/shm`` and the home folder. Nothing else of the
host's file system is there, so no Unix socket file of the host is: a
read-only bind would not do, as ``connect()`` on a socket on a read-only mount
still succeeds. Under network policy ``none`` the holder also owns a network
namespace with only loopback, which keeps out the host's abstract Unix
sockets too.

What an unprivileged user of the host could not read in the bound folders
that hold settings (``/etc``, ``/opt``, ``/usr/local``: ``/etc/shadow``, a
munge key, TLS private keys) is masked (``hidden_paths``): root in the
sandbox sees an empty read-only file or folder there, never the host's
content. The installed software under the rest of ``/usr``, the library
folders and the Python installation is not walked (packages install it
world-readable, and a walk of those trees costs most of a second per process).

The holder's process is PID 1 of the PID namespace (``INIT``, which reaps
orphans and does nothing else): the kernel delivers no signal to it from
inside the namespace that it has no handler for, and it has none, so
``kill -9 -1`` from a command ends every other process of the session and
not the sandbox. It stays out of the session's cgroup, so exhausting the
session's memory or process limits cannot end it either.

Every command enters those namespaces through descriptors the session keeps
open (``/proc/self/fd/N``: a holder whose PID was reused can never receive a
command), and a root command keeps only Docker's default capabilities, so it
can neither remount nor leave. One holder per session, rather than one
``bwrap`` per command, keeps background processes (a server started by one
command, used by the next) alive across commands, as in a container.

The session's file calls (``transfer.main``) enter the same namespaces but the
PID one: each runs outside the sandbox's PID namespace (as root, in a fresh
one of its own, ``unshare --pid``; unprivileged, in the job's), so the
sandbox's commands cannot see it, signal it or open its descriptors, and the
copy stream the host reads is the helper's alone.
"""

from __future__ import annotations

import asyncio
import fcntl
import functools
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import agentcompass
from agentcompass._util.aio import kill_child
from agentcompass.runtime.config import ConfigError

from . import netns
from .netns import PUBLIC_FIX
from .leftovers import MASK_PREFIX, record_owner

# The host folders a sandboxed command sees (read-only), when they exist: programs, libraries, settings.
HOST_FOLDERS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt")
# Fresh and empty in every sandbox (besides the home folder): where sockets and temporary files live.
PRIVATE_FOLDERS = ("/tmp", "/var/tmp", "/run", "/var/run")
# What a root command keeps: Docker's default capability set less mknod. Without sys_admin it can
# neither remount a read-only folder nor enter another namespace; without sys_ptrace or sys_module
# it takes over nothing of the host; without mknod it makes no device node (one in the workspace
# would be opened on the host when the workspace is copied out).
KEPT_CAPABILITIES = (
    "chown", "dac_override", "fowner", "fsetid", "kill", "setgid", "setuid", "setpcap",
    "net_bind_service", "net_raw", "sys_chroot", "audit_write", "setfcap",
)
BOUNDING_SET = "-all," + ",".join(f"+{cap}" for cap in KEPT_CAPABILITIES)

# The bound folders walked for what an unprivileged user could not read (and under them, what is
# not walked: the Python installation). The other bound folders hold installed software only.
MASKED_FOLDERS = ("/etc", "/opt", "/usr/local", "/usr/etc")
# PID 1 of the sandbox: no handler for any signal (so none sent from inside reaches it), SIGCHLD
# blocked and waited for, every child reaped; it prints 'ready' once it runs.
INIT_NAME = "agentcompass-sandbox-init"
INIT = (
    "import os, signal\n"
    "for s in signal.valid_signals():\n"
    "    try:\n"
    "        signal.signal(s, signal.SIG_DFL)\n"
    "    except (OSError, ValueError, RuntimeError):\n"
    "        pass\n"
    "signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})\n"
    "try:\n"
    "    os.setsid()\n"
    "except OSError:\n"
    "    pass\n"
    "os.write(1, b'ready\\n')\n"
    "while True:\n"
    "    try:\n"
    "        os.waitpid(-1, 0)\n"
    "    except ChildProcessError:\n"
    "        signal.sigwait({signal.SIGCHLD})\n"
    "    except OSError:\n"
    "        pass\n"
)

_TOOLS = ("bwrap", "nsenter", "setpriv", "unshare")
_NS_GET_PARENT = 0xB702  # ioctl: the parent of a user namespace
_START_TIMEOUT = 10.0
_INSTALL = "install bubblewrap and util-linux (Debian: apt-get install bubblewrap)"


class SandboxUnavailableError(ConfigError):
    """The host_process sandbox cannot be made on this machine: refused, never run weaker."""


def _rootful() -> bool:
    return os.geteuid() == 0


@functools.lru_cache(maxsize=1)
def sandbox_support() -> tuple[bool, str]:
    """Whether a bubblewrap sandbox can be made here; if not, why not."""
    missing = [tool for tool in _TOOLS if shutil.which(tool) is None]
    if missing:
        return False, f"the tools {missing} are not on PATH ({_INSTALL})"
    usage = subprocess.run(["nsenter", "--help"], capture_output=True, text=True).stdout
    if "--wdns" not in usage:
        return False, "nsenter has no --wdns option (it needs util-linux 2.38 or later)"
    argv = ["bwrap", "--unshare-pid", "--unshare-net", "--unshare-ipc", "--ro-bind", "/", "/",
            "--proc", "/proc", "--dev", "/dev", "true"]
    return netns.probe(argv, " (it needs root or unprivileged user namespaces)")


def require_sandbox(what: str) -> None:
    available, reason = sandbox_support()
    if not available:
        raise SandboxUnavailableError(
            f"{what} needs the bubblewrap sandbox, which cannot be made on this machine: {reason}. "
            "Run where it can (as root, or with unprivileged user namespaces enabled), use the docker "
            f"environment, or set the environment's `sandbox: off` and {PUBLIC_FIX} to run unconfined host "
            "processes"
        )


def visible_folders() -> list[str]:
    """The host folders bound read-only into every sandbox, as they exist here."""
    extra = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
             str(Path(agentcompass.__file__).resolve().parent)}
    folders = [f for f in HOST_FOLDERS if os.path.lexists(f)]
    folders += sorted(p for p in extra if os.path.isdir(p) and not any(_inside(p, f) for f in HOST_FOLDERS))
    return folders


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _python_folders() -> set[str]:
    return {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix)}


@functools.lru_cache(maxsize=1)
def hidden_paths() -> tuple[tuple[str, bool], ...]:
    """What an unprivileged user could not read under ``MASKED_FOLDERS``, as (path, is a folder):
    a file without read permission for others, or a folder others cannot enter or list (not walked
    further). Links are left alone: what they lead to is masked where it is. Walked once per process
    (a few milliseconds for a usual ``/etc``)."""
    skipped = _python_folders()
    found: list[tuple[str, bool]] = []

    def walk(folder: str, device: int) -> None:
        try:
            entries = list(os.scandir(folder))
        except OSError:
            return
        for entry in entries:
            try:
                mode = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISLNK(mode.st_mode):
                continue
            if stat.S_ISDIR(mode.st_mode):
                if mode.st_mode & 0o005 != 0o005:
                    found.append((entry.path, True))
                elif mode.st_dev == device and entry.path not in skipped:
                    walk(entry.path, device)
            elif not mode.st_mode & 0o004:
                found.append((entry.path, False))

    for top in MASKED_FOLDERS:
        if os.path.isdir(top) and not os.path.islink(top) and top not in skipped:
            walk(top, os.stat(top).st_dev)
    return tuple(found)


@functools.lru_cache(maxsize=1)
def _mask_sources() -> tuple[str, str]:
    """An empty read-only file and an empty read-only folder, bound over what ``hidden_paths`` finds;
    made once per process, in a private folder of the host's temporary folder."""
    import atexit

    folder = tempfile.mkdtemp(prefix=MASK_PREFIX)
    record_owner(folder)  # 'agentcompass clean' removes it once this process is gone, if atexit never ran
    empty_file, empty_folder = os.path.join(folder, "file"), os.path.join(folder, "folder")
    os.close(os.open(empty_file, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o444))
    os.mkdir(empty_folder, 0o555)
    os.chmod(folder, 0o555)

    made_by = os.getpid()

    def remove() -> None:
        if os.getpid() != made_by:  # a forked child's exit (forkserver runs atexit): the folder is its parent's
            return
        os.chmod(folder, 0o700)
        shutil.rmtree(folder, ignore_errors=True)

    atexit.register(remove)
    return empty_file, empty_folder


def _mask_argv() -> list[str]:
    hidden = hidden_paths()
    if not hidden:
        return []
    empty_file, empty_folder = _mask_sources()
    argv: list[str] = []
    for path, is_folder in hidden:
        # the walk is once per process: a path removed since has nothing to hide, and bwrap could not
        # bind over it (it would fail making it in the read-only /etc)
        if os.path.lexists(path):
            argv += ["--ro-bind", empty_folder if is_folder else empty_file, path]
    return argv


def _holder_argv(workspace: str, isolated: bool, info_fd: int, tools: tuple[str, ...] = ()) -> list[str]:
    # --new-session: no command can push input into the terminal of the job (TIOCSTI)
    argv = ["bwrap", "--die-with-parent", "--new-session", "--unshare-pid", "--unshare-ipc", "--info-fd", str(info_fd)]
    if isolated:
        argv.append("--unshare-net")
    # fresh folders first: a visible folder inside one (a Python under the home folder) is bound over it
    for folder in PRIVATE_FOLDERS:
        argv += ["--tmpfs", folder]
    home = os.environ.get("HOME")
    if home and home != "/" and not any(_inside(home, f) for f in HOST_FOLDERS):
        argv += ["--tmpfs", home]
    for folder in visible_folders():
        if os.path.islink(folder):  # /bin -> usr/bin on a merged-/usr system
            argv += ["--symlink", os.readlink(folder), folder]
        else:
            argv += ["--ro-bind", folder, folder]
    argv += _mask_argv()
    # each tool folder (agentcompass.tools) read-only at its own path: the folders around it are empty ones
    # bubblewrap makes, unless a visible folder holds it
    for folder in tools:
        argv += ["--ro-bind", folder, folder]
    argv += ["--proc", "/proc", "--dev", "/dev"]
    argv += ["--bind", workspace, workspace, "--chdir", workspace]
    # the holder is PID 1 of the namespace and leads a process group of its own, as the holder of a
    # network namespace does
    return [*argv, "--as-pid-1", "--", sys.executable, "-I", "-S", "-c", INIT, INIT_NAME]


class Sandbox:
    """The namespaces of one session, held by a bubblewrap process and entered by every command."""

    def __init__(self, holder: asyncio.subprocess.Process, fds: dict[str, int]) -> None:
        self.holder = holder
        self._fds = fds
        # the network namespace under 'none', for endpoints and the socket relay
        self.network: netns.IsolatedNetwork | None = None
        if "net" in fds:
            self.network = netns.IsolatedNetwork(holder, fds["net"], fds.get("owner"))

    @classmethod
    async def create(cls, workspace: str, isolated: bool, env: dict[str, str], what: str,
                     tools: tuple[str, ...] = ()) -> "Sandbox":
        """The sandbox of one session; ``tools`` are host folders bound read-only at their own paths."""
        require_sandbox(what)
        read, write = os.pipe()
        try:
            holder = await asyncio.create_subprocess_exec(
                *_holder_argv(workspace, isolated, write, tools), pass_fds=(write,), env=env,
                stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                start_new_session=True,
            )
        finally:
            os.close(write)
        fds: dict[str, int] = {}
        assert holder.stdout is not None and holder.stderr is not None  # both piped above
        try:
            line = await asyncio.wait_for(holder.stdout.readline(), _START_TIMEOUT)
            if line.strip() != b"ready":
                err = (await asyncio.wait_for(holder.stderr.read(), _START_TIMEOUT)).decode(errors="replace")
                raise SandboxUnavailableError(f"{what}: the bubblewrap holder failed: {err.strip() or 'no output'}")
            # written before the command starts, so before 'ready'
            child = int(json.loads(os.read(read, 65536).decode())["child-pid"])
            fds["pidfd"] = os.pidfd_open(child)
            kinds = ["pid", "mnt", "ipc"] + (["net"] if isolated else []) + ([] if _rootful() else ["user"])
            for kind in kinds:
                fds[kind] = os.open(f"/proc/{child}/ns/{kind}", os.O_RDONLY | os.O_CLOEXEC)
            if "user" in fds:
                # unprivileged, bubblewrap owns the namespaces from one user namespace and runs the
                # command in a second one, nested in it, that holds no capability over them
                fds["owner"] = fcntl.ioctl(fds["user"], _NS_GET_PARENT)
                os.set_inheritable(fds["owner"], False)
            if isolated and os.fstat(fds["net"]).st_ino == os.stat("/proc/self/ns/net").st_ino:
                raise SandboxUnavailableError(f"{what}: the sandbox shares this process's network")
        except BaseException:
            for fd in fds.values():
                os.close(fd)
            kill_child(holder)
            await holder.wait()
            raise
        finally:
            os.close(read)
        return cls(holder, fds)

    @property
    def pass_fds(self) -> tuple[int, ...]:
        return tuple(fd for kind, fd in self._fds.items() if kind != "pidfd")

    def wrap(self, argv: list[str], cwd: str, user_change: list[str], helper: bool = False) -> list[str]:
        """``argv`` run inside the sandbox from ``cwd``, as ``setpriv``'s ``user_change`` options say (root
        only); the descriptors in ``pass_fds`` must be inherited.

        A ``helper`` (the session's file calls) sees the sandbox's files but is none of its processes: it
        runs outside the sandbox's PID namespace, so no command there finds it in ``/proc``, signals it, or
        opens its descriptors (the pipe of a copy's stream, which the host reads). As root it runs in a PID
        namespace of its own, naming no process but itself."""
        enter = ["nsenter"]
        if "user" in self._fds:
            # unprivileged: join the namespaces as the user namespace that owns them (we made it), then
            # drop into the sandbox's own one, which has no capability over them
            enter += ["--preserve-credentials", f"--user=/proc/self/fd/{self._fds['owner']}"]
        names = {"pid": "--pid", "mnt": "--mount", "ipc": "--ipc", "net": "--net"}
        enter += [f"{names[kind]}=/proc/self/fd/{fd}" for kind, fd in self._fds.items()
                  if kind in names and not (helper and kind == "pid")]
        # the directory is looked up inside, never opened from outside (its host mount would be the way out)
        enter += [f"--wdns={cwd}", "--"]
        own_pids = ["unshare", "--pid", "--kill-child", "--"] if helper else []
        if "user" in self._fds and helper:
            # unprivileged: as the job's user, in the job's PID namespace (outside the sandbox's, whose /proc
            # names no /proc/self to enter its user namespace or make one by)
            return [*enter, *argv]
        if "user" in self._fds:
            return [*enter, "nsenter", "--preserve-credentials", f"--user=/proc/self/fd/{self._fds['user']}", "--", *argv]
        return [*enter, *own_pids, "setpriv", "--bounding-set", BOUNDING_SET, *user_change, "--", *argv]

    async def close(self) -> None:
        if self.network is not None:
            self.network.close_relays()
        kill_child(self.holder)
        # and PID 1 of the namespace (through a descriptor: never a reused PID): every process in it ends with it
        try:
            signal.pidfd_send_signal(self._fds["pidfd"], signal.SIGKILL)
        except ProcessLookupError:
            pass
        await self.holder.wait()
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()
