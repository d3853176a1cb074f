"""plans.json written one plan at a time, and its index (agentcompass.pipeline.plan_index).

The streamed plans.json is byte for byte what the whole-payload writer wrote; the index
gives each plan's span and each shard's digest as ``AttemptFingerprints.shard`` computed
it from the whole file; an index that is missing, stale, of another shard size, truncated
or garbled is built again from plans.json, never trusted and never a reason to fail.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from agentcompass import layout
from agentcompass._util.jsonio import canonical_json, publishing, read_json
from agentcompass.pipeline import plan_index, reading, reuse
from agentcompass.pipeline.bodies import request as bodies
from agentcompass.pipeline.files import PlansFile, TasksFile, write_file
from agentcompass.plugins import load_components
from agentcompass.runtime import Planner, build_run_recipe_registry
from agentcompass.runtime.models import (
    BenchmarkSpec,
    ExecutionPlan,
    ExecutionSpec,
    HarnessSpec,
    ModelSpec,
    RunMetadata,
    RunRequest,
    TaskSpec,
)

load_components()

# ids and texts beyond ASCII: a plan's byte span is not its character span
TASKS = [
    TaskSpec(task_id="capitale-française", question="Où est l'hôtel de ville ?", ground_truth="Paris"),
    TaskSpec(task_id="tokyo/東京", question="首都は？", category="geo", ground_truth="東京"),
    TaskSpec(task_id="plain", question="2 + 2?", ground_truth="4"),
    TaskSpec(task_id="emoji", question="Say 🦜.", ground_truth="🦜"),
]
ATTEMPTS = 3  # 12 attempts


def make_request(attempts: int = ATTEMPTS) -> RunRequest:
    return RunRequest(
        model=ModelSpec(), benchmark=BenchmarkSpec(id="example_exact_match"), harness=HarnessSpec(id="oracle"),
        execution=ExecutionSpec(attempts=attempts), metadata=RunMetadata(request_name="ünïcode"),
    )


def old_plans_file(req: RunRequest, tasks: list[TaskSpec]) -> str:
    """plans.json as the whole-payload writer wrote it: every plan made, then one canonical_json."""
    planner = Planner(reading.benchmark_for(req), reading.harness_for(req), build_run_recipe_registry(req),
                      reading.environment_for(req.environment.id))
    plans = [planner.plan(req, task, a) for task in tasks for a in range(1, req.execution.attempts + 1)]
    return canonical_json(PlansFile(req.metadata.request_name, plans).to_dict())


@pytest.fixture
def run(tmp_path: Path) -> Path:
    """A run folder with tasks.json of TASKS and plans.json (and its index, for slices of 5) written."""
    req = make_request()
    write_file("tasks", layout.tasks_file(tmp_path), TasksFile("ünïcode", "example_exact_match", TASKS))
    bodies.plan_list(req, layout.tasks_file(tmp_path), layout.plans_file(tmp_path), shard_size=5)
    return tmp_path


def keys_of(tasks: list[TaskSpec], attempts: int = ATTEMPTS) -> list[tuple[str, int]]:
    return [(layout.task_segment(t.task_id), a) for t in tasks for a in range(1, attempts + 1)]


def digests_from_whole_files(run: Path, size: int) -> list[str]:
    """Each slice's digest as ``AttemptFingerprints.shard`` computed it: from the whole files, parsed."""
    tasks = {layout.task_segment(t["task_id"]): t for t in read_json(layout.tasks_file(run))["tasks"]}
    plans = {(layout.task_segment(p["task_id"]), p["attempt"]): p for p in read_json(layout.plans_file(run))["plans"]}
    keys = keys_of(TASKS)
    return [reuse.digest([[tasks[s], plans[(s, a)]] for s, a in keys[i:i + size]]) for i in range(0, len(keys), size)]


def shard_digests(run: Path, size: int) -> list[str]:
    keys = keys_of(TASKS)
    return [plan_index.shard_digest(layout.plans_file(run), layout.tasks_file(run), size, k, keys[i:i + size],
                                    lambda: reading.raw_tasks(layout.tasks_file(run)))
            for k, i in enumerate(range(0, len(keys), size))]


def index_json(run: Path) -> dict:
    return plan_index._decoded(Path(layout.plan_index_file(run)).read_bytes())


def forget() -> None:
    """What this process holds of every index: the next read starts from the files."""
    plan_index._held.clear()


@pytest.mark.parametrize("attempts, tasks", [(ATTEMPTS, TASKS), (1, TASKS[:1]), (2, [])],
                         ids=["12-attempts", "one-plan", "no-plans"])
def test_plans_json_is_byte_for_byte_what_the_whole_payload_writer_wrote(tmp_path: Path, attempts, tasks):
    req = make_request(attempts)
    tasks_path, out = layout.tasks_file(tmp_path), layout.plans_file(tmp_path)
    write_file("tasks", tasks_path, TasksFile("ünïcode", "example_exact_match", tasks))
    published = []
    with publishing(published.append):
        view = bodies.plan_list(req, tasks_path, out, shard_size=5)
    assert Path(out).read_bytes() == old_plans_file(req, tasks).encode()
    # the writer the plans file had: validated, scrubbed, canonical, atomic
    write_file("plans", tmp_path / "old.json", read_json(out))
    assert (tmp_path / "old.json").read_bytes() == Path(out).read_bytes()
    # recorded just before it appeared (each write once: plans.json, then its index)
    assert published == [Path(out), Path(layout.plan_index_file(tmp_path))]
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    # run_info.json's view, from the plans in hand, is what decoding plans.json gives
    decoded = [ExecutionPlan.from_dict(p, *reading.plan_classes(req)) for p in read_json(out)["plans"]]
    expected: dict = {}
    for plan in decoded:
        expected.setdefault(plan.task_id, {"attempts": {}})["attempts"][str(plan.attempt)] = plan.audit_view()
    assert view == expected


def test_the_index_gives_each_plans_span_and_each_shards_digest(run: Path):
    data = index_json(run)
    assert list(zip(data["segments"], data["attempts"])) == keys_of(TASKS)
    raw = Path(layout.plans_file(run)).read_bytes()
    whole = read_json(layout.plans_file(run))["plans"]
    assert [json.loads(raw[o:o + n]) for o, n in zip(data["offsets"], data["lengths"])] == whole
    assert data["shard_size"] == 5 and data["shards"] == digests_from_whole_files(run, 5)
    assert len(data["shards"]) == 3  # 5, 5 and 2 attempts
    forget()
    assert shard_digests(run, 5) == digests_from_whole_files(run, 5)
    wanted = [keys_of(TASKS)[7], keys_of(TASKS)[2]]
    assert plan_index.read_plans(layout.plans_file(run), wanted) == {
        (layout.task_segment(p["task_id"]), p["attempt"]): p for p in (whole[7], whole[2])}
    with pytest.raises(KeyError, match="no plan of task segment 'plain', attempt 9"):
        plan_index.read_plans(layout.plans_file(run), [("plain", 9)])


def test_a_read_parses_the_plans_it_asks_for_and_no_other(run: Path):
    """Every other plan's text blanked out (same size, same time): the index is trusted, and the
    plans asked for are read from their spans alone."""
    path = Path(layout.plans_file(run))
    data, st, index = bytearray(path.read_bytes()), path.stat(), index_json(run)
    for i, (offset, length) in enumerate(zip(index["offsets"], index["lengths"])):
        if i not in (5, 6):
            data[offset:offset + length] = b"x" * length
    path.write_bytes(bytes(data))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    forget()
    keys = keys_of(TASKS)
    plans = plan_index.read_plans(path, keys[5:7])
    assert [(layout.task_segment(p["task_id"]), p["attempt"]) for p in plans.values()] == keys[5:7]
    # and the shard digests come from the index alone
    assert plan_index.shard_digest(path, layout.tasks_file(run), 5, 0, keys[:5], lambda: {}) == index["shards"][0]


def test_a_missing_index_is_built_again_from_plans_json(run: Path):
    before = index_json(run)
    Path(layout.plan_index_file(run)).unlink()
    forget()
    assert reading.plan_keys(layout.plans_file(run)) == keys_of(TASKS)
    rebuilt = index_json(run)
    assert {k: rebuilt[k] for k in ("segments", "attempts", "offsets", "lengths", "plans")} == \
        {k: before[k] for k in ("segments", "attempts", "offsets", "lengths", "plans")}
    forget()
    assert shard_digests(run, 5) == before["shards"]
    assert index_json(run)["shards"] == before["shards"]  # written back with them


def test_a_stale_index_is_built_again(run: Path):
    """plans.json rewritten (another request: 1 attempt per task): the index of the old one is not used."""
    req = make_request(attempts=1)
    old = index_json(run)
    plans_path = layout.plans_file(run)
    Path(plans_path).write_text(old_plans_file(req, TASKS))  # by another writer: no index written
    assert index_json(run) == old
    plans = plan_index.read_plans(plans_path, keys_of(TASKS, 1))
    assert [p["attempt"] for p in plans.values()] == [1, 1, 1, 1]
    assert index_json(run)["plans"] == list(plan_index.file_stamp(plans_path))
    assert reading.plan_keys(plans_path) == keys_of(TASKS, 1)


def test_digests_of_another_shard_size_or_tasks_json_are_made_again(run: Path):
    forget()
    assert shard_digests(run, 2) == digests_from_whole_files(run, 2)
    data = index_json(run)
    assert data["shard_size"] == 2 and len(data["shards"]) == 6
    # tasks.json rewritten (its time changes): the digests are made again from it
    tasks = read_json(layout.tasks_file(run))
    tasks["tasks"][0]["question"] = "Où est la mairie ?"
    Path(layout.tasks_file(run)).write_text(canonical_json(tasks))
    forget()
    fresh = shard_digests(run, 2)
    assert fresh == digests_from_whole_files(run, 2) and fresh[0] != data["shards"][0] and fresh[2] == data["shards"][2]


def check_rebuilt(run: Path, digests_first: bool = False) -> None:
    """Whatever the index file holds, reads give plans.json's plans, keys and digests (asked for
    first, or after the plans), and the file is written again, whole and right."""
    forget()
    keys = keys_of(TASKS)
    whole = read_json(layout.plans_file(run))["plans"]
    if digests_first:
        assert shard_digests(run, 5) == digests_from_whole_files(run, 5)
    assert list(plan_index.read_plans(layout.plans_file(run), keys).values()) == whole
    assert reading.plan_keys(layout.plans_file(run)) == keys
    assert shard_digests(run, 5) == digests_from_whole_files(run, 5)
    data = index_json(run)
    assert list(zip(data["segments"], data["attempts"])) == keys and data["shards"] == digests_from_whole_files(run, 5)


def flip_a_digest(data: bytes) -> bytes:
    """The first shard's digest changed (a file whose text is still valid: only its checksum tells)."""
    at = data.index(b'"shards":["') + len(b'"shards":["')
    return data[:at] + (b"0" if data[at:at + 1] != b"0" else b"1") + data[at + 1:]


@pytest.mark.parametrize("garble", [
    lambda data: data[: len(data) // 2],
    flip_a_digest,
    lambda data: b"\x00\xff garbage",
    lambda data: b"",
], ids=["truncated", "a-digest-changed", "not-json", "empty"])
def test_a_truncated_or_garbled_index_is_built_again_rather_than_trusted(run: Path, garble):
    index = Path(layout.plan_index_file(run))
    index.write_bytes(garble(index.read_bytes()))
    check_rebuilt(run)


def shifted_spans(data: dict) -> dict:
    return {**data, "offsets": [o + 1 for o in data["offsets"]]}


def wrong_keys(data: dict) -> dict:
    return {**data, "segments": list(reversed(data["segments"]))}


def lost_entry(data: dict) -> dict:
    return {**data, **{name: data[name][:3] + data[name][4:] for name in ("segments", "attempts", "offsets", "lengths")}}


@pytest.mark.parametrize("wrong", [
    shifted_spans, wrong_keys, lost_entry,
    lambda data: {**data, "version": 0},
    lambda data: {**data, "offsets": "many"},
    lambda data: {**data, "lengths": [10 ** 9] * len(data["lengths"])},
    lambda data: {**data, "shards": ["short"] * 3},
    lambda data: {**data, "shards": data["shards"][:2]},
    lambda data: [data],
], ids=["shifted-spans", "wrong-keys", "lost-entry", "other-version", "wrong-type", "past-the-end", "bad-digests",
        "digests-missing", "not-an-object"])
@pytest.mark.parametrize("digests_first", [False, True], ids=["plans-first", "digests-first"])
def test_an_index_whole_but_wrong_is_built_again_rather_than_trusted(run: Path, wrong, digests_first: bool):
    """An index file that matches its digest but not plans.json (a bug of its writer): each read
    checks what it finds at a span is the plan it asked for."""
    index = Path(layout.plan_index_file(run))
    index.write_bytes(plan_index._encoded(wrong(index_json(run))))
    check_rebuilt(run, digests_first)


def test_plans_json_in_any_valid_layout_is_indexed(tmp_path: Path):
    """A plans.json that is not the canonical writer's (compact, keys in another order, a BOM-less
    UTF-8 file with its text unescaped): the spans found are the plans' bytes."""
    req = make_request(attempts=2)
    canonical = json.loads(old_plans_file(req, TASKS))
    plans = canonical["plans"]
    path = tmp_path / "plans.json"
    path.write_text('{"request_name":"x" ,\n"plans" : [ ' + " ,".join(json.dumps(p, ensure_ascii=False)
                                                                     for p in plans) + "\t] }", encoding="utf-8")
    forget()
    got = plan_index.read_plans(path, keys_of(TASKS, 2))
    assert list(got.values()) == plans
    path.write_text('{"plans": [], "request_name": "x"}')
    forget()
    assert reading.plan_keys(path) == []


def test_an_index_that_cannot_be_written_is_held_in_memory(run: Path):
    """A folder the index cannot be written to (here: a folder in its place) costs a rebuild per
    process, never a failure."""
    index = Path(layout.plan_index_file(run))
    index.unlink()
    index.mkdir()
    forget()
    keys = keys_of(TASKS)
    assert list(plan_index.read_plans(layout.plans_file(run), keys).values()) == read_json(layout.plans_file(run))["plans"]
    assert shard_digests(run, 5) == digests_from_whole_files(run, 5)
    assert index.is_dir() and not list(index.iterdir()) and not [p for p in run.iterdir() if p.name.endswith(".tmp")]
