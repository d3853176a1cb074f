"""Events: every run appends what it does to results/<ns>/<run_id>/events.jsonl, from its shards'
inner runs too, and an SDK caller sees each event as the run goes."""

from __future__ import annotations

import collections
import json
import logging
import multiprocessing
import os
import re
from pathlib import Path

import jsonschema

from agentcompass._util import jsonio
from agentcompass.pipeline import events as ev
from agentcompass.pipeline.files import EVENT_TYPES, generate_schema, schema_path
from agentcompass.testing.endpoint import ScriptedEndpoint, completion

TASKS = 6  # two shards: 4 attempts and 2
FAILING = "w3"
RUN = Path("results/default/ev")


def model(body):
    word = re.search(r"Repeat the word (w\d+)\.", body["messages"][-1]["content"]).group(1)
    if word == FAILING:
        return 400, {"error": {"message": "scripted refusal"}}  # a 4xx other than 429 is not retried
    return 200, completion(word)


def evaluate(workdir: Path, endpoint, temperature: float, seen: list | None = None):
    from agentcompass.sdk import run_evaluation

    return run_evaluation(
        "synthetic", "chat", "scripted", base_url=endpoint.base_url, model_params={"temperature": temperature},
        benchmark_params={"num_tasks": TASKS}, run_id="ev", workdir=workdir, snakemake_args=["--quiet"],
        config_paths=[write_runtime(workdir)], on_event=None if seen is None else seen.append,
    )


def write_runtime(workdir: Path) -> Path:
    path = workdir / "runtime.yaml"
    path.write_text(json.dumps({"runtime": {"shard_size": 4, "progress": False}}))
    return path


def lines(workdir: Path) -> list[dict]:
    return [json.loads(line) for line in (workdir / RUN / "events.jsonl").read_text().splitlines()]


def of(events: list[dict], invocation: str) -> list[dict]:
    return [e for e in events if e["invocation"] == invocation]


def planned(events: list[dict]) -> int:
    """The attempts an invocation builds, as a reader counts them: the latest count of each shard."""
    latest = {}
    for e in events:
        if e["event"] == "attempts_planned":
            latest[e["shard"]] = e["attempts"]
    return sum(latest.values())


def by_attempt(events: list[dict]) -> dict[tuple[str, int], list[str]]:
    out = collections.defaultdict(list)
    for e in events:
        if "task_id" in e:
            out[(e["task_id"], e["attempt"])].append(e["event"])
    return out


def test_the_event_schema_is_generated_from_the_contracts():
    committed = json.loads(schema_path("event").read_text())
    assert committed == generate_schema("event"), "run scripts/generate_schemas.py"
    assert {d["properties"]["event"]["enum"][0] for d in committed["$defs"].values() if "event" in d["properties"]} \
        == set(EVENT_TYPES)


def test_a_sharded_run_and_its_reruns_append_what_they_build(workdir: Path, monkeypatch):
    monkeypatch.setenv("AGENTCOMPASS_USER_CONFIG", "")
    validator = jsonschema.Draft202012Validator(json.loads(schema_path("event").read_text()))
    seen: list[dict] = []
    with ScriptedEndpoint(model) as endpoint:
        [outcome] = evaluate(workdir, endpoint, 0.0, seen).outcomes
        assert outcome.state == "completed_with_errors"
        first = lines(workdir)
        for event in first:
            validator.validate(event)
        # the callback saw every event, in the file's order, before the call returned
        assert seen == first
        [invocation] = {e["invocation"] for e in first}
        assert first[0]["event"] == "request_started" and first[-1]["event"] == "request_finished"
        assert first[-1]["outcome"]["state"] == "completed_with_errors" and first[-1]["outcome"]["done"] == TASKS
        outer = first[0]["pid"]
        # the attempts were built by the shards' inner runs, each a process of its own
        inner = {(e["shard"], e["pid"]) for e in first if e["event"] == "attempt_finished"}
        assert {s for s, _ in inner} == {0, 1} and outer not in {p for _, p in inner}
        assert planned(first) == TASKS
        # one plan, start and finish per attempt, in that order; the plan is the one run_info.json keeps
        info = json.loads((workdir / RUN / "run_info.json").read_text())["resolved_execution_plans"]
        assert len(by_attempt(first)) == TASKS
        for (task, attempt), kinds in by_attempt(first).items():
            assert kinds == ["execution_plan_resolved", "attempt_started", "attempt_finished"], (task, kinds)
        for e in first:
            if e["event"] == "execution_plan_resolved":
                assert e["plan"] == info[e["task_id"]]["attempts"][str(e["attempt"])]
            if e["event"] == "attempt_started":
                assert e["stage"] == "prepare"
            if e["event"] == "attempt_finished":
                result = json.loads((workdir / RUN / "attempts" / e["task_id"] / "1" / "result.json").read_text())
                assert (e["status"], e["score"], e["error_stage"]) == (
                    result["status"], result["score"], result.get("error_stage"))
                assert e["stages"] == ["prepare", "run", "evaluate"]
        failed = [e for e in first if e["event"] == "attempt_finished" and e["status"] != "completed"]
        assert [(e["status"], e["error_stage"]) for e in failed] == [("run_error", "run")]
        assert ev.read_events(workdir / RUN) == first
        assert ev.STARTED_ENV not in os.environ  # the caller's process goes on without the run's identity

        # a change of temperature reruns every attempt from its run stage: that is all it appends
        seen.clear()
        evaluate(workdir, endpoint, 0.5, seen)
        every = lines(workdir)
        assert every[:len(first)] == first
        second = every[len(first):]
        assert seen == second and {e["invocation"] for e in second} != {invocation}
        assert planned(second) == TASKS
        assert sorted(e["stage"] for e in second if e["event"] == "attempt_started") == ["run"] * TASKS
        assert {tuple(e["stages"]) for e in second if e["event"] == "attempt_finished"} == {("run", "evaluate")}

        # nothing to build: nothing appended, and the callback is never called
        seen.clear()
        evaluate(workdir, endpoint, 0.5, seen)
        assert lines(workdir) == every and seen == []

        # one deleted result.json is one regrade, in its shard alone
        (workdir / RUN / "attempts/t4/1/result.json").unlink()
        evaluate(workdir, endpoint, 0.5, seen)
        third = lines(workdir)[len(every):]
        assert planned(third) == 1
        attempts = by_attempt(third)
        assert list(attempts) == [("t4", 1)] and attempts[("t4", 1)] == [
            "execution_plan_resolved", "attempt_started", "attempt_finished"]
        assert [e["stage"] for e in third if e["event"] == "attempt_started"] == ["evaluate"]
        for event in every + third:
            validator.validate(event)


def _append_many(path: str, writer: int, count: int) -> None:
    for i in range(count):
        jsonio.append_line(path, {"event": "x", "writer": writer, "i": i, "pad": "p" * (i % 300)})


def test_appends_from_several_processes_never_interleave(tmp_path: Path):
    path = str(tmp_path / "events.jsonl")
    procs = [multiprocessing.Process(target=_append_many, args=(path, w, 2000)) for w in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
        assert p.exitcode == 0
    rows = [json.loads(line) for line in Path(path).read_text().splitlines()]
    assert len(rows) == 8000
    for writer in range(4):  # and each writer's lines in the order it wrote them
        assert [r["i"] for r in rows if r["writer"] == writer] == list(range(2000))


def test_a_reader_takes_complete_lines_only_and_skips_what_is_not_an_event(tmp_path: Path):
    path = tmp_path / "events.jsonl"
    path.write_bytes(b'{"event": "a"}\n')
    follower = ev.Follower(path)  # from the end: what was there before is another invocation's
    assert follower.read() == []
    with open(path, "ab") as f:
        f.write(b'{"event": "b"}\nnot json\n[1]\n{"event": "c", "note": "half')
    assert [e["event"] for e in follower.read()] == ["b"]
    with open(path, "ab") as f:
        f.write(b' done"}\n')
    assert [e["event"] for e in follower.read()] == ["c"]
    assert [e["event"] for e in ev.read_events(tmp_path)] == ["a", "b", "c"]


class Caught(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def test_a_failing_callback_is_reported_once_and_the_others_still_arrive(tmp_path: Path):
    run = tmp_path / "run"
    run.mkdir()
    caught = Caught()
    logging.getLogger("agentcompass").addHandler(caught)
    jsonio.append_line(run / ev.EVENTS_FILE, {"event": "request_started", "invocation": "old"})
    got = []

    def callback(event):
        got.append(event["event"])
        if event["event"] == "attempt_started":
            raise RuntimeError("a bug in the caller's code")

    tail = ev.Tail([run], callback, interval=0.01).start()
    for kind, invocation in [("attempt_finished", "stale"), ("request_started", "now"), ("attempt_started", "now"),
                             ("attempt_started", "now"), ("attempt_finished", "stale"), ("request_finished", "now")]:
        jsonio.append_line(run / ev.EVENTS_FILE, {"event": kind, "invocation": invocation})
    try:
        tail.stop()
    finally:
        logging.getLogger("agentcompass").removeHandler(caught)
    assert got == ["request_started", "attempt_started", "attempt_started", "request_finished"]
    warnings = [m for m in caught.messages if "on_event raised" in m]
    assert len(warnings) == 1 and "RuntimeError: a bug in the caller's code" in warnings[0]
