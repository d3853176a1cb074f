"""host_process on a machine without bubblewrap: what asks for the sandbox is refused before any
work, and what does not still runs (the default example must run anywhere)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from agentcompass.environments.netns import network_isolation

from .envkit import clean_env

CHECK = """
import asyncio, json
from agentcompass.environments import HostProcessEnvironment
from agentcompass.runtime.config import ConfigError
from agentcompass.runtime.models import EnvironmentSpec, NetworkPolicy

env = HostProcessEnvironment()
out = {}
cases = {
    "bubblewrap": ({"sandbox": "bubblewrap"}, None),
    "auto, run phase none": ({}, "none"),
    "auto, public": ({}, None),
    "off, run phase none": ({"sandbox": "off"}, "none"),
}
for name, (params, run_network) in cases.items():
    spec = EnvironmentSpec(id="host_process", params=params,
                           run_network=NetworkPolicy(mode=run_network) if run_network else None)
    try:
        env.build_config(spec)
        out[name] = "accepted"
    except ConfigError as exc:
        out[name] = str(exc)

async def main():
    session = await env.open(EnvironmentSpec(id="host_process"), NetworkPolicy(), "nobwrap-task-1-run")
    try:
        return (await session.exec(["echo", "ran"])).stdout, session.sandboxed
    finally:
        await session.close()

out["ran"] = asyncio.run(main())
print(json.dumps(out))
"""


def path_without(tmp_path, program: str) -> str:
    """A PATH that finds every program this one finds, but ``program``."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for directory in os.environ["PATH"].split(os.pathsep):
        if not os.path.isdir(directory):
            continue
        for name in os.listdir(directory):
            target = os.path.join(directory, name)
            if name != program and not (bin_dir / name).exists() and os.access(target, os.X_OK):
                (bin_dir / name).symlink_to(target)
    return str(bin_dir)


def test_without_bubblewrap_the_sandbox_is_refused_and_plain_public_phases_still_run(tmp_path):
    env = clean_env(PATH=path_without(tmp_path, "bwrap"))
    checked = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, env=env, timeout=120)
    assert checked.returncode == 0, checked.stderr
    out = json.loads(checked.stdout)
    assert "needs the bubblewrap sandbox" in out["bubblewrap"] and "apt-get install bubblewrap" in out["bubblewrap"]
    assert "run phase" in out["auto, run phase none"] and "apt-get install bubblewrap" in out["auto, run phase none"]
    assert out["auto, public"] == "accepted"
    if network_isolation()[0]:
        assert out["off, run phase none"] == "accepted"
    assert out["ran"] == ["ran\n", False]
    assert "not in a sandbox" in checked.stderr and "sandbox: off" in checked.stderr  # said once, with the way out


DOCKER_DEFAULT_CAPABILITIES = 0xA80425FB  # chown ... setfcap, as Docker grants them
CAP_MKNOD = 1 << 27


def test_a_root_command_in_the_sandbox_keeps_only_dockers_capabilities_less_mknod():
    import pytest

    from agentcompass.environments.bubblewrap import sandbox_support

    from .envkit import Provider

    if os.geteuid() != 0 or not sandbox_support()[0]:
        pytest.skip("needs root and the sandbox")

    async def body(s):
        return (
            await s.exec(["grep", "CapBnd", "/proc/self/status"]),
            await s.exec(["mount", "-o", "remount,rw", "/usr"]),
            await s.exec(["touch", "/usr/agentcompass-probe"]),
        )

    caps, remount, touch = Provider("host_process", {"sandbox": "bubblewrap"}).run(body)
    assert int(caps.stdout.split()[1], 16) == DOCKER_DEFAULT_CAPABILITIES & ~CAP_MKNOD
    assert remount.returncode != 0 and touch.returncode != 0
    assert not os.path.exists("/usr/agentcompass-probe")


def test_cpus_is_a_cpu_quota_on_the_cgroup_every_command_is_in():
    import pytest

    from agentcompass.environments.cgroups import LimitsUnavailableError, require_limits

    from .envkit import Provider

    try:
        require_limits(("cpu",))
    except LimitsUnavailableError as exc:
        pytest.skip(str(exc))

    def quota_of(listing: str) -> int:
        """The CPU quota (microseconds per 100 ms) of the cgroup ``/proc/self/cgroup`` names."""
        lines = [line.split(":", 2) for line in listing.splitlines()]
        if os.path.exists("/sys/fs/cgroup/cgroup.controllers"):
            path = next(path for _, names, path in lines if names == "")
            return int(open(f"/sys/fs/cgroup{path}/cpu.max").read().split()[0])
        path = next(path for _, names, path in lines if "cpu" in names.split(","))
        mount = next(m for m in os.listdir("/sys/fs/cgroup") if "cpu" in m.split(","))
        return int(open(f"/sys/fs/cgroup/{mount}{path}/cpu.cfs_quota_us").read())

    async def body(s):
        first = await s.exec(["cat", "/proc/self/cgroup"])
        second = await s.exec("sleep 1 & cat /proc/self/cgroup", shell=True)
        return first.stdout, second.stdout, quota_of(first.stdout)

    first, second, quota = Provider("host_process").run(body, cpus=0.5)
    assert second == first  # every command, and what it starts, in the session's cgroup
    assert quota == 50_000  # half of each 100 ms period


MASKS = """
import atexit, json, os, sys
from agentcompass.environments import bubblewrap
from agentcompass.environments.leftovers import MASK_RECORD
folder = os.path.dirname(bubblewrap._mask_sources()[0])
record = json.load(open(os.path.join(folder, MASK_RECORD)))
child = os.fork()
if child == 0:  # a forked child ends as the fork server's do: the atexit functions, then os._exit
    atexit._run_exitfuncs()
    os._exit(0)
os.waitpid(child, 0)
print(json.dumps({"folder": folder, "owner": record["owner"], "after_child": os.path.isdir(folder)}), flush=True)
"""


def test_the_sandbox_folder_records_its_owner_and_outlives_a_forked_childs_exit():
    """The folder of masks (one per process) names the process that made it, for 'agentcompass clean'; the
    exit of a child forked from that process leaves it, and the process's own exit removes it."""
    import pytest

    from agentcompass.environments.bubblewrap import hidden_paths
    from agentcompass.environments.leftovers import owner_token

    if not hidden_paths():
        pytest.skip("nothing on this machine to hide: no folder of masks is made")
    done = subprocess.run([sys.executable, "-c", MASKS], capture_output=True, text=True, timeout=60, env=clean_env())
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["after_child"] is True
    assert seen["owner"].split(":")[0] == owner_token().split(":")[0] and seen["owner"].split(":")[1].isdigit()
    assert not os.path.exists(seen["folder"])  # its owner ended: the folder went with it
