"""Each use of Snakemake's internals (agentcompass.pipeline.engine), checked against the pinned Snakemake.

A tiny workflow calls the engine's functions from its Snakefile and jobs and
notes what they saw; an upgrade of Snakemake that changes one of them fails
its test here rather than a run.
"""

from __future__ import annotations

import inspect
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from agentcompass.pipeline import engine
from agentcompass.pipeline.engine import Records

SNAKEFILE = '''
import json, logging, time
from agentcompass.pipeline import engine
from agentcompass.pipeline.engine import Records

OBS = {}


def note(key, value):
    OBS[key] = value
    with open("obs.json", "w") as f:
        json.dump(OBS, f, default=str)


note("config_files", engine.config_files(workflow))
note("config_args", engine.config_args(workflow))
note("main_snakefile", engine.main_snakefile(workflow))
note("console_handlers", [h.get_name() for h in engine.console_handlers()])
note("all_handlers", sorted(h.get_name() or type(h).__name__ for h in logging.getLogger(engine.SNAKEMAKE_LOGGER).handlers))
if config.get("cap"):
    engine.set_global_resource(workflow, "widgets", 3)
if config.get("quiet"):
    engine.set_console_level("warning")
if config.get("debug"):
    engine.set_console_level("debug")
from snakemake.logging import logger as snakemake_logger
snakemake_logger.debug("agentcompass-debug-probe")  # shown at 'debug' only
if config.get("unannounced"):
    engine.drop_job_announcements()
if config.get("recover"):
    def recover():  # what a run's recovery does for a file a killed job had finished
        records = Records.of(workflow)
        note("marked_when_called", sorted(records.incomplete(["a.txt"])))
        records.unmark("a.txt")
    engine.before_markers_are_read(workflow, recover)


def first(wildcards):
    note("executing", engine.executing(workflow))
    note("main", engine.is_main_process(workflow))
    note("cluster", engine.on_cluster(workflow))
    force = engine.forcing(workflow)
    note("forcing", [force.forceall, sorted(force.forcerun), force.forcetargets])
    note("cores", engine.cores(workflow))
    note("widgets", engine.global_resource(workflow, "widgets"))
    note("code", engine.rule_code(workflow, "a"))
    note("threads", engine.requested_threads(workflow, "a"))
    note("resources", engine.rule_resources(workflow, "a", wildcards, ["widgets"]))
    if config.get("nolock"):
        engine.leave_directory_unlocked(workflow)
    if config.get("unthrottled"):
        engine.submit_local_jobs_unthrottled(workflow)
    return []


onerror:
    note("failed_jobs", engine.failed_jobs(workflow))


onstart:
    note("planned_at_start", sorted(rule for rule, _ in engine.planned_jobs(workflow)))
    note("named_targets", engine.named_targets(workflow))
    if config.get("wake"):
        engine.wake_for_signals(workflow)
    note("open_jobs", type(workflow.scheduler._open_jobs).__name__)


rule all:
    input: first, "c.txt"


rule a:
    input: "in.txt"
    output: "a.txt"
    log: "a.log"
    params: p1="x", p2=json.dumps({"k": 1})
    resources: widgets=1
    run:
        # a twin of a.txt's record, made as a job makes it before its output appears
        engine.Records.of(workflow).write_finished(workflow, "a", output[0] + ".twin", input, log, params)
        if config.get("slow"):
            open("a.sleeping", "w").close()  # running: the twin's record is written by now
            time.sleep(60)
        if config.get("fail"):
            raise RuntimeError("a failed")
        open(output[0], "w").write("a")
        if config.get("stop"):
            note("stopped", engine.stop_scheduling(workflow))


rule b:
    input: "a.txt"
    output: "b.txt"
    run:
        note("planned_in_job", sorted([rule, w] for rule, w in engine.planned_jobs(workflow)))
        if config.get("held"):  # the scheduler's lock held (as while it adds a checkpoint's jobs): the read waits
            import threading
            lock = workflow.scheduler._lock
            lock.acquire()
            reader = threading.Thread(target=lambda: note("read_after_release", engine.planned_jobs(workflow) is not None))
            reader.start()
            reader.join(0.5)  # the read takes a few milliseconds when nothing holds the lock
            note("waited_for_lock", reader.is_alive())
            lock.release()
            reader.join()
        open(output[0], "w").write("b")


rule c:
    input: "b.txt"
    output: "c.txt"
    run:
        note("timers", len(engine.scheduler_timers()))  # after three job selections
        open(output[0], "w").write("c")
'''


@pytest.fixture(scope="module")
def flow(tmp_path_factory) -> Callable[[], Path]:
    """A new folder holding the tiny workflow (its Snakefile, input and config file), each call."""

    def new() -> Path:
        folder = tmp_path_factory.mktemp("flow")
        (folder / "Snakefile").write_text(SNAKEFILE)
        (folder / "in.txt").write_text("in")
        (folder / "cfg.yaml").write_text("{}\n")
        return folder

    return new


@dataclass(frozen=True)
class Run:
    """A finished run of the tiny workflow: its folder, what Snakemake wrote, what the workflow noted."""

    folder: Path
    done: subprocess.CompletedProcess
    seen: dict


@pytest.fixture(scope="module")
def plain(flow) -> Run:
    """The workflow run once with no setting of ours (Snakemake's own limit on job starts, 100/1s, spelled
    out): the tests that read what a plain run shows read this one; one that changes its folder, a copy."""
    folder = flow()
    done = snakemake(folder, "--cores", "1", "--max-jobs-per-timespan", "100/1s")
    return Run(folder, done, observed(folder) if done.returncode == 0 else {})


def copy_of(run: Run, flow: Callable[[], Path]) -> Path:
    """A new folder holding what ``run`` left (outputs, records, times of change), to run again in."""
    folder = flow()
    shutil.copytree(run.folder, folder, symlinks=True, dirs_exist_ok=True)
    return folder


def snakemake(flow: Path, *args: str, wait: bool = True):
    argv = [sys.executable, "-m", "snakemake", "--snakefile", str(flow / "Snakefile"), "--directory", str(flow),
            "--force-use-threads", *args]
    if not wait:
        return subprocess.Popen(argv, cwd=flow, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return subprocess.run(argv, cwd=flow, capture_output=True, text=True, timeout=300)


def observed(flow: Path) -> dict:
    return json.loads((flow / "obs.json").read_text())


def test_settings_the_workflow_reads(flow):
    flow = flow()
    done = snakemake(flow, "--cores", "3", "--configfile", "cfg.yaml", "--forcerun", "a", "--set-threads", "a=7",
                     "--config", "cap=1")
    assert done.returncode == 0, done.stderr[-3000:]
    seen = observed(flow)
    assert seen["config_files"] == [str(flow / "cfg.yaml")] or Path(seen["config_files"][0]).name == "cfg.yaml"
    assert seen["config_args"] == ["cap=1"]
    assert seen["main_snakefile"].endswith("Snakefile")
    # the console's handler, not the log file's (which keeps everything)
    assert seen["console_handlers"] == ["DefaultStreamHandler"]
    assert "DefaultLogFileHandler" in seen["all_handlers"]
    assert (seen["executing"], seen["main"], seen["cluster"]) == (True, True, False)
    assert seen["forcing"] == [False, ["a"], False]
    assert seen["cores"] == 3 and seen["widgets"] == 3
    assert "write_finished" in seen["code"]
    assert seen["threads"] == 7  # as asked, before Snakemake cuts a job's threads to its cores
    assert seen["resources"]["widgets"] == 1 and seen["resources"]["_cores"] == 3

    dry = snakemake(flow, "--cores", "1", "-n", "--forceall")
    assert dry.returncode == 0 and observed(flow)["executing"] is False
    assert observed(flow)["forcing"][0] is True


def test_the_jobs_a_run_plans_are_read_at_its_start_and_while_it_runs(plain: Run, flow):
    assert plain.done.returncode == 0, plain.done.stderr[-3000:]
    seen = plain.seen
    assert seen["planned_at_start"] == ["a", "all", "b", "c"] and seen["named_targets"] is False
    # from a job's thread, with a finished: what ran and what will run, each with its wildcards
    assert seen["planned_in_job"] == [["a", {}], ["all", {}], ["b", {}], ["c", {}]]
    flow = copy_of(plain, flow)
    (flow / "c.txt").unlink()
    done = snakemake(flow, "--cores", "2", "c.txt")
    assert done.returncode == 0, done.stderr[-3000:]
    assert observed(flow)["planned_at_start"] == ["c"] and observed(flow)["named_targets"] is True


def test_a_record_written_before_the_output_appears_is_the_one_snakemake_writes(plain: Run):
    assert plain.done.returncode == 0, plain.done.stderr[-3000:]
    records = engine.Records.open(plain.folder)
    ours, theirs = (records.persistence.metadata(engine._iofile(p)) for p in ("a.txt.twin", "a.txt"))
    for field in ("rule", "code", "input", "log", "params", "shellcmd", "software_stack_hash",
                  "record_format_version", "conda_env", "container_img_url", "incomplete"):
        assert getattr(ours, field) == getattr(theirs, field), field
    record = records.record("a.txt")
    assert record.params == tuple(engine.record_params(records.persistence, ["x", json.dumps({"k": 1})]))
    assert record.input == ("in.txt",) and record.rule == "a"
    assert records.record("never-built.txt") is None


def marked(folder: Path) -> bool:
    """Whether Snakemake has marked a job of the run in ``folder`` started: it does so just after handing
    the job to its thread, so the job may be running before."""
    return any(path.is_file() for path in (folder / ".snakemake" / "incomplete").rglob("*"))


def test_incomplete_markers_of_a_killed_job_are_read_and_dropped(flow):
    flow = flow()
    proc = snakemake(flow, "--cores", "1", "--config", "slow=1", wait=False)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None and not ((flow / "a.sleeping").exists() and marked(flow)):
        time.sleep(0.05)
    assert (flow / "a.sleeping").exists() and marked(flow), proc.communicate()[0][-3000:]  # rule a's job runs
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    records = engine.Records.open(flow)
    assert records.any_incomplete()
    assert records.incomplete(["a.txt", "b.txt", "in.txt"]) == {"a.txt"}
    records.unmark("a.txt")
    assert records.incomplete(["a.txt"]) == set() and not records.any_incomplete()


@pytest.mark.parametrize("hooked", [True, False], ids=["hooked", "plain"])
def test_a_marker_dropped_before_snakemake_reads_them_spares_a_finished_file(plain: Run, flow, hooked: bool):
    """A run whose targets are files calls no input function of ours before Snakemake reads the
    incomplete markers: ``before_markers_are_read`` is the recovery's moment. Without it, the
    finished a.txt that a killed job left marked is built again (``--rerun-incomplete``)."""
    assert plain.done.returncode == 0
    flow = copy_of(plain, flow)
    (flow / "a.txt").write_text("finished")
    records = engine.Records.open(flow)
    records.persistence._mark_incomplete(engine._key(records.persistence, "a.txt"), None)
    assert records.incomplete(["a.txt"]) == {"a.txt"}
    args = ["--config", "recover=1"] if hooked else []
    done = snakemake(flow, "a.txt", "b.txt", "--cores", "1", "--rerun-incomplete", *args)
    assert done.returncode == 0, done.stderr[-3000:]
    rebuilt = (flow / "a.txt").read_text() != "finished"
    assert rebuilt is not hooked
    if hooked:
        assert observed(flow)["marked_when_called"] == ["a.txt"]


def test_a_stale_snakemake_lock_is_left_alone_when_the_workflow_skips_it(flow):
    flow = flow()
    locks = flow / ".snakemake" / "locks"
    locks.mkdir(parents=True)
    (locks / "0.output.lock").write_text(f"{flow / 'a.txt'}\na.txt\n")  # what a killed run leaves
    refused = snakemake(flow, "--cores", "1")
    assert refused.returncode != 0 and "cannot be locked" in refused.stderr + refused.stdout
    done = snakemake(flow, "--cores", "1", "--config", "nolock=1")
    assert done.returncode == 0, done.stderr[-3000:]


def test_stop_scheduling_starts_no_further_job(flow):
    flow = flow()
    done = snakemake(flow, "--cores", "1", "--config", "stop=1")
    assert observed(flow)["stopped"] is True
    assert (flow / "a.txt").exists() and not (flow / "b.txt").exists()
    assert done.returncode != 0


def test_set_console_level_hides_the_job_lines(plain: Run, flow):
    assert "rule a:" in plain.done.stderr
    quiet = snakemake(flow(), "--cores", "1", "--config", "quiet=1")
    assert quiet.returncode == 0 and "rule a:" not in quiet.stderr and "Finished jobid" not in quiet.stderr


def announced(output: str) -> list[str]:
    """The rules of the jobs Snakemake announced as it started them."""
    return re.findall(r"^(?:local)?rule (\w+):$", output, re.M)


def test_job_announcements_are_dropped_and_finished_jobs_and_errors_kept(plain: Run, flow):
    loud = plain.done
    assert loud.returncode == 0 and announced(loud.stderr) == ["a", "b", "c", "all"]
    flow = flow()
    failed = snakemake(flow, "--cores", "1", "--config", "unannounced=1", "fail=1")
    assert failed.returncode != 0 and announced(failed.stderr) == []
    assert "Error in rule a:" in failed.stderr  # what failed is still told, with its files
    assert observed(flow)["failed_jobs"] == ["a"]  # the jobs that failed, as the end of a run names them
    done = snakemake(flow, "--cores", "1", "--config", "unannounced=1")
    assert done.returncode == 0, done.stderr[-2000:]
    assert announced(done.stderr) == []
    assert sorted(re.findall(r"Finished jobid: \d+ \(Rule: (\w+)\)", done.stderr)) == ["a", "all", "b", "c"]
    # nor a line per selection, per batch started, or of progress after each job
    assert "steps (" in loud.stderr and "Select jobs to execute" in loud.stderr and "Execute 1 jobs" in loud.stderr
    assert not re.search(r"steps \(|Select jobs to execute|Execute \d+ jobs", done.stderr), done.stderr[-2000:]


def test_the_scheduler_timers_are_found_by_what_snakemake_arms_them_from():
    from snakemake.scheduling.job_scheduler import JobScheduler

    class Scheduler:
        _open_jobs = threading.Semaphore(0)

    JobScheduler._schedule_reevalutation(Scheduler(), 600)  # arms a Timer, as after every job selection
    ours = threading.Timer(600, lambda: None)
    ours.start()
    try:
        assert engine.cancel_scheduler_timers() == 1
        assert ours.is_alive()
    finally:
        ours.cancel()


def test_local_jobs_start_without_snakemakes_rate_limiter_and_its_timers(plain: Run, flow):
    throttled = plain.done  # --max-jobs-per-timespan 100/1s
    assert throttled.returncode == 0, throttled.stderr[-3000:]
    assert plain.seen["timers"] >= 1  # Snakemake's limiter arms one after each selection
    flow = flow()
    free = snakemake(flow, "--cores", "1", "--max-jobs-per-timespan", "100/1s", "--config", "unthrottled=1")
    assert free.returncode == 0, free.stderr[-3000:]
    assert observed(flow)["timers"] == 0


def test_signature_once_is_what_snakemake_reads_instead_of_inspecting():
    from snakemake.common import FUNC_OVERWRITE_PARAMS_ATTR, get_function_params

    def param(self, wildcards, threads):
        return 1

    engine.signature_once(param)
    stored = getattr(param, FUNC_OVERWRITE_PARAMS_ATTR)  # read on every call, in place of inspect.signature
    assert get_function_params(param) is stored and list(stored) == ["self", "wildcards", "threads"]


def test_the_jobs_a_run_plans_are_read_under_the_schedulers_lock(flow):
    """Snakemake adds a finished checkpoint's jobs to the DAG holding its scheduler's ``_lock``:
    a reader in another thread waits for it, so it never sees the DAG halfway through."""
    from snakemake.scheduling.job_scheduler import JobScheduler

    assert "with self._lock:" in inspect.getsource(JobScheduler.schedule)
    flow = flow()
    done = snakemake(flow, "--cores", "2", "--config", "held=1")
    assert done.returncode == 0, done.stderr[-3000:]
    seen = observed(flow)
    assert seen["waited_for_lock"] is True and seen["read_after_release"] is True


def test_wake_for_signals_replaces_the_semaphore_the_scheduler_waits_on(plain: Run, flow):
    from snakemake.scheduling.job_scheduler import JobScheduler

    assert "self._open_jobs.acquire()" in inspect.getsource(JobScheduler.schedule)  # its untimed wait
    assert plain.done.returncode == 0 and plain.seen["open_jobs"] == "Semaphore", plain.done.stderr[-3000:]
    flow = flow()
    woken = snakemake(flow, "--cores", "1", "--config", "wake=1")
    assert woken.returncode == 0 and observed(flow)["open_jobs"] == "_WakingSemaphore", woken.stderr[-3000:]


def test_set_console_level_debug_shows_snakemakes_debug_messages_on_the_console_only(plain: Run, flow):
    plain = plain.done
    assert plain.returncode == 0 and "agentcompass-debug-probe" not in plain.stderr, plain.stderr[-3000:]
    flow = flow()
    debug = snakemake(flow, "--cores", "1", "--config", "debug=1")
    assert debug.returncode == 0 and "agentcompass-debug-probe" in debug.stderr, debug.stderr[-3000:]
    newest = max((flow / ".snakemake" / "log").glob("*.snakemake.log"), key=lambda p: p.stat().st_mtime_ns)
    assert "Finished jobid" in newest.read_text() and "agentcompass-debug-probe" not in newest.read_text()


PERIODIC_SNAKEFILE = """
from agentcompass.pipeline import engine
if config.get("accept"):
    engine.accept_periodic_names(["make"])

rule all:
    input: "out/task-" + "0" * 25 + ".txt"

rule make:
    output: "out/{name}.txt"
    run:
        open(output[0], "w").write("x")
"""


def test_accept_periodic_names_lets_a_name_ending_in_a_repeated_run_build(workdir: Path):
    (workdir / "Snakefile").write_text(PERIODIC_SNAKEFILE)
    refused = snakemake(workdir, "--cores", "1")
    assert refused.returncode != 0 and "PeriodicWildcardError" in refused.stderr, refused.stderr[-3000:]
    done = snakemake(workdir, "--cores", "1", "--config", "accept=1")
    assert done.returncode == 0, done.stderr[-3000:]
    assert (workdir / "out" / ("task-" + "0" * 25 + ".txt")).exists()


# A Snakefile used as a module of another: Snakemake keeps only the main Snakefile's onstart/onsuccess/onerror.
INNER_SNAKEFILE = """
from pathlib import Path
from agentcompass.pipeline import engine

onstart:
    Path("own-onstart").write_text("ran")

rule all:
    input: "m.txt"

rule m:
    output: "m.txt"
    run:
        if config.get("fail"):
            raise RuntimeError("m failed")
        open(output[0], "w").write("m")

engine.run_handlers_as_module(workflow, lambda: Path("started").write_text("yes"),
                              lambda ok: Path("finished").write_text(str(ok)))
"""

MAIN_SNAKEFILE = """
module inner:
    snakefile: "inner.smk"
    config: config

use rule * from inner
"""


@pytest.mark.parametrize("fail", [False, True], ids=["ok", "failed"])
def test_run_handlers_as_module_gives_the_handlers_to_the_main_workflow(workdir: Path, fail: bool):
    (workdir / "inner.smk").write_text(INNER_SNAKEFILE)
    (workdir / "Snakefile").write_text(MAIN_SNAKEFILE)
    done = snakemake(workdir, "--cores", "1", *(["--config", "fail=1"] if fail else []))
    assert (done.returncode != 0) is fail, done.stderr[-3000:]
    assert not (workdir / "own-onstart").exists()  # what Snakemake does with a module's onstart
    assert (workdir / "started").read_text() == "yes"
    assert (workdir / "finished").read_text() == str(not fail)


def test_run_handlers_as_module_leaves_a_main_snakefile_alone(workdir: Path):
    (workdir / "Snakefile").write_text(INNER_SNAKEFILE)
    done = snakemake(workdir, "--cores", "1")
    assert done.returncode == 0, done.stderr[-3000:]
    assert (workdir / "own-onstart").read_text() == "ran"
    assert not (workdir / "started").exists() and not (workdir / "finished").exists()


# --- reading records as agentcompass status does: relative, absolute and long paths ---------------

LONG = "x" * 120 + "-" + "y" * 79  # a 200-byte path segment, as layout.task_segment may make one
PARAM = json.dumps({"stage": "1", "plan": "abc"}, sort_keys=True)

RECORDS_SNAKEFILE = """
import os, signal, time
from pathlib import Path

onstart:
    Path(".main-pid").write_text(str(os.getpid()))

rule all:
    input: "results/ns/run/request.json", "{outside}/ns/run/request.json", "results/ns/run/attempts/{long}/1/result.json"

rule write:
    output: "{{prefix}}/ns/run/{{name}}"
    wildcard_constraints: prefix="results|{outside}", name="request.json|attempts/.+"
    params: depends={param!r}
    run:
        Path(output[0]).write_text("done")

rule killed:
    output: "results/ns/run/killed.json"
    params: depends={param!r}
    run:
        Path(output[0]).write_text("half")
        # the run dies inside the job once Snakemake has marked it started (just after handing it to a
        # thread, which may run it first): Snakemake's marker stays
        deadline = time.monotonic() + 60
        while not any(p.is_file() for p in Path(".snakemake/incomplete").rglob("*")) and time.monotonic() < deadline:
            time.sleep(0.01)
        os.kill(int(Path(".main-pid").read_text()), signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGKILL)
"""


def run_records_flow(workdir: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SNAKEMAKE")}
    # its jobs threads of the run, as the shipped profile has them (a process each would start Snakemake again)
    cmd = [sys.executable, "-m", "snakemake", "--snakefile", str(workdir / "Snakefile"), "--directory", str(workdir),
           "--cores", "1", "--force-use-threads", *args]
    return subprocess.run(cmd, cwd=workdir, env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def records_flow(tmp_path_factory) -> tuple[Path, Path]:
    """A working folder where the workflow ran, and a results folder outside it."""
    root = tmp_path_factory.mktemp("engine")
    workdir, outside = root / "work", root / "outside-results"
    workdir.mkdir()
    (workdir / "Snakefile").write_text(RECORDS_SNAKEFILE.format(outside=outside, long=LONG, param=PARAM))
    done = run_records_flow(workdir)
    assert done.returncode == 0, done.stderr[-3000:]
    killed = run_records_flow(workdir, "results/ns/run/killed.json")
    assert killed.returncode != 0 and (workdir / "results/ns/run/killed.json").exists()
    return workdir, outside


def test_records_of_relative_absolute_and_long_paths(records_flow):
    workdir, outside = records_flow
    records = Records.open(workdir)
    paths = ["results/ns/run/request.json", f"{outside}/ns/run/request.json", f"results/ns/run/attempts/{LONG}/1/result.json"]
    assert len(f"{workdir}/{paths[2]}".encode()) > 255  # its key spans more than one file name
    for path in paths:
        record = records.record(path)
        assert record is not None, path
        assert record.rule == "write"
        assert record.params == records.params_of([PARAM])
        assert record.param_values() == [PARAM]
        assert records.params_of([PARAM + " "]) != record.params


def test_a_record_is_keyed_by_the_path_as_the_workflow_names_it(records_flow):
    workdir, _ = records_flow
    records = Records.open(workdir)
    assert records.record("./results/ns/run/request.json") is None
    assert records.record(f"{workdir}/results/ns/run/request.json") is None
    assert records.record("results/ns/run/missing.json") is None


def test_incomplete_markers_of_a_killed_job(records_flow):
    workdir, outside = records_flow
    records = Records.open(workdir)
    assert records.any_incomplete()
    killed = "results/ns/run/killed.json"
    finished = ["results/ns/run/request.json", f"{outside}/ns/run/request.json", f"results/ns/run/attempts/{LONG}/1/result.json"]
    assert records.incomplete([killed, *finished]) == {killed}


def test_a_folder_where_snakemake_never_ran_has_no_records(tmp_path):
    assert Records.open(tmp_path) is None


# The main thread waits on a semaphore while a signal lands on another thread (as the kernel does
# when the main thread already has one pending); the handler releases the semaphore. A plain
# semaphore is woken only by the fallback release after 8 s; ours within half a second of the
# signal (its wait wakes that often), which is sent 0.2 s in: at most 0.7 s.
SIGNAL_ELSEWHERE = """
import signal, sys, threading, time
from agentcompass.pipeline.engine import _WakingSemaphore

semaphore = threading.Semaphore(0)
if sys.argv[1] == "waking":
    semaphore.__class__ = _WakingSemaphore
signal.signal(signal.SIGUSR1, lambda signum, frame: semaphore.release())

def elsewhere():
    time.sleep(0.2)
    signal.pthread_kill(threading.get_ident(), signal.SIGUSR1)  # delivered to this thread, not the main one
    time.sleep(30)

threading.Thread(target=elsewhere, daemon=True).start()
fallback = threading.Timer(8, semaphore.release)
fallback.daemon = True
fallback.start()
started = time.monotonic()
semaphore.acquire()
print(time.monotonic() - started)
"""


@pytest.mark.parametrize("kind", ["waking", "plain"])
def test_a_signal_another_thread_receives_wakes_the_schedulers_wait(kind: str):
    done = subprocess.run([sys.executable, "-c", SIGNAL_ELSEWHERE, kind], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    waited = float(done.stdout)
    if kind == "waking":
        assert waited < 7  # at most 0.7 s on a quiet machine
    else:
        assert waited >= 7.5  # what Snakemake's own semaphore does: the stop waits for something else


def test_status_checks_of_cluster_jobs_wait_no_longer_than_the_setting(monkeypatch):
    import asyncio
    import inspect as inspect_module
    from types import SimpleNamespace

    from snakemake_executor_plugin_slurm import Executor as SlurmExecutor
    from snakemake_interface_executor_plugins.executors.remote import RemoteExecutor

    # what the plugin does: a back-off kept in next_seconds_between_status_checks, waited
    # out by the executor's sleep(), which the wait loop calls between two checks
    assert issubclass(SlurmExecutor, RemoteExecutor)
    assert "await self.sleep()" in inspect_module.getsource(RemoteExecutor._wait_for_jobs)
    assert "next_seconds_between_status_checks + 10" in inspect_module.getsource(SlurmExecutor.check_active_jobs)

    class Executor:  # the plugin's state after a few checks that found every job still running
        next_seconds_between_status_checks = 180

    executor = Executor()
    workflow = SimpleNamespace(non_local_exec=True, scheduler=SimpleNamespace(_executor=executor),
                               remote_execution_settings=SimpleNamespace(seconds_between_status_checks=5))
    assert engine.status_checks_at_most(workflow) == 5
    waits = []

    async def sleep(seconds):
        waits.append(seconds)

    monkeypatch.setattr(asyncio, "sleep", sleep)
    asyncio.run(executor.sleep())
    executor.next_seconds_between_status_checks = 1  # a shorter wait of the plugin's stays
    asyncio.run(executor.sleep())
    assert waits == [5, 1]

    local = SimpleNamespace(non_local_exec=False, scheduler=SimpleNamespace(_executor=Executor()),
                            remote_execution_settings=workflow.remote_execution_settings)
    assert engine.status_checks_at_most(local) is None and "sleep" not in vars(local.scheduler._executor)


def test_the_installed_snakemake_and_its_plugin_interfaces_are_the_pinned_versions():
    """The tests above check the versions pyproject.toml pins: run with others, they prove nothing."""
    import importlib.metadata
    import tomllib

    project = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())["project"]
    requirements = project["dependencies"] + project["optional-dependencies"]["slurm"]
    snakemake_ones = [text for text in requirements if text.startswith("snakemake")]
    pins = {}
    for text in snakemake_ones:
        match = re.fullmatch(r"([a-z0-9-]+)==([0-9][0-9.]*)", text)
        assert match, f"pyproject.toml: {text!r}: pin it to one version (name==X.Y.Z)"
        pins[match[1]] = match[2]
    assert set(pins) >= {"snakemake", "snakemake-interface-logger-plugins", "snakemake-interface-executor-plugins",
                         "snakemake-executor-plugin-slurm"}
    for name, version in pins.items():
        installed = importlib.metadata.version(name)
        assert installed == version, f"{name} {installed} is installed; pyproject.toml pins {version}"


# What a run's per-job bookkeeping is cut to: one record per output, no empty logs, resource
# signatures read once.
BOOKKEEPING_SNAKEFILE = """
import json
from pathlib import Path
from agentcompass.pipeline import engine
from agentcompass.pipeline.engine import Records

if config.get("cut"):
    engine.record_once()
    engine.leave_missing_logs_missing(["a"])

rule all:
    input: "a.txt", "b.txt"

rule a:
    output: "a.txt"
    log: "a.log"
    params: p="x"
    resources: widgets=lambda wildcards, attempt: 4 + attempt
    run:
        # recorded as a stage records its output, just before it appears
        Records.of(workflow).write_finished(workflow, "a", output[0], input, log, params)
        Path(output[0]).write_text(str(resources.widgets))

rule b:
    output: "b.txt"
    log: "b.log"
    run:
        Path(output[0]).write_text("b")

told = engine.resources_without_signatures(workflow) if config.get("cut") else 0
Path("told.json").write_text(json.dumps(told))
"""


@pytest.mark.parametrize("cut", [True, False], ids=["cut", "plain"])
def test_a_job_that_recorded_its_outputs_is_booked_without_a_second_record_or_an_empty_log(workdir: Path,
                                                                                           cut: bool):
    (workdir / "Snakefile").write_text(BOOKKEEPING_SNAKEFILE)
    done = snakemake(workdir, "--cores", "1", *(["--config", "cut=1"] if cut else []))
    assert done.returncode == 0, done.stderr[-3000:]
    records = engine.Records.open(workdir)
    a, b = (records.persistence.metadata(engine._iofile(p)) for p in ("a.txt", "b.txt"))
    # Snakemake's own record carries the job's hash; the job's record (written by write_finished) does not
    assert (a.job_hash is None) is cut and b.job_hash is not None
    assert tuple(a.params) == records.params_of(["x"]) and a.rule == "a"
    assert not records.incomplete(["a.txt", "b.txt"])
    # the log a job did not write: none for rule a once cut, Snakemake's empty one otherwise
    assert (workdir / "a.log").exists() is not cut and (workdir / "b.log").read_text() == ""
    # resources are evaluated as before, from signatures told once
    assert (workdir / "a.txt").read_text() == "5"
    assert json.loads((workdir / "told.json").read_text()) >= (1 if cut else 0)
    again = snakemake(workdir, "--cores", "1", "-n", *(["--config", "cut=1"] if cut else []))
    assert again.returncode == 0 and "Nothing to be done" in again.stdout + again.stderr, again.stderr[-3000:]


def test_resource_functions_are_told_their_parameters_once():
    from snakemake.common import get_function_params
    from snakemake.resources import Resource

    class Rule:
        resources = {"widgets": Resource("widgets", lambda wildcards, attempt: attempt)}

    class Workflow:
        rules = [Rule()]

    assert engine.resources_without_signatures(Workflow()) == 1
    assert list(get_function_params(Rule.resources["widgets"]._evaluator)) == ["wildcards", "attempt"]
    # the method every resource is evaluated through reads as its bound signature does
    assert list(get_function_params(Rule.resources["widgets"].evaluate)) == ["args", "kwargs"]
    assert engine.resources_without_signatures(Workflow()) == 0  # told already
