"""Tool folders in containers: where they are mounted, what ``check_runnable`` says of an image that
cannot run a tool, and a mount the container cannot read, refused at open."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from agentcompass import tools
from agentcompass.runtime.base import retryable
from agentcompass.runtime.models import EnvironmentSpec, NetworkPolicy
from agentcompass.testing.npm_registry import NpmRegistry

from .envkit import TEST_IMAGE, Provider, unique_label

# a shell script standing in for a glibc program: check_runnable looks for the loader before it runs it
FAKE = tools.ToolRecipe("fake", "1.0.0", ("@fake/tool@{version}",), "@fake/tool/bin/fake", needs=("glibc",))
GLIBC_IMAGE = os.environ.get("AGENTCOMPASS_TEST_GLIBC_IMAGE")


@pytest.fixture
def cache(readable_tmp: Path, monkeypatch) -> Path:
    root = readable_tmp / "tools"
    monkeypatch.setitem(tools.TOOLS, "fake", FAKE)
    with NpmRegistry() as registry:
        registry.publish("@fake/tool", "1.0.0", {"bin/fake": ("#!/bin/sh\necho fake 1.0.0\n", 0o755)})
        tools.install(FAKE.key, root=root, registry=registry.url)
    root.chmod(0o755)
    monkeypatch.setenv("AGENTCOMPASS_TOOL_CACHE", str(root))
    return root


def _check(image: str) -> tuple[dict[str, str], str | None]:
    async def main():
        spec = EnvironmentSpec(id="docker", params={"image": image}, tools=[FAKE.key])
        session = await Provider("docker").environment.open(spec, NetworkPolicy(), unique_label("tools"))
        try:
            return dict(session.tools), await tools.check_runnable(session, FAKE.key)
        finally:
            await session.close()

    return asyncio.run(main())


def test_a_tool_is_mounted_at_its_key_and_an_image_without_glibc_is_named(needs_docker, cache):
    mounted, problem = _check(TEST_IMAGE)  # busybox: no glibc loader
    assert mounted == {FAKE.key: f"/opt/agentcompass/tools/{FAKE.key}"}
    assert problem is not None and "no glibc loader /lib64/ld-linux-x86-64.so.2" in problem
    assert "fake 1.0.0 needs a glibc userland" in problem
    if GLIBC_IMAGE is None:
        pytest.skip("AGENTCOMPASS_TEST_GLIBC_IMAGE names no image with glibc: the control is not run")
    assert _check(GLIBC_IMAGE)[1] is None


def test_a_tool_folder_the_container_cannot_read_fails_at_open_without_a_retry(needs_docker, cache):
    """What an engine whose user cannot read the cache mounts: a folder without the tool's files."""
    (cache / "fake@1.0.1").mkdir()  # a folder as the engine would see an unreadable one: no manifest in it
    spec = EnvironmentSpec(id="docker", params={"image": TEST_IMAGE}, tools=["fake@1.0.1"])
    with pytest.raises(tools.ToolMountError, match="the container cannot read .*agentcompass-tool.json") as raised:
        asyncio.run(Provider("docker").environment.open(spec, NetworkPolicy(), unique_label("tools")))
    assert not retryable(raised.value) and retryable(tools.ToolInstallError("the registry did not answer"))


def test_a_cache_the_rootless_engine_cannot_enter_is_refused_at_open_naming_the_fix(needs_podman, tmp_path, monkeypatch):
    """Rootless Podman's user is not this process's: a cache under ``tmp_path`` (below a folder of mode 0700)
    is one it cannot enter, and its refusal to mount it is a ToolMountError saying what to set."""
    if needs_podman != "podman-rootless":
        pytest.skip(f"an engine of {needs_podman} runs as root: it enters every folder")
    root = tmp_path / "tools"
    monkeypatch.setitem(tools.TOOLS, "fake", FAKE)
    with NpmRegistry() as registry:
        registry.publish("@fake/tool", "1.0.0", {"bin/fake": ("#!/bin/sh\necho fake 1.0.0\n", 0o755)})
        tools.install(FAKE.key, root=root, registry=registry.url)
    monkeypatch.setenv("AGENTCOMPASS_TOOL_CACHE", str(root))
    spec = EnvironmentSpec(id="docker", params={"image": TEST_IMAGE}, tools=[FAKE.key])
    with pytest.raises(tools.ToolMountError, match="Set AGENTCOMPASS_TOOL_CACHE to a folder the engine can read"):
        asyncio.run(Provider("docker").environment.open(spec, NetworkPolicy(), unique_label("tools")))
