"""Shards: a request of more than runtime.shard_size attempts is built in slices,
each by an inner Snakemake, with the same files and the same per-file reuse."""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import jsonschema

from agentcompass.pipeline import shards
from agentcompass.pipeline.files import schema_path
from conftest import announced, jobs_run, jobs_run_with_shards, shard_logs, snakemake

# example_exact_match has 5 tasks: 3 attempts each make 15 attempts, 2 shards of 8 and 7 (the third task's
# attempts in both): the fewest that show a slice rebuilt alone while another is left as it is
SHARD_SIZE = 8
CONFIG = {
    "requests": {"big": {"benchmark": "example_exact_match", "harness": "oracle", "model": {"id": "none"},
                         "execution": {"attempts": 3}}},
}


def write_config(workdir: Path, shard_size: int) -> Path:
    path = workdir / "eval.yaml"
    path.write_text(json.dumps({**CONFIG, "runtime": {"shard_size": shard_size}}))
    return path


def build(workdir: Path, config: Path, *args: str) -> dict[str, int]:
    logs = shard_logs(workdir)
    done = snakemake(workdir, "--configfile", str(config), *args)
    assert done.returncode == 0, done.stderr[-3000:]
    return jobs_run_with_shards(workdir, done.stderr, logs)


def scored(workdir: Path) -> dict[str, tuple]:
    """Every attempt's status, answer and score: what must not depend on how the request was built."""
    base = workdir / "results/default/big/attempts"
    out = {}
    for path in sorted(base.glob("*/*/result.json")):
        r = json.loads(path.read_text())
        out[f"{path.parent.parent.name}/{path.parent.name}"] = (r["status"], r["answer"], r["score"])
    return out


def without_times(metrics: dict) -> dict:
    """metrics.json without the stages' timings, which differ from run to run."""
    for stats in [metrics["summary"]["overall"], *metrics["summary"]["by_category"].values()]:
        stats.pop("wall_seconds")
        stats.pop("latency_seconds")
    return metrics


def test_a_sharded_request_builds_the_same_files_and_reruns_only_what_is_missing(workdir: Path):
    whole, sharded = workdir / "whole", workdir / "sharded"
    whole.mkdir()
    sharded.mkdir()
    assert build(whole, write_config(whole, 0))["evaluate"] == 15

    config = write_config(sharded, SHARD_SIZE)
    ran = build(sharded, config)
    assert ran["shard"] == 2 and ran["prepare"] == ran["run"] == ran["evaluate"] == 15
    # a shard's log lists its finished jobs (counted above), not an announcement of each
    assert not any(announced(log.read_text()) for log in shard_logs(sharded))
    assert scored(sharded) == scored(whole) and len(scored(sharded)) == 15
    metrics = [without_times(json.loads((d / "results/default/big/metrics.json").read_text())) for d in (whole, sharded)]
    assert metrics[0] == metrics[1] and metrics[1]["num_attempts"] == 15
    paths = sorted((sharded / "results/default/big/shards").glob("*/shard.json"))
    records = [json.loads(p.read_text()) for p in paths]
    schema = json.loads(schema_path("shard").read_text())
    for record in records:
        jsonschema.Draft202012Validator(schema).validate(record)
    assert [r["attempts"] for r in records] == [8, 7]
    assert sum(r["counts"]["completed"] for r in records) == 15

    # a no-op rerun is decided by the outer run alone
    again = snakemake(sharded, "--configfile", str(config))
    assert again.returncode == 0 and jobs_run(again.stderr) == {}
    assert "Nothing to be done" in again.stderr

    # one deleted result.json: its shard only, and in it the one evaluation
    order = [t["task_id"] for t in json.loads((sharded / "results/default/big/tasks.json").read_text())["tasks"]]
    victim = sharded / "results/default/big/attempts" / order[3] / "2" / "result.json"  # position 3*3+1 = 10: shard 1
    before = shard_logs(sharded)
    victim.unlink()
    assert build(sharded, config) == {"shard": 1, "evaluate": 1, "metrics": 1, "report": 1}
    rewritten = [p for p, stamp in shard_logs(sharded).items() if before[p] != stamp]
    assert [p.parent.name for p in rewritten] == ["1"]
    assert victim.exists() and scored(sharded) == scored(whole)
    assert [(p.parent / "generation").read_text() for p in paths] == ["1\n", "2\n"]
    # the repaired slice is current again: no second rerun
    assert jobs_run(snakemake(sharded, "--configfile", str(config)).stderr) == {}

    # a whole task folder (its 3 attempts) removed: its shard rebuilds it, once
    shutil.rmtree(victim.parent.parent)
    assert build(sharded, config) == {"shard": 1, "prepare": 3, "run": 3, "evaluate": 3, "metrics": 1, "report": 1}
    assert scored(sharded) == scored(whole)
    assert jobs_run(snakemake(sharded, "--configfile", str(config)).stderr) == {}

    # forcing a per-attempt rule reaches every shard's inner run
    assert build(sharded, config, "--forcerun", "evaluate") == {"shard": 2, "evaluate": 15, "metrics": 1, "report": 1}

    # a changed parameter reruns every shard it reaches, once: the same command again builds nothing
    config.write_text(json.dumps({**json.loads(config.read_text()),
                                  "benchmarks": {"example_exact_match": {"case_sensitive": True}}}))
    ran = build(sharded, config)
    assert ran["shard"] == 2 and ran["evaluate"] == 15
    assert jobs_run(snakemake(sharded, "--configfile", str(config)).stderr) == {}


def test_a_dry_run_shows_the_shard_jobs_without_running_them(workdir: Path):
    config = write_config(workdir, SHARD_SIZE)
    plans = snakemake(workdir, "results/default/big/plans.json", "--configfile", str(config))
    assert plans.returncode == 0, plans.stderr[-2000:]
    dry = snakemake(workdir, "--configfile", str(config), "--dry-run")
    assert dry.returncode == 0, dry.stderr[-2000:]
    assert dry.stdout.count("rule shard:") + dry.stderr.count("rule shard:") == 2
    assert not list(workdir.glob("results/default/big/attempts/*/*/result.json"))


def test_a_shards_generation_moves_when_a_folder_of_its_slice_changes(tmp_path: Path):
    folders = [tmp_path / "a", tmp_path / "b"]
    for folder in folders:
        folder.mkdir()
    record, held = tmp_path / "shard.json", tmp_path / "generation"
    names = [str(f) for f in folders]

    def generation() -> int:
        return shards.generation(str(held), names)

    assert generation() == 1  # never built
    shards.hold(str(held), 1)
    record.write_text("{}")
    assert generation() == 1  # built after both folders: current
    future = time.time() + 5
    os.utime(folders[1], (future, future))  # a file replaced in b after the record
    assert generation() == 2
    os.utime(folders[1], (future - 3600, future - 3600))
    assert generation() == 1
    folders[0].rmdir()
    assert generation() == 2
    folders[0].mkdir()
    os.utime(folders[0], (future - 3600, future - 3600))
    record.unlink()  # Snakemake removes it before the job runs: the job computes what its scheduler did
    assert generation() == 1


def _workflow(forceall=False, forcerun=()):
    return SimpleNamespace(
        dag_settings=SimpleNamespace(forceall=forceall, forcerun=frozenset(forcerun), forcetargets=False),
        config_settings=SimpleNamespace(configfiles=[Path("/cfg/a.yaml")], config_args=["runtime={\"shard_size\": 4}"]),
        main_snakefile="/repo/Snakefile",
    )


def test_forced_rules_and_files_of_a_slice():
    files = ["results/default/big/attempts/t1/1/result.json", "results/default/big/attempts/t1/1/output.json"]

    def listed():
        listed.calls += 1
        return files

    listed.calls = 0
    assert shards.forced_rules(_workflow()) == [] and shards.forced_files(_workflow(), listed) == []
    assert listed.calls == 0  # nothing forced: the slice's files are never listed
    assert shards.forced_rules(_workflow(forceall=True)) == ["prepare", "run", "evaluate", "scan"]
    assert shards.forced_rules(_workflow(forcerun={"run", "metrics"})) == ["run"]
    named = _workflow(forcerun={"./results/default/big/attempts/t1/1/result.json", "results/other.json", "run"})
    assert shards.forced_files(named, listed) == [files[0]] and shards.forced_rules(named) == ["run"]
    assert shards.forced_files(_workflow(forcerun={"run"}), listed) == [] and listed.calls == 1


def test_the_inner_run_gets_this_runs_config_and_runs_locally(monkeypatch):
    argv = shards.inner_argv(_workflow(), 8, {"model_endpoint_x": 3}, ["run"], ["a/result.json", "a/plan.json"])
    assert argv[:shards.INNER_ARGS] == [sys.executable, "-P", "-m", "snakemake"]  # never imports from the folder
    assert argv[shards.INNER_ARGS:shards.INNER_ARGS + 2] == ["a/result.json", "a/plan.json"]  # the slice's files, before any option
    assert argv[argv.index("--snakefile") + 1] == "/repo/Snakefile"
    assert argv[argv.index("--cores") + 1] == "8" and "--nolock" in argv
    assert argv[argv.index("--configfile") + 1] == "/cfg/a.yaml"
    assert argv[argv.index("--resources") + 1] == "model_endpoint_x=3"
    assert argv[argv.index("--forcerun") + 1] == "run"
    assert argv[-2:] == ["--config", "runtime={\"shard_size\": 4}"]  # last: --config takes what follows
    many = [f"results/default/big/attempts/t{i}/1/result.json" for i in range(40_000)]
    # too long: the default rule names them
    assert "--snakefile" == shards.inner_argv(_workflow(), 8, {}, [], many)[shards.INNER_ARGS]
    monkeypatch.setenv("SNAKEMAKE_PROFILE", "slurm")
    env = shards.inner_env("default", "big", 2, "123")
    assert "SNAKEMAKE_PROFILE" not in env and env[shards.SHARD_ENV] == "default/big/2"
    monkeypatch.setenv(shards.SHARD_ENV, env[shards.SHARD_ENV])
    monkeypatch.setenv(shards.INVOCATION_ENV, env[shards.INVOCATION_ENV])
    assert shards.inner_shard() == ("default", "big", 2)
    assert shards.invocation("456") == "123"  # reuse off: the inner run is part of its outer invocation
    monkeypatch.delenv(shards.SHARD_ENV)
    assert shards.inner_shard() is None and os.environ.get(shards.SHARD_ENV) is None
    assert shards.invocation("456") == "456"
