"""Copying files across a session's boundary: what may cross, and how it lands.

A copy is a tar stream whose first entry is the copied file or folder itself
(named by its last path component) and whose other entries lie beneath it.
``pack`` writes one from a folder it walks without following any link below
the copied path; ``extract`` lands one under a folder it holds open, and takes
only regular files, folders and symbolic links:

- a link stays a link (its target is never looked at), and nothing is ever
  written through one: every folder on the way is opened with ``O_NOFOLLOW``
  below a descriptor, and a file is created with ``O_EXCL`` after whatever
  stood at its name is removed;
- device nodes, FIFOs and sockets are skipped, and ``extract`` returns them
  listed (``name (kind)``); so is an entry whose name leaves the copied folder
  or that would land under a link or a file;
- a run of zero bytes lands as a hole, so a sparse file stays small;
- folder depth, entry count and total size have limits (``Limits``): past one
  the copy stops with ``CopyLimitError``, which says which limit and where;
  every entry of the stream counts, skipped ones too.

Reading a stream costs at most linear time and ``HEADER_LIMIT`` of memory per
entry whatever it holds: a pax extended header or a GNU long name or link is
refused past ``HEADER_LIMIT`` bytes before it is read, a pax header's records
are parsed in one pass by this module (``tarfile``'s own parser is quadratic
on some inputs in the Pythons agentcompass supports), at most
``HEADER_RUN_LIMIT`` such headers may precede an entry, and global headers and
sparse entries (which neither packer writes) are refused.

Modes keep their permission bits only (no setuid, setgid or sticky bit), and
the owner can always read and write what lands.

The same module runs inside a host_process sandbox, as ``python -I -S
transfer.py OP PATH DEPTH FILES SIZE``, to carry out a session's file calls
in the sandbox's own view of the file system (``main``). So it imports
nothing but the standard library, and ``tarfile`` only where a copy needs it.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import BinaryIO, Callable, Iterator, TypeVar

    T = TypeVar("T")

# The limits of one copy: folder depth below the copied folder, entries, and bytes (a sparse file at its full size).
DEPTH_LIMIT = 128
FILES_LIMIT = 100_000
SIZE_LIMIT = 1 << 30
# The most a session's ``read_text`` returns: a larger file is refused (``CopyLimitError``) before it is read.
READ_LIMIT = 8 << 20
# The most one extended header of a copy's stream (pax, or a GNU long name or link) may hold, and how many may
# precede one entry. A name this module packs is at most DEPTH_LIMIT levels of 255 bytes (a link target 4 KiB).
HEADER_LIMIT = 64 << 10
HEADER_RUN_LIMIT = 4
# The most skipped entries a copy lists by name (the rest are counted)
SKIPPED_LISTED = 100

_CHUNK = 1 << 20
_HOLE = 1 << 16  # zero runs of this size (aligned) land as holes
_ZEROS = bytes(_CHUNK)
_KIND_HEADER = "AGENTCOMPASS.kind"  # a pax header naming what a tar type cannot say (a socket)
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class Limits:
    """How deep, how many entries and how many bytes one copy may hold."""

    __slots__ = ("depth", "files", "size")

    def __init__(self, depth: int = DEPTH_LIMIT, files: int = FILES_LIMIT, size: int = SIZE_LIMIT) -> None:
        self.depth, self.files, self.size = depth, files, size

    def args(self) -> list[str]:
        return [str(self.depth), str(self.files), str(self.size)]


class CopyLimitError(OSError):
    """A copy reached one of its limits (``kind``: 'depth', 'files' or 'size'), or a read its own ('read')."""

    def __init__(self, kind: str, limits: Limits, at: str = "", what: str = "") -> None:
        self.kind, self.limits, self.at, self.what = kind, limits, at, what
        reason = {
            "depth": f"it holds folders nested more than {limits.depth} levels deep",
            "files": f"it holds more than {limits.files} entries",
            "size": f"it holds more than {limits.size} bytes (a sparse file counts at its full size)",
            "read": f"it is more than {limits.size} bytes, the most a session's read_text returns (copy it out "
                    "with download instead)",
        }.get(kind, kind)
        where = f" (at {shown(at)})" if at else ""
        if kind == "read":
            super().__init__(errno.EFBIG, f"{what + ': ' if what else ''}not read: {reason}")
            return
        super().__init__(errno.EFBIG, f"{what + ': ' if what else ''}not copied whole: {reason}{where}; "
                         "agentcompass copies at most that much out of or into a session")

    def within(self, what: str) -> "CopyLimitError":
        """The same error, saying which copy it stopped (unless it says so already)."""
        return self if self.what else CopyLimitError(self.kind, self.limits, self.at, what)


class Refused(OSError):
    """A path the copy does not go through: a link or a file where a folder must be."""


def shown(name: str, limit: int = 300) -> str:
    """A name as it may be printed: quoted, control characters and undecodable bytes escaped, capped."""
    text = repr(name)
    return text if len(text) <= limit else text[:limit] + "...'"


def kind_of(mode: int) -> str:
    """What a file of ``mode`` is, in words."""
    return (
        "folder" if stat.S_ISDIR(mode) else "regular file" if stat.S_ISREG(mode)
        else "symbolic link" if stat.S_ISLNK(mode) else "FIFO" if stat.S_ISFIFO(mode)
        else "socket" if stat.S_ISSOCK(mode) else "character device" if stat.S_ISCHR(mode)
        else "block device" if stat.S_ISBLK(mode) else "special file"
    )


# --- walking without links ---------------------------------------------------------------


def open_dir(parent_fd: int, name: str, create: bool = False) -> int:
    """The folder ``name`` under ``parent_fd``, never through a link (``Refused``); made when ``create``."""
    for _ in range(3):
        try:
            return os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
        except FileNotFoundError:
            if not create:
                raise
            try:
                os.mkdir(name, 0o755, dir_fd=parent_fd)
            except FileExistsError:
                pass  # made meanwhile: open it
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                what = kind_of(os.stat(name, dir_fd=parent_fd, follow_symlinks=False).st_mode)
                raise Refused(exc.errno, f"{shown(name)} is a {what}, not a folder") from None
            raise
    raise OSError(errno.EAGAIN, f"{shown(name)} keeps changing")


def walk_to(root_fd: int, parts: list[str], create: bool = False) -> int:
    """A new descriptor of the folder ``parts`` below ``root_fd``, no link followed on the way."""
    fd = os.dup(root_fd)
    try:
        for part in parts:
            child = open_dir(fd, part, create)
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


def _lstat(parent_fd: int, name: str) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def _clear(parent_fd: int, name: str, keep_dir: bool = False) -> os.stat_result | None:
    """Remove what stands at ``name`` unless it is a folder; return the folder's status if one stays."""
    st = _lstat(parent_fd, name)
    if st is None:
        return None
    if stat.S_ISDIR(st.st_mode):
        if keep_dir:
            return st
        raise IsADirectoryError(errno.EISDIR, f"{shown(name)} is a folder")
    os.unlink(name, dir_fd=parent_fd)
    return None


# --- packing -----------------------------------------------------------------------------


class _FileData:
    """``size`` bytes of an open file, holes read as zeros without touching the disk; a file that shrank
    meanwhile ends in zeros, so the stream keeps the size its header gave."""

    def __init__(self, fd: int, size: int) -> None:
        self.fd, self.left, self.pos = fd, size, 0
        self.data_at, self.hole_at, self.ended = 0, 0, False

    def read(self, n: int = _CHUNK) -> bytes:
        """Exactly ``n`` bytes (fewer only at the end): ``tarfile`` takes a short read for a cut stream."""
        n = min(n if n >= 0 else _CHUNK, self.left)
        parts = []
        while n > 0:
            part = self._part(n)
            parts.append(part)
            n -= len(part)
        return b"".join(parts)

    def _part(self, n: int) -> bytes:
        if not self.ended and self.pos >= self.hole_at:
            try:
                self.data_at = os.lseek(self.fd, self.pos, os.SEEK_DATA)
                self.hole_at = os.lseek(self.fd, self.data_at, os.SEEK_HOLE)
            except OSError as exc:
                if exc.errno != errno.ENXIO:  # no hole support here: all of it is data
                    self.data_at, self.hole_at = self.pos, self.pos + self.left
                else:  # nothing but a hole from here on
                    self.ended = True
        if self.ended or self.pos < self.data_at:
            limit = self.left if self.ended else self.data_at - self.pos
            chunk = bytes(min(n, limit))
        else:
            chunk = os.pread(self.fd, min(n, self.hole_at - self.pos), self.pos)
            if not chunk:
                self.ended = True
                chunk = bytes(n)
        self.pos += len(chunk)
        self.left -= len(chunk)
        return chunk


class _Packer:
    def __init__(self, tar, limits: Limits, skipped: list[str] | None, under: str = "") -> None:
        import tarfile

        self.tarfile = tarfile
        self.tar = tar
        self.limits = limits
        self.skipped = skipped
        self.under = under
        self.entries = 0
        self.bytes = 0

    def _info(self, arcname: str, st: os.stat_result):
        info = self.tarfile.TarInfo(self.under + arcname)
        info.mode = st.st_mode & 0o7777
        info.mtime = int(st.st_mtime)
        info.uid = info.gid = 0
        info.uname = info.gname = "root"
        return info

    def add(self, parent_fd: int, name: str, arcname: str, depth: int) -> int | None:
        """Add one entry; return a descriptor of it when it is a folder to walk into."""
        st = _lstat(parent_fd, name)
        if st is None:
            return None  # gone meanwhile
        if depth:
            if depth > self.limits.depth:
                raise CopyLimitError("depth", self.limits, arcname)
            self.entries += 1
            if self.entries > self.limits.files:
                raise CopyLimitError("files", self.limits, arcname)
        info = self._info(arcname, st)
        if stat.S_ISDIR(st.st_mode):
            try:
                fd = open_dir(parent_fd, name)
            except (Refused, FileNotFoundError):
                return None  # changed meanwhile: not walked
            info.type = self.tarfile.DIRTYPE
            self.tar.addfile(info)
            return fd
        if stat.S_ISREG(st.st_mode):
            try:
                fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=parent_fd)
            except OSError as exc:
                if exc.errno in (errno.ENOENT, errno.ELOOP):
                    return None  # changed meanwhile
                raise
            try:
                st = os.fstat(fd)
                if stat.S_ISDIR(st.st_mode):
                    return None  # changed meanwhile
                if stat.S_ISREG(st.st_mode):
                    self.bytes += st.st_size
                    if self.bytes > self.limits.size:
                        raise CopyLimitError("size", self.limits, arcname)
                    info = self._info(arcname, st)
                    info.size = st.st_size
                    self.tar.addfile(info, _FileData(fd, st.st_size))
                    return None
                info = self._info(arcname, st)  # what it became meanwhile
            finally:
                os.close(fd)
        elif stat.S_ISLNK(st.st_mode):
            info.type = self.tarfile.SYMTYPE
            info.linkname = os.readlink(name, dir_fd=parent_fd)
            self.tar.addfile(info)
            return None
        if self.skipped is not None:  # not sent at all
            self.skipped.append(f"{shown(arcname.partition('/')[2] or arcname)} ({kind_of(st.st_mode)})")
            return None
        # sent without contents, for the side that lands the copy to skip and list
        info.type = {stat.S_IFCHR: self.tarfile.CHRTYPE, stat.S_IFBLK: self.tarfile.BLKTYPE}.get(
            stat.S_IFMT(st.st_mode), self.tarfile.FIFOTYPE)
        if info.type != self.tarfile.FIFOTYPE:
            info.devmajor, info.devminor = os.major(st.st_rdev), os.minor(st.st_rdev)
        info.pax_headers = {_KIND_HEADER: kind_of(st.st_mode)}
        self.tar.addfile(info)
        return None

    def walk(self, fd: int, arcname: str) -> None:
        """Every entry below the folder ``fd`` (which this closes), depth first, without recursion."""
        stack: list[tuple[int, str, int, Iterator[os.DirEntry]]] = []
        try:
            stack.append((fd, arcname, 0, iter(os.scandir(fd))))
            while stack:
                folder, prefix, depth, entries = stack[-1]
                entry = next(entries, None)
                if entry is None:
                    os.close(folder)
                    stack.pop()
                    continue
                child = self.add(folder, entry.name, f"{prefix}/{entry.name}", depth + 1)
                if child is not None:
                    stack.append((child, f"{prefix}/{entry.name}", depth + 1, iter(os.scandir(child))))
        finally:
            for folder, *_ in stack:
                os.close(folder)


def pack(out: BinaryIO, parent_fd: int, name: str, arcname: str, limits: Limits,
         skipped: list[str] | None = None, under: str = "") -> None:
    """Write the tar stream of ``name`` under ``parent_fd`` (itself never followed if a link) to ``out``,
    as ``arcname`` in the folder ``under`` of the archive (``"a/b/"``: its entries' names begin so, and
    errors and lists name them without it).

    Device nodes, FIFOs and sockets are sent as entries without contents, which ``extract`` skips and lists;
    with a ``skipped`` list they are listed there instead and not sent (for a receiver that would make them).
    """
    import tarfile

    with tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT, bufsize=1 << 16) as tar:
        tar.copybufsize = _CHUNK  # type: ignore[attr-defined]  # read in large chunks
        packer = _Packer(tar, limits, skipped, under)
        if _lstat(parent_fd, name) is None:
            raise FileNotFoundError(errno.ENOENT, f"{shown(name)} does not exist")
        fd = packer.add(parent_fd, name, arcname, 0)
        if skipped:
            raise OSError(errno.EINVAL, f"{shown(name)} is not a regular file, folder or link: it is not copied")
        if fd is not None:
            packer.walk(fd, arcname)


# --- extracting --------------------------------------------------------------------------


def _parts(name: str) -> list[str]:
    return [part for part in name.split("/") if part not in ("", ".")]


def _pax_records(buf: bytes) -> list[tuple[bytes, bytes]]:
    """The (keyword, value) records of a pax extended header, in one pass over it: each is
    ``LENGTH KEYWORD=VALUE\\n``, its LENGTH counting the whole record. ValueError for anything else."""
    records = []
    pos = 0
    while pos < len(buf):
        if not buf[pos:].strip(b"\0"):
            break  # padding
        space = buf.find(b" ", pos, pos + 21)
        if space <= pos or not buf[pos:space].isdigit():
            raise ValueError("a pax record does not start with its length")
        end = pos + int(buf[pos:space])
        if end > len(buf) or end <= space + 2 or buf[end - 1] != 0x0A:
            raise ValueError("a pax record's length does not match it")
        equals = buf.find(b"=", space + 1, end - 1)
        if equals <= space + 1:
            raise ValueError("a pax record has no keyword")
        records.append((buf[space + 1:equals], buf[equals + 1:end - 1]))
        pos = end
    return records


_BOUNDED_INFO: list[type] = []


def bounded_info() -> type:
    """A ``tarfile.TarInfo`` whose reading of a stream costs linear time and bounded memory, whatever it holds."""
    if _BOUNDED_INFO:
        return _BOUNDED_INFO[0]
    import tarfile

    extended = (tarfile.XHDTYPE, tarfile.SOLARIS_XHDTYPE, tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK)

    class Unread(tarfile.HeaderError):
        """A header this module does not read (never one of those ``TarFile.next`` passes over)."""

    class BoundedInfo(tarfile.TarInfo):
        def _proc_member(self, tar):
            if self.type in (tarfile.XGLTYPE, tarfile.GNUTYPE_SPARSE):
                raise Unread("a global or sparse header, which no copy writes")
            if self.type not in extended:
                return super()._proc_member(tar)
            if self.size > HEADER_LIMIT:
                raise Unread(f"an extended header of {self.size} bytes, more than the {HEADER_LIMIT} a copy's may hold")
            run = getattr(tar, "_agentcompass_run", 0) + 1
            if run > HEADER_RUN_LIMIT:
                raise Unread(f"more than {HEADER_RUN_LIMIT} extended headers before an entry")
            setattr(tar, "_agentcompass_run", run)
            try:
                return super()._proc_member(tar)
            finally:
                setattr(tar, "_agentcompass_run", run - 1)

        def _proc_pax(self, tar):
            """tarfile's own, less global and sparse headers, with records read by ``_pax_records``."""
            buf = tar.fileobj.read(self._block(self.size))
            try:
                records = _pax_records(buf[:self.size])
            except ValueError as exc:
                raise Unread(str(exc)) from None
            binary = (b"hdrcharset", b"BINARY") in records
            headers = tar.pax_headers.copy()
            for key, value in records:
                keyword = self._decode_pax_field(key, "utf-8", "utf-8", tar.errors)
                if keyword.startswith("GNU.sparse."):
                    raise Unread("a sparse entry, which no copy writes")
                encoding = tar.encoding if binary and keyword in tarfile.PAX_NAME_FIELDS else "utf-8"
                headers[keyword] = self._decode_pax_field(value, encoding, tar.encoding, tar.errors)
            try:
                member = self.fromtarfile(tar)
            except tarfile.HeaderError as exc:
                raise tarfile.SubsequentHeaderError(str(exc)) from None
            member._apply_pax_info(headers, tar.encoding, tar.errors)
            member.offset = self.offset
            if "size" in headers:
                offset = member.offset_data
                if member.isreg() or member.type not in tarfile.SUPPORTED_TYPES:
                    offset += member._block(member.size)
                tar.offset = offset
            return member

    _BOUNDED_INFO.append(BoundedInfo)
    return BoundedInfo


def _write_data(fd: int, source, size: int) -> None:
    """``size`` bytes of ``source`` into the new file ``fd``: runs of zeros as holes."""
    written = 0
    hole = False
    while written < size:
        chunk = source.read(min(_CHUNK, size - written))
        if not chunk:
            raise OSError(errno.EIO, "the copy's stream ended inside a file")
        for start in range(0, len(chunk), _HOLE):
            block = chunk[start:start + _HOLE]
            if block == _ZEROS[:len(block)]:
                os.lseek(fd, len(block), os.SEEK_CUR)
                hole = True
            else:
                view = memoryview(block)
                while view:
                    view = view[os.write(fd, view):]
        written += len(chunk)
    if hole:
        os.ftruncate(fd, size)


class _Extractor:
    def __init__(self, parent_fd: int, name: str, limits: Limits) -> None:
        self.parent_fd, self.name, self.limits = parent_fd, name, limits
        self.skipped: list[str] = []
        self.root_fd: int | None = None
        self.chain: list[tuple[str, int]] = []  # the folders of the last entry, open
        self.files: set[tuple[str, ...]] = set()  # regular files landed: what a hard link may copy
        self.unlisted = 0
        self.entries = 0
        self.bytes = 0

    def close(self) -> None:
        for _, fd in self.chain:
            os.close(fd)
        self.chain.clear()
        if self.root_fd is not None:
            os.close(self.root_fd)
            self.root_fd = None

    def skip(self, name: str, why: str) -> None:
        self.unlisted += 1
        if len(self.skipped) < SKIPPED_LISTED:
            self.skipped.append(f"{shown(name)} ({why})")
            self.unlisted -= 1

    def listed(self) -> list[str]:
        """What was skipped: by name, then how many more."""
        return self.skipped + ([f"and {self.unlisted} more entries"] if self.unlisted else [])

    def folder(self, parts: list[str]) -> int:
        """The open folder ``parts`` below the root (made where missing), reusing the last entry's."""
        keep = 0
        while keep < len(self.chain) and keep < len(parts) and self.chain[keep][0] == parts[keep]:
            keep += 1
        for _, fd in self.chain[keep:]:
            os.close(fd)
        del self.chain[keep:]
        assert self.root_fd is not None
        fd = self.chain[-1][1] if self.chain else self.root_fd
        for part in parts[keep:]:
            fd = open_dir(fd, part, create=True)
            self.chain.append((part, fd))
        return fd

    def root(self, member, tar) -> bool:
        """Land the copy's first entry at ``name``; whether entries below it follow."""
        if member.isdir():
            if _clear(self.parent_fd, self.name, keep_dir=True) is None:
                os.mkdir(self.name, (member.mode & 0o777) | 0o700, dir_fd=self.parent_fd)
            self.root_fd = open_dir(self.parent_fd, self.name)
            return True
        if member.isreg():
            st = _lstat(self.parent_fd, self.name)
            if st is not None and stat.S_ISDIR(st.st_mode):
                raise IsADirectoryError(errno.EISDIR, f"{shown(self.name)} is a folder: a file cannot be copied onto it")
            self.count_bytes(member.size, member.name)
            self.regular(self.parent_fd, self.name, member, tar.extractfile(member))
            return False
        if member.issym():
            _clear(self.parent_fd, self.name)
            os.symlink(member.linkname, self.name, dir_fd=self.parent_fd)
            return False
        raise OSError(errno.EINVAL, f"{shown(member.name)} is a {self.kind(member)}, not a regular file or "
                      "folder: it is not copied")

    @staticmethod
    def kind(member) -> str:
        named = member.pax_headers.get(_KIND_HEADER)
        if named in ("FIFO", "socket", "character device", "block device", "special file"):
            return named
        return {b"3": "character device", b"4": "block device", b"6": "FIFO"}.get(member.type, "special file")

    def count_bytes(self, size: int, name: str) -> None:
        self.bytes += size
        if self.bytes > self.limits.size:
            raise CopyLimitError("size", self.limits, name)

    def regular(self, parent_fd: int, name: str, member, source) -> None:
        _clear(parent_fd, name)
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                     dir_fd=parent_fd)
        try:
            _write_data(fd, source, member.size)
            os.fchmod(fd, (member.mode & 0o777) | 0o600)
            os.utime(fd, (member.mtime, member.mtime))
        finally:
            os.close(fd)

    def entry(self, member, tar, root: str) -> None:
        self.entries += 1  # every entry counts, whatever becomes of it
        if self.entries > self.limits.files:
            raise CopyLimitError("files", self.limits, member.name)
        parts = _parts(member.name)
        if not parts or parts[0] != root or ".." in parts:
            self.skip(member.name, "outside the copied folder")
            return
        rel = parts[1:]
        if not rel:
            return  # the root again
        if len(rel) > self.limits.depth:
            raise CopyLimitError("depth", self.limits, "/".join(rel))
        shown_name = "/".join(rel)
        if not (member.isreg() or member.isdir() or member.issym() or member.islnk()):
            self.skip(shown_name, self.kind(member))
            return
        try:
            parent = self.folder(rel[:-1])
        except Refused as exc:
            self.skip(shown_name, f"under a link or a file: {exc.strerror}")
            return
        leaf = rel[-1]
        try:
            if member.isdir():
                if _clear(parent, leaf, keep_dir=True) is None:
                    os.mkdir(leaf, (member.mode & 0o777) | 0o700, dir_fd=parent)
            elif member.issym():
                _clear(parent, leaf)
                os.symlink(member.linkname, leaf, dir_fd=parent)
            elif member.isreg():
                self.count_bytes(member.size, shown_name)
                self.regular(parent, leaf, member, tar.extractfile(member))
                self.files.add(tuple(rel))
            else:
                self.hard_link(parent, leaf, member, root, shown_name)
        except IsADirectoryError:
            self.skip(shown_name, "a folder stands at its name")
        except ValueError as exc:  # e.g. a NUL in a link's target
            self.skip(shown_name, str(exc))

    def hard_link(self, parent: int, leaf: str, member, root: str, name: str) -> None:
        """A hard link lands as a copy of the file it links to, when that file landed in this copy."""
        target = _parts(member.linkname)
        if target[:1] == [root]:
            target = target[1:]
        if tuple(target) not in self.files:
            self.skip(name, "a hard link to a file outside the copy")
            return
        assert self.root_fd is not None
        try:
            folder = walk_to(self.root_fd, target[:-1])
        except Refused:
            self.skip(name, "a hard link to a file under a link")
            return
        try:
            source = os.open(target[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=folder)
        finally:
            os.close(folder)
        try:
            st = os.fstat(source)
            self.count_bytes(st.st_size, name)
            member.size, member.mode, member.mtime = st.st_size, st.st_mode, int(st.st_mtime)
            self.regular(parent, leaf, member, _FileData(source, st.st_size))
        finally:
            os.close(source)


def extract(source: BinaryIO, parent_fd: int, name: str, limits: Limits) -> list[str]:
    """Land the tar stream ``source`` at ``name`` under ``parent_fd``; return what was skipped.

    A folder merges into a folder that stands there; a file onto a folder raises ``IsADirectoryError``.
    """
    import tarfile

    extractor = _Extractor(parent_fd, name, limits)
    try:
        with tarfile.open(fileobj=source, mode="r|", bufsize=1 << 16, tarinfo=bounded_info()) as tar:
            first = tar.next()
            if first is None:
                raise OSError(errno.EIO, "the copy's stream holds nothing")
            parts = _parts(first.name)
            if not parts:
                raise OSError(errno.EIO, f"the copy's first entry has no name: {shown(first.name)}")
            root = parts[0]
            if len(parts) > 1:  # no entry of its own: a folder
                implied = tarfile.TarInfo(root)
                implied.type, implied.mode = tarfile.DIRTYPE, 0o755
                extractor.root(implied, tar)
                extractor.entry(first, tar, root)
            elif not extractor.root(first, tar):
                return extractor.listed()
            while (member := tar.next()) is not None:
                extractor.entry(member, tar, root)
                tar.members.clear()  # type: ignore[attr-defined]  # a long stream keeps no list of what it held
    except tarfile.TarError as exc:
        raise OSError(errno.EIO, f"the copy's stream is not a valid archive: {exc}") from None
    finally:
        extractor.close()
    return extractor.listed()


# --- on the host ---------------------------------------------------------------------------


def open_parent(local: str) -> tuple[int, str]:
    """The folder of a host path of agentcompass's own (made where missing) open, and the path's last name."""
    parent, name = os.path.split(os.path.abspath(local))
    os.makedirs(parent, exist_ok=True)
    return os.open(parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC), name


def note_skipped(what: str, skipped: list[str]) -> None:
    """Say in the log which entries a copy left out (agentcompass's console and its jobs' logs)."""
    if skipped:
        import logging

        more = 0
        last = skipped[-1].split()
        if len(last) == 4 and last[0] == "and" and last[1].isdigit() and last[2:] == ["more", "entries"]:
            more, skipped = int(last[1]), skipped[:-1]  # past SKIPPED_LISTED (a name is always quoted)
        total = len(skipped) + more
        listed = ", ".join(skipped[:20]) + (f", and {total - 20} more" if total > 20 else "")
        logging.getLogger("agentcompass.environments").warning(
            "%s: %d entries not copied (only regular files, folders and links are): %s", what, total, listed)


def pack_local(out: BinaryIO, local: str, limits: Limits) -> None:
    """The tar stream of a host path of agentcompass's own; a link in it (or the path itself) stays a link."""
    parent_fd, name = open_parent(local)
    try:
        pack(out, parent_fd, name, name, limits)
    finally:
        os.close(parent_fd)


def extract_local(source: BinaryIO, local: str, limits: Limits) -> list[str]:
    """Land a tar stream at a host path of agentcompass's own; return what was skipped."""
    parent_fd, name = open_parent(local)
    try:
        return extract(source, parent_fd, name, limits)
    finally:
        os.close(parent_fd)


def piped(produce: Callable[[BinaryIO], object], consume: Callable[[BinaryIO], T]) -> T:
    """``consume(reader)`` of what ``produce(writer)`` writes, each in a thread of its own, through a pipe.

    The producer's failure wins (the consumer then saw a stream cut short); a consumer that stops early
    ends the producer with a broken pipe.
    """
    import threading

    read, write = os.pipe()
    failures: dict[str, BaseException] = {}
    result: list[T] = []

    def producer() -> None:
        try:
            with open(write, "wb", buffering=_CHUNK) as out:
                produce(out)
        except BaseException as exc:  # reported below, in the calling thread
            failures["produce"] = exc

    thread = threading.Thread(target=producer, daemon=True)
    thread.start()
    try:
        with open(read, "rb", buffering=_CHUNK) as source:
            result.append(consume(source))
    except BaseException as exc:
        failures["consume"] = exc
    thread.join()
    produced = failures.get("produce")
    if produced is not None and not isinstance(produced, BrokenPipeError):
        raise produced
    if "consume" in failures:
        raise failures["consume"]
    if produced is not None:
        raise produced
    return result[0]


class Confined:
    """The file calls of a session without a sandbox: every path inside ``root``, no link followed.

    A path is made absolute against ``root`` and normalized as text first (``..`` included); one that
    leaves ``root`` raises ``PermissionError``, and a link on the way (or at the path) raises ``OSError``
    (``ELOOP``), whatever it points at.
    """

    def __init__(self, root: str, limits: Limits) -> None:
        self.root = os.path.normpath(root)
        self.limits = limits

    def locate(self, path: str, create: bool = False) -> tuple[int, str]:
        """The folder holding ``path`` open, and its last name; folders on the way made when ``create``."""
        target = os.path.normpath(os.path.join(self.root, path))
        if target == self.root:
            parent, name = os.path.split(self.root)
            return os.open(parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC), name
        if not target.startswith(self.root.rstrip("/") + "/"):
            raise PermissionError(
                errno.EACCES, f"{shown(path)} is outside the workspace {self.root}: without the sandbox "
                "(`sandbox: off`), a session's file calls reach only its workspace")
        parts = target[len(self.root.rstrip("/")) + 1:].split("/")
        root_fd = os.open(self.root, _DIR_FLAGS)
        try:
            return walk_to(root_fd, parts[:-1], create), parts[-1]
        except Refused as exc:
            raise OSError(errno.ELOOP, f"{shown(path)}: {exc.strerror}; without the sandbox (`sandbox: off`), "
                          "a session's file calls follow no link") from None
        finally:
            os.close(root_fd)

    def _open(self, path: str, flags: int, create: bool = False) -> int:
        parent, name = self.locate(path, create)
        try:
            return os.open(name, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644, dir_fd=parent)
        except OSError as exc:
            if exc.errno != errno.ELOOP:
                raise
            raise OSError(errno.ELOOP, f"{shown(path)} is a symbolic link; without the sandbox (`sandbox: off`), "
                          "a session's file calls follow no link") from None
        finally:
            os.close(parent)

    def status(self, path: str) -> tuple[bool, bool]:
        """Whether ``path`` exists, and whether it is a folder (a link is neither followed nor a folder)."""
        try:
            parent, name = self.locate(path)
        except (FileNotFoundError, NotADirectoryError):
            return False, False
        try:
            st = _lstat(parent, name)
        finally:
            os.close(parent)
        return st is not None, st is not None and stat.S_ISDIR(st.st_mode)

    def read(self, path: str) -> bytes:
        fd = self._open(path, os.O_RDONLY)
        try:
            st = os.fstat(fd)
            if stat.S_ISDIR(st.st_mode):
                raise IsADirectoryError(errno.EISDIR, f"{shown(path)} is a directory")
            if not stat.S_ISREG(st.st_mode):
                raise OSError(errno.EINVAL, f"{shown(path)} is a {kind_of(st.st_mode)}, not a regular file")
            limits = Limits(size=READ_LIMIT)
            if st.st_size > limits.size:
                raise CopyLimitError("read", limits, "", f"reading {shown(path)}")
            data = bytearray()
            while len(data) <= limits.size and (chunk := os.read(fd, min(_CHUNK, limits.size + 1 - len(data)))):
                data += chunk
            if len(data) > limits.size:  # it grew meanwhile
                raise CopyLimitError("read", limits, "", f"reading {shown(path)}")
            return bytes(data)
        finally:
            os.close(fd)

    def write(self, path: str, data: bytes) -> None:
        fd = self._open(path, os.O_WRONLY | os.O_CREAT, create=True)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise OSError(errno.EINVAL, f"{shown(path)} is a {kind_of(st.st_mode)}, not a regular file")
            os.ftruncate(fd, 0)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)

    def upload(self, local: str, remote: str) -> list[str]:
        parent, name = self.locate(remote, create=True)
        try:
            return piped(lambda out: pack_local(out, local, self.limits),
                         lambda source: extract(source, parent, name, self.limits))
        finally:
            os.close(parent)

    def download(self, remote: str, local: str) -> list[str]:
        parent, name = self.locate(remote)
        try:
            return piped(lambda out: pack(out, parent, name, name, self.limits),
                         lambda source: extract_local(source, local, self.limits))
        finally:
            os.close(parent)


# --- inside a sandbox --------------------------------------------------------------------


def _fail(code: int, **report: object) -> int:
    sys.stderr.write(json.dumps(report) + "\n")
    return code


def _split(path: str, create: bool = False) -> tuple[int, str]:
    """The folder of ``path`` (links followed, as any program there would) open, and its last name; the
    folders on the way made when ``create``."""
    path = os.path.realpath(path)
    parent, name = os.path.split(path)
    if not name:
        raise OSError(errno.EINVAL, "the root folder cannot be copied")
    if create:
        os.makedirs(parent, exist_ok=True)
    return os.open(parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC), name


def _copy_out(fd: int, out: BinaryIO, limit: int) -> None:
    """The file's bytes, at most ``limit`` and one more (so a file that grew past it is seen to)."""
    left = limit + 1
    while left > 0 and (chunk := os.read(fd, min(_CHUNK, left))):
        out.write(chunk)
        left -= len(chunk)


def main(argv: list[str]) -> int:
    """One file call inside a sandbox: ``OP PATH DEPTH FILES SIZE``; data on stdin and stdout.

    ``stat``: JSON {"exists", "dir"} (links followed); ``read``: the file's bytes (at most SIZE); ``write``:
    stdin into the file (folders made); ``pack``: the tar stream of PATH; ``unpack``: a tar stream from stdin
    landed at PATH, then JSON {"skipped": [...]}. A failure exits 2 with {"errno", "reason"} on stderr, a limit 3 with
    {"limit", "at"}.
    """
    op, path, depth, files, size = argv
    limits = Limits(int(depth), int(files), int(size))
    out = sys.stdout.buffer
    try:
        if op == "stat":
            try:
                st = os.stat(path)
            except (FileNotFoundError, NotADirectoryError):
                out.write(b'{"exists": false, "dir": false}')
            else:
                out.write(json.dumps({"exists": True, "dir": stat.S_ISDIR(st.st_mode)}).encode())
        elif op == "read":
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            try:
                st = os.fstat(fd)
                if stat.S_ISDIR(st.st_mode):
                    raise IsADirectoryError(errno.EISDIR, "is a folder")
                if not stat.S_ISREG(st.st_mode):
                    return _fail(2, errno=errno.EINVAL, reason=f"is a {kind_of(st.st_mode)}, not a regular file")
                if st.st_size > limits.size:
                    return _fail(3, limit="read", at="")
                _copy_out(fd, out, limits.size)
            finally:
                os.close(fd)
        elif op == "write":
            parent = os.path.dirname(path)
            if parent:
                os.makedirs(parent, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
            try:
                st = os.fstat(fd)
                if not stat.S_ISREG(st.st_mode):
                    return _fail(2, errno=errno.EINVAL, reason=f"is a {kind_of(st.st_mode)}, not a regular file")
                os.ftruncate(fd, 0)
                data = sys.stdin.buffer
                while chunk := data.read(_CHUNK):
                    view = memoryview(chunk)
                    while view:
                        view = view[os.write(fd, view):]
            finally:
                os.close(fd)
        elif op == "pack":
            parent_fd, name = _split(path)
            try:
                pack(out, parent_fd, name, name, limits)
            finally:
                os.close(parent_fd)
        elif op == "unpack":
            parent_fd, name = _split(path, create=True)
            try:
                skipped = extract(sys.stdin.buffer, parent_fd, name, limits)
            finally:
                os.close(parent_fd)
            out.write(json.dumps({"skipped": skipped}).encode())
        else:
            return _fail(2, errno=errno.EINVAL, reason=f"no such file call: {op}")
        out.flush()
    except CopyLimitError as exc:
        return _fail(3, limit=exc.kind, at=exc.at)
    except OSError as exc:
        return _fail(2, errno=exc.errno or errno.EIO, reason=exc.strerror or str(exc))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
