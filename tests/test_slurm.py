"""On a real SLURM cluster: an evaluation through ``--profile profiles/slurm`` builds the same
statuses and scores as a local run, in one cluster job per shard, under a per-endpoint cap
that holds across the cluster; killed halfway and run again, it runs only what was missing.

The cluster is the one ``.ci/slurm-up.sh`` starts on this machine (``.ci/run`` does, and sets
AGENTCOMPASS_SLURM=1, which makes these tests required). The model is a ScriptedEndpoint on
127.0.0.1: the cluster's one node is this machine, so its jobs reach it.
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

import pytest
import yaml

from agentcompass.pipeline import provenance
from agentcompass.runtime.model_client import endpoint_resource
from agentcompass.testing.endpoint import Reply, ScriptedEndpoint, completion
from conftest import ROOT, SNAKEFILE, clean_env, jobs_run_with_shards, shard_logs, snakemake

PROFILE = ROOT / "profiles" / "slurm"
# example_exact_match has 5 tasks: 8 attempts each make 40, two shards (cluster jobs) of 20
ATTEMPTS, SHARD_SIZE = 8, 20
TOTAL = 5 * ATTEMPTS
# the node has 2 CPUs here: a shard of 2 threads asks 1, so both shards fit at once
CLUSTER_ARGS = ["--set-threads", "shard=2", "--set-resources", "shard:cpus_per_task=1"]
ANSWERS = {"France": "Paris", "planet": "Jupiter", "Hamlet": "Marlowe"}  # Japan and water: no answer


def answer(body, delay: float) -> Reply:
    question = body["messages"][-1]["content"]
    text = next((a for key, a in ANSWERS.items() if key in question), "I do not know")
    return Reply(200, completion(text), delay=delay)


def cluster_ready() -> str | None:
    """Why no cluster is usable here, or None."""
    try:
        import snakemake_executor_plugin_slurm  # noqa: F401
    except ImportError:
        return "snakemake-executor-plugin-slurm is not installed (pip install 'agentcompass[slurm]')"
    if not shutil.which("sinfo") or not shutil.which("sbatch"):
        return "no SLURM client (sinfo, sbatch) on PATH"
    try:
        states = subprocess.run(["sinfo", "-h", "-N", "-o", "%T"], capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        return "sinfo did not answer in 30 s"
    if states.returncode != 0 or not any(s.strip() in ("idle", "mixed") for s in states.stdout.splitlines()):
        return f"no idle SLURM node (sinfo: {states.stdout.strip() or states.stderr.strip()!r})"
    return None


@pytest.fixture(scope="module")
def cluster():
    why = cluster_ready()
    if why is None:
        return
    if os.environ.get("AGENTCOMPASS_SLURM") == "1":
        pytest.fail(f"AGENTCOMPASS_SLURM=1 requires a SLURM cluster, but {why}. Start one: .ci/slurm-up.sh DIR")
    pytest.skip(f"no SLURM cluster here ({why}); .ci/run starts one (.ci/slurm-up.sh) and requires this test")


def write_config(workdir: Path, base_url: str) -> Path:
    path = workdir / "eval.yaml"
    path.write_text(yaml.safe_dump({
        "requests": {"big": {
            "benchmark": "example_exact_match",
            "harness": {"id": "chat", "params": {"retry_backoff": 0}},
            "model": {"id": "scripted", "base_url": base_url},
            "execution": {"attempts": ATTEMPTS},
        }},
        "runtime": {"shard_size": SHARD_SIZE},
    }))
    return path


def slurm_argv(workdir: Path, config: Path, *extra: str) -> list[str]:
    return [
        sys.executable, "-m", "snakemake", "--snakefile", str(SNAKEFILE), "--directory", str(workdir),
        "--configfile", str(config), "--profile", str(PROFILE), *CLUSTER_ARGS, *extra,
    ]


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


def test_an_evaluation_on_slurm_equals_the_local_one_in_one_job_per_shard(cluster, tmp_path: Path):
    local = local_run(tmp_path / "local")

    work = tmp_path / "slurm"
    work.mkdir()
    started = time.monotonic()
    with ScriptedEndpoint(lambda body: answer(body, 0.2)) as endpoint:
        cap = f"{endpoint_resource(endpoint.base_url)}=2"
        done = subprocess.run(slurm_argv(work, write_config(work, endpoint.base_url), "--resources", cap),
                              cwd=work, env=clean_env(), capture_output=True, text=True, timeout=600)
    seconds = time.monotonic() - started
    assert done.returncode == 0, done.stderr[-4000:]
    print(f"SLURM run of {TOTAL} attempts: {seconds:.1f} s, SLURM jobs {slurm_job_ids(done.stderr)}")

    # one cluster job per shard of 20 attempts, and every model call from one of them
    submitted = slurm_job_ids(done.stderr)
    records = shard_records(work)
    assert len(submitted) == 2 == len(records) and [r["attempts"] for r in records] == [20, 20]
    assert sorted(r["slurm_job_id"] for r in records) == sorted(submitted)
    assert len(endpoint.requests) == TOTAL
    # two shards of 2 threads each would make 4 calls at once: the cap of 2 held across the cluster
    assert 1 <= endpoint.max_in_flight <= 2

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
    out = work / "first.log"
    with ScriptedEndpoint(lambda body: answer(body, 1.0)) as endpoint:
        config = write_config(work, endpoint.base_url)
        with open(out, "w") as log:
            run = subprocess.Popen(slurm_argv(work, config), cwd=work, env=clean_env(), stdout=log,
                                   stderr=subprocess.STDOUT, start_new_session=True)
        try:
            deadline = time.monotonic() + 300
            while len(results(work)) < 6:
                assert run.poll() is None, out.read_text()[-4000:]
                assert time.monotonic() < deadline, "no attempt finished on the cluster in 300 s"
                time.sleep(0.5)
        finally:
            # what a user does to a run stuck on a cluster: cancel its jobs, then kill Snakemake
            # (waiting on SLURM, it ignores SIGTERM)
            jobs = slurm_job_ids(out.read_text())
            if jobs:
                subprocess.run(["scancel", *jobs], check=False)
            os.killpg(run.pid, signal.SIGKILL)
            run.wait()
        assert jobs, out.read_text()[-4000:]
        deadline = time.monotonic() + 60
        while subprocess.run(["squeue", "-h", "-j", ",".join(jobs), "-t", "PENDING,RUNNING,COMPLETING"],
                             capture_output=True, text=True).stdout.strip():
            assert time.monotonic() < deadline, "the cancelled jobs were still running after 60 s"
            time.sleep(0.5)
        calls_before = len(endpoint.requests)

        done_before = {k: (work / "results/default/big/attempts" / k / "result.json").stat().st_mtime_ns
                       for k in results(work)}
        missing = TOTAL - len(done_before)
        assert 0 < missing < TOTAL, f"{len(done_before)} of {TOTAL} attempts had finished when the run was killed"

        # the killed Snakemake left its lock: a user unlocks, then runs the same command again
        unlock = subprocess.run(slurm_argv(work, config, "--unlock"), cwd=work, env=clean_env(),
                                capture_output=True, text=True, timeout=120)
        assert unlock.returncode == 0, unlock.stderr[-3000:]
        logs = shard_logs(work)
        again = subprocess.run(slurm_argv(work, config), cwd=work, env=clean_env(),
                               capture_output=True, text=True, timeout=600)
        assert again.returncode == 0, again.stderr[-4000:]
        calls = len(endpoint.requests) - calls_before

    ran = jobs_run_with_shards(work, again.stderr, logs)
    print(f"killed with {len(done_before)} of {TOTAL} attempts finished (SLURM jobs {jobs}); "
          f"the rerun ran {ran} in SLURM jobs {slurm_job_ids(again.stderr)}, {calls} model calls")
    # only the missing attempts were evaluated; a model was called once for each attempt run again
    assert ran.get("evaluate", 0) == missing, ran
    assert calls == ran.get("run", 0) <= missing
    # the finished attempts were not touched
    for key, stamp in done_before.items():
        assert (work / "results/default/big/attempts" / key / "result.json").stat().st_mtime_ns == stamp, key
    assert scored(work) == local and len(shard_records(work)) == 2
    # each attempt names the job that ran it: a job of the first run, or of the rerun
    rerun_jobs = set(slurm_job_ids(again.stderr))
    assert rerun_jobs and not rerun_jobs & set(jobs)
    for key, r in results(work).items():
        assert r["provenance"]["slurm_job_id"] in (set(jobs) if key in done_before else set(jobs) | rerun_jobs)


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
