"""On a real SLURM cluster: an evaluation through ``--profile profiles/slurm``, unedited, builds
the same statuses and scores as a local run, in one cluster job per shard, under a per-endpoint
cap that holds across the cluster; killed halfway and run again, it runs only what was missing.

These tests submit jobs, so they use only a cluster named for them: they run when
AGENTCOMPASS_SLURM=1, for the cluster the SLURM client on PATH talks to, in the partition
AGENTCOMPASS_SLURM_PARTITION (default: the profile's). ``.ci/slurm-up.sh`` starts one on this
machine and writes both variables into its env file, which ``.ci/run`` sources. Without the
variable they are skipped, whatever cluster answers; with it and no usable cluster they fail.
The model is a ScriptedEndpoint on 127.0.0.1: the cluster's one node is this machine, so its
jobs reach it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from agentcompass.pipeline import provenance
from agentcompass.runtime.model_client import endpoint_resource
from agentcompass.testing.endpoint import Reply, ScriptedEndpoint, completion
from conftest import ROOT, SNAKEFILE, clean_env, jobs_run_with_shards, shard_logs, snakemake

PROFILE = ROOT / "profiles" / "slurm"
SETTINGS = yaml.safe_load((PROFILE / "config.yaml").read_text())
CHECK_DRIVER = Path(__file__).parent / "drivers" / "cluster_check.smk"
OPT_IN = "AGENTCOMPASS_SLURM"
PARTITION = os.environ.get("AGENTCOMPASS_SLURM_PARTITION") or SETTINGS["default-resources"]["slurm_partition"]
# example_exact_match has 5 tasks: 8 attempts each make 40, two shards (cluster jobs) of 20
ATTEMPTS, SHARD_SIZE = 8, 20
TOTAL = 5 * ATTEMPTS
ANSWERS = {"France": "Paris", "planet": "Jupiter", "Hamlet": "Marlowe"}  # Japan and water: no answer
# squeue reasons of a pending job that no node of its partition can ever run
NEVER_STARTS = {"PartitionConfig", "PartitionTimeLimit", "PartitionNodeLimit", "BadConstraints"}


def answer(body, delay: float) -> Reply:
    question = body["messages"][-1]["content"]
    text = next((a for key, a in ANSWERS.items() if key in question), "I do not know")
    return Reply(200, completion(text), delay=delay)


def cluster_problem() -> str | None:
    """Why the named cluster cannot run these tests, or None."""
    try:
        import snakemake_executor_plugin_slurm  # noqa: F401
    except ImportError:
        return "snakemake-executor-plugin-slurm is not installed (pip install 'agentcompass[slurm]')"
    if not shutil.which("sinfo") or not shutil.which("sbatch"):
        return "no SLURM client (sinfo, sbatch) is on PATH"
    try:
        states = subprocess.run(["sinfo", "-h", "-N", "-p", PARTITION, "-o", "%T"],
                                capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        return "sinfo did not answer in 30 s"
    # a node busy with another test's jobs (allocated, mixed, completing) is up: jobs queue for it
    up = ("idle", "mixed", "allocated", "completing")
    if states.returncode != 0 or not any(s.strip() in up for s in states.stdout.splitlines()):
        found = states.stdout.strip() or states.stderr.strip() or "no nodes"
        return f"partition {PARTITION!r} has no node up to run jobs (sinfo: {found!r})"
    return None


@pytest.fixture(scope="module")
def cluster():
    if os.environ.get(OPT_IN) != "1":
        pytest.skip(f"these tests submit SLURM jobs, so they run only on a cluster named for them: set {OPT_IN}=1 "
                    f"(.ci/run does, for the cluster it starts with .ci/slurm-up.sh)")
    why = cluster_problem()
    if why is not None:
        pytest.fail(f"{OPT_IN}=1 names the SLURM cluster on PATH for these tests, but {why}. Start one with "
                    f"`.ci/slurm-up.sh DIR && source DIR/env`, or unset {OPT_IN} to skip these tests.")


def node_cpus() -> int:
    """CPUs of the partition's largest node."""
    out = subprocess.run(["sinfo", "-h", "-N", "-p", PARTITION, "-o", "%c"], capture_output=True, text=True).stdout
    return max(int(c.rstrip("+")) for c in out.split())


def partition_args() -> list[str]:
    """Nothing for the profile's own partition. For another (AGENTCOMPASS_SLURM_PARTITION),
    the profile's default resources with that partition: the option replaces them all."""
    defaults = dict(SETTINGS["default-resources"])
    if defaults["slurm_partition"] == PARTITION:
        return []
    defaults["slurm_partition"] = PARTITION
    return ["--default-resources", *[f"{k}='{v}'" if isinstance(v, str) else f"{k}={v}" for k, v in defaults.items()]]


def write_config(workdir: Path, base_url: str, attempts: int = ATTEMPTS) -> Path:
    path = workdir / "eval.yaml"
    path.write_text(yaml.safe_dump({
        "requests": {"big": {
            "benchmark": "example_exact_match",
            "harness": {"id": "chat", "params": {"retry_backoff": 0}},
            "model": {"id": "scripted", "base_url": base_url},
            "execution": {"attempts": attempts},
        }},
        "runtime": {"shard_size": SHARD_SIZE},
    }))
    return path


def slurm_argv(workdir: Path, config: Path, *extra: str, snakefile: Path = SNAKEFILE) -> list[str]:
    """The guide's command (docs/slurm.md): the workflow through the profile, as shipped."""
    argv = [sys.executable, "-m", "snakemake", "--snakefile", str(snakefile), "--directory", str(workdir)]
    if config:
        argv += ["--configfile", str(config)]
    return [*argv, "--profile", str(PROFILE), *partition_args(), *extra]


def never_starting(jobs: list[str]) -> str | None:
    """One of ``jobs`` that SLURM keeps pending for ever, as a sentence, or None."""
    if not jobs:
        return None
    out = subprocess.run(["squeue", "-h", "-j", ",".join(jobs), "-t", "PENDING", "-o", "%i %r"],
                         capture_output=True, text=True).stdout
    for line in out.splitlines():
        job, _, reason = line.strip().partition(" ")
        if reason in NEVER_STARTS:
            return f"SLURM job {job} can never start (squeue: pending, {reason})"
    return None


def watch(run: subprocess.Popen, log: Path, timeout: float, until=lambda: False) -> None:
    """Wait for the driver to exit (or ``until()``); fail at once, not at the timeout, when it
    submitted a job that no node can run: it would wait for that job for ever."""
    deadline = time.monotonic() + timeout
    while run.poll() is None and not until():
        stuck = never_starting(slurm_job_ids(log.read_text()))
        assert stuck is None, f"{stuck}, and the driver waits for it. Its log ends:\n{log.read_text()[-3000:]}"
        assert time.monotonic() < deadline, f"the driver did not finish in {timeout} s:\n{log.read_text()[-3000:]}"
        time.sleep(0.5)


def stop(run: subprocess.Popen, log: Path) -> list[str]:
    """A driver killed outright, as by a lost login node: its jobs cancelled by hand, then
    Snakemake SIGKILLed (on SIGTERM it would wait for its running jobs to end). Returns the
    cancelled jobs, once SLURM has ended them."""
    jobs = slurm_job_ids(log.read_text())
    if jobs:
        subprocess.run(["scancel", *jobs], check=False)
    if run.poll() is None:
        os.killpg(run.pid, signal.SIGKILL)
    run.wait()
    deadline = time.monotonic() + 60
    while jobs and subprocess.run(["squeue", "-h", "-j", ",".join(jobs), "-t", "PENDING,RUNNING,COMPLETING"],
                                  capture_output=True, text=True).stdout.strip():
        assert time.monotonic() < deadline, f"the cancelled jobs {jobs} were still running after 60 s"
        time.sleep(0.5)
    return jobs


def start_driver(argv: list[str], workdir: Path, name: str) -> tuple[subprocess.Popen, Path]:
    """Start a driver (the outer Snakemake) with its output in ``workdir/name``."""
    log = workdir / name
    with open(log, "w") as out:
        run = subprocess.Popen(argv, cwd=workdir, env=clean_env(), stdout=out, stderr=subprocess.STDOUT,
                               start_new_session=True)
    return run, log


def run_driver(argv: list[str], workdir: Path, name: str, timeout: float = 600) -> SimpleNamespace:
    """Run a driver (the outer Snakemake) to its end, its output in ``workdir/name``."""
    run, log = start_driver(argv, workdir, name)
    try:
        watch(run, log, timeout)
    finally:
        if run.poll() is None:
            stop(run, log)
    return SimpleNamespace(returncode=run.returncode, output=log.read_text())


def job_cpus(job: str) -> int:
    """The CPUs SLURM gave a job (squeue keeps a finished job MinJobAge seconds)."""
    shown = subprocess.run(["scontrol", "-o", "show", "job", job], capture_output=True, text=True).stdout
    return int(re.search(r"\bNumCPUs=(\d+)", shown).group(1))


def results(workdir: Path) -> dict[str, dict]:
    base = workdir / "results/default/big/attempts"
    return {f"{p.parent.parent.name}/{p.parent.name}": json.loads(p.read_text())
            for p in sorted(base.glob("*/*/result.json"))}


def scored(workdir: Path) -> dict[str, tuple]:
    return {k: (r["status"], r["answer"], r["score"], r["correct"]) for k, r in results(workdir).items()}


def slurm_job_ids(output: str) -> list[str]:
    """The SLURM jobs the outer Snakemake submitted, from its log."""
    return re.findall(r"has been submitted with SLURM jobid (\d+)", output)


def shard_records(workdir: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(workdir.glob("results/default/big/shards/*/shard.json"))]


def local_run(workdir: Path) -> dict[str, tuple]:
    """The same evaluation built on this machine, without the cluster."""
    workdir.mkdir()
    with ScriptedEndpoint(lambda body: answer(body, 0)) as endpoint:
        done = snakemake(workdir, "--configfile", str(write_config(workdir, endpoint.base_url)))
    assert done.returncode == 0, done.stderr[-3000:]
    assert len(endpoint.requests) == TOTAL
    local = scored(workdir)
    assert len(local) == TOTAL
    assert {s for s, *_ in local.values()} == {"completed"} and {c for *_, c in local.values()} == {True, False}
    for r in results(workdir).values():
        assert r["provenance"]["slurm_job_id"] is None and r["provenance"]["host"]
    return local


@pytest.mark.slow(reason="the same evaluation twice, local and on SLURM, each attempt one job on a 2-CPU cluster")
def test_an_evaluation_on_slurm_equals_the_local_one_in_one_job_per_shard(cluster, tmp_path: Path):
    local = local_run(tmp_path / "local")

    work = tmp_path / "slurm"
    work.mkdir()
    started = time.monotonic()
    with ScriptedEndpoint(lambda body: answer(body, 0.2)) as endpoint:
        cap = f"{endpoint_resource(endpoint.base_url)}=2"
        done = run_driver(slurm_argv(work, write_config(work, endpoint.base_url), "--resources", cap), work, "run.log")
    seconds = time.monotonic() - started
    assert done.returncode == 0, done.output[-4000:]
    print(f"SLURM run of {TOTAL} attempts: {seconds:.1f} s, SLURM jobs {slurm_job_ids(done.output)}")

    # one cluster job per shard of 20 attempts, and every model call from one of them
    submitted = slurm_job_ids(done.output)
    records = shard_records(work)
    assert len(submitted) == 2 == len(records) and [r["attempts"] for r in records] == [20, 20]
    assert sorted(r["slurm_job_id"] for r in records) == sorted(submitted)
    assert len(endpoint.requests) == TOTAL
    # each shard job asked the profile's CPUs, fewer than the node has: it started at once
    asked = SETTINGS["set-resources"]["shard"]["cpus_per_task"]
    assert [job_cpus(j) for j in submitted] == [asked, asked] and asked < node_cpus()
    # the cap of 2 held across the cluster, for shards of the profile's 4 threads on one CPU each
    assert endpoint.max_in_flight == 2

    # the same statuses and scores as the local run; each result names its host and SLURM job
    assert scored(work) == local
    by_shard = {r["shard"]: r["slurm_job_id"] for r in records}
    for key, r in results(work).items():
        assert r["provenance"]["host"] == records[0]["host"]
        assert r["provenance"]["slurm_job_id"] in by_shard.values()
    order = [t["task_id"] for t in json.loads((work / "results/default/big/tasks.json").read_text())["tasks"]]
    first_of_shard_1 = f"{order[SHARD_SIZE // ATTEMPTS]}/{SHARD_SIZE % ATTEMPTS + 1}"
    assert results(work)[first_of_shard_1]["provenance"]["slurm_job_id"] == by_shard[1]
    metrics = [json.loads((d / "results/default/big/metrics.json").read_text()) for d in (tmp_path / "local", work)]
    assert metrics[0]["metrics"] == metrics[1]["metrics"] and metrics[0]["counts"] == metrics[1]["counts"]


def test_a_slurm_run_killed_halfway_reruns_only_the_missing_attempts(cluster, tmp_path: Path):
    local = local_run(tmp_path / "local")

    work = tmp_path / "slurm"
    work.mkdir()
    with ScriptedEndpoint(lambda body: answer(body, 1.0)) as endpoint:
        config = write_config(work, endpoint.base_url)
        run, out = start_driver(slurm_argv(work, config), work, "first.log")
        try:
            watch(run, out, 300, until=lambda: len(results(work)) >= 6)
            assert run.poll() is None, f"the run ended before it was killed:\n{out.read_text()[-4000:]}"
        finally:
            jobs = stop(run, out)
        assert jobs, out.read_text()[-4000:]
        calls_before = len(endpoint.requests)

        done_before = {k: (work / "results/default/big/attempts" / k / "result.json").stat().st_mtime_ns
                       for k in results(work)}
        missing = TOTAL - len(done_before)
        assert 0 < missing < TOTAL, f"{len(done_before)} of {TOTAL} attempts had finished when the run was killed"

        # the same command again, with no flag: the killed driver's lock died with it
        logs = shard_logs(work)
        again = run_driver(slurm_argv(work, config), work, "again.log")
        assert again.returncode == 0, again.output[-4000:]
        calls = len(endpoint.requests) - calls_before

    ran = jobs_run_with_shards(work, again.output, logs)
    print(f"killed with {len(done_before)} of {TOTAL} attempts finished (SLURM jobs {jobs}); "
          f"the rerun ran {ran} in SLURM jobs {slurm_job_ids(again.output)}, {calls} model calls")
    # only the missing attempts were evaluated; a model was called once for each attempt run again
    assert ran.get("evaluate", 0) == missing, ran
    assert calls == ran.get("run", 0) <= missing
    # the finished attempts were not touched
    for key, stamp in done_before.items():
        assert (work / "results/default/big/attempts" / key / "result.json").stat().st_mtime_ns == stamp, key
    assert scored(work) == local and len(shard_records(work)) == 2
    # each attempt names the job that ran it: a job of the first run, or of the rerun
    rerun_jobs = set(slurm_job_ids(again.output))
    assert rerun_jobs and not rerun_jobs & set(jobs)
    for key, r in results(work).items():
        assert r["provenance"]["slurm_job_id"] in (set(jobs) if key in done_before else set(jobs) | rerun_jobs)


def test_two_slurm_jobs_share_one_call_cache_and_a_third_run_pays_nothing(cluster, tmp_path: Path):
    """Two requests of the same calls, each attempt one shard job on the cluster, two at a time, write the
    same entries of the call cache in the results folder: every entry is whole, and a third request of the
    same calls, built locally, is answered from them without one call to the endpoint."""
    from agentcompass import callcache

    work = tmp_path / "slurm"
    work.mkdir()
    request = {"benchmark": {"id": "example_exact_match", "params": {"limit": 2}},
               "harness": {"id": "chat", "params": {"retry_backoff": 0}},
               "execution": {"cache": "on"}}
    config = work / "eval.yaml"
    with ScriptedEndpoint(lambda body: answer(body, 0.5)) as endpoint:
        model = {"id": "scripted", "base_url": endpoint.base_url}
        config.write_text(yaml.safe_dump({"requests": {name: {**request, "model": model} for name in ("a", "b")},
                                          "runtime": {"shard_size": 1}}))
        done = run_driver(slurm_argv(work, config), work, "run.log")
        assert done.returncode == 0, done.output[-4000:]
        paid = len(endpoint.requests)
        # a third request of the same calls, built on this machine: the entries the cluster's jobs wrote answer it
        config.write_text(yaml.safe_dump({"requests": {"c": {**request, "model": model}}}))
        again = snakemake(work, "--configfile", str(config))
        assert again.returncode == 0, again.stderr[-4000:]
        third = len(endpoint.requests) - paid

    jobs = {json.loads(p.read_text())["slurm_job_id"] for p in work.glob("results/default/[ab]/shards/*/shard.json")}
    assert len(jobs) == 4  # one shard job per attempt of each request
    # both requests made the same two calls: each was paid once or twice (two jobs at once may both miss)
    assert 2 <= paid <= 4
    store = callcache.CallStore(work / "results" / callcache.CACHE_FOLDER)
    entries = list(store.entries())
    assert len(entries) == 2 and not list(store.root.glob("*/.*.tmp"))
    for path, _, _ in entries:
        assert json.loads(path.read_text())["key"] == path.stem
    # the third request: its calls answered from the cache, its scores the first two's
    assert third == 0
    for task in ("capital-france", "capital-japan"):
        results_of = [json.loads((work / f"results/default/{r}/attempts/{task}/1/result.json").read_text())
                      for r in "abc"]
        assert len({(r["answer"], r["score"]) for r in results_of}) == 1
        assert results_of[2]["usage"]["cached_calls"] == 1 and results_of[2]["usage"]["calls"] == 0


def test_scans_run_in_the_shard_jobs_and_a_new_scanner_reruns_only_the_scans_on_the_cluster(cluster, tmp_path: Path):
    """The scan stage on SLURM, as locally: each attempt's scan.json is built in its shard's cluster job, and
    a scanner added to the finished run reruns only the scans, in new jobs, with no call to the model."""
    work = tmp_path / "slurm"
    work.mkdir()
    config = work / "eval.yaml"

    def write(*scanners: str) -> None:
        config.write_text(yaml.safe_dump({"requests": {"scanned": {
            "benchmark": {"id": "example_exact_match", "params": {"limit": 2}},
            "harness": {"id": "chat", "params": {"retry_backoff": 0}},
            "model": {"id": "scripted", "base_url": endpoint.base_url}, "scanners": list(scanners)}},
            "runtime": {"shard_size": 1}}))

    def findings() -> dict[str, list[str]]:
        return {p.parent.parent.name: [f["id"] for f in json.loads(p.read_text())["scanners"]]
                for p in work.glob("results/default/scanned/attempts/*/1/scan.json")}

    with ScriptedEndpoint(lambda body: answer(body, 0.0)) as endpoint:
        write("gave_up")
        done = run_driver(slurm_argv(work, config), work, "run.log")
        assert done.returncode == 0, done.output[-4000:]
        first_jobs = set(slurm_job_ids(done.output))
        assert len(first_jobs) == 2  # one cluster job per shard (an attempt each)
        assert findings() == {"capital-france": ["gave_up"], "capital-japan": ["gave_up"]}
        called = len(endpoint.requests)
        before = shard_logs(work)
        write("gave_up", "network")
        again = run_driver(slurm_argv(work, config), work, "again.log")
        assert again.returncode == 0, again.output[-4000:]
        assert len(endpoint.requests) == called  # no attempt ran again
    ran = jobs_run_with_shards(work, again.output, before)
    assert ran.get("scan") == 2 and not any(ran.get(name) for name in ("prepare", "run", "evaluate")), ran
    again_jobs = set(slurm_job_ids(again.output))
    assert len(again_jobs) == 2 and not again_jobs & first_jobs
    assert findings() == {"capital-france": ["gave_up", "network"], "capital-japan": ["gave_up", "network"]}


def preflight_config(workdir: Path, tasks: Path, base_url: str) -> Path:
    """Three task folders, two of them broken, behind an oracle preflight, two attempts each."""
    path = workdir / "eval.yaml"
    path.write_text(yaml.safe_dump({
        "requests": {"big": {
            "benchmark": {"id": "task_dir", "params": {"path": str(tasks)}},
            "harness": "tool_agent",
            "model": {"id": "scripted", "base_url": base_url},
            "environment": {"id": "host_process", "run_network": {"mode": "public"}},
            "execution": {"attempts": 2, "preflight": "oracle"},
        }},
        "runtime": {"shard_size": SHARD_SIZE},
    }))
    return path


def test_preflight_on_slurm_quarantines_the_broken_tasks_as_a_local_run_does(cluster, tmp_path: Path):
    from test_preflight import model, task

    tasks = tmp_path / "tasks"
    task(tasks, "healthy")
    task(tasks, "verifier-crash", test="#!/bin/sh\necho 'the verifier fell over' >&2\nexit 3\n")
    task(tasks, "wrong-solution", solve="#!/bin/sh\necho 'Hello, world' > /app/hello.txt\n")
    runs = {}
    for where in ("local", "slurm"):
        work = tmp_path / where
        work.mkdir()
        with ScriptedEndpoint(model) as endpoint:
            config = preflight_config(work, tasks, endpoint.base_url)
            if where == "local":
                done = snakemake(work, "--configfile", str(config))
                assert done.returncode == 0, done.stderr[-4000:]
            else:
                done = run_driver(slurm_argv(work, config), work, "run.log")
                assert done.returncode == 0, done.output[-4000:]
                # each task's preflight was a cluster job of its own, before the shard's job
                assert len(slurm_job_ids(done.output)) == 3 + 1, done.output[-4000:]
            calls = len(endpoint.requests)
        metrics = json.loads((work / "results/default/big/metrics.json").read_text())
        runs[where] = (scored(work), calls, metrics["scored_on"], metrics["metrics"])
    local, slurm = runs["local"], runs["slurm"]
    assert local[1] == 4  # the healthy task's two attempts, two steps each: no broken task called the model
    assert local[2]["scored"] == 1 and sorted(q["task_id"] for q in local[2]["quarantined"]) == [
        "verifier-crash", "wrong-solution"]
    assert {k: v[0] for k, v in local[0].items()} == {
        "healthy/1": "completed", "healthy/2": "completed", "verifier-crash/1": "skipped",
        "verifier-crash/2": "skipped", "wrong-solution/1": "skipped", "wrong-solution/2": "skipped"}
    assert slurm == local


def test_a_slurm_driver_stopped_with_sigterm_cancels_its_jobs_and_the_next_run_continues(cluster, tmp_path: Path):
    work = tmp_path / "slurm"
    work.mkdir()
    with ScriptedEndpoint(lambda body: answer(body, 1.0)) as endpoint:
        config = write_config(work, endpoint.base_url)
        run, log = start_driver(slurm_argv(work, config), work, "first.log")
        try:
            watch(run, log, 300, until=lambda: len(results(work)) >= 2)
            assert run.poll() is None, f"the run ended before it was stopped:\n{log.read_text()[-4000:]}"
            jobs = slurm_job_ids(log.read_text())
            run.send_signal(signal.SIGTERM)
            run.wait(timeout=120)  # it does not wait for its cluster jobs to end: it cancels them
        finally:
            if run.poll() is None:
                stop(run, log)
        output = log.read_text()
        assert run.returncode != 0 and "stopping because it received SIGTERM" in output, output[-4000:]
        deadline = time.monotonic() + 60
        while subprocess.run(["squeue", "-h", "-j", ",".join(jobs), "-t", "PENDING,RUNNING"],
                             capture_output=True, text=True).stdout.strip():
            assert time.monotonic() < deadline, f"the jobs {jobs} of the stopped driver still run"
            time.sleep(0.5)
        done_before = len(results(work))
        assert done_before < TOTAL
        again = run_driver(slurm_argv(work, config), work, "again.log")  # the same command, no flag
        assert again.returncode == 0, again.output[-4000:]
    assert len(results(work)) == TOTAL
    print(f"SIGTERM stopped the driver with {done_before} of {TOTAL} attempts done and cancelled SLURM jobs {jobs}")


# --- a shard job no node can run ------------------------------------------------------


def test_a_shard_job_no_node_can_run_stops_the_driver_before_it_is_submitted(cluster, tmp_path: Path):
    """agentcompass.pipeline.cluster.check_shard_job, called as the shard rule should call it."""
    too_many = node_cpus() + 1
    work = tmp_path / "too-big"
    work.mkdir()
    started = time.monotonic()
    # set-resources on the command line replaces the profile's: cpus_per_task is the only key there
    stopped = run_driver(slurm_argv(work, None, "--set-resources", f"shard:cpus_per_task={too_many}",
                                    snakefile=CHECK_DRIVER), work, "run.log", timeout=120)
    seconds = time.monotonic() - started
    assert stopped.returncode != 0, stopped.output[-3000:]
    assert not slurm_job_ids(stopped.output), "the job was submitted:\n" + stopped.output[-3000:]
    message = " ".join(stopped.output.split())
    assert (f"asks SLURM for {too_many} CPUs (set-resources: shard: cpus_per_task in your SLURM profile)" in message
            and f"no node of partition {PARTITION!r} has more than {too_many - 1}" in message), stopped.output[-3000:]

    # the profile as shipped fits the same node: the check lets its job through, and it runs
    work = tmp_path / "shipped"
    work.mkdir()
    ran = run_driver(slurm_argv(work, None, snakefile=CHECK_DRIVER), work, "run.log", timeout=300)
    assert ran.returncode == 0 and len(slurm_job_ids(ran.output)) == 1, ran.output[-3000:]
    assert (work / "done/0.txt").read_text() == "ran\n"
    print(f"stopped in {seconds:.1f} s before submitting a job of {too_many} CPUs")


def test_the_workflow_stops_before_submitting_a_shard_job_no_node_can_run(cluster, tmp_path: Path):
    too_many = node_cpus() + 1
    with ScriptedEndpoint(lambda body: answer(body, 0)) as endpoint:
        config = write_config(tmp_path, endpoint.base_url, attempts=1)
        stopped = run_driver(slurm_argv(tmp_path, config, "--set-resources", f"shard:cpus_per_task={too_many}"),
                             tmp_path, "run.log", timeout=300)
    assert stopped.returncode != 0 and not slurm_job_ids(stopped.output), stopped.output[-3000:]
    assert "cpus_per_task" in stopped.output and not endpoint.requests


# --- threads: attempts at once, not CPUs ------------------------------------------------


def test_a_shard_runs_its_threads_at_once_on_the_cpus_its_job_asks(cluster, tmp_path: Path):
    threads = SETTINGS["set-threads"]["shard"]
    cpus = SETTINGS["set-resources"]["shard"]["cpus_per_task"]
    # 4 attempts of 5 tasks: one shard
    with ScriptedEndpoint(lambda body: answer(body, 1.0)) as endpoint:
        config = write_config(tmp_path, endpoint.base_url, attempts=4)
        done = run_driver(slurm_argv(tmp_path, config), tmp_path, "run.log")
    assert done.returncode == 0 and len(shard_records(tmp_path)) == 1, done.output[-3000:]
    assert endpoint.max_in_flight == threads, (
        f"the shard made at most {endpoint.max_in_flight} model calls at once, not the {threads} of its "
        f"threads (set-threads: shard), on the {cpus} CPU its job asked (set-resources: shard: cpus_per_task)")


def test_the_endpoint_cap_holds_for_a_shard_with_more_threads_than_the_cap(cluster, tmp_path: Path):
    # two CPUs give the job 2 of the profile's 4 threads today, and all 4 once threads are not cut
    if node_cpus() < 2:
        pytest.fail(f"this test needs a node of 2 CPUs in partition {PARTITION!r}")
    with ScriptedEndpoint(lambda body: answer(body, 0.5)) as endpoint:
        config = write_config(tmp_path, endpoint.base_url, attempts=4)  # one shard
        cap = f"{endpoint_resource(endpoint.base_url)}=1"
        done = run_driver(slurm_argv(tmp_path, config, "--set-resources", "shard:cpus_per_task=2",
                                     "--resources", cap), tmp_path, "run.log")
    assert done.returncode == 0 and len(shard_records(tmp_path)) == 1, done.output[-3000:]
    assert endpoint.max_in_flight == 1, f"{endpoint.max_in_flight} model calls at once under a cap of 1"


# --- the SLURM job id lookup, without a cluster -------------------------------------


def fake_proc(root: Path, processes: dict[int, tuple[int, dict[str, str]]]) -> Path:
    """A /proc of ``pid -> (parent pid, initial environment)``."""
    for pid, (parent, env) in processes.items():
        folder = root / str(pid)
        folder.mkdir(parents=True)
        (folder / "stat").write_text(f"{pid} (python3 -m (x)) S {parent} {pid} 0 0 -1\n")
        (folder / "environ").write_bytes(b"".join(f"{k}={v}".encode() + b"\0" for k, v in env.items()))
    return root


def test_the_slurm_job_id_is_found_in_the_environment_or_an_ancestors(tmp_path: Path):
    proc = fake_proc(tmp_path / "proc", {
        40: (30, {"PATH": "/bin"}),                       # this process: the plugin removed SLURM_*
        30: (20, {"SLURM_CPUS_ON_NODE": "2"}),
        20: (1, {"SLURM_JOB_ID": "1234", "HOME": "/root"}),  # the batch script's shell
        1: (0, {"SLURM_JOB_ID": "never-init"}),
    })
    assert provenance.find_slurm_job_id({}, pid=40, proc=proc) == "1234"
    assert provenance.find_slurm_job_id({"SLURM_JOB_ID": "77"}, pid=40, proc=proc) == "77"
    assert provenance.find_slurm_job_id({"SLURM_JOBID": "78"}, pid=40, proc=proc) == "78"
    # a shard hands its job to its inner run: that wins
    assert provenance.find_slurm_job_id({provenance.JOB_ID_ENV: "9", "SLURM_JOB_ID": "77"}, pid=40, proc=proc) == "9"


def test_outside_slurm_there_is_no_job_id(tmp_path: Path):
    proc = fake_proc(tmp_path / "proc", {40: (30, {}), 30: (1, {"PATH": "/bin"}), 1: (0, {"SLURM_JOB_ID": "init"})})
    assert provenance.find_slurm_job_id({}, pid=40, proc=proc) is None
    assert provenance.find_slurm_job_id({}, pid=99, proc=proc) is None  # a process gone meanwhile
    loop = fake_proc(tmp_path / "loop", {5: (6, {}), 6: (5, {})})
    assert provenance.find_slurm_job_id({}, pid=5, proc=loop) is None


def test_task_folders_with_a_dockerfile_run_on_slurm_through_rootless_podman_as_locally(cluster, needs_podman,
                                                                                       tmp_path: Path):
    """A cluster node with no Docker daemon: the docker environment on rootless Podman's API socket
    builds each shipped task folder's Dockerfile (FROM local/busybox:latest, nothing pulled), in a
    cluster job, with the same verdicts as the same run on this machine."""
    from environments.envkit import docker_engine

    from agentcompass.benchmarks.task_dir import SHIPPED_TASKS

    if docker_engine() != "podman-rootless":
        pytest.skip(f"DOCKER_HOST names {docker_engine()}, not rootless Podman: .ci/run runs this test with "
                    "DOCKER_HOST at the rootless Podman that .ci/podman-up.sh --rootless starts")
    shipped = sorted(p.name for p in SHIPPED_TASKS.iterdir() if (p / "task.toml").is_file())

    def write(workdir: Path) -> Path:
        path = workdir / "tasks.yaml"
        path.write_text(yaml.safe_dump({
            "requests": {"big": {
                "benchmark": {"id": "task_dir"}, "harness": "oracle", "model": {"id": "none"},
                "environment": {"id": "docker"},
            }},
            "runtime": {"shard_size": SHARD_SIZE},
        }))
        return path

    def verdicts(workdir: Path) -> dict[str, tuple]:
        return {k.split("/")[0]: (r["status"], r["score"], r["correct"], r["error"]) for k, r in results(workdir).items()}

    local = tmp_path / "local"
    local.mkdir()
    done = snakemake(local, "--configfile", str(write(local)))
    assert done.returncode == 0, done.stderr[-3000:]
    assert verdicts(local) == {task: ("completed", 1.0, True, None) for task in shipped}

    work = tmp_path / "slurm"
    work.mkdir()
    started = time.monotonic()
    done = run_driver(slurm_argv(work, write(work)), work, "run.log")
    assert done.returncode == 0, done.output[-4000:]
    submitted = slurm_job_ids(done.output)
    print(f"SLURM run of {len(shipped)} task folders on rootless Podman: {time.monotonic() - started:.1f} s, "
          f"SLURM jobs {submitted}")
    assert verdicts(work) == verdicts(local)
    records = shard_records(work)
    assert len(records) == 1 and submitted == [records[0]["slurm_job_id"]]
    for r in results(work).values():
        assert r["provenance"]["slurm_job_id"] == records[0]["slurm_job_id"]
    # the task images were built on the rootless engine, and no container of the runs is left on it
    # (theirs: labelled with their run id; other tests' sessions may be open on the engine meanwhile)
    import docker

    client = docker.from_env()
    try:
        left = [c.name for c in client.containers.list(all=True, filters={"label": "agentcompass=1"}, ignore_removed=True)
                if c.labels.get("agentcompass.label", "").startswith("big-")]
    finally:
        client.close()
    assert left == []


def test_two_slurm_jobs_draw_from_one_budget(cluster, tmp_path: Path):
    """Six attempts in two shard jobs on the cluster under a budget of two and a half calls, two attempt jobs at
    once (the first shard's, then the second's): both jobs draw from the one ledger in the run folder, so the
    second job, seeing what the first paid, starts no attempt; together they pass the budget by at most what
    the attempts in flight could pay (one call each: $0.002)."""
    from agentcompass import spend
    from test_spend import CALL_USD, PRICING, Words

    work = tmp_path / "slurm"
    work.mkdir()
    words = Words()
    budget = 0.005
    with ScriptedEndpoint(lambda body: Reply(200, words(body), delay=0.5)) as endpoint:
        config = work / "eval.yaml"
        config.write_text(yaml.safe_dump({
            "requests": {"r": {"benchmark": {"id": "synthetic", "params": {"num_tasks": 6}},
                               "harness": {"id": "chat", "params": {"retry_backoff": 0}},
                               "model": {"id": "scripted", "base_url": endpoint.base_url, "pricing": PRICING},
                               "execution": {"budget": {"cost_usd": budget}, "task_concurrency": 2}}},
            "runtime": {"shard_size": 3}}))
        done = run_driver(slurm_argv(work, config), work, "run.log")
    assert done.returncode != 0, done.output[-4000:]
    run = work / "results/default/r"
    outputs = [json.loads(p.read_text()) for p in run.glob("attempts/*/1/output.json")]
    ledger = spend.request_ledger(run).read()
    paid = sum(words.calls.values())
    assert ledger.calls == paid and ledger.cost_usd == pytest.approx(paid * CALL_USD)
    assert budget <= ledger.cost_usd <= budget + 2 * CALL_USD, ledger
    assert len(outputs) == paid < 6  # the rest wait, missing: none failed
    assert all(o["status"] == "completed" for o in outputs)
    # the second shard's cluster job read the ledger the first one's charged, and started nothing
    started = {o["provenance"]["slurm_job_id"] for o in outputs}
    assert len(started) == 1 and started != {None}
    unbuilt = [p for p in run.glob("shards/*/") if not (p / "shard.json").exists()]
    assert len(unbuilt) == 1 and len(list(run.glob("shards/*/shard.json"))) == 1
    second = (unbuilt[0] / "shard.log").read_text()
    assert "budget of request 'r' (execution.budget.cost_usd: $0.0050) is spent" in second
