"""The fork server of inner runs: a forked inner run behaves as ``python -m snakemake`` would."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
from multiprocessing import forkserver as mp_forkserver

from agentcompass.pipeline import forkserver

SNAKEFILE = textwrap.dedent("""
    import os

    rule all:
        output: "out.txt"
        run:
            with open(output[0], "w") as f:
                f.write(f"{os.environ['PROBE']} {os.environ['AGENTCOMPASS_PARENT_PID']} {os.getcwd()} {os.readlink('/proc/self/fd/0')}")

    rule broken:
        output: "broken.txt"
        run:
            raise RuntimeError("this rule fails")
""")


@pytest.fixture(scope="module")
def server():
    forkserver.start()
    yield
    forkserver.stop()


def test_preloading_starts_no_thread():
    """A fork keeps only the forking thread: the preload must not start any."""
    code = "import threading, agentcompass.pipeline.preload; print(threading.active_count())"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "1"


def test_a_forked_inner_run_has_its_environment_folder_and_log(server, workdir: Path, monkeypatch):
    (workdir / "Snakefile").write_text(SNAKEFILE)
    monkeypatch.chdir(workdir)  # the inner run works in the folder of the process that spawns it
    log = workdir / "inner.log"
    env = {**os.environ, "PROBE": "from-the-caller"}
    proc = forkserver.spawn(["--snakefile", str(workdir / "Snakefile"), "--cores", "1", "--force-use-threads", "all"],
                            env, log)
    assert proc.wait(timeout=120) == 0
    probe, parent, cwd, stdin = (workdir / "out.txt").read_text().split(" ")
    assert probe == "from-the-caller" and cwd == str(workdir) and stdin == os.devnull
    # its parent is the fork server, not this process, and its parent watch follows the server
    assert int(parent) == mp_forkserver._forkserver._forkserver_pid != os.getpid()
    assert "Finished jobid" in log.read_text()


def test_a_failed_inner_run_exits_non_zero_with_snakemakes_error_in_its_log(server, workdir: Path, monkeypatch):
    (workdir / "Snakefile").write_text(SNAKEFILE)
    monkeypatch.chdir(workdir)
    log = workdir / "inner.log"
    proc = forkserver.spawn(["--snakefile", str(workdir / "Snakefile"), "--cores", "1", "broken"],
                            dict(os.environ), log)
    assert proc.wait(timeout=120) == 1
    text = log.read_text()
    assert "Error in rule broken" in text and "this rule fails" in text


def test_stop_waits_for_the_server():
    forkserver.start()
    pid = mp_forkserver._forkserver._forkserver_pid
    assert pid is not None
    forkserver.stop()
    with pytest.raises(ProcessLookupError):  # reaped, not a zombie
        os.kill(pid, 0)


# A caller's script that starts an inner run at its top level, with no `if __name__ == "__main__":`
UNGUARDED = """
import os, sys
from pathlib import Path
from agentcompass.pipeline import forkserver

folder = Path(sys.argv[1])
with open(folder / "runs", "a") as f:
    f.write("x")
proc = forkserver.spawn(["--snakefile", str(folder / "Snakefile"), "--cores", "1", "--force-use-threads", "all"],
                        dict(os.environ), folder / "inner.log")
code = proc.wait(timeout=120)
forkserver.stop()
sys.exit(code)
"""


def test_a_callers_script_without_a_main_guard_runs_once(workdir: Path):
    (workdir / "Snakefile").write_text(SNAKEFILE)
    script = workdir / "drive.py"
    script.write_text(UNGUARDED)
    done = subprocess.run([sys.executable, str(script), str(workdir)], cwd=workdir, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PROBE": "scripted"})
    assert done.returncode == 0, done.stderr[-3000:]
    assert (workdir / "runs").read_text() == "x"  # not again in the forked child
    assert (workdir / "out.txt").read_text().startswith("scripted ")


def test_inner_runs_that_start_and_end_at_once_report_their_own_exit_status(server, tmp_path: Path, monkeypatch):
    """A forked child's exit status is one message on a pipe: two threads reading it at once left one
    of them with nothing, which ``multiprocessing`` reports as 255, a failed shard whose inner run
    had succeeded (every ``Process.start()`` reads every running child's, from the starting thread).
    Shards start and end in threads of the outer run, and a stop polls them from another."""
    (tmp_path / "Snakefile").write_text(SNAKEFILE)
    monkeypatch.chdir(tmp_path)
    codes: list[int] = []
    procs: list[forkserver.InnerRun] = []
    guard = threading.Lock()
    done = threading.Event()

    def shard(k: int) -> None:
        proc = forkserver.spawn(["--version"], dict(os.environ), tmp_path / f"inner{k}.log")
        with guard:
            procs.append(proc)
        code = proc.wait(timeout=120)
        with guard:
            codes.append(code)

    def stopper() -> None:  # as a stop's CHILDREN.terminate() polls them
        while not done.is_set():
            with guard:
                running = list(procs)
            for proc in running:
                proc.poll()

    poller = threading.Thread(target=stopper)
    poller.start()
    try:
        for _ in range(4):
            threads = [threading.Thread(target=shard, args=(k,)) for k in range(8)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
    finally:
        done.set()
        poller.join()
    assert {code: codes.count(code) for code in codes} == {0: 32}
