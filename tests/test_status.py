"""``agentcompass status`` tells the truth: real runs through the CLI, then status on them.

Status reads Snakemake's records through Snakemake's own code, keyed by each
output path exactly as the workflow names it, so long paths and a results
folder outside the working folder read as any other.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from agentcompass.pipeline import engine
from agentcompass.testing.endpoint import ScriptedEndpoint, completion
from conftest import agentcompass, jobs_run

REQUEST = "example_exact_match-oracle-none"
N = 5  # example_exact_match's tasks


def ok(done) -> str:
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    return done.stdout


def up_to_date(stdout: str, name: str, attempts: str) -> None:
    assert f"{name}  (" in stdout, stdout
    assert f"attempts: {attempts}\n" in stdout + "\n", stdout
    assert "up to date: nothing would rerun" in stdout and "would rerun:" not in stdout, stdout


def test_a_long_run_id_reads_like_any_other(workdir: Path):
    # 230 characters: Snakemake's key of each file (base64 of its path) spans more than one file name
    run_id = "".join(hashlib.sha256(str(i).encode()).hexdigest() for i in range(4))[:230]
    args = ("synthetic", "oracle", "none", "-b", "num_tasks=2", "--run-id", run_id)
    ok(agentcompass(workdir, "run", *args))
    up_to_date(ok(agentcompass(workdir, "status", *args)), "synthetic-oracle-none", "completed 2")
    # one result gone: exactly that attempt would run again
    (workdir / "results" / "default" / run_id / "attempts" / "t1" / "1" / "result.json").unlink()
    stdout = ok(agentcompass(workdir, "status", *args))
    assert "result.json x1: missing" in stdout and "metrics.json x1: upstream file reruns" in stdout, stdout
    assert "prepared.json" not in stdout and "output.json" not in stdout, stdout


def test_a_results_folder_outside_the_working_folder(workdir: Path, tmp_path: Path):
    outside = tmp_path / "elsewhere" / "results"
    args = ("example_exact_match", "oracle", "none", "--results-dir", str(outside))
    ok(agentcompass(workdir, "run", *args))
    assert (outside / "default" / REQUEST / "metrics.json").is_file()
    stdout = ok(agentcompass(workdir, "status", *args))
    up_to_date(stdout, REQUEST, f"completed {N}")
    assert f"({outside / 'default' / REQUEST})" in stdout
    stdout = ok(agentcompass(workdir, "status", *args, "-b", "case_sensitive=true"))
    assert f"result.json x{N}: params changed: plan" in stdout, stdout


def test_status_takes_benchmark_harness_model_like_run(workdir: Path):
    ok(agentcompass(workdir, "run", "example_exact_match", "oracle", "none", "-b", "limit=2"))
    stdout = ok(agentcompass(workdir, "status", "example_exact_match", "oracle", "none", "-b", "limit=2"))
    up_to_date(stdout, REQUEST, "completed 2")
    assert "example-oracle" not in stdout  # not the project config's request
    # a request that was never run is all missing, under its own name
    stdout = ok(agentcompass(workdir, "status", "example_exact_match", "fixed_answer", "none"))
    assert "example_exact_match-fixed_answer-none  (results/default/example_exact_match-fixed_answer-none)" in stdout
    assert "attempts: no attempts yet" in stdout and "request.json x1: missing" in stdout, stdout


def test_a_change_shows_what_would_rerun_and_why(cli_oracle_run_copy: Path):
    workdir = cli_oracle_run_copy  # `agentcompass run example_exact_match oracle none`, built once a session
    # a scoring parameter: regrading only
    stdout = ok(agentcompass(workdir, "status", "example_exact_match", "oracle", "none", "-b", "case_sensitive=true"))
    assert f"result.json x{N}: params changed: plan" in stdout, stdout
    assert "metrics.json x1: upstream file reruns" in stdout
    assert "prepared.json" not in stdout and "output.json" not in stdout and "tasks.json" not in stdout, stdout
    # a prompt parameter: preparation onward
    stdout = ok(agentcompass(workdir, "status", "example_exact_match", "oracle", "none",
                             "-b", "prompt_template=Answer {question}"))
    assert f"prepared.json x{N}: params changed: plan" in stdout, stdout
    assert f"output.json x{N}: upstream file reruns" in stdout
    # one more task: only its attempt is new
    stdout = ok(agentcompass(workdir, "status", "example_exact_match", "oracle", "none", "--attempts", "2"))
    assert f"prepared.json x{N}: missing" in stdout and "params changed: execution" in stdout, stdout
    assert "result.json x5: missing" in stdout


def test_a_relative_and_an_absolute_config_path_are_the_same_request(workdir: Path):
    (workdir / "eval.yaml").write_text(
        "requests:\n  mine: {benchmark: example_exact_match, harness: oracle, model: {id: none}}\n"
    )
    ok(agentcompass(workdir, "run", "-c", "eval.yaml"))
    request = (workdir / "results/default/mine/request.json").read_bytes()
    assert json.loads(request)["metadata"]["config_paths"][-1] == str((workdir / "eval.yaml").resolve())
    for named in ("eval.yaml", "./eval.yaml", str(workdir / "eval.yaml")):
        up_to_date(ok(agentcompass(workdir, "status", "-c", named)), "mine", f"completed {N}")
    # and the same command again builds nothing, and leaves request.json as it was
    again = agentcompass(workdir, "run", "-c", "eval.yaml")
    ok(again)
    assert jobs_run(again.stdout + again.stderr) == {}
    assert (workdir / "results/default/mine/request.json").read_bytes() == request


def test_a_results_folder_as_the_first_argument_still_works(workdir: Path, tmp_path: Path):
    outside = tmp_path / "old-style"
    ok(agentcompass(workdir, "run", "--results-dir", str(outside)))  # the project config's request
    done = agentcompass(workdir, "status", str(outside))
    up_to_date(ok(done), "example-oracle", "completed 5")
    assert "deprecated" in done.stderr and "--results-dir" in done.stderr
    done = agentcompass(workdir, "status", "example_exact_match", "oracle")
    assert done.returncode == 2 and "give all of BENCHMARK HARNESS MODEL" in done.stderr
    done = agentcompass(workdir, "status", "example_exact_match", "oracle", "none", "extra")
    assert done.returncode == 2 and "unexpected argument(s) extra" in done.stderr


def refuse_w4(body):
    if "word w4." in body["messages"][-1]["content"]:
        return 400, {"error": {"message": "scripted refusal"}}  # a 4xx other than 429 is not retried
    return 200, completion("x")


def test_a_sharded_request_is_read_from_its_current_shards_records(workdir: Path):
    """A shard the next run does not rerun (its record holds the params the shard rule computes now) has
    none of its attempts rebuilt: its attempts are not judged, and its record counts them when it counts
    no failure; a shard that reruns is judged file by file, as its inner run judges them."""
    with ScriptedEndpoint(refuse_w4) as endpoint:
        config = workdir / "eval.yaml"
        config.write_text(json.dumps({
            "runtime": {"progress": False, "shard_size": 4},  # two shards: t0-t3 and t4-t5
            "requests": {"sharded": {"benchmark": "synthetic", "harness": "chat",
                                     "model": {"id": "scripted", "base_url": endpoint.base_url}}},
            "benchmarks": {"synthetic": {"num_tasks": 6}},
        }))
        done = agentcompass(workdir, "run", "-c", str(config))
    assert done.returncode == 1, done.stderr[-3000:]
    stdout = ok(agentcompass(workdir, "status", "-c", str(config)))
    up_to_date(stdout, "sharded", "completed 5, run_error 1")
    assert "    run_error at run [endpoint]: t4 attempt 1: model call refused: HTTP 400" in stdout, stdout  # read from its slice

    # shard 0's folders as its record left them: a result.json no one can read is never read
    folder = workdir / "results/default/sharded/attempts/t0/1"
    stamp = folder.stat()
    (folder / "result.json").unlink()
    (folder / "result.json").mkdir()
    os.utime(folder, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))
    up_to_date(ok(agentcompass(workdir, "status", "-c", str(config))), "sharded", "completed 5, run_error 1")

    # one more task: the second slice (t4-t6) changes, and only the new attempt is built in it
    six = config.read_text()
    more = json.loads(six)
    more["benchmarks"]["synthetic"]["num_tasks"] = 7
    config.write_text(json.dumps(more))
    stdout = ok(agentcompass(workdir, "status", "-c", str(config)))
    for name in ("prepared.json", "output.json", "result.json"):
        assert f"{name} x1: missing" in stdout, stdout
    config.write_text(six)

    # a folder of shard 0 changed: the shard reruns, and its inner run rebuilds exactly the missing result
    (folder / "result.json").rmdir()
    stdout = ok(agentcompass(workdir, "status", "-c", str(config)))
    assert "attempts: completed 4, missing 1, run_error 1\n" in stdout, stdout
    assert "result.json x1: missing" in stdout and "prepared.json" not in stdout and "output.json" not in stdout


def test_a_tasks_preflight_reruns_only_that_tasks_attempts(workdir: Path):
    """A stage built per task is judged once per task, and an attempt stage that reads its file reruns with
    it only in that task's attempts; a killed preflight job (its file marked incomplete) reruns as one."""
    (workdir / "eval.yaml").write_text(json.dumps({"requests": {"vetted": {
        "benchmark": {"id": "example_exact_match", "params": {"limit": 2}}, "harness": "oracle",
        "model": {"id": "none"}, "execution": {"attempts": 2, "preflight": {"mode": "oracle", "runs": 1}}}}}))
    ok(agentcompass(workdir, "run", "-c", "eval.yaml"))
    up_to_date(ok(agentcompass(workdir, "status", "-c", "eval.yaml")), "vetted", "completed 4")
    run = workdir / "results/default/vetted"
    first, second = sorted(path.stem for path in (run / "preflight").glob("*.json"))
    (run / "preflight" / f"{first}.json").unlink()
    stdout = ok(agentcompass(workdir, "status", "-c", "eval.yaml", "-v"))
    assert "preflight/<task>.json x1: missing" in stdout and "prepared.json x2: upstream file reruns" in stdout, stdout
    assert f"attempts/{first}/2/result.json" in stdout and f"attempts/{second}/" not in stdout, stdout

    records = engine.Records.open(workdir)
    assert records is not None
    killed = f"results/default/vetted/preflight/{second}.json"
    # the marker Snakemake leaves on the output of a job it started and did not finish
    records.persistence._mark_incomplete(engine._key(records.persistence, killed), None)
    stdout = ok(agentcompass(workdir, "status", "-c", "eval.yaml"))
    assert "preflight/<task>.json x1: incomplete (a run was killed)" in stdout, stdout
    assert "prepared.json x4: upstream file reruns" in stdout, stdout
