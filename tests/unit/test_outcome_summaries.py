"""results.outcomes reads a request's summaries: metrics.json's error kinds and the shards' records,
not every attempt's result.json (the end of a run of 100,000 attempts opens a few files)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentcompass import layout, results
from agentcompass.plugins import load_components
from agentcompass.runtime.config import load_run_config
from agentcompass.runtime.orchestration import resolve_orchestration

load_components()  # the ids below are the built-in components'

TASKS = ("a", "b", "c")
ATTEMPTS = 2  # 6 attempts in slices of 2: a/1 a/2 | b/1 b/2 | c/1 c/2
FAILED = ("b", 2)
KIND = "run_error: model call failed after N tries"


@pytest.fixture
def run(tmp_path: Path):
    """A request's folder as a run that finished leaves it: tasks.json, metrics.json with its summary,
    one result.json per attempt (one of them failed); and the orchestration of that request."""
    config = load_run_config([], {
        "runtime": {"results_dir": str(tmp_path / "results"), "shard_size": 2},
        "requests": {"r": {"benchmark": "example_exact_match", "harness": "oracle", "model": {"id": "none"},
                           "execution": {"attempts": ATTEMPTS}}},
    }, include_user=False, include_project=False)
    orchestration = resolve_orchestration(config)
    [folder] = results.run_folders(orchestration)
    write(layout.tasks_file(folder), {"tasks": [{"task_id": t} for t in TASKS]})
    for task, n in attempts():
        failed = (task, n) == FAILED
        write(result_file(folder, task, n), {
            "task_id": task, "attempt": n, "status": "run_error" if failed else "completed",
            "error": "model call failed after 3 tries\nTraceback ..." if failed else None})
    counts = {"completed": 5, "run_error": 1}
    write(layout.metrics_file(folder), {
        "benchmark_id": "example_exact_match", "metrics": {"accuracy": 5 / 6}, "counts": counts,
        "num_tasks": 3, "num_attempts": 6,
        "summary": {"overall": {"attempts": 6, "counts": counts, "errors": {KIND: 1}}, "by_category": {}}})
    return orchestration, folder


def attempts() -> list[tuple[str, int]]:
    return [(t, n) for t in TASKS for n in range(1, ATTEMPTS + 1)]


def result_file(folder: Path, task: str, n: int) -> Path:
    return Path(layout.result_file(layout.attempt_folder(folder, layout.task_segment(task), n)))


def shard_file(folder: Path, index: int) -> Path:
    return Path(layout.file_in(layout.shard_folder(folder, index), results.SHARD_STAGE))


def write(path, data) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(data))


def unreadable(path: Path) -> None:
    """A folder in the place of the file: reading it as a file fails (chmod does not stop root)."""
    path.unlink()
    path.mkdir()


def test_failed_attempts_by_kind_come_from_the_summary_and_no_result_file_is_read(run):
    orchestration, folder = run
    for task, n in attempts():
        unreadable(result_file(folder, task, n))
    with pytest.raises(ValueError):  # what reading any of them would do
        results.read_json(result_file(folder, *FAILED))
    [outcome] = results.outcomes(orchestration, True).outcomes
    assert (outcome.state, outcome.counts, outcome.errors, outcome.done, outcome.total) == \
        ("completed_with_errors", {"completed": 5, "run_error": 1}, {KIND: 1}, 6, 6)


def test_a_metrics_json_without_error_kinds_has_them_read_from_the_results(run):
    orchestration, folder = run
    metrics = json.loads(Path(layout.metrics_file(folder)).read_text())
    del metrics["summary"]  # as versions before the summary wrote it
    write(layout.metrics_file(folder), metrics)
    [outcome] = results.outcomes(orchestration, True).outcomes
    assert (outcome.state, outcome.errors, outcome.done, outcome.total) == ("completed_with_errors", {KIND: 1}, 6, 6)
    # a summary whose kinds do not add up to the failed attempts counts for none
    metrics["summary"] = {"overall": {"errors": {"run_error: another": 2}}}
    write(layout.metrics_file(folder), metrics)
    assert results.outcomes(orchestration, True).outcomes[0].errors == {KIND: 1}


def test_a_stopped_request_counts_a_recorded_slice_by_its_record_and_looks_for_the_rest(run):
    orchestration, folder = run
    for task, n in attempts():
        result_file(folder, task, n).unlink()
    # slice 0 (a/1, a/2) built: its record stands for its attempts, which are not looked for
    write(shard_file(folder, 0), {"shard": 0, "attempts": 2, "first": "a/1", "last": "a/2", "counts": {"completed": 2}})
    # slice 1's record is of another slicing (an earlier task list): its attempts are looked for, one is there
    write(shard_file(folder, 1), {"shard": 1, "attempts": 2, "first": "x/1", "last": "b/2", "counts": {"completed": 2}})
    write(result_file(folder, "b", 1), {"task_id": "b", "attempt": 1, "status": "completed"})
    # slice 2 has no record: both its attempts are there
    for n in (1, 2):
        write(result_file(folder, "c", n), {"task_id": "c", "attempt": n, "status": "completed"})
    [outcome] = results.outcomes(orchestration, False, reason="stopped by SIGTERM").outcomes
    assert (outcome.state, outcome.done, outcome.total, outcome.counts, outcome.reason) == \
        ("stopped", 5, 6, {}, "stopped by SIGTERM")
    # never sharded (shard_size 0): every attempt is looked for, records or not
    orchestration.runtime.shard_size = 0
    assert results.outcomes(orchestration, False).outcomes[0].done == 3


def test_a_dry_run_counts_the_attempts_of_the_task_list(run):
    orchestration, folder = run
    for task, n in attempts():
        unreadable(result_file(folder, task, n))
    [outcome] = results.outcomes(orchestration, True, dry_run=True).outcomes
    assert (outcome.state, outcome.total, outcome.done) == ("planned", 6, 0)
    Path(layout.tasks_file(folder)).unlink()  # before the task list is written: nothing known yet
    assert results.outcomes(orchestration, True, dry_run=True).outcomes[0].total == 0


def test_hostile_task_ids_and_a_planted_shard_record_link_count_nothing_outside_the_run(run, tmp_path: Path):
    """What the outcome reads is named by task ids (the task data's) and found in the run folder: an id
    that climbs out is one percent-encoded folder, and a shard record that is a link is not trusted."""
    orchestration, folder = run
    hostile = ("../../../escape", "a/b")
    write(layout.tasks_file(folder), {"tasks": [{"task_id": t} for t in hostile]})
    # where a naive join of the ids would land, outside the attempts folder: results that must not count
    for task in hostile:
        for n in (1, 2):
            write(folder / "attempts" / task / str(n) / "result.json", {"task_id": task, "attempt": n,
                                                                           "status": "completed"})
    # a shard record planted as a link to a file elsewhere that claims slice 0 is built
    outside = tmp_path / "claim.json"
    write(outside, {"shard": 0, "attempts": 2, "first": f"{layout.task_segment(hostile[0])}/1",
                    "last": f"{layout.task_segment(hostile[0])}/2", "counts": {"completed": 2}})
    shard_file(folder, 0).parent.mkdir(parents=True, exist_ok=True)
    shard_file(folder, 0).symlink_to(outside)
    [outcome] = results.outcomes(orchestration, False).outcomes
    assert (outcome.total, outcome.done) == (4, 0)
    assert all("/" not in layout.task_segment(t) and layout.task_segment(t) != ".." for t in hostile)


def test_each_way_a_run_ends_without_a_requests_metrics_says_why(run, monkeypatch):
    """The end-of-run line never says a job failed when none did: a run that ended well without the
    request's metrics.json built less than the request; one that did not end well says why it stopped."""
    from agentcompass._util import aio
    from agentcompass.pipeline import lifecycle
    from agentcompass.pipeline.targets import ONLY_ENV

    orchestration, folder = run
    Path(layout.metrics_file(folder)).unlink()
    monkeypatch.delenv(ONLY_ENV, raising=False)
    [ended_well] = results.outcomes(orchestration, True).outcomes
    assert ended_well.state == "partial" and "without error" in ended_well.reason
    assert "failed" not in ended_well.reason
    monkeypatch.setenv(ONLY_ENV, "preflight")  # agentcompass check
    assert results.outcomes(orchestration, True).outcomes[0].reason == "only each task's preflight was asked for"

    aio.reset()
    lifecycle.note_failures([])
    try:
        assert lifecycle.end_reason(True) is None
        own = lifecycle.end_reason(False)  # Snakemake's own error (a lock, an input it cannot make): no job failed
        assert own == "Snakemake stopped on an error of its own, and no job failed; its output above says which"
        lifecycle.note_failures(["tasks"])
        assert lifecycle.end_reason(False) == "1 job failed (tasks); Snakemake's output above names it"
        lifecycle.note_failures(["attempt", "attempt", "metrics"])
        assert lifecycle.end_reason(False) == "3 jobs failed (attempt, metrics); Snakemake's output above names them"
        aio.cancel_running("it received SIGTERM")  # a stop's own reason comes first
        assert lifecycle.end_reason(False) == "it received SIGTERM"
        [stopped] = results.outcomes(orchestration, False, reason=lifecycle.end_reason(False)).outcomes
        assert (stopped.state, stopped.reason) == ("stopped", "it received SIGTERM")
    finally:
        aio.reset()
        lifecycle.note_failures([])
