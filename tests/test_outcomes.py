"""What a run reports: honest outcomes, exit statuses a script can use, and Snakemake's arguments after --."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

from agentcompass.testing.endpoint import ScriptedEndpoint, completion
from conftest import SNAKEFILE, agentcompass, clean_env

FAILING = {"w1", "w4", "w7"}


def model(body):
    prompt = body["messages"][-1]["content"]
    if any(f"word {w}." in prompt for w in FAILING):
        return 500, {"error": {"message": "scripted failure"}}
    return 200, completion("x")


def write_config(workdir: Path, endpoint) -> Path:
    path = workdir / "eval.yaml"
    path.write_text(json.dumps({
        "runtime": {"progress": False},
        "requests": {"honest": {"benchmark": "synthetic", "harness": "chat",
                                "model": {"id": "scripted", "base_url": endpoint.base_url}}},
        "benchmarks": {"synthetic": {"num_tasks": 9}},
        "harnesses": {"chat": {"max_model_retries": 0}},
    }))
    return path


def test_failed_attempts_are_counted_grouped_and_set_the_exit_status(workdir: Path):
    with ScriptedEndpoint(model) as endpoint:
        done = agentcompass(workdir, "run", "-c", str(write_config(workdir, endpoint)))
    assert done.returncode == 1, done.stderr[-3000:]
    line = done.stdout.strip().splitlines()[-1]
    assert line.startswith("honest: completed with errors: 3 of 9 attempts failed (")
    assert "run_error: model call failed after N tries; last error: HTTP N: " in line and " x3)" in line
    assert line.endswith("results/default/honest/metrics.json")

    fine = agentcompass(workdir, "run", "example_exact_match", "oracle", "none")
    assert fine.returncode == 0 and "example_exact_match-oracle-none: completed: 5 attempts; accuracy 1.0" in fine.stdout


HOLDER = """
import sys, time
from agentcompass.pipeline import locks
locks.acquire(sys.argv[1])
print("held", flush=True)
time.sleep(600)
"""


def test_a_folder_another_run_builds_is_refused_at_once_naming_that_run(workdir: Path):
    with ScriptedEndpoint(lambda body: completion("x")) as endpoint:
        config = write_config(workdir, endpoint)
        first = agentcompass(workdir, "run", "-c", str(config))  # an earlier run: its metrics.json exists
        assert (workdir / "results/default/honest/metrics.json").exists()
        holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(workdir / "results/default/honest")],
                                  cwd=workdir, env=clean_env(), stdout=subprocess.PIPE, text=True)
        try:
            assert holder.stdout.readline().strip() == "held"
            calls = len(endpoint.requests)
            refused = agentcompass(workdir, "run", "-c", str(config), "--", "--forceall")
            assert refused.returncode == 4, refused.stderr[-3000:]
            assert f"is being built by another run: pid {holder.pid} on host {socket.gethostname()}, since " in refused.stderr
            assert "Fix: wait for that run to end, or stop it (kill -TERM" in refused.stderr
            assert refused.stdout == ""  # no metrics of the earlier run reported as this run's result
            plain = subprocess.run([sys.executable, "-m", "snakemake", "--snakefile", str(SNAKEFILE), "--cores", "2",
                                    "--configfile", str(config), "--forceall"],
                                   cwd=workdir, env=clean_env(), capture_output=True, text=True, timeout=300)
            assert plain.returncode != 0 and f"pid {holder.pid}" in plain.stdout + plain.stderr
            assert len(endpoint.requests) == calls  # nothing ran
        finally:
            holder.kill()
            holder.wait()
        # the holder is gone (killed): its lock went with it, and the run goes on without a flag
        again = agentcompass(workdir, "run", "-c", str(config), "--", "--forcerun", "metrics")
        assert again.returncode == 0, again.stderr[-3000:]
    assert first.returncode == 0


def test_arguments_after_the_double_dash_reach_snakemake_as_it_reads_them(workdir: Path):
    dry = agentcompass(workdir, "run", "example_exact_match", "oracle", "none", "--", "-n")
    assert dry.returncode == 0, dry.stderr[-3000:]  # a request never run: a dry run, not a failure
    assert "dry run: nothing was built" in dry.stdout and not (workdir / "results").exists()

    target = "results/default/example_exact_match-oracle-none/tasks.json"
    built = agentcompass(workdir, "run", "example_exact_match", "oracle", "none", "--", target)
    assert built.returncode == 0, built.stderr[-3000:]
    assert (workdir / target).exists()
    assert not (workdir / "results/default/example_exact_match-oracle-none/metrics.json").exists()
    assert "built what was asked" in built.stdout

    whole = agentcompass(workdir, "run", "example_exact_match", "oracle", "none", "--", "--quiet")
    assert whole.returncode == 0 and "completed: 5 attempts" in whole.stdout


def test_a_bad_config_reports_no_earlier_result(cli_oracle_run_copy: Path):
    workdir = cli_oracle_run_copy  # an earlier result: `agentcompass run example_exact_match oracle none`, built once a session
    bad = agentcompass(workdir, "run", "example_exact_match", "oracle", "none", "-b", "no_such_param=1")
    assert bad.returncode == 2 and "invalid run config" in bad.stderr and bad.stdout == ""


def test_exit_statuses_are_documented():
    guide = (Path(__file__).resolve().parent.parent / "docs" / "reuse.md").read_text()
    section = guide[guide.index("## Exit status"):]
    for code in ("| 0 |", "| 1 |", "| 2 |", "| 3 |", "| 4 |"):
        assert code in section


def refuse_w4(body):
    if "word w4." in body["messages"][-1]["content"]:
        return 400, {"error": {"message": "scripted refusal 7"}}  # a 4xx other than 429 is not retried
    return 200, completion("x")


def test_a_sharded_request_reports_its_failed_attempt_by_kind_from_its_summaries(workdir: Path):
    """The end of the run reads metrics.json's summary and the shards' records: the outcome is the
    one every result.json gives, and stays so when no result.json can be read."""
    from agentcompass import results
    from agentcompass.pipeline.events import read_events
    from agentcompass.plugins import load_components
    from agentcompass.runtime.config import load_run_config
    from agentcompass.runtime.orchestration import resolve_orchestration

    with ScriptedEndpoint(refuse_w4) as endpoint:
        config = workdir / "eval.yaml"
        config.write_text(json.dumps({
            "runtime": {"progress": False, "shard_size": 4},  # two shards: 4 attempts and 2
            "requests": {"sharded": {"benchmark": "synthetic", "harness": "chat",
                                     "model": {"id": "scripted", "base_url": endpoint.base_url}}},
            "benchmarks": {"synthetic": {"num_tasks": 6}},
        }))
        done = agentcompass(workdir, "run", "-c", str(config))
    assert done.returncode == 1, done.stderr[-3000:]
    run = workdir / "results/default/sharded"
    assert sorted(p.parent.name for p in run.glob("shards/*/shard.json")) == ["0", "1"]
    failed = json.loads((run / "attempts/t4/1/result.json").read_text())
    kind = results.error_kind(failed["status"], failed["error"])
    assert kind.startswith("run_error: ") and "HTTP N" in kind, kind
    [finished] = [e["outcome"] for e in read_events(run) if e["event"] == "request_finished"]
    assert (finished["state"], finished["counts"], finished["errors"], finished["done"], finished["total"]) == \
        ("completed_with_errors", {"completed": 5, "run_error": 1}, {kind: 1}, 6, 6)
    assert f"completed with errors: 1 of 6 attempts failed ({kind} x1)" in done.stdout

    load_components()
    orchestration = resolve_orchestration(load_run_config([str(config)], None, start=workdir,
                                                          include_user=False, include_project=False))
    for path in run.glob("attempts/*/*/result.json"):  # a folder in each one's place: none can be read
        path.unlink()
        path.mkdir()
    [outcome] = results.outcomes(orchestration, True, workdir).outcomes
    assert outcome.to_dict() == finished
    # stopped: each shard's record counts its slice, whose result.json files are not looked for
    for path in run.glob("attempts/*/*/result.json"):
        path.rmdir()
    [stopped] = results.outcomes(orchestration, False, workdir).outcomes
    assert (stopped.state, stopped.done, stopped.total, stopped.errors) == ("stopped", 6, 6, {})


def test_config_files_merge_in_order_and_only_their_requests_run(workdir: Path):
    """``run -c a.yaml -c b.yaml``: b's settings over a's requests, and no request of the project config
    (configs/config.yaml's example-oracle, which Snakemake read when it kept only the last of repeated
    --configfile flags); a job that fails is named as one, and only then."""
    (workdir / "a.yaml").write_text(json.dumps({
        "runtime": {"progress": False},
        "requests": {"mine": {"benchmark": "example_exact_match", "harness": "oracle", "model": {"id": "none"}}}}))
    (workdir / "b.yaml").write_text(json.dumps({"benchmarks": {"example_exact_match": {"limit": 2}}}))
    done = agentcompass(workdir, "run", "-c", "a.yaml", "--config", "b.yaml")
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1].startswith("mine: completed: 2 attempts; accuracy 1.0")
    assert sorted(p.name for p in (workdir / "results/default").iterdir()) == ["mine"]
    # status reads the same layers: what ran is what it predicts, with nothing to rerun
    status = agentcompass(workdir, "status", "-c", "a.yaml", "-c", "b.yaml")
    assert status.returncode == 0 and status.stdout.startswith("mine  (results/default/mine)"), status.stdout
    assert "attempts: completed 2" in status.stdout and "nothing would rerun" in status.stdout

    # a third file whose task list cannot be made: the tasks job fails, and the line says so
    (workdir / "c.yaml").write_text(json.dumps({"benchmarks": {"example_exact_match": {"task_ids": ["nope"]}}}))
    failed = agentcompass(workdir, "run", "-c", "a.yaml", "-c", "b.yaml", "-c", "c.yaml")
    assert failed.returncode == 3, failed.stderr[-3000:]
    assert "mine: stopped before it finished (1 job failed (tasks); Snakemake's output above names it)" in failed.stdout
    assert sorted(p.name for p in (workdir / "results/default").iterdir()) == ["mine"]
