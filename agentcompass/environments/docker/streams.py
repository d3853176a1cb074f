"""What the docker environment reads from and writes to the engine's streams: a command's
multiplexed exec stream (``_read_frames``, ``_write_input``), a command the engine could not start
(``_exec_failed``, ``_not_started``), and the archives files move in (``_stream_file``,
``_only_file``, ``_tar_filter``).
"""

from __future__ import annotations

import io
import socket
import struct
import tarfile
from typing import IO

from agentcompass.runtime import ExecResult
from agentcompass.runtime.base import CappedOutput


def _only_file(tar: tarfile.TarFile, path: str) -> tuple[tarfile.TarInfo, IO[bytes]]:
    """The one regular file of an archive the engine made of ``path`` (a file, not a folder)."""
    member = tar.next()
    file = tar.extractfile(member) if member is not None else None
    if member is None or file is None:
        raise IsADirectoryError(f"{path} is not a regular file in the container")
    return member, file

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
