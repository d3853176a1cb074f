"""Root in the sandbox against the tool folders mounted into it: read-only, and a window on nothing else.

A fake tool, installed from an npm registry on 127.0.0.1, is mounted into a
session of each provider (host_process in its bubblewrap sandbox, docker).
As root there the agent tries to write, create, remove, rename, chmod, link
and remount in the tool folder, and looks around it (``..``) for the host's
cache. Every try fails, the host's folder is unchanged byte for byte, and
``..`` of the mount shows the sandbox's own folder, holding the mounted
tools alone.
"""

from __future__ import annotations

import asyncio
import hashlib
import secrets
from pathlib import Path

import pytest

from agentcompass import tools
from agentcompass.runtime.models import EnvironmentSpec, NetworkPolicy
from agentcompass.testing.npm_registry import NpmRegistry
from environments.envkit import Provider, sandboxed_provider, unique_label

FAKE = tools.ToolRecipe("fake", "1.0.0", ("@fake/tool@{version}",), "@fake/tool/bin/fake")
KEY = FAKE.key
PROGRAM = "#!/bin/sh\necho fake 1.0.0\n"


@pytest.fixture(params=["host_process", "docker"])
def provider(request) -> Provider:
    return sandboxed_provider(request.param, as_root=True)


@pytest.fixture
def cache(readable_tmp: Path, monkeypatch) -> Path:
    """A tool cache holding the fake tool, and a canary file of the host beside it."""
    root = readable_tmp / "tools"
    monkeypatch.setitem(tools.TOOLS, "fake", FAKE)
    with NpmRegistry() as registry:
        registry.publish("@fake/tool", "1.0.0", {"bin/fake": (PROGRAM, 0o755), "README.md": ("fake\n", 0o644)})
        tools.install(KEY, root=root, registry=registry.url)
    (root / "canary.txt").write_text(f"canary-{secrets.token_hex(8)}")
    root.chmod(0o755)  # an engine that is not this process's user reads the cache too
    monkeypatch.setenv("AGENTCOMPASS_TOOL_CACHE", str(root))
    return root


def _digest(root: Path) -> dict[str, str]:
    """Each path under ``root`` -> its mode and, for a file, the sha256 of its bytes."""
    found = {}
    for path in sorted(root.rglob("*")):
        info = path.lstat()
        body = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() and not path.is_symlink() else ""
        found[str(path.relative_to(root))] = f"{oct(info.st_mode)} {body}"
    return found


def _run(provider: Provider, commands: dict[str, str]) -> tuple[str, dict]:
    async def main():
        spec = EnvironmentSpec(id=provider.name, params=provider.params, tools=[KEY])
        session = await provider.environment.open(spec, NetworkPolicy(), unique_label("tools"))
        try:
            folder = session.tools[KEY]
            ran = {name: await session.exec(command, shell=True, timeout=30, env={"T": folder})
                   for name, command in commands.items()}
            return folder, ran
        finally:
            await session.close()

    return asyncio.run(main())


TAMPERING = {
    "create": "touch \"$T/new\"",
    "overwrite": "echo 'echo pwned' > \"$T/@fake/tool/bin/fake\"",
    "append": "echo 'echo pwned' >> \"$T/@fake/tool/bin/fake\"",
    "remove": "rm -f \"$T/@fake/tool/README.md\"",
    "rename": "mv \"$T/@fake/tool/README.md\" \"$T/@fake/tool/moved\"",
    "rename the folder": "mv \"$T/@fake\" \"$T/moved\"",
    "mkdir": "mkdir \"$T/@fake/new\"",
    "chmod": "chmod 777 \"$T/@fake/tool/bin\"",
    "chmod the program": "chmod 4777 \"$T/@fake/tool/bin/fake\"",
    "symlink": "ln -s / \"$T/@fake/root\"",
    "replace by a link": "rm -rf \"$T/@fake/tool/bin\" && ln -s /tmp \"$T/@fake/tool/bin\"",
    "remount": "mount -o remount,rw \"$T\"",
    "unmount": "umount \"$T\" || umount -l \"$T\"",
}


def test_root_in_the_sandbox_cannot_change_a_tool_folder(provider, cache):
    before = _digest(cache / KEY)
    folder, ran = _run(provider, {**TAMPERING, "after": 'ls -a "$T/@fake/tool" "$T/@fake/tool/bin"; "$T/@fake/tool/bin/fake"'})
    for name in TAMPERING:
        assert ran[name].returncode != 0, (name, ran[name])
    after = ran["after"]
    assert after.stdout.split() == [f"{folder}/@fake/tool:", ".", "..", "README.md", "bin",
                                    f"{folder}/@fake/tool/bin:", ".", "..", "fake", "fake", "1.0.0"], after
    assert _digest(cache / KEY) == before


def test_the_mount_shows_nothing_else_of_the_host(provider, cache):
    canary = (cache / "canary.txt").read_text()
    folder, ran = _run(provider, {
        "around": 'ls -a "$T/.."',
        "canary": f'cat "$T/../canary.txt" "{cache}/canary.txt"; grep -rs {canary} "$T/.." "{cache.parent}"',
        "lock": f'ls "$T/../{KEY}.lock" "{cache}/{KEY}.lock"',
    })
    if provider.name == "docker":
        assert folder == f"{tools.SANDBOX_TOOL_ROOT}/{KEY}"
    else:
        assert folder == str(cache / KEY)  # its host path, in a folder the sandbox made
    assert ran["around"].stdout.split() == [".", "..", KEY], ran["around"]
    assert canary not in ran["canary"].stdout and ran["canary"].returncode != 0, ran["canary"]
    assert ran["lock"].returncode != 0 and ran["lock"].stdout == ""
