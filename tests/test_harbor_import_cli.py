"""The Harbor job of tests/data/harbor_job (written through Harbor's own models) read as a run by the commands:
``runs`` and ``export`` show it, ``compare`` pairs it with an agentcompass run of the same task ids, ``report``
writes its pages only to a folder the user names; nothing is written into the folder.

The agentcompass run answers every example_exact_match question right (a scripted endpoint on 127.0.0.1); the
job passes capital-france's first trial only, so the flips are known.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from agentcompass.benchmarks.example_exact_match import _QUESTIONS
from agentcompass.testing.endpoint import ScriptedEndpoint, completion
from conftest import agentcompass

pytestmark = pytest.mark.e2e
JOB = Path(__file__).resolve().parent / "data" / "harbor_job"

def snapshot(folder: Path) -> dict[str, tuple[int, int, int]]:
    found = {}
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            info = os.lstat(os.path.join(root, name))
            found[os.path.relpath(os.path.join(root, name), folder)] = (info.st_size, info.st_mtime_ns, info.st_mode)
    return found


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> Path:
    """The working folder, holding results/default/ours: every question answered right."""
    workdir = tmp_path_factory.mktemp("harbor")
    def reply(body) -> tuple[int, dict]:
        asked = body["messages"][-1]["content"]
        return 200, completion(next(answer for _, question, _, answer in _QUESTIONS if question in asked))

    with ScriptedEndpoint(reply) as endpoint:
        assert endpoint.base_url.startswith("http://127.0.0.1:")
        done = agentcompass(workdir, "run", "example_exact_match", "chat", "scripted", "--base-url",
                            endpoint.base_url, "--run-id", "ours")
        assert done.returncode == 0, done.stderr[-3000:]
    return workdir


def test_a_harbor_job_compares_with_a_run_of_the_same_tasks(made: Path):
    before = snapshot(JOB)
    done = agentcompass(made, "compare", str(JOB), "results/default/ours", "--json")
    assert done.returncode == 0, done.stderr[-3000:]
    [c] = json.loads(done.stdout)["comparisons"]
    assert (c["a"]["namespace"], c["a"]["benchmark"], c["a"]["harness"], c["a"]["model"]) == (
        "imported", "example_exact_match", "terminus-2", "openai/gpt-4o-mini")
    # capital-france's second trial has no attempt 2 in the run to pair with; water-formula's trial is an
    # infrastructure failure, left out of the pairs
    assert [(u["task_id"], u["attempt"]) for u in c["only_a"]] == [("capital-france", 2)] and c["only_b"] == []
    assert c["paired"] == 4
    assert c["flipped"]["a_only"] == []
    assert sorted(f["task_id"] for f in c["flipped"]["b_only"]) == ["author-hamlet", "capital-japan",
                                                                     "largest-planet"]
    assert {f["name"]: (f["a"], f["b"]) for f in c["failures"]} == {"infrastructure": (1, 0), "limit": (1, 0)}
    text = agentcompass(made, "compare", str(JOB), "results/default/ours")
    assert text.returncode == 0 and "passed in B only (3)" in text.stdout, text.stdout
    assert snapshot(JOB) == before


def test_runs_export_and_report_of_a_harbor_job(made: Path):
    before = snapshot(JOB)
    done = agentcompass(made, "runs", str(JOB), "--json")
    assert done.returncode == 0, done.stderr[-3000:]
    [found] = json.loads(done.stdout)
    assert (found["namespace"], found["run_id"], found["attempts_done"], found["attempts_total"]) == (
        "imported", "harbor_job", 6, 6)
    assert found["failures"] == {"infrastructure": 1, "limit": 1} and found["accuracy"] == pytest.approx(0.2)
    # no prices: the cost is what the job's agent results say they cost, summed (every view reads that sum)
    reported = [json.loads(p.read_text())["agent_result"].get("cost_usd") for p in JOB.glob("*/result.json")
                if (json.loads(p.read_text()).get("agent_result") or {}).get("cost_usd") is not None]
    assert reported and found["cost_usd"] == pytest.approx(sum(reported))
    done = agentcompass(made, "export", str(JOB), "--format", "jsonl")
    assert done.returncode == 0, done.stderr[-3000:]
    by = {(r["task_id"], r["attempt"]): r for r in map(json.loads, done.stdout.splitlines())}
    assert len(by) == 6
    assert (by["author-hamlet", 1]["score"], by["author-hamlet", 1]["correct"]) == (0.75, False)
    assert (by["largest-planet", 1]["status"], by["largest-planet", 1]["failure_class"]) == ("run_error", "limit")
    assert by["capital-france", 1]["prompt_tokens"] == 812 and by["capital-france", 1]["run_seconds"] == 4.0
    report = agentcompass(made, "report", str(JOB))
    assert report.returncode == 2 and "Traceback" not in report.stderr, report.stderr[-3000:]
    # its report goes to a folder the user names, never into the job
    report = agentcompass(made, "report", str(JOB), "--out", "harbor-report")
    assert report.returncode == 0, report.stderr[-3000:]
    assert "capital-japan" in (made / "harbor-report" / "data" / "attempts.js").read_text()
    assert snapshot(JOB) == before


def test_a_hostile_job_is_a_clear_error_of_the_command(made: Path, tmp_path: Path):
    import shutil

    job = tmp_path / "harbor_job"
    shutil.copytree(JOB, job)
    trial = job / "capital-japan__i7j8k9l" / "result.json"
    trial.write_bytes(trial.read_bytes()[:200])
    done = agentcompass(made, "compare", str(job), "results/default/ours")
    assert done.returncode == 2, (done.returncode, done.stderr[-3000:])
    assert f"{trial}: is not valid JSON" in done.stderr and "Traceback" not in done.stderr
