"""The tool cache against a real npm registry on 127.0.0.1: installed once, read-only, and nothing of a
hostile or corrupt tarball anywhere."""

from __future__ import annotations

import asyncio
import io
import json
import os
import stat
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from agentcompass import cli, tools
from agentcompass.environments.host_process import HostProcessEnvironment
from agentcompass.runtime.models import EnvironmentSpec, NetworkPolicy
from agentcompass.testing.npm_registry import NpmRegistry, integrity_of

FAKE = tools.ToolRecipe("fake", "1.0.0", ("@fake/tool@{version}", "fake-helper@2.0.0"), "@fake/tool/bin/fake")
FILES = {
    "bin/fake": ("#!/bin/sh\necho fake 1.0.0\n", 0o4755),  # setuid: dropped
    "README.md": ("the fake tool\n", 0o666),  # writable by all: no longer
    "lib/data.json": ('{"a": 1}\n', 0o644),
}
# a subprocess that installs the fake tool: the recipe registered there as here
INSTALL_PY = (
    "import sys; from pathlib import Path; from agentcompass import tools\n"
    f"tools.TOOLS['fake'] = tools.{FAKE!r}\n"
    "print(tools.install('fake@1.0.0', root=Path(sys.argv[1]), registry=sys.argv[2]))\n"
)


@pytest.fixture
def fake(monkeypatch) -> tools.ToolRecipe:
    monkeypatch.setitem(tools.TOOLS, "fake", FAKE)
    return FAKE


@pytest.fixture
def registry():
    with NpmRegistry() as served:
        served.publish("@fake/tool", "1.0.0", FILES)
        served.publish("fake-helper", "2.0.0", {"index.js": ("module.exports = 1\n", 0o644)}, top="helper")
        yield served


def _tree(root: Path) -> dict[str, int]:
    """Every path under ``root`` -> its mode."""
    return {str(p.relative_to(root)): stat.S_IMODE(p.lstat().st_mode) for p in sorted(root.rglob("*"))}


def test_install_unpacks_each_package_into_its_folder_read_only_with_a_manifest(fake, registry, tmp_path):
    folder = tools.install("fake@1.0.0", root=tmp_path, registry=registry.url)
    assert folder == tmp_path / "fake@1.0.0"
    ran = subprocess.run([folder / fake.program], capture_output=True, text=True, check=True)
    assert ran.stdout == "fake 1.0.0\n"
    assert (folder / "fake-helper/index.js").read_text() == "module.exports = 1\n"  # its own top folder stripped
    modes = _tree(folder)
    assert modes["@fake/tool/bin/fake"] == 0o555 and modes["@fake/tool/README.md"] == 0o444
    assert all(mode in (0o555, 0o444) for mode in modes.values()), modes
    assert all(mode == 0o555 for path, mode in modes.items() if (folder / path).is_dir())
    manifest = json.loads((folder / tools.MANIFEST).read_text())
    assert manifest["key"] == "fake@1.0.0"
    assert [(p["name"], p["integrity"]) for p in manifest["packages"]] == [
        ("@fake/tool", integrity_of(registry.tarballs["/tarballs/0.tgz"])),
        ("fake-helper", integrity_of(registry.tarballs["/tarballs/1.tgz"]))]
    # the scoped name's '/' is encoded in the metadata URL, as npm's registry wants it
    assert registry.gets[0] == "/@fake/tool/1.0.0"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fake@1.0.0", "fake@1.0.0.lock"]


def test_a_second_install_is_instant_and_needs_no_registry(fake, tmp_path):
    with NpmRegistry() as registry:
        registry.publish("@fake/tool", "1.0.0", FILES)
        registry.publish("fake-helper", "2.0.0", {"index.js": ("1", 0o644)})
        first = tools.install("fake", root=tmp_path, registry=registry.url)  # a bare name: its pinned version
        asked = len(registry.gets)
    started = time.monotonic()
    again = tools.install("fake@1.0.0", root=tmp_path, registry=registry.url)  # the server is gone
    assert again == first and time.monotonic() - started < 0.5
    assert len(registry.gets) == asked == 4


def test_another_version_of_a_known_tool_is_its_own_key(fake, registry, tmp_path):
    registry.publish("@fake/tool", "1.1.0", {"bin/fake": ("#!/bin/sh\necho 1.1\n", 0o755)})
    folder = tools.install("fake@1.1.0", root=tmp_path, registry=registry.url)
    assert folder.name == "fake@1.1.0" and (folder / "@fake/tool/bin/fake").read_text().endswith("echo 1.1\n")


def test_an_integrity_mismatch_is_refused_and_leaves_nothing(fake, registry, tmp_path):
    registry.publish_tarball("@fake/tool", "1.0.0", registry.tarballs["/tarballs/0.tgz"] + b"tampered",
                             integrity=integrity_of(registry.tarballs["/tarballs/0.tgz"]))
    with pytest.raises(tools.ToolInstallError, match="sha512 is not the integrity"):
        tools.install("fake@1.0.0", root=tmp_path, registry=registry.url)
    assert [p.name for p in tmp_path.iterdir()] == ["fake@1.0.0.lock"]


def test_a_missing_package_or_no_sha512_is_a_clear_error(fake, registry, tmp_path):
    with pytest.raises(tools.ToolInstallError, match="HTTP 404"):
        tools.install("fake@9.9.9", root=tmp_path, registry=registry.url)
    registry.packages[("@fake/tool", "1.0.0")]["dist"]["integrity"] = "sha1-AAAA"
    with pytest.raises(tools.ToolInstallError, match="no sha512"):
        tools.install("fake@1.0.0", root=tmp_path, registry=registry.url)
    assert [p.name for p in tmp_path.iterdir() if not p.name.endswith(".lock")] == []


def test_unknown_tools_and_versions_that_are_not_plain_name_the_known_tools():
    for key, says in (("nosuch@1.0", "no tool is named 'nosuch'"), ("codex@../../x", "no plain version"),
                      ("codex@1.0 ; rm", "no plain version"), ("codex@", "no plain version")):
        with pytest.raises(tools.ToolError, match="known tools are claude-code") as raised:
            tools.resolve(key)
        assert says in str(raised.value)
    assert tools.resolve("codex").key == "codex@0.169.0"
    assert tools.resolve("codex@0.170.0").packages == tools.TOOLS["codex"].packages


# --- hostile tarballs ---------------------------------------------------------------------------


def _member(name: str, kind: bytes = tarfile.REGTYPE, data: bytes = b"x", link: str = "", mode: int = 0o644):
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.mode = kind, link, mode
    info.size = len(data) if kind == tarfile.REGTYPE else 0
    if kind in (tarfile.CHRTYPE, tarfile.BLKTYPE):
        info.devmajor, info.devminor = 1, 3
    return info, data


def _tarball(*members) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if info.isfile() else None)
    return buffer.getvalue()


OK = _member("package/bin/fake", data=b"#!/bin/sh\n", mode=0o755)
HOSTILE = {
    "dot-dot": [OK, _member("package/../../escaped")],
    "absolute": [OK, _member("{outside}/escaped")],
    "symlink out": [OK, _member("package/out", tarfile.SYMTYPE, link="../../../..{outside}")],
    "absolute symlink": [OK, _member("package/out", tarfile.SYMTYPE, link="{outside}")],
    "write through a symlink": [OK, _member("package/out", tarfile.SYMTYPE, link="."),
                                _member("package/out/escaped")],
    "symlink through a symlink": [OK, _member("package/a/b", tarfile.SYMTYPE, link="."),
                                  _member("package/up", tarfile.SYMTYPE, link="a/b/../..")],
    "hard link out": [OK, _member("package/passwd", tarfile.LNKTYPE, link="../etc/passwd")],
    "hard link to outside file": [OK, _member("package/passwd", tarfile.LNKTYPE, link="{outside}/target")],
    "device": [OK, _member("package/null", tarfile.CHRTYPE)],
    "fifo": [OK, _member("package/pipe", tarfile.FIFOTYPE)],
    "two top folders": [OK, _member("other/escaped")],
    "twice the same name": [OK, _member("package/bin/fake", tarfile.SYMTYPE, link="{outside}/target")],
}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_a_hostile_tarball_is_refused_and_nothing_is_written_anywhere(case, fake, registry, tmp_path):
    root, outside = tmp_path / "cache", tmp_path / "outside"
    outside.mkdir()
    (outside / "target").write_text("host file")
    members = []
    for info, data in HOSTILE[case]:
        members.append((info.replace(name=info.name.replace("{outside}", str(outside)),
                                     linkname=info.linkname.replace("{outside}", str(outside))), data))
    registry.publish_tarball("@fake/tool", "1.0.0", _tarball(*members))
    before = _tree(tmp_path)
    with pytest.raises(tools.ToolInstallError, match="refused"):
        tools.install("fake@1.0.0", root=root, registry=registry.url)
    assert _tree(tmp_path) == {**before, "cache": 0o755, "cache/fake@1.0.0.lock": 0o644}
    assert (outside / "target").read_text() == "host file"


def test_links_inside_the_package_are_kept(fake, registry, tmp_path):
    """The control of the hostile cases: a link that stays in the package, and a hard link to a file of it."""
    registry.publish_tarball("@fake/tool", "1.0.0", _tarball(
        OK, _member("package/lib/x", data=b"data"), _member("package/bin/alias", tarfile.SYMTYPE, link="fake"),
        _member("package/bin/lib", tarfile.SYMTYPE, link="../lib"),
        _member("package/bin/copy", tarfile.LNKTYPE, link="package/bin/fake")))
    folder = tools.install("fake@1.0.0", root=tmp_path, registry=registry.url) / "@fake/tool"
    assert os.readlink(folder / "bin/alias") == "fake" and (folder / "bin/lib/x").read_text() == "data"
    assert (folder / "bin/copy").stat().st_ino == (folder / "bin/fake").stat().st_ino


def test_a_tarball_larger_than_its_bound_is_refused_while_it_streams(fake, registry, tmp_path, monkeypatch):
    monkeypatch.setattr(tools, "MAX_TARBALL_BYTES", 100)
    with pytest.raises(tools.ToolInstallError, match="larger than 100 bytes"):
        tools.install("fake@1.0.0", root=tmp_path, registry=registry.url)
    assert [p.name for p in tmp_path.iterdir()] == ["fake@1.0.0.lock"]


# --- two installs at once -----------------------------------------------------------------------


def test_two_processes_installing_at_once_install_once(fake, registry, tmp_path):
    registry.delay = 0.5  # the first install is still downloading when the second asks
    procs = [subprocess.Popen([sys.executable, "-c", INSTALL_PY, str(tmp_path), registry.url],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [proc.communicate(timeout=60) for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0], outs
    assert {out.strip() for out, _ in outs} == {str(tmp_path / "fake@1.0.0")}
    assert registry.metadata_gets() == 2  # one per package: the second process found the folder


# --- the CLI ------------------------------------------------------------------------------------


def test_the_cli_installs_and_lists(fake, registry, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("AGENTCOMPASS_TOOL_CACHE", str(tmp_path))
    monkeypatch.setenv("npm_config_registry", registry.url)
    assert cli.main(["tools", "install", "fake"]) == 0
    assert "fake@1.0.0: installed in" in capsys.readouterr().out
    assert cli.main(["tools", "install", "fake@1.0.0"]) == 0
    assert "already installed" in capsys.readouterr().out
    assert cli.main(["tools", "list"]) == 0
    listing = capsys.readouterr().out
    assert "claude-code  2.1.328" in listing and "fake@1.0.0" in listing and " MB" in listing
    assert cli.main(["tools", "install", "fake@2.0.0"]) == 1  # no such version on the registry
    assert "HTTP 404" in capsys.readouterr().err
    assert cli.main(["tools", "install", "nosuch"]) == 2
    assert "known tools are" in capsys.readouterr().err


# --- the spec, the plan, the session ------------------------------------------------------------


def test_an_environment_spec_without_tools_serializes_as_before():
    assert "tools" not in EnvironmentSpec().to_dict()
    spec = EnvironmentSpec(tools=["codex@0.169.0"])
    assert spec.to_dict()["tools"] == ["codex@0.169.0"]
    assert EnvironmentSpec.from_dict(spec.to_dict()) == spec
    assert EnvironmentSpec.from_dict(EnvironmentSpec().to_dict()).tools == []


def test_a_host_process_session_mounts_its_tools_and_the_program_runs(fake, registry, tmp_path, monkeypatch):
    monkeypatch.setenv("AGENTCOMPASS_TOOL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("npm_config_registry", registry.url)

    async def main():
        session = await HostProcessEnvironment().open(EnvironmentSpec(tools=["fake@1.0.0"]), NetworkPolicy(), "tools")
        try:
            folder = session.tools["fake@1.0.0"]
            return folder, await tools.check_runnable(session, "fake@1.0.0")
        finally:
            await session.close()

    folder, problem = asyncio.run(main())
    assert folder == str(tmp_path / "cache" / "fake@1.0.0") and problem is None


def test_check_runnable_says_what_fails(fake, registry, tmp_path, monkeypatch):
    broken = tools.ToolRecipe("fake", "1.0.1", ("@fake/tool@{version}",), "@fake/tool/bin/fake", needs=("glibc",))
    monkeypatch.setitem(tools.TOOLS, "fake", broken)
    registry.publish("@fake/tool", "1.0.1", {"bin/fake": ("#!/bin/sh\necho broken >&2; exit 3\n", 0o755)})
    monkeypatch.setenv("AGENTCOMPASS_TOOL_CACHE", str(tmp_path))
    monkeypatch.setenv("npm_config_registry", registry.url)

    async def main():
        session = await HostProcessEnvironment().open(EnvironmentSpec(tools=["fake@1.0.1"]), NetworkPolicy(), "tools")
        try:
            return (await tools.check_runnable(session, "fake@1.0.1"),
                    await tools.check_runnable(session, "codex@0.169.0"))
        finally:
            await session.close()

    failing, unmounted = asyncio.run(main())
    assert failing is not None and "exited 3" in failing and "broken" in failing
    assert unmounted is not None and "not mounted" in unmounted


def test_an_install_that_fails_at_open_is_an_infrastructure_error(fake, tmp_path, monkeypatch):
    with NpmRegistry() as registry:
        url = registry.url  # nothing listens there once it stops
    monkeypatch.setenv("AGENTCOMPASS_TOOL_CACHE", str(tmp_path))
    monkeypatch.setenv("npm_config_registry", url)
    with pytest.raises(tools.ToolInstallError, match="installing tool fake@1.0.0 into"):
        asyncio.run(HostProcessEnvironment().open(EnvironmentSpec(tools=["fake@1.0.0"]), NetworkPolicy(), "tools"))
    assert [p.name for p in tmp_path.iterdir()] == ["fake@1.0.0.lock"]
