"""The preflight stage and quarantine through the real workflow, on task_dir task folders.

One healthy task and four broken ones, each broken its own way: an environment that cannot
be run, a verifier that crashes, a reference solution that passes only on some runs (it asks
a counter on 127.0.0.1, which this test serves), and a wrong reference solution. A model-calling
harness runs against a scripted endpoint that counts the calls: only the healthy task calls it.
"""

from __future__ import annotations

import http.server
import json
import shutil
import threading
from pathlib import Path

import jsonschema
import yaml

from agentcompass.benchmarks.task_dir import SHIPPED_TASKS
from agentcompass.pipeline.files import schema_path
from agentcompass.testing.endpoint import ScriptedEndpoint, tool_call_reply
from conftest import agentcompass, jobs_run, snakemake
from test_task_dir import environment_of

HELLO = "printf 'Hello, agentcompass!\\n' > /app/hello.txt\n"
REASONS = {"broken-env": "preflight_failed", "verifier-crash": "preflight_failed",
           "flaky-solution": "preflight_flaky", "wrong-solution": "preflight_failed"}


class Counter:
    """An HTTP server on 127.0.0.1 answering ``pass`` to its 2nd request, ``fail`` otherwise: a pass after a
    failure, which the preflight sees only if it runs every run it was asked for."""

    def __init__(self) -> None:
        self.calls = 0
        counter = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (the handler's name)
                counter.calls += 1
                body = b"pass" if counter.calls == 2 else b"fail"
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def task(tasks: Path, name: str, *, dockerfile: str | None = None, test: str | None = None, solve: str | None = None):
    folder = tasks / name
    shutil.copytree(SHIPPED_TASKS / "hello-file", folder)
    if dockerfile is not None:
        (folder / "environment" / "Dockerfile").write_text(dockerfile)
    if test is not None:
        (folder / "tests" / "test.sh").write_text(test)
    if solve is not None:
        (folder / "solution" / "solve.sh").write_text(solve)


def write_tasks(tasks: Path, counter_url: str) -> None:
    task(tasks, "healthy")
    # host_process follows a Dockerfile's COPY and WORKDIR and refuses one that installs software
    task(tasks, "broken-env", dockerfile="FROM local/busybox:latest\nWORKDIR /app\nRUN apk add --no-cache jq\n")
    task(tasks, "verifier-crash", test="#!/bin/sh\necho 'the verifier fell over' >&2\nexit 3\n")
    task(tasks, "flaky-solution", solve=(
        "#!/bin/sh\n"
        f"if [ \"$(python3 -c \"import urllib.request; print(urllib.request.urlopen('{counter_url}').read().decode())\")\" = pass ]; "
        f"then {HELLO.strip()}; else echo nope > /app/hello.txt; fi\n"))
    task(tasks, "wrong-solution", solve="#!/bin/sh\necho 'Hello, world' > /app/hello.txt\n")


def model(body):
    step = sum(1 for m in body["messages"] if m["role"] == "assistant")
    if step == 0:
        return tool_call_reply("bash", {"command": "printf 'Hello, agentcompass!\\n' > hello.txt"}, call_id="c1")
    return tool_call_reply("submit", {"answer": "done"}, call_id="c2")


def config(workdir: Path, tasks: Path, base_url: str, model_id: str = "scripted") -> Path:
    path = workdir / "preflight.yaml"
    path.write_text(yaml.safe_dump({"requests": {"vetted": {
        "benchmark": {"id": "task_dir", "params": {"path": str(tasks)}},
        "harness": "tool_agent",
        "model": {"id": model_id, "base_url": base_url},
        "environment": {**environment_of("host_process"), "run_network": {"mode": "public"}},
        "execution": {"preflight": {"mode": "oracle", "runs": 2}},
    }}}))
    return path


def stamps(run: Path) -> dict[str, int]:
    return {p.name: p.stat().st_mtime_ns for p in sorted((run / "preflight").glob("*.json"))}


def test_only_the_task_that_passes_preflight_calls_the_model_and_is_scored(tmp_path: Path, workdir: Path):
    counter = Counter()
    tasks = tmp_path / "tasks"
    write_tasks(tasks, counter.url)
    run = workdir / "results" / "default" / "vetted"
    try:
        with ScriptedEndpoint(model) as endpoint:
            first = snakemake(workdir, "--configfile", str(config(workdir, tasks, endpoint.base_url)))
            assert first.returncode == 0, first.stderr[-4000:]
            assert jobs_run(first.stderr)["preflight"] == 5
            assert len(endpoint.requests) == 2  # the healthy task's two steps: nothing else called the model
    finally:
        counter.close()
    assert counter.calls == 2  # the flaky task's two runs, and no attempt of it

    records = {p.stem: json.loads(p.read_text()) for p in (run / "preflight").glob("*.json")}
    schema = json.loads(schema_path("preflight").read_text())
    for record in records.values():
        jsonschema.Draft202012Validator(schema).validate(record)
    assert records["healthy"]["passed"] and [r["correct"] for r in records["healthy"]["runs"]] == [True] * 2
    for name, reason in REASONS.items():
        assert records[name]["passed"] is False and records[name]["reason"] == reason, records[name]
    assert [r["correct"] for r in records["flaky-solution"]["runs"]] == [False, True]
    assert records["flaky-solution"]["flaky"] is True
    assert "Dockerfile" in records["broken-env"]["error"] or "RUN" in records["broken-env"]["error"]

    for name, reason in REASONS.items():
        result = json.loads((run / "attempts" / name / "1" / "result.json").read_text())
        assert result["status"] == "skipped" and result["failure_class"] == "task"
        assert result["error_stage"] == "preflight" and result["metadata"]["quarantine"]["reason"] == reason
        # no environment was opened for it: the prepare stage saved no workspace
        assert not (run / "attempts" / name / "1" / "workspace").exists()
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["num_tasks"] == 1 and metrics["num_attempts"] == 1 and metrics["metrics"]["accuracy"] == 1.0
    assert metrics["scored_on"]["tasks"] == 5 and metrics["scored_on"]["scored"] == 1
    assert {q["task_id"]: q["reason"] for q in metrics["scored_on"]["quarantined"]} == REASONS
    assert metrics["summary"]["overall"]["attempts"] == 1
    report = (run / "report" / "index.html").read_text()
    assert "are scored on 1 of 5 tasks; 4 quarantined: broken-env (preflight_failed)" in report
    assert "does not count the attempts on disk" not in report

    # runs says what the accuracy is over
    listed = agentcompass(workdir, "runs")
    assert listed.returncode == 0, listed.stderr
    assert "1/5 tasks (4 quarantined)" in listed.stdout and "task=4" in listed.stdout, listed.stdout
    [overview] = json.loads(agentcompass(workdir, "runs", "--json").stdout)
    assert overview["scored_on"] == {"tasks": 5, "scored": 1, "attempts": 5, "counted": 1, "infrastructure": 0,
                                     "quarantined": 4}

    # a quarantined attempt is skipped, not failed: retry leaves it to the preflight, and says so
    retried = agentcompass(workdir, "retry", "-c", str(config(workdir, tasks, "http://127.0.0.1:9/v1")),
                           "--only", "task")
    assert retried.returncode == 0, retried.stderr
    assert "not retried: they run by themselves once their task's preflight passes" in retried.stdout
    assert "nothing to retry" in retried.stdout

    shutil.copytree(run, workdir / "results" / "default" / "before")  # for compare, below

    # another model reruns the healthy task's attempt and no preflight: the files are untouched
    before = stamps(run)
    with ScriptedEndpoint(model) as endpoint:
        other = snakemake(workdir, "--configfile", str(config(workdir, tasks, endpoint.base_url, "other-model")))
        assert other.returncode == 0, other.stderr[-4000:]
        assert len(endpoint.requests) == 2
        assert "preflight" not in jobs_run(other.stderr)
        assert stamps(run) == before

        # an edit of the broken task's Dockerfile reruns that task's preflight alone; it passes now,
        # and its attempt is the one that calls the model
        (tasks / "broken-env" / "environment" / "Dockerfile").write_text("FROM local/busybox:latest\nWORKDIR /app\n")
        path = config(workdir, tasks, endpoint.base_url, "other-model")
        status = agentcompass(workdir, "status", "-c", str(path))  # says so first, from the stage table
        assert "preflight/<task>.json x1: params changed" in status.stdout, status.stdout
        fixed = snakemake(workdir, "--configfile", str(path))
        assert fixed.returncode == 0, fixed.stderr[-4000:]
        assert len(endpoint.requests) == 4
    assert jobs_run(fixed.stderr)["preflight"] == 1 and jobs_run(fixed.stderr)["run"] == 1
    after = stamps(run)
    assert [name for name in after if after[name] != before[name]] == ["broken-env.json"]
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["scored_on"]["scored"] == 2
    # compare pairs only the tasks scored in both: the healthy one; four are left out, and said so
    compared = agentcompass(workdir, "compare", "results/default/before", "results/default/vetted", "--json")
    assert compared.returncode == 0, compared.stderr
    [pair] = json.loads(compared.stdout)["comparisons"]
    assert pair["paired"] == 1 and pair["quarantined"] == 4
    text = agentcompass(workdir, "compare", "results/default/before", "results/default/vetted").stdout
    assert "left out: 4 quarantined by preflight (in A or B)" in text


def test_check_prints_the_broken_and_flaky_tasks_and_fails(tmp_path: Path, workdir: Path):
    counter = Counter()
    tasks = tmp_path / "tasks"
    write_tasks(tasks, counter.url)
    shutil.rmtree(tasks / "verifier-crash")
    shutil.rmtree(tasks / "broken-env")
    try:
        done = agentcompass(workdir, "check", "task_dir", "-b", f"path={tasks}", "--runs", "2",
                            "-e", environment_of("host_process")["id"])
    finally:
        counter.close()
    assert done.returncode == 1, done.stdout + done.stderr[-3000:]
    assert "1 of 3 tasks pass preflight; 1 broken, 1 flaky" in done.stdout, done.stdout
    assert "broken: wrong-solution (fail, fail)" in done.stdout
    assert "flaky: flaky-solution (fail, pass)" in done.stdout
    # no attempt was built: check runs the preflight stage only
    assert not list(workdir.glob("results/*/*/attempts/*/*/result.json"))
    assert not list(workdir.glob("results/*/*/metrics.json"))



def test_a_dockerfile_that_does_not_build_quarantines_its_task_on_docker(needs_docker, tmp_path: Path, workdir: Path):
    """On docker the environment is the image the task's Dockerfile builds: one whose build fails is quarantined,
    and an edit that makes it build reruns that task's preflight alone."""
    environment = environment_of("docker")
    tasks = tmp_path / "tasks"
    task(tasks, "healthy")
    task(tasks, "no-build", dockerfile="FROM local/busybox:latest\nWORKDIR /app\nRUN echo 'this build fails' && exit 7\n")
    run = workdir / "results" / "default" / "vetted"
    with ScriptedEndpoint(model) as endpoint:
        path = workdir / "docker.yaml"
        path.write_text(yaml.safe_dump({"requests": {"vetted": {
            "benchmark": {"id": "task_dir", "params": {"path": str(tasks)}}, "harness": "tool_agent",
            "model": {"id": "scripted", "base_url": endpoint.base_url}, "environment": environment,
            "execution": {"preflight": "oracle"}}}}))
        first = snakemake(workdir, "--configfile", str(path))
        assert first.returncode == 0, first.stderr[-4000:]
        assert len(endpoint.requests) == 2  # the healthy task's attempt alone
        record = json.loads((run / "preflight" / "no-build.json").read_text())
        assert record["passed"] is False and record["reason"] == "preflight_failed"
        assert record["error"].startswith("ImageBuildError") and "returned a non-zero code: 7" in record["error"]
        result = json.loads((run / "attempts" / "no-build" / "1" / "result.json").read_text())
        assert result["status"] == "skipped" and result["metadata"]["quarantine"]["reason"] == "preflight_failed"
        metrics = json.loads((run / "metrics.json").read_text())
        assert metrics["scored_on"]["scored"] == 1 and [q["task_id"] for q in metrics["scored_on"]["quarantined"]] == ["no-build"]

        before = stamps(run)
        (tasks / "no-build" / "environment" / "Dockerfile").write_text("FROM local/busybox:latest\nWORKDIR /app\n")
        fixed = snakemake(workdir, "--configfile", str(path))
        assert fixed.returncode == 0, fixed.stderr[-4000:]
        assert jobs_run(fixed.stderr)["preflight"] == 1
        assert len(endpoint.requests) == 4  # now its attempt runs, and calls the model
    after = stamps(run)
    assert [name for name in after if after[name] != before[name]] == ["no-build.json"]
    assert json.loads((run / "preflight" / "no-build.json").read_text())["passed"] is True


def test_a_sharded_request_builds_each_preflight_once_in_the_outer_run(workdir: Path):
    """Shards depend on their tasks' preflight files: the outer run builds them, no inner run does."""
    path = workdir / "sharded.yaml"
    path.write_text(yaml.safe_dump({"runtime": {"shard_size": 3}, "requests": {"sharded": {
        "benchmark": {"id": "example_exact_match", "params": {"limit": 2}}, "harness": "oracle",
        "model": {"id": "none"}, "execution": {"attempts": 2, "preflight": {"mode": "oracle", "runs": 2}}}}}))
    done = snakemake(workdir, "--configfile", str(path))
    assert done.returncode == 0, done.stderr[-4000:]
    run = workdir / "results" / "default" / "sharded"
    # 2 tasks of 2 attempts in slices of 3: the first shard holds both tasks' attempts, the second task's
    # preflight is shared with the second shard
    assert jobs_run(done.stderr) == {"request": 1, "tasks": 1, "plans": 1, "preflight": 2, "shard": 2,
                                     "metrics": 1, "report": 1}
    logs = sorted(run.glob("shards/*/shard.log"))
    for log in logs:
        assert "preflight" not in jobs_run(log.read_text()), log.read_text()[-3000:]
    assert [jobs_run(log.read_text()).get("prepare") for log in logs] == [3, 1]
    assert json.loads((run / "metrics.json").read_text())["scored_on"] == {
        "tasks": 2, "scored": 2, "quarantined": [], "skipped": 0, "attempts": 4, "counted": 4, "infrastructure": 0}
    again = snakemake(workdir, "--configfile", str(path))
    assert again.returncode == 0 and jobs_run(again.stderr) == {}, again.stderr[-3000:]
