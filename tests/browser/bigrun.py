"""A finished run of many instant attempts (synthetic + oracle), its files written directly.

The workflow builds 10,000 attempts in minutes; the report's test needs the files, not the
build. request.json, tasks.json and plans.json come from the workflow itself (the target
plans.json: no attempt runs), each attempt's files are written as its stages write them
(the same contracts, the same JSON writer), and metrics.json by the metrics stage's own code.
"""

from __future__ import annotations

import json
from pathlib import Path

from agentcompass._util.jsonio import write_json
from agentcompass.layout import task_segment
from agentcompass.pipeline.bodies import summary
from agentcompass.pipeline.jobs import RequestJob
from agentcompass.plugins import load_builtin_components
from agentcompass.runtime.models import PreparedTask, RunRequest, RunResult, TaskInput, TaskOutput, TaskStatus
from conftest import snakemake

RUN = Path("results/default/big")


def build(workdir: Path, tasks: int) -> Path:
    """``workdir/results/default/big``: ``tasks`` attempts, every 13th wrong, every 97th a run_error."""
    config = workdir / "big.yaml"
    config.write_text(json.dumps({
        "requests": {"big": {"benchmark": "synthetic", "harness": "oracle", "model": {"id": "none"}}},
        "benchmarks": {"synthetic": {"num_tasks": tasks}},
    }))
    planned = snakemake(workdir, str(RUN / "request.json"), str(RUN / "plans.json"), "--configfile", str(config))
    assert planned.returncode == 0, planned.stderr[-3000:]
    run = workdir / RUN
    req = RunRequest.from_dict(json.loads((run / "request.json").read_text()))
    plans = json.loads((run / "plans.json").read_text())["plans"]
    results = []
    for i, plan in enumerate(plans):
        task_id, word = plan["task_id"], plan["benchmark_plan"]["expected"]
        folder = run / "attempts" / task_segment(task_id) / "1"
        write_json(folder / "plan.json", plan)
        write_json(folder / "prepared.json", PreparedTask(
            task_id=task_id, category=f"c{i % 4}", input=TaskInput(prompt=f"Repeat the word {word}."),
            output=TaskOutput(answer="Only the word.")).to_dict())
        timings = {"run_seconds": 0.001 + (i % 7) / 1000, "evaluate_seconds": 0.002}
        if i % 97 == 96:
            result = RunResult(task_id=task_id, status=TaskStatus.RUN_ERROR, error_stage="run", timings=timings,
                               error=f"oracle: the sandbox went away after {i % 5 + 1} s", provenance={"host": "test"})
        else:
            answer = word if i % 13 else "wrong"
            result = RunResult(task_id=task_id, answer=answer, correct=answer == word, score=float(answer == word),
                               ground_truth=word, timings=timings, provenance={"host": "test"})
        write_json(folder / "output.json", {**result.to_dict(), "correct": None, "score": None})
        write_json(folder / "result.json", result.to_dict())
        results.append(folder / "result.json")
    load_builtin_components()
    summary.write_metrics(RequestJob(req, str(run), outputs={"metrics": str(run / "metrics.json")}, stage="metrics"),
                          results)
    return run
