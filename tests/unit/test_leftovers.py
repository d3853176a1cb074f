"""Finding a session's processes by their environment markers."""

import os
import subprocess
import sys
from pathlib import Path

from agentcompass.environments import leftovers
from agentcompass.environments.leftovers import marked_processes


def test_a_process_caught_mid_exec_is_read_again_and_found(monkeypatch):
    # between installing its new memory and writing its environment there, a
    # process in execve reads as an empty environment: a one-time scan missed it
    reads = {101: [b"", b"", b"A=1\0AGENTCOMPASS_SESSION=s1\0"], 102: [b"AGENTCOMPASS_SESSION=s1\0"], 103: [b"B=2\0"]}
    monkeypatch.setattr(leftovers, "_pids", lambda: [101, 102, 103, 104])
    monkeypatch.setattr(leftovers, "_environ", lambda pid: reads[pid].pop(0) if pid in reads else None)
    monkeypatch.setattr(leftovers, "_kernel_thread", lambda pid: False)
    assert marked_processes("AGENTCOMPASS_SESSION", "s1") == [101, 102]


def test_kernel_threads_and_processes_that_stay_empty_are_not_waited_for(monkeypatch):
    calls = []

    def environ(pid):
        calls.append(pid)
        return b""

    monkeypatch.setattr(leftovers, "_pids", lambda: [1, 2])
    monkeypatch.setattr(leftovers, "_environ", environ)
    monkeypatch.setattr(leftovers, "_kernel_thread", lambda pid: pid == 1)
    assert marked_processes("AGENTCOMPASS_SESSION", "s1") == []
    assert calls.count(1) == 1  # a kernel thread has no environment: read once
    assert calls.count(2) == leftovers._EXEC_REREADS + 1  # bounded, never a loop


def test_a_real_marked_process_is_found_and_a_kernel_thread_is_told_apart():
    env = dict(os.environ, AGENTCOMPASS_SESSION="leftovers-unit-test")
    # it says it is ready once it runs: before its exec, /proc shows the environment of the process it was forked from
    child = subprocess.Popen([sys.executable, "-c", "import time; print('ready', flush=True); time.sleep(60)"], env=env,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline() == "ready\n"
        assert child.pid in marked_processes("AGENTCOMPASS_SESSION", "leftovers-unit-test")
        assert not leftovers._kernel_thread(child.pid)
        kernel = [p for p in leftovers._pids() if Path(f"/proc/{p}/comm").read_text().strip() == "kthreadd"]
        assert all(leftovers._kernel_thread(p) for p in kernel)
    finally:
        child.kill()
        child.wait()


def test_clean_skips_a_container_removed_between_the_listing_and_its_lookup(monkeypatch):
    """``agentcompass clean`` lists containers, then looks each one up: one that its own run (or another clean)
    removed in between is gone, not an error (a 404 there once failed a clean in CI). The engine is docker's
    own ContainerCollection over an API that answers the listing and then 404 for the lookup."""
    import docker
    from docker.models.containers import ContainerCollection

    from agentcompass.environments.docker.cleanup import _clean_engine

    class GoneAPI:
        def containers(self, **kwargs):
            return [{"Id": "9d3f2d94"}]

        def inspect_container(self, container_id):
            raise docker.errors.NotFound(f"No such container: {container_id}")

    class Engine:
        def __init__(self, **kwargs) -> None:
            self.api = GoneAPI()
            self.containers = ContainerCollection(client=self)

        def ping(self) -> bool:
            return True

        def close(self) -> None:
            pass

    monkeypatch.setattr(docker, "DockerClient", Engine)
    report = leftovers.CleanReport()
    _clean_engine("unix:///nowhere.sock", None, include_live=True, dry_run=False, report=report)
    assert report.containers == [] and report.notes == []


def test_clean_finds_each_providers_clean_up_through_the_registry(monkeypatch, capsys):
    """``agentcompass clean`` calls the clean-up hook of each registered Environment class once, however many
    ids name it; a provider without a hook of its own (a plug-in written before it) leaves nothing to clean."""
    from agentcompass.cli import main
    from agentcompass.runtime.base import BaseEnvironment
    from agentcompass.runtime.registry import Registry

    calls = []

    class Fake(BaseEnvironment):
        """Leaves one container behind."""

        async def open(self, spec, network, label):
            raise NotImplementedError

        @classmethod
        def clean_leftovers(cls, run_id, include_live, dry_run, report):
            calls.append((cls, run_id, include_live, dry_run))
            report.containers.append(f"container fake-{run_id}-1")
            report.notes.append("one engine was not checked")

    class Plain(BaseEnvironment):
        """A provider without a clean-up of its own."""

        async def open(self, spec, network, label):
            raise NotImplementedError

    registry = Registry("environment")
    registry.register("fake")(Fake)
    registry.register("fake_alias")(Fake)
    registry.register("plain")(Plain)
    monkeypatch.setattr(leftovers, "ENVIRONMENTS", registry)

    assert main(["clean", "--run", "r1", "--dry-run"]) == 0
    assert calls == [(Fake, "r1", False, True)]
    out, err = capsys.readouterr()
    assert out == "would remove container fake-r1-1\n"
    assert err == "agentcompass clean: one engine was not checked\n"

    report = leftovers.clean("r2", include_live=True)
    assert calls[1:] == [(Fake, "r2", True, False)]
    assert report.containers == ["container fake-r2-1"] and report.processes == report.workspaces == []
