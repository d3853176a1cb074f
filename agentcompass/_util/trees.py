"""Folder trees whose contents someone else made: the agent's workspace, a task folder, a kept attempt.

Whatever such a tree holds (links to anywhere, FIFOs and device nodes, names
that are not UTF-8 or hold newlines and terminal escapes, thousands of levels
of folders, folders without permissions), the host-side operations here:

- never follow a link: a link is removed, listed or shown as a link, with its
  target as text;
- never open anything but a regular file (FIFOs and devices are listed, never
  opened: opening a FIFO blocks, opening a device reads the host's);
- work on any depth: no recursion, at most one directory descriptor per level
  they walk (``remove_tree`` holds one in all), no path longer than a name;
- take names as bytes from the kernel and give them back unchanged
  (``shown`` turns one into text a page or a terminal shows as it is).
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass
from typing import Callable, Iterator

from agentcompass.errors import AgentCompassError

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_PATH_FLAGS = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# a regular file, opened without following a link and without blocking on a FIFO put in its place
FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def _open_dir(name: bytes, dir_fd: int | None, expected: os.stat_result | None = None, unlock: bool = False) -> int:
    """A descriptor of the folder ``name`` (never through a link); with ``unlock``, made readable and
    searchable first when it is not; with ``expected``, it must be that folder (same device and inode)."""
    handle = os.open(name, _PATH_FLAGS, dir_fd=dir_fd)
    try:
        info = os.fstat(handle)
        if expected is not None and (info.st_dev, info.st_ino) != (expected.st_dev, expected.st_ino):
            raise OSError(errno.ESTALE, "the folder changed while it was being walked", name)
        if unlock and info.st_mode & 0o700 != 0o700 and os.geteuid() == info.st_uid:
            # a locked folder (chmod 000 in the sandbox): its owner may unlock it; through the descriptor,
            # so no link put in its place is followed
            os.chmod(f"/proc/self/fd/{handle}", stat.S_IMODE(info.st_mode) | 0o700)
        return os.open(b".", _DIR_FLAGS, dir_fd=handle)
    finally:
        os.close(handle)


def _names(fd: int) -> list[tuple[bytes, bool]]:
    """(name, is a folder) of a folder's entries (a link is no folder)."""
    with os.scandir(fd) as entries:
        return [(os.fsencode(entry.name), entry.is_dir(follow_symlinks=False)) for entry in entries]


def remove_tree(path: str | os.PathLike | bytes, *, ignore_errors: bool = False) -> None:
    """Remove ``path``: a file, a link (the link itself, never its target), or a folder and all it holds.

    No recursion and one folder descriptor at a time, so any depth; names as
    bytes, so any name; locked folders are unlocked (chmod u+rwx) first when
    this process owns them. What cannot be removed is left, and the first
    failure raised as OSError after the rest is removed (never with
    ``ignore_errors``). A path that does not exist is nothing to do.
    """
    target = os.path.abspath(os.fsencode(path)).rstrip(b"/") or b"/"
    parent, name = os.path.split(target)
    failures: list[OSError] = []
    try:
        top = os.open(parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        return
    except OSError:
        if not ignore_errors:
            raise
        return
    try:
        _remove(top, name, failures)
    finally:
        os.close(top)
    if failures and not ignore_errors:
        raise failures[0]


def _remove(top: int, name: bytes, failures: list[OSError]) -> None:
    try:
        info = os.stat(name, dir_fd=top, follow_symlinks=False)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(info.st_mode):
        _attempt(failures, os.unlink, name, dir_fd=top)
        return
    # one frame per folder walked into: its identity (checked when coming back through ".."), its name in
    # its parent, the names of its subfolders still to remove
    try:
        fd = _open_dir(name, top, unlock=True)
    except OSError as exc:
        failures.append(exc)
        return
    chain: list[tuple[os.stat_result, bytes, list[bytes] | None]] = [(os.fstat(fd), name, None)]
    try:
        while chain:
            here, here_name, pending = chain[-1]
            if pending is None:  # first visit: remove what is not a folder, note the folders
                pending = []
                try:
                    names = _names(fd)
                except OSError as exc:
                    failures.append(exc)
                    names = []
                for child, is_dir in names:
                    if is_dir:
                        pending.append(child)
                    else:
                        _attempt(failures, os.unlink, child, dir_fd=fd)
                chain[-1] = (here, here_name, pending)
            if pending:
                child = pending.pop()
                try:
                    child_fd = _open_dir(child, fd, unlock=True)
                except FileNotFoundError:
                    continue
                except OSError as exc:
                    failures.append(exc)
                    continue
                os.close(fd)
                fd = child_fd
                chain.append((os.fstat(fd), child, None))
                continue
            # empty (or as empty as it gets): back to the parent, then remove this folder
            chain.pop()
            if chain:
                try:
                    parent_fd = _open_dir(b"..", fd, expected=chain[-1][0])
                except OSError as exc:  # moved away under us: what is left stays
                    failures.append(exc)
                    return
                os.close(fd)
                fd = parent_fd
                _attempt(failures, os.rmdir, here_name, dir_fd=fd)
            else:
                os.close(fd)
                fd = -1
                _attempt(failures, os.rmdir, here_name, dir_fd=top)
    finally:
        if fd >= 0:
            os.close(fd)


def _attempt(failures: list[OSError], call, name: bytes, *, dir_fd: int) -> None:
    try:
        call(name, dir_fd=dir_fd)
    except FileNotFoundError:
        pass
    except OSError as exc:
        failures.append(exc)


# --- reading a tree ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Entry:
    """One entry of a walked tree: its path below the root (bytes, '/'-separated), its kind, and for a
    link its target (as the link says it, never followed)."""

    path: bytes
    kind: str  # file, dir, link, fifo, socket, char-device, block-device, other
    target: bytes | None = None
    # a folder at the depth limit: its contents are not walked
    cut: bool = False


def kind_of(mode: int) -> str:
    for test, kind in ((stat.S_ISREG, "file"), (stat.S_ISDIR, "dir"), (stat.S_ISLNK, "link"),
                       (stat.S_ISFIFO, "fifo"), (stat.S_ISSOCK, "socket"), (stat.S_ISCHR, "char-device"),
                       (stat.S_ISBLK, "block-device")):
        if test(mode):
            return kind
    return "other"


class TooManyEntries(AgentCompassError, ValueError):
    """A folder holds more entries than its reader takes (``entries(fd, most)``)."""


def entries(fd: int, most: int | None = None) -> list[tuple[bytes, str]]:
    """(name, kind) of a folder's entries in name order, never through a link; the kind from the listing where
    it tells. More than ``most`` entries (when given) is ``TooManyEntries``, raised before any more is read."""
    found: list[tuple[bytes, str]] = []
    with os.scandir(fd) as listing:
        for entry in listing:
            if most is not None and len(found) >= most:
                raise TooManyEntries(f"more than {most} entries")
            if entry.is_symlink():
                kind = "link"
            elif entry.is_dir(follow_symlinks=False):
                kind = "dir"
            elif entry.is_file(follow_symlinks=False):
                kind = "file"
            else:
                try:
                    kind = kind_of(entry.stat(follow_symlinks=False).st_mode)
                except OSError:
                    continue
            found.append((os.fsencode(entry.name), kind))
    return sorted(found)


def walk(root: str | os.PathLike | bytes, *, most_depth: int = 64,
         prune: Callable[[bytes], bool] | None = None) -> Iterator[tuple[Entry, int]]:
    """Every entry under ``root``, depth first in name order, never through a link; with each the
    descriptor of its folder (valid until the next entry: open a file with ``open_file(name, fd)``).

    A folder ``most_depth`` levels down is yielded with ``cut`` set and not walked;
    one for whose path ``prune`` is true is neither yielded nor walked. A folder that
    cannot be read is yielded and skipped. ``root`` must be a folder, not a link
    (OSError otherwise).
    """
    fd = _open_dir(os.fsencode(root), None)
    stack: list[tuple[int, bytes, Iterator[tuple[bytes, str]]]] = [(fd, b"", iter(entries(fd)))]
    try:
        while stack:
            fd, prefix, names = stack[-1]
            item = next(names, None)
            if item is None:
                os.close(fd)
                stack.pop()
                continue
            name, kind = item
            path = prefix + name
            if kind == "link":
                try:
                    target = os.fsencode(os.readlink(name, dir_fd=fd))
                except OSError:
                    target = b"?"
                yield Entry(path, kind, target=target), fd
            elif kind == "dir":
                if prune is not None and prune(path):
                    continue
                cut = len(stack) >= most_depth
                yield Entry(path, kind, cut=cut), fd
                if not cut:
                    try:
                        child = _open_dir(name, fd)
                    except OSError:
                        continue
                    try:
                        listing = entries(child)
                    except OSError:
                        os.close(child)
                        continue
                    stack.append((child, path + b"/", iter(listing)))
            else:
                yield Entry(path, kind), fd
    finally:
        for fd, _, _ in stack:
            os.close(fd)


def open_file(name: str | os.PathLike | bytes, dir_fd: int | None = None) -> int:
    """A descriptor of the regular file ``name``: never through a link at its end, never a FIFO or a
    device (OSError then, and nothing is read)."""
    fd = os.open(os.fsencode(name), FILE_FLAGS, dir_fd=dir_fd)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise OSError(errno.EINVAL, f"not a regular file but a {kind_of(info.st_mode)}", os.fsdecode(name))
        os.set_blocking(fd, True)
        return fd
    except BaseException:
        os.close(fd)
        raise


def read_bytes(path: str | os.PathLike | bytes, dir_fd: int | None = None) -> bytes:
    """The contents of a regular file (``open_file``): a link or anything else in its place is an OSError."""
    with os.fdopen(open_file(path, dir_fd), "rb") as handle:
        return handle.read()


def read_text(path: str | os.PathLike | bytes) -> str:
    """``read_bytes`` as UTF-8 text."""
    return read_bytes(path).decode("utf-8")


# names that a page or a terminal would show as something else: control characters (newlines, the escape
# of terminal sequences), and the separators a line or a paragraph ends at
_VISIBLE = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\\": "\\\\"}


def shown(name: str | bytes) -> str:
    """A file name as text that shows it as it is: bytes that are not UTF-8 as ``\\xNN``, control
    characters as escapes (``\\n``, ``\\x1b``), a backslash doubled; nothing else changes."""
    if isinstance(name, bytes):
        data = name
    else:
        try:
            data = os.fsencode(name)
        except UnicodeEncodeError:  # a lone surrogate that no file name decodes to
            data = name.encode("utf-8", "surrogatepass")
    out = []
    for char in data.decode("utf-8", "surrogateescape"):
        code = ord(char)
        if char in _VISIBLE:
            out.append(_VISIBLE[char])
        elif 0xDC80 <= code <= 0xDCFF:  # a byte that is not UTF-8
            out.append(f"\\x{code - 0xDC00:02x}")
        elif code < 0x20 or code == 0x7F or 0x80 <= code < 0xA0:
            out.append(f"\\x{code:02x}")
        elif code in (0x2028, 0x2029) or 0xD800 <= code <= 0xDFFF:
            out.append(f"\\u{code:04x}")
        else:
            out.append(char)
    return "".join(out)


# what each kind of entry that is not a file, folder or link is called in a message
SPECIAL_KINDS = {"fifo": "a FIFO", "socket": "a socket", "char-device": "a character device",
          "block-device": "a block device", "other": "a special file"}


def confined(root: str | os.PathLike | bytes, *, most_depth: int = 64, folder_links: bool = True,
             prune: Callable[[bytes], bool] | None = None) -> str | None:
    """The first entry under the folder ``root`` that reaches out of it, as ``"<path below root>: why"``;
    None when every entry stays inside.

    Out of it: a link whose target is absolute or resolves outside ``root``
    (through any chain of links), a link to a FIFO, socket or device, a FIFO,
    socket or device itself, folders nested deeper than ``most_depth``; with
    ``folder_links`` false also a link to a folder (a builder that follows links
    would walk it, and a loop forever). A link that stays inside is fine, even a
    dangling one. ``prune``: folders (by path below ``root``) not looked into.
    """
    base = os.path.realpath(os.fsencode(root))
    for entry, _ in walk(base, most_depth=most_depth, prune=prune):
        where = shown(entry.path)
        if entry.kind == "dir":
            if entry.cut:
                return f"{where}: folders nest deeper than {most_depth} levels"
            continue
        if entry.kind in SPECIAL_KINDS:
            return f"{where}: is {SPECIAL_KINDS[entry.kind]}, not a file, folder or link"
        if entry.kind != "link":
            continue
        target = entry.target or b""
        if os.path.isabs(target):
            return f"{where}: is a symbolic link to the absolute path {shown(target)}, outside the folder"
        resolved = os.path.realpath(os.path.join(base, os.path.dirname(entry.path), target))
        if resolved != base and not resolved.startswith(base.rstrip(b"/") + b"/"):
            return f"{where}: is a symbolic link to {shown(target)}, which leads outside the folder"
        try:
            kind = kind_of(os.stat(resolved).st_mode)
        except OSError:
            continue  # dangling (or a loop): nothing is reached through it
        if kind in SPECIAL_KINDS:
            return f"{where}: is a symbolic link to {SPECIAL_KINDS[kind]} ({shown(target)})"
        if kind == "dir" and not folder_links:
            return f"{where}: is a symbolic link to a folder ({shown(target)}), which a build would walk into"
    return None
