"""An Inspect AI ``.eval`` log, made by inspect_ai itself, read as a run by ``compare``, ``runs`` and ``export``.

The log is of the questions of example_exact_match (the same task ids), asked by ``inspect_ai.eval`` with its
``openai-api`` provider of a scripted endpoint on 127.0.0.1, two epochs; the agentcompass run asks the same
questions of another scripted endpoint with the chat harness. The answers differ on planted tasks, and
``compare`` must find exactly those flips.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest

from agentcompass.benchmarks.example_exact_match import _QUESTIONS
from agentcompass.testing.endpoint import ScriptedEndpoint, completion
from conftest import agentcompass, clean_env

pytest.importorskip("inspect_ai")
pytestmark = pytest.mark.e2e

# Inspect's answers: Hamlet wrong, water an error (a 500 with no retry: a run_error of class endpoint)
INSPECT_ANSWERS = {"France": "Paris", "Japan": "Tokyo", "planet": "Jupiter", "water": None, "Hamlet": "Marlowe"}
# agentcompass's: Japan wrong, the rest right
RUN_ANSWERS = {"France": "Paris", "Japan": "Kyoto", "planet": "Jupiter", "water": "H2O", "Hamlet": "Shakespeare"}

# the Inspect task, run by a Python of its own (inspect_ai sets up its own event loop and logging)
INSPECT_SCRIPT = """
import sys
from inspect_ai import Task, eval as inspect_eval
from inspect_ai.dataset import Sample
from inspect_ai.model import get_model
from inspect_ai.scorer import exact
from inspect_ai.solver import generate
from agentcompass.benchmarks.example_exact_match import _QUESTIONS

base_url, log_dir = sys.argv[1], sys.argv[2]
task = Task(name="example_exact_match", solver=generate(), scorer=exact(),
            dataset=[Sample(id=task_id, input=question, target=answer, metadata={"category": category})
                     for task_id, question, category, answer in _QUESTIONS])
model = get_model("openai-api/scripted/stub", base_url=base_url, api_key="not-a-secret")
[log] = inspect_eval(task, model=model, log_dir=log_dir, log_format="eval", display="none", epochs=2,
                     fail_on_error=False, max_retries=0, retry_on_error=0)
print(log.location)
"""


def answering(answers: dict[str, str | None]):
    def reply(body) -> tuple[int, dict]:
        question = body["messages"][-1]["content"]
        answer = next((a for k, a in answers.items() if k in question), "?")
        if answer is None:
            return 500, {"error": {"message": "scripted failure"}}
        found = completion(answer)
        found["usage"] = {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13}
        return 200, found
    return reply


def digest(path: Path) -> tuple[str, int]:
    return hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mtime_ns


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> tuple[Path, Path]:
    """(the working folder, holding results/default/ours; the Inspect log, under results/ too)."""
    import subprocess

    workdir = tmp_path_factory.mktemp("inspect")
    log_dir = workdir / "results" / "inspect-logs"
    script = workdir / "make_log.py"
    script.write_text(INSPECT_SCRIPT)
    # inspect_ai's data in the test's folder; any call it would make off this machine goes to a closed port
    nowhere = "http://127.0.0.1:9"
    env = clean_env(XDG_DATA_HOME=str(workdir / "xdg-data"), XDG_CACHE_HOME=str(workdir / "xdg-cache"),
                    HTTP_PROXY=nowhere, HTTPS_PROXY=nowhere, ALL_PROXY=nowhere, NO_PROXY="127.0.0.1,localhost")
    with ScriptedEndpoint(answering(INSPECT_ANSWERS)) as endpoint:
        assert endpoint.base_url.startswith("http://127.0.0.1:")
        done = subprocess.run([sys.executable, str(script), endpoint.base_url, str(log_dir)], cwd=workdir, env=env,
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        # 5 samples x 2 epochs, all asked here (the OpenAI client inspect_ai uses retries the 500s itself)
        asked = [r.body["messages"][-1]["content"] for r in endpoint.requests]
        assert len(asked) >= 10 and sorted(set(asked)) == sorted(question for _, question, *_ in _QUESTIONS)
    [log] = log_dir.glob("*.eval")
    with ScriptedEndpoint(answering(RUN_ANSWERS)) as endpoint:
        done = agentcompass(workdir, "run", "example_exact_match", "chat", "scripted", "--base-url",
                            endpoint.base_url, "--run-id", "ours", "-H", "max_model_retries=0")
        assert done.returncode == 0, done.stderr[-3000:]
    return workdir, log


def test_an_inspect_log_compares_with_a_run_of_the_same_tasks(made):
    workdir, log = made
    before = digest(log)
    done = agentcompass(workdir, "compare", str(log), "results/default/ours", "--json")
    assert done.returncode == 0, done.stderr
    [c] = json.loads(done.stdout)["comparisons"]
    assert (c["a"]["namespace"], c["a"]["benchmark"], c["a"]["harness"]) == ("imported", "example_exact_match",
                                                                            "generate")
    assert c["a"]["model"] == "openai-api/scripted/stub" and (c["a"]["attempts"], c["a"]["finished"]) == (10, 10)
    # epoch 1 pairs with the run's one attempt; epoch 2 has none to pair with
    assert c["paired"] == 5 and c["only_b"] == []
    assert sorted((u["task_id"], u["attempt"]) for u in c["only_a"]) == [(t, 2) for t, *_ in sorted(_QUESTIONS)]
    # Inspect passes France, Japan, planet; the run passes France, planet, water, Hamlet
    assert c["flipped"] == {"a_only": [{"task_id": "capital-japan", "attempt": 1}],
                            "b_only": [{"task_id": "author-hamlet", "attempt": 1},
                                       {"task_id": "water-formula", "attempt": 1}]}
    metrics = {m["name"]: m for m in c["metrics"]}
    assert (metrics["accuracy"]["a"], metrics["accuracy"]["b"]) == (0.6, 0.8)
    assert (metrics["errors"]["a"], metrics["errors"]["b"]) == (1, 0)
    assert {f["name"]: (f["a"], f["b"]) for f in c["failures"]} == {"endpoint": (1, 0)}
    usage = {u["name"]: u for u in c["usage"]}
    # the failed call's tokens are not counted on either side: 4 replies of 10 + 3 in A, 5 in B
    assert (usage["prompt_tokens"]["a"], usage["completion_tokens"]["a"]) == (40, 12)
    # the same as a table, with the import named; nothing was written into the log
    text = agentcompass(workdir, "compare", str(log), "results/default/ours")
    assert text.returncode == 0 and "passed in A only (1): capital-japan" in text.stdout
    assert digest(log) == before


def test_map_tasks_pairs_tasks_named_differently(made, tmp_path):
    workdir, log = made
    # A's Hamlet (wrong) is paired with B's planet (right), A's planet (right) with B's Hamlet (right)
    mapping = tmp_path / "map.yaml"
    mapping.write_text("author-hamlet: largest-planet\nlargest-planet: author-hamlet\n")
    done = agentcompass(workdir, "compare", str(log), "results/default/ours", "--map-tasks", str(mapping), "--json")
    assert done.returncode == 0, done.stderr
    [c] = json.loads(done.stdout)["comparisons"]
    assert c["flipped"]["b_only"] == [{"task_id": "largest-planet", "attempt": 1},
                                      {"task_id": "water-formula", "attempt": 1}]
    assert c["flipped"]["a_only"] == [{"task_id": "capital-japan", "attempt": 1}]
    # a mapping that names a task A does not have is refused, naming it
    (tmp_path / "bad.json").write_text(json.dumps({"no-such-task": "capital-france"}))
    bad = agentcompass(workdir, "compare", str(log), "results/default/ours", "--map-tasks", str(tmp_path / "bad.json"))
    assert bad.returncode == 2 and "no-such-task is not a task of run A" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_runs_and_export_show_the_log(made):
    workdir, log = made
    before = digest(log)
    done = agentcompass(workdir, "runs", str(log), "--json")
    assert done.returncode == 0, done.stderr
    [found] = json.loads(done.stdout)
    assert (found["namespace"], found["attempts_done"], found["attempts_total"]) == ("imported", 10, 10)
    assert found["failures"] == {"endpoint": 2} and found["accuracy"] == 0.6 and found["path"] == str(log)
    # imports are named, never found: a results root lists only agentcompass's runs
    listed = agentcompass(workdir, "runs", "results", "--json")
    assert [r["run_id"] for r in json.loads(listed.stdout)] == ["ours"]
    done = agentcompass(workdir, "export", str(log), "--format", "jsonl")
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(rows) == 10 and {r["attempt"] for r in rows} == {1, 2}
    by = {(r["task_id"], r["attempt"]): r for r in rows}
    assert by["water-formula", 2]["status"] == "run_error" and by["water-formula", 2]["failure_class"] == "endpoint"
    assert (by["author-hamlet", 1]["correct"], by["author-hamlet", 1]["score"]) == (False, 0.0)
    assert (by["capital-france", 1]["correct"], by["capital-france", 1]["prompt_tokens"]) == (True, 10)
    assert by["capital-france", 1]["category"] == "geography" and by["capital-france", 1]["calls"] == 1
    # it holds no agentcompass trajectory: ATIF export is refused, naming the log and the formats that work
    atif = agentcompass(workdir, "export", str(log), "--format", "atif", "-o", "atif-out")
    assert atif.returncode == 2 and "run of inspect" in atif.stderr and "jsonl" in atif.stderr
    assert "Traceback" not in atif.stderr and not (workdir / "atif-out").exists()
    # an import is never written to: its report goes to a folder the user names, or none is written
    report = agentcompass(workdir, "report", str(log))
    assert report.returncode == 2 and "never written to" in report.stderr and "--out DIR" in report.stderr
    assert "Traceback" not in report.stderr
    report = agentcompass(workdir, "report", str(log), "--out", "inspect-report")
    assert report.returncode == 0, report.stderr
    index = (workdir / "inspect-report" / "index.html").read_text()
    assert "10 of 10" in index and "A run inspect wrote, imported" in index
    assert "capital-japan" in (workdir / "inspect-report" / "data" / "attempts.js").read_text()
    assert digest(log) == before and sorted(p.name for p in log.parent.iterdir()) == [log.name]
