"""One failure of each class the pipeline produces, end to end: result.json, metrics.json, the report,
``runs``, ``compare`` and ``retry --only``.

Five requests of one attempt each, through the real command line and the real
Snakemake, against a scripted endpoint on 127.0.0.1 that answers by model id:

- endpoint: every call gets a 503, after its retries;
- limit: the endpoint answers the first turn, never the second, and the attempt's ``execution.task_timeout``
  ends it (both calls count in its usage, metrics and cost);
- verifier: the oracle answers and the judge replies with no verdict;
- harness: the harness's own code raises (a message about a dead sandbox and a timeout);
- infrastructure: the host_process sandbox is ended from outside mid-command (no retries left), in the
  first of two tasks: every figure (the run's last line, metrics.json, the report, ``runs``, ``compare``) is
  over the other one, and says so.

The ``task`` class (a quarantined attempt) comes from the preflight stage and is
not produced here; tests/unit/test_failures.py counts it.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from agentcompass.environments.netns import network_isolation
from agentcompass.testing.endpoint import Hang, ScriptedEndpoint, completion, server_error
from conftest import agentcompass, clean_env

DRIVER = Path(__file__).parent / "drivers" / "failure_classes_workflow.py"
# request name -> the class its one attempt fails with
EXPECTED = {"endpoint": "endpoint", "limit": "limit", "verifier": "verifier", "harness": "harness",
            "infrastructure": "infrastructure"}


def reply(body):
    if body.get("model") == "hangs" and len(body["messages"]) == 1:
        return completion("Lyon?")  # its first turn; the follow-up is never answered
    return {"fails": server_error(503), "hangs": Hang(seconds=60)}.get(
        body.get("model"), completion("It looks right to me."))  # the judge: no GRADE line, no verdict


def config(workdir: Path, url: str) -> Path:
    (workdir / "d.jsonl").write_text(json.dumps({"question": "Capital of France?", "answer": "Paris"}) + "\n")
    one_task = {"id": "example_exact_match", "params": {"limit": 1}}
    chat = {"id": "chat", "params": {"max_model_retries": 1, "retry_backoff": 0, "rate_limit_patience": 0}}
    requests = {
        "endpoint": {"benchmark": one_task, "harness": chat, "model": {"id": "fails", "base_url": url}},
        "limit": {"benchmark": one_task, "harness": {**chat, "params": {**chat["params"], "follow_ups": ["Sure?"]}},
                  "model": {"id": "hangs", "base_url": url, "pricing": {"input_per_million": 1e6,
                                                                         "output_per_million": 1e6}},
                  "execution": {"task_timeout": 2}},
        "verifier": {"benchmark": {"id": "dataset", "params": {
            "path": str(workdir / "d.jsonl"), "fields": {"input": "question", "target": "answer"},
            "scorer": "model_graded", "judge": {"id": "undecided", "base_url": url}}},
            "harness": "oracle", "model": {"id": "none"}},
        "harness": {"benchmark": one_task, "harness": "test_raises", "model": {"id": "none"}},
        "infrastructure": {"benchmark": {"id": "example_exact_match", "params": {"limit": 2}},
                           "harness": {"id": "test_sandbox_fault", "params": {
                               "fault": "drop_session", "faults": 1, "only_task": "capital-france"}},
                           "environment": {"id": "host_process", "run_network": "none"}, "model": {"id": "none"},
                           "execution": {"max_retries": 0}},
    }
    path = workdir / "classes.yaml"
    path.write_text(yaml.safe_dump({"requests": requests}))
    return path


def drive(workdir: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(DRIVER), str(workdir), *args], cwd=workdir, env=clean_env(),
                          capture_output=True, text=True, timeout=600)


def run_dir(workdir: Path, name: str) -> Path:
    return workdir / "results" / "default" / name


def result_of(workdir: Path, name: str, task: str = "*") -> dict:
    [path] = (run_dir(workdir, name) / "attempts").glob(f"{task}/1/result.json")
    return json.loads(path.read_text())


def calls(endpoint: ScriptedEndpoint) -> dict[str, int]:
    counted: dict[str, int] = {}
    for request in endpoint.requests:
        counted[request.body["model"]] = counted.get(request.body["model"], 0) + 1
    return counted


def counter(workdir: Path, name: str, file: str, task: str = "*") -> int:
    [path] = (run_dir(workdir, name) / "attempts").glob(f"{task}/1/{file}")
    return int(path.read_text())


@pytest.mark.skipif(not network_isolation()[0], reason=f"host_process cannot isolate here: {network_isolation()[1]}")
def test_one_failure_of_each_class_is_classed_counted_shown_and_retried_by_class(workdir: Path):
    with ScriptedEndpoint(reply) as endpoint:
        url = endpoint.base_url
        cfg = config(workdir, url)
        done = drive(workdir, "run", "--config", str(cfg))
        assert done.returncode == 1, done.stdout + done.stderr[-4000:]  # every request ends with a failed attempt

        for name, cls in EXPECTED.items():
            result = result_of(workdir, name, "capital-france" if name == "infrastructure" else "*")
            assert result["status"] != "completed" and result["failure_class"] == cls, (name, result)
            metrics = json.loads((run_dir(workdir, name) / "metrics.json").read_text())
            assert metrics["summary"]["overall"]["failures"] == {cls: 1}, name
            page = (run_dir(workdir, name) / "report" / "index.html").read_text()
            section = page[page.index('<section id="failures">'):]
            section = section[:section.index("</section>")]
            assert 'id="chart-failures"' in section and f"<td>{cls}</td>" in section, name
        # the endpoint's last status is recorded beside the class; the harness's message spoke of a timeout
        assert result_of(workdir, "endpoint")["metadata"]["failure"] == {"class": "endpoint", "http_status": 503}
        assert "timeout" in result_of(workdir, "harness")["error"]
        # the calls of the attempt its time limit ended: in its result, the metrics and the cost
        usage = result_of(workdir, "limit")["usage"]
        assert (usage["calls"], usage["prompt_tokens"], usage["completion_tokens"]) == (2, 10, 2), usage
        overall = json.loads((run_dir(workdir, "limit") / "metrics.json").read_text())["summary"]["overall"]
        assert overall["calls"] == 2 and overall["cost_usd"] == pytest.approx(12.0), overall

        listed = agentcompass(workdir, "runs")
        assert listed.returncode == 0, listed.stderr
        lines = {line.split()[1]: line for line in listed.stdout.splitlines()[1:]}
        assert all(f"{cls}=1" in lines[name] for name, cls in EXPECTED.items()), listed.stdout
        # one denominator: the infrastructure failure is in no figure, and each says what it is over
        assert result_of(workdir, "infrastructure", "capital-japan")["correct"] is True
        metrics = json.loads((run_dir(workdir, "infrastructure") / "metrics.json").read_text())
        assert metrics["metrics"]["accuracy"] == metrics["summary"]["overall"]["accuracy"] == 1.0
        assert metrics["counts"] == {"completed": 1, "run_error": 1}
        [last] = [line for line in done.stdout.splitlines() if line.startswith("infrastructure: ")]
        assert "1 of 2 attempts failed" in last and "accuracy 1.0, mean_score 1.0 on 1 of 2 tasks; 1 infrastructure" in last
        page = (run_dir(workdir, "infrastructure") / "report" / "index.html").read_text()
        assert "scored on 1 of 2 tasks; 1 infrastructure." in page and ">1.000<" in page
        assert re.search(r"infrastructure=1 +1\.000 +1/2 tasks \(1 infrastructure\)", lines["infrastructure"]), listed.stdout
        itself = agentcompass(workdir, "compare", str(run_dir(workdir, "infrastructure")),
                              str(run_dir(workdir, "infrastructure")), "--resamples", "10")
        assert "paired: 1 attempt(s)" in itself.stdout and "left out: 1 infrastructure (in A or B)" in itself.stdout
        assert re.search(r"^ *accuracy +1\.000 +1\.000", itself.stdout, re.M), itself.stdout

        compared = agentcompass(workdir, "compare", str(run_dir(workdir, "endpoint")), str(run_dir(workdir, "limit")),
                                "--json", "--resamples", "10")
        assert compared.returncode == 0, compared.stderr
        [side_by_side] = json.loads(compared.stdout)["comparisons"]
        assert {f["name"]: (f["a"], f["b"]) for f in side_by_side["failures"]} == {"endpoint": (1, 0), "limit": (0, 1)}
        text = agentcompass(workdir, "compare", str(run_dir(workdir, "endpoint")), str(run_dir(workdir, "limit")),
                            "--resamples", "10").stdout
        assert re.search(r"^ *endpoint +1 +0 +-1$", text, re.M) and re.search(r"^ *limit +0 +1 +\+1$", text, re.M), text

        wrong = drive(workdir, "retry", "--config", str(cfg), "--only", "endpoint,network")
        assert wrong.returncode != 0
        assert "unknown failure class(es) 'network'" in wrong.stderr
        assert "infrastructure, endpoint, harness, limit, verifier, task" in wrong.stderr

        before = calls(endpoint)
        assert before == {"fails": 2, "hangs": 2, "undecided": 1}, before
        retried = drive(workdir, "retry", "--config", str(cfg), "--only", "endpoint,infrastructure")
        assert retried.returncode == 1, retried.stdout + retried.stderr[-4000:]
        assert "retrying 2 failed attempt(s) of class infrastructure, endpoint" in retried.stdout
        # endpoint: two more tries; the other model-calling attempts called nothing
        assert calls(endpoint) == {**before, "fails": 4}
        assert counter(workdir, "harness", "raises-calls") == 1  # not rerun
        assert counter(workdir, "infrastructure", "fault-calls", "capital-france") == 2  # rerun: its sandbox lasts
        assert counter(workdir, "infrastructure", "fault-calls", "capital-japan") == 1  # completed: not rerun
        healed = result_of(workdir, "infrastructure", "capital-france")
        assert healed["status"] == "completed" and healed["failure_class"] is None
        for name in ("endpoint", "limit", "verifier", "harness"):
            assert result_of(workdir, name)["failure_class"] == EXPECTED[name]
        metrics = json.loads((run_dir(workdir, "infrastructure") / "metrics.json").read_text())
        assert metrics["summary"]["overall"]["failures"] == {}
        assert metrics["scored_on"]["scored"] == 2 and metrics["scored_on"]["infrastructure"] == 0
