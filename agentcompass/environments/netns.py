"""Network namespaces: the isolated network of a ``none`` phase, and the way into it.

A host command under network policy ``none`` runs in a network namespace that
has nothing but its own loopback. One holder process per session keeps the
namespace alive (``unshare -n sh -c 'ip link set lo up; exec sleep infinity'``)
and the session keeps a descriptor of it open: every command enters through
that descriptor (``nsenter --net=/proc/self/fd/N``), so a holder that died
and whose PID was reused can never send a command into another network.

The agentcompass process reaches a service inside such a namespace (or inside
a disconnected container) through ``TcpRelay``: a listener on the host's
127.0.0.1 whose connections are opened from a thread that joined the
namespace with ``setns``. The other way round, a listener made inside a
container's namespace (``listen_in_netns``) relays to a Unix socket on this
machine: the one hole a model gateway needs.
"""

from __future__ import annotations

import asyncio
import ctypes
import errno
import functools
import os
import selectors
import shutil
import socket
import subprocess
import threading
import time
from typing import Callable, cast

from agentcompass._util.aio import kill_child
from agentcompass.runtime.config import ConfigError

CLONE_NEWNET = 0x40000000

# A root command in an isolated phase loses the capabilities that would let it
# leave: setns back into the host's network or mount (sys_admin), move a link
# into another namespace (net_admin), or take over a host process (sys_ptrace,
# sys_module). Without them, /proc/1/ns/net cannot even be opened.
DROPPED_CAPABILITIES = "-sys_admin,-net_admin,-sys_ptrace,-sys_module"

_TOOLS = ("unshare", "nsenter", "setpriv", "ip")
_HOLDER_SCRIPT = "ip link set lo up || exit 1; echo ready; exec sleep infinity"
_START_TIMEOUT = 10.0


class NetworkIsolationError(ConfigError):
    """A ``none`` phase that cannot be isolated here: it is refused, never run open."""


def _rootful() -> bool:
    return os.geteuid() == 0


def _unshare_argv() -> list[str]:
    # Without root, a user namespace owned by the caller grants the right to make the network one.
    return ["unshare", "--net"] if _rootful() else ["unshare", "--user", "--map-root-user", "--net"]


@functools.lru_cache(maxsize=1)
def network_isolation() -> tuple[bool, str]:
    """Whether host processes can get a network namespace here; if not, why not."""
    missing = [tool for tool in _TOOLS if shutil.which(tool) is None]
    if missing:
        return False, f"the tools {missing} are not on PATH (install util-linux and iproute2)"
    return probe([*_unshare_argv(), "true"])


def probe(argv: list[str], hint: str = "") -> tuple[bool, str]:
    """Whether ``argv`` runs and exits 0 here; if not, why not (with ``hint`` appended)."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=_START_TIMEOUT)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"`{' '.join(argv)}` failed: {exc}"
    if done.returncode != 0:
        reason = done.stderr.strip() or f"exit status {done.returncode}"
        return False, f"`{' '.join(argv)}` failed: {reason}{hint}"
    return True, ""


# the fix that runs a phase open, wherever its 'none' came from: the request's policy wins over a benchmark's or
# a task's (a task folder's allow_internet = false), which the user never set
PUBLIC_FIX = ("every phase's network policy that is 'none' to 'public' in the request's environment (`run_network: "
              "public`, likewise `baseline_network` and `evaluation_network`; a request's policy overrides the "
              "benchmark's or the task's)")


def require_isolation(what: str) -> None:
    available, reason = network_isolation()
    if not available:
        raise NetworkIsolationError(
            f"{what} cannot enforce network policy 'none' on this machine: {reason}. "
            "It never runs such a phase with the network open; run it where network namespaces "
            "are allowed (as root, or with unprivileged user namespaces enabled), use the docker "
            f"environment, or set {PUBLIC_FIX}"
        )


def open_netns(pid: int) -> int:
    """A descriptor of ``pid``'s network namespace, refused if that is our own network."""
    fd = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    if os.fstat(fd).st_ino == os.stat("/proc/self/ns/net").st_ino:
        os.close(fd)
        raise NetworkIsolationError(f"process {pid} shares this process's network: it is not isolated")
    return fd


_libc = ctypes.CDLL(None, use_errno=True)


def _made_in_netns(ns_fd: int, make: Callable[[], socket.socket]) -> socket.socket:
    """The socket ``make()`` opens inside the namespace ``ns_fd`` (needs root).

    A socket belongs to the namespace it was created in, and ``setns`` moves only
    the calling thread: so a short-lived thread joins the namespace and opens it.
    """
    outcome: dict = {}

    def inside() -> None:
        if _libc.setns(ns_fd, CLONE_NEWNET) != 0:
            errno = ctypes.get_errno()
            outcome["error"] = OSError(errno, f"setns into the namespace failed: {os.strerror(errno)}")
            return
        try:
            outcome["socket"] = make()
        except OSError as exc:
            outcome["error"] = exc

    thread = threading.Thread(target=inside, name="agentcompass-netns-socket", daemon=True)
    thread.start()
    thread.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["socket"]


def connect_in_netns(ns_fd: int, port: int, timeout: float = 10.0) -> socket.socket:
    """A TCP connection to 127.0.0.1:``port`` inside the namespace ``ns_fd`` (needs root)."""
    sock = _made_in_netns(ns_fd, lambda: socket.create_connection(("127.0.0.1", port), timeout=timeout))
    sock.settimeout(None)
    return sock


def listen_in_netns(ns_fd: int) -> socket.socket:
    """A listener on 127.0.0.1 (a free port) inside the namespace ``ns_fd`` (needs root)."""
    return _made_in_netns(ns_fd, lambda: socket.create_server(("127.0.0.1", 0)))


class RootSockets:
    """Sockets made inside the network namespace ``fd`` by joining it from a thread (needs root)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def connect(self, port: int) -> socket.socket:
        return connect_in_netns(self.fd, port)

    def listen(self) -> socket.socket:
        return listen_in_netns(self.fd)

    def close(self) -> None:
        os.close(self.fd)


# The helper of UserNamespaceSockets, run in the namespaces it joined: on each request it makes a
# socket there ("L": a listener on 127.0.0.1, "C<port>": a connection to 127.0.0.1:<port>) and sends
# it back over the socket pair, or "-" and the error.
_SOCKET_MAKER = r"""
import socket, sys
channel = socket.socket(fileno=int(sys.argv[1]))
while request := channel.recv(64):
    try:
        if request == b"L":
            made = socket.create_server(("127.0.0.1", 0))
        else:
            made = socket.create_connection(("127.0.0.1", int(request[1:])), timeout=10)
            made.settimeout(None)
    except (OSError, ValueError) as exc:
        channel.sendall(b"-" + str(exc).encode()[:500])
        continue
    socket.send_fds(channel, [b"+"], [made.fileno()])
    made.close()
"""


class UserNamespaceSockets:
    """Sockets made inside the user and network namespaces of ``pid``, without root.

    The owner of a user namespace (the user who runs rootless Podman) may join it, and then
    its network namespace, from a single-threaded process: ``nsenter --user --net`` starts a
    small helper there, which makes each socket in that network and hands it back over a
    Unix socket pair. Nothing runs in the container.
    """

    def __init__(self, pid: int) -> None:
        if not shutil.which("nsenter"):
            raise NetworkIsolationError("joining a rootless container's network needs nsenter (util-linux)")
        import sys

        # this interpreter, or where this user may not run it (a Python under another user's home), the system's
        python = sys.executable if os.access(sys.executable, os.X_OK) else (shutil.which("python3") or sys.executable)
        ours, theirs = socket.socketpair()
        try:
            self._helper = subprocess.Popen(
                ["nsenter", f"--target={pid}", "--user", "--net", "--preserve-credentials", "--",
                 python, "-I", "-S", "-c", _SOCKET_MAKER, str(theirs.fileno())],
                pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
        finally:
            theirs.close()
        self._channel = ours
        self._lock = threading.Lock()

    def _make(self, request: bytes) -> socket.socket:
        with self._lock:
            self._channel.sendall(request)
            message, fds, _, _ = socket.recv_fds(self._channel, 1024, 1)
        if fds:
            return socket.socket(fileno=fds[0])
        if not message:
            self._helper.wait()
            error = (self._helper.stderr.read() if self._helper.stderr else b"").decode(errors="replace").strip()
            raise NetworkIsolationError(f"could not join the container's namespaces with nsenter: {error}")
        raise OSError(message[1:].decode(errors="replace"))

    def connect(self, port: int) -> socket.socket:
        return self._make(b"C%d" % port)

    def listen(self) -> socket.socket:
        return self._make(b"L")

    def close(self) -> None:
        self._channel.close()  # the helper's recv ends: it exits
        try:
            self._helper.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._helper.kill()
            self._helper.wait()
        if self._helper.stderr:
            self._helper.stderr.close()


def connect_unix(path: str) -> socket.socket:
    """A connection to the Unix socket at ``path`` (a file: it is the same in every network)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
    except OSError:
        sock.close()
        raise
    return sock


# At most this many connections through one relay at once (one session's): one more is closed as soon as
# it is accepted. Each holds a thread and two descriptors of the job process, which its attempts share.
# Twice the gateway's own limit (agentcompass.gateway.MAX_CONNECTIONS), so that the gateway, which fails
# the attempt that crowds it, sees a crowd before the relay does.
RELAY_MAX_CONNECTIONS = 64
# Once one direction of a relayed connection has ended, how long the other may stay open.
RELAY_HALF_OPEN_SECONDS = 30.0


class TcpRelay:
    """A listener (by default on the host's 127.0.0.1); each connection is joined to one ``connect()`` opens.

    At most ``RELAY_MAX_CONNECTIONS`` at once; a connection half closed for ``RELAY_HALF_OPEN_SECONDS`` is closed."""

    def __init__(self, connect: Callable[[], socket.socket], listener: socket.socket | None = None) -> None:
        self._connect = connect
        self._listener = listener if listener is not None else socket.create_server(("127.0.0.1", 0))
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._serving = 0  # connections accepted and not yet closed
        self.refused = 0  # connections closed unserved: RELAY_MAX_CONNECTIONS were open
        threading.Thread(target=self._accept, name="agentcompass-relay", daemon=True).start()

    @property
    def address(self) -> str:
        host, port = self._listener.getsockname()[:2]
        return f"{host}:{port}"

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    time.sleep(0.1)  # out of descriptors for now: the listener stays
                    continue
                return  # closed
            with self._lock:
                crowded = self._serving >= RELAY_MAX_CONNECTIONS
                if crowded:
                    self.refused += 1
                else:
                    self._serving += 1
            if crowded:
                client.close()
                continue
            try:
                threading.Thread(target=self._serve, args=(client,), name="agentcompass-relay-conn", daemon=True).start()
            except RuntimeError:  # no thread can start now
                client.close()
                self._done()

    def _done(self) -> None:
        with self._lock:
            self._serving -= 1

    def _serve(self, client: socket.socket) -> None:
        try:
            self._relay(client)
        finally:
            self._done()

    def _relay(self, client: socket.socket) -> None:
        try:
            inner = self._connect()
        except OSError:
            client.close()
            return
        with self._lock:
            self._open.update((client, inner))
        peer = {client: inner, inner: client}
        for sock in peer:
            sock.settimeout(RELAY_HALF_OPEN_SECONDS)  # a peer that reads nothing ends its direction
        with selectors.DefaultSelector() as selector:
            for sock in peer:
                selector.register(sock, selectors.EVENT_READ)
            reading = set(peer)
            half_open_until: float | None = None
            while reading:
                wait = None if half_open_until is None else half_open_until - time.monotonic()
                if wait is not None and wait <= 0:
                    break  # one direction ended long enough ago: the other is closed too
                for key, _ in selector.select(wait):
                    source = cast(socket.socket, key.fileobj)  # registered above: sockets only
                    try:
                        data = source.recv(65536)
                        if data:
                            peer[source].sendall(data)
                            continue
                    except OSError:
                        pass
                    # one direction ended: pass the end on, keep the other direction open for a while
                    selector.unregister(source)
                    reading.discard(source)
                    if half_open_until is None:
                        half_open_until = time.monotonic() + RELAY_HALF_OPEN_SECONDS
                    try:
                        peer[source].shutdown(socket.SHUT_WR)
                    except OSError:
                        pass
        with self._lock:
            self._open.difference_update((client, inner))
        client.close()
        inner.close()

    def close(self) -> None:
        try:
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread
        except OSError:
            pass
        self._listener.close()
        with self._lock:
            for sock in list(self._open):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


class IsolatedNetwork:
    """One network namespace with only loopback, held for a session, entered by every command."""

    def __init__(self, holder: asyncio.subprocess.Process, net_fd: int, user_fd: int | None) -> None:
        self.holder = holder
        self.net_fd = net_fd
        self.user_fd = user_fd
        self._relays: dict[int, TcpRelay] = {}

    @classmethod
    async def create(cls, env: dict[str, str], what: str) -> "IsolatedNetwork":
        require_isolation(what)
        holder = await asyncio.create_subprocess_exec(
            # the holder dies with the thread that started it, even when that thread's process is killed
            "setpriv", "--pdeathsig", "KILL", *_unshare_argv(), "sh", "-c", _HOLDER_SCRIPT,
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            env=env, start_new_session=True,
        )
        assert holder.stdout is not None and holder.stderr is not None  # both piped above
        try:
            line = await asyncio.wait_for(holder.stdout.readline(), _START_TIMEOUT)
            if line.strip() != b"ready":
                err = (await asyncio.wait_for(holder.stderr.read(), _START_TIMEOUT)).decode(errors="replace")
                raise NetworkIsolationError(f"{what}: the network namespace holder failed: {err.strip() or 'no output'}")
            net_fd = open_netns(holder.pid)
            user_fd = None if _rootful() else os.open(f"/proc/{holder.pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
        except BaseException:
            await _stop(holder)
            raise
        return cls(holder, net_fd, user_fd)

    @property
    def pass_fds(self) -> tuple[int, ...]:
        return (self.net_fd,) if self.user_fd is None else (self.user_fd, self.net_fd)

    def wrap(self, argv: list[str]) -> list[str]:
        """``argv`` run inside the namespace (the descriptors in ``pass_fds`` must be inherited)."""
        if self.user_fd is None:
            return [
                "nsenter", f"--net=/proc/self/fd/{self.net_fd}", "--",
                "setpriv", "--bounding-set", DROPPED_CAPABILITIES, "--", *argv,
            ]
        # Unprivileged: the user namespace that owns the network is the boundary. Our uid is its
        # root already; keeping the credentials avoids setgroups, which that namespace denies.
        return [
            "nsenter", "--preserve-credentials", f"--user=/proc/self/fd/{self.user_fd}",
            f"--net=/proc/self/fd/{self.net_fd}", "--", *argv,
        ]

    def endpoint(self, port: int) -> str:
        if self.user_fd is not None:
            raise NetworkIsolationError(
                "reaching a service inside an isolated host_process phase needs root (setns into the "
                "namespace); run as root or reach the service from a command inside the session"
            )
        if port not in self._relays:
            self._relays[port] = TcpRelay(functools.partial(connect_in_netns, self.net_fd, port))
        return self._relays[port].address

    def close_relays(self) -> None:
        for relay in self._relays.values():
            relay.close()
        self._relays.clear()

    async def close(self) -> None:
        self.close_relays()
        await _stop(self.holder)
        for fd in self.pass_fds:
            os.close(fd)


async def _stop(proc: asyncio.subprocess.Process) -> None:
    # the session's close has often killed the holder already, by its markers
    kill_child(proc)
    await proc.wait()
