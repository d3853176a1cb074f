"""The call cache's store and keys (agentcompass.callcache): what a key holds, entries that are not whole,
writers of one key at once, the modes, and pruning."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from agentcompass import callcache
from agentcompass.callcache import AttemptCalls, CallKey, CallStore, Entry

ENDPOINT = "http://127.0.0.1:8000/v1"
BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "temperature": 0.0}
HOUR = 3600


def base_key(**changes) -> CallKey:
    key = CallKey(ENDPOINT, "m", "openai_chat", "/chat/completions", callcache.request_digest(BODY), 1, "run", 0)
    return dataclasses.replace(key, **changes)


def entry(text: str = "hello", status: int = 200) -> Entry:
    return Entry(status, "application/json", json.dumps({"text": text}).encode(), 10, 2, 0.5)


def calls(tmp_path: Path, mode: str = "on", **kw) -> AttemptCalls:
    return AttemptCalls(CallStore(tmp_path / "cache"), mode, kw.pop("attempt", 1), kw.pop("stage", "run"), **kw)


# --- keys ----------------------------------------------------------------------------------------


def test_each_field_of_the_key_changes_its_digest():
    base = base_key()
    changed = {"endpoint": "http://127.0.0.1:8001/v1", "model": "m2", "protocol": "anthropic",
               "path": "/v1/messages", "request": callcache.request_digest({**BODY, "temperature": 1}),
               "attempt": 2, "stage": "evaluate", "occurrence": 1}
    assert set(changed) == {f.name for f in dataclasses.fields(CallKey)}
    digests = {base.digest} | {base_key(**{name: value}).digest for name, value in changed.items()}
    assert len(digests) == len(changed) + 1
    assert base_key().digest == base.digest and len(base.digest) == 64


def test_only_the_volatile_fields_of_a_request_are_left_out_of_its_digest():
    digest = callcache.request_digest(BODY)
    for name in callcache.VOLATILE:
        assert callcache.request_digest({**BODY, name: {"session": "s-123"}}) == digest, name
    for name, value in (("stream", True), ("stream_options", {"include_usage": True}), ("temperature", 0.5),
                        ("tools", [{"type": "function"}]), ("max_tokens", 8), ("seed", 1), ("model", "m2"),
                        ("messages", [{"role": "user", "content": "hi!"}])):
        assert callcache.request_digest({**BODY, name: value}) != digest, name
    # the bytes of a JSON object are keyed as the object: key order and spacing do not count
    assert callcache.request_digest(json.dumps(dict(reversed(BODY.items())), indent=2).encode()) == digest
    assert callcache.request_digest(b"not json") != callcache.request_digest(b"not json!")
    assert callcache.request_digest(b"[1, 2]") != callcache.request_digest(b"[1,2]")  # no object: the bytes


def test_an_endpoint_is_keyed_without_its_credentials_query_fragment_or_case(tmp_path: Path):
    view = calls(tmp_path)
    plain = view.key(endpoint=ENDPOINT, model="m", protocol="openai_chat", path="/p", body=BODY)
    view.restart()
    noisy = view.key(endpoint="  HTTP://user:secret@127.0.0.1:8000/v1/?key=sk-1#frag ", model="m",
                     protocol="openai_chat", path="/p", body=BODY)
    assert noisy == plain and "secret" not in json.dumps(noisy.describe())
    assert callcache.endpoint_of("https://Api.Example.com/v1/") == "https://api.example.com/v1"


def test_occurrences_are_counted_per_request_and_a_restart_counts_from_the_first_again(tmp_path: Path):
    view = calls(tmp_path)

    def key(body=BODY, path="/chat/completions"):
        return view.key(endpoint=ENDPOINT, model="m", protocol="openai_chat", path=path, body=body)

    other = {**BODY, "temperature": 1}
    first = [key(), key(other), key(), key(path="/responses"), key(), key(other)]
    assert [k.occurrence for k in first] == [0, 0, 1, 0, 2, 1]
    assert len({k.digest for k in first}) == 6 and view.calls == 6
    view.restart()
    assert view.calls == 0
    again = [key(), key(other), key()]
    assert again == [first[0], first[1], first[2]], "a retry of the attempt gets the keys of its first try"
    assert calls(tmp_path, attempt=2).key(endpoint=ENDPOINT, model="m", protocol="openai_chat",
                                          path="/chat/completions", body=BODY) != first[0]


def test_cache_mode_reads_yamls_on_and_off_and_refuses_anything_else():
    assert [callcache.cache_mode(v) for v in (None, False, True, "off", "on", "refresh", "replay")] == [
        "off", "off", "on", "off", "on", "refresh", "replay"]
    for bad in ("yes", 1, "ON"):
        with pytest.raises(ValueError, match="execution.cache must be one of off, on, refresh, replay"):
            callcache.cache_mode(bad)
    assert callcache.cache_root("res") == Path("res/.call-cache") and callcache.cache_root("res", "/c") == Path("/c")


# --- the store -----------------------------------------------------------------------------------


def test_an_entry_is_read_back_as_written_scrubbed_and_with_bytes_that_are_no_utf8(tmp_path: Path):
    store = CallStore(tmp_path)
    raw = b'data: {"x": "\xff\xfe"}\n\ndata: [DONE]\n\n'
    store.write(base_key(), Entry(200, "text/event-stream", raw, 3, 4, 1.25))
    assert store.read(base_key()) == Entry(200, "text/event-stream", raw, 3, 4, 1.25)
    store.write(base_key(occurrence=1), entry("key sk-secret-1 here"), scrub=lambda t: t.replace("sk-secret-1", "[k]"))
    kept = store.read(base_key(occurrence=1))
    assert kept is not None and json.loads(kept.body) == {"text": "key [k] here"}
    assert b"sk-secret-1" not in store.path(base_key(occurrence=1).digest).read_bytes()
    record = json.loads(store.path(base_key().digest).read_text())
    assert record["key_stage"] == "run" and record["key_occurrence"] == 0 and record["key"] == base_key().digest
    assert store.read(base_key(occurrence=2)) is None


def test_an_entry_file_that_is_not_whole_is_a_miss(tmp_path: Path):
    store = CallStore(tmp_path)
    k = base_key()
    store.write(k, entry())
    path = store.path(k.digest)
    good = path.read_bytes()

    def damaged(data: bytes) -> Entry | None:
        path.unlink()
        path.write_bytes(data)
        return store.read(k)

    record = json.loads(good)
    assert damaged(good[: len(good) // 2]) is None, "torn"
    assert damaged(b"") is None, "empty"
    assert damaged(good.replace(b"hello", b"jello")) is None, "edited body"
    assert damaged(json.dumps({**record, "format": 99}).encode()) is None, "another format"
    assert damaged(json.dumps({**record, "status": "two hundred"}).encode()) is None, "a status that is no number"
    assert damaged(json.dumps([record]).encode()) is None, "no object"
    other = base_key(occurrence=5)
    store.write(other, entry("another"))
    assert damaged(store.path(other.digest).read_bytes()) is None, "another key's entry"
    assert damaged(good) == entry(), "the whole entry again"
    # a link, even to the key's own whole entry
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_bytes(good)
    path.unlink()
    path.symlink_to(elsewhere)
    assert store.read(k) is None
    path.unlink()
    path.mkdir()
    assert store.read(k) is None, "a folder"


def test_an_entry_larger_than_the_limit_is_a_miss(tmp_path: Path):
    store = CallStore(tmp_path)
    big = Entry(200, "text/plain", b"x" * (callcache.ENTRY_LIMIT - 200))
    store.write(base_key(), big)
    assert store.path(base_key().digest).stat().st_size > callcache.ENTRY_LIMIT
    assert store.read(base_key()) is None
    small = Entry(200, "text/plain", b"x" * (callcache.ENTRY_LIMIT - 2000))
    store.write(base_key(), small)
    assert store.read(base_key()) == small


def test_a_store_that_cannot_be_written_leaves_the_call_uncached_never_an_error(tmp_path: Path):
    (tmp_path / "file").write_text("not a folder")
    store = CallStore(tmp_path / "file")
    store.write(base_key(), entry())  # the call stands
    store.hit(base_key())
    assert store.read(base_key()) is None and list(store.entries()) == []
    assert store.stats()["entries"] == 0 and store.prune(max_bytes=0) == (0, 0)


def test_threads_writing_one_key_at_once_leave_a_whole_entry_and_readers_see_whole_ones(tmp_path: Path):
    store = CallStore(tmp_path)
    k = base_key()
    bodies = {f"writer {n} " + "y" * (20_000 * (n + 1)) for n in range(6)}
    seen: list[Entry | None] = []
    stop = threading.Event()

    def write(text: str) -> None:
        for _ in range(15):
            store.write(k, entry(text))

    def read() -> None:
        while not stop.is_set():
            seen.append(store.read(k))

    reader = threading.Thread(target=read)
    reader.start()
    writers = [threading.Thread(target=write, args=(text,)) for text in bodies]
    for t in writers:
        t.start()
    for t in writers:
        t.join()
    stop.set()
    reader.join()
    wanted = {entry(text).body for text in bodies}
    found = store.read(k)
    assert found is not None and found.body in wanted
    read_whole = [e for e in seen if e is not None]
    assert read_whole and all(e.body in wanted for e in read_whole)
    assert all(e is not None for e in seen[seen.index(read_whole[0]):]), "once written, never a miss"
    assert [p.name for p in store.path(k.digest).parent.iterdir()] == [f"{k.digest}.json"], "no temporary file"


WRITER = """
import json, sys
from agentcompass.callcache import CallKey, CallStore, Entry
store = CallStore(sys.argv[1])
key = CallKey(*json.loads(sys.argv[2]))
body = json.dumps({"text": sys.argv[3] + "z" * 100_000}).encode()
for _ in range(int(sys.argv[4])):
    store.write(key, Entry(200, "application/json", body, 1, 1))
"""


def test_two_processes_writing_one_key_leave_a_whole_entry(tmp_path: Path):
    store = CallStore(tmp_path)
    k = base_key()
    fields = json.dumps([getattr(k, f.name) for f in dataclasses.fields(CallKey)])
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path), fields, name, "60"])
             for name in ("first", "second")]
    seen = []
    while any(p.poll() is None for p in procs):
        seen.append(store.read(k))
    assert [p.wait() for p in procs] == [0, 0]
    texts = {json.loads(e.body)["text"][:6].rstrip("z") for e in [*seen, store.read(k)] if e is not None}
    assert store.read(k) is not None and texts <= {"first", "second"} and texts
    assert [p.name for p in store.path(k.digest).parent.iterdir()] == [f"{k.digest}.json"]


# --- modes ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode,reads,writes", [("off", False, False), ("on", True, True),
                                               ("refresh", False, True), ("replay", True, False)])
def test_each_mode_reads_and_writes_as_documented(tmp_path: Path, mode: str, reads: bool, writes: bool):
    store = CallStore(tmp_path / "cache")
    old, new = base_key(), base_key(occurrence=1)
    store.write(old, entry("kept before"))
    view = AttemptCalls(store, mode, 1, "run")
    assert (view.lookup(old) == entry("kept before")) is reads
    assert view.lookup(new) is None
    view.keep(new, entry("answered"))
    view.keep(old, entry("answered again"))
    assert (store.read(new) == entry("answered")) is writes
    assert store.read(old) == (entry("answered again") if writes else entry("kept before"))
    assert view.hits == int(reads) and sum(store.hits().values()) == int(reads)
    assert view.replaying is (mode == "replay")
    view.keep(base_key(occurrence=2), entry("refused", status=429))
    assert store.read(base_key(occurrence=2)) is None, "only an answered call is kept"


def test_a_replays_miss_is_recorded_and_its_message_names_the_call(tmp_path: Path):
    view = calls(tmp_path, "replay", stage="evaluate")
    view.key(endpoint=ENDPOINT, model="m", protocol="openai_chat", path="/chat/completions", body=BODY)
    k = view.key(endpoint=ENDPOINT, model="m", protocol="openai_chat", path="/chat/completions", body=BODY)
    assert view.lookup(k) is None
    miss = view.missed(k)
    assert view.misses == [miss] and miss["call"] == 2 and miss["occurrence"] == 1 and miss["key"] == k.digest
    message = callcache.miss_message(miss)
    assert "model call 2 of the evaluate stage" in message and "POST /chat/completions" in message
    assert f"request {k.request[:12]}" in message and "occurrence 1" in message and "never calls" in message
    assert view.record(k, "miss") == {"key": k.digest, "request": k.request, "occurrence": 1, "stage": "evaluate",
                                      "served": "miss"}


# --- pruning -------------------------------------------------------------------------------------


def aged(store: CallStore, ages_hours: list[float]) -> list[CallKey]:
    keys = []
    for n, age in enumerate(ages_hours):
        k = base_key(occurrence=n)
        store.write(k, entry("x" * 500))
        back(store, k, age)
        keys.append(k)
    return keys


def back(store: CallStore, key: CallKey, hours: float) -> None:
    """Set ``key``'s entry's time (of its last write or hit) ``hours`` ago."""
    then = time.time() - hours * HOUR
    os.utime(store.path(key.digest), (then, then))


def test_prune_by_size_removes_the_entries_used_longest_ago_and_their_hits(tmp_path: Path):
    store = CallStore(tmp_path)
    keys = aged(store, [5, 4, 3, 2, 1])
    store.hit(keys[0])  # used now: the newest
    store.hit(keys[0])
    store.hit(keys[4])
    store.hit(keys[1])
    back(store, keys[1], 4)  # a hit of long ago
    sizes = [store.path(k.digest).stat().st_size for k in keys]
    assert store.stats()["bytes"] == sum(sizes) and max(sizes) - min(sizes) < 10
    kept = sizes[0] + sizes[3] + sizes[4]
    assert store.prune(max_bytes=kept) == (2, sizes[1] + sizes[2])
    assert [store.read(k) is not None for k in keys] == [True, False, False, True, True]
    assert store.hits() == {keys[0].digest: 2, keys[4].digest: 1}
    assert store.stats()["hits"] == 3 and store.stats()["entries"] == 3
    assert store.prune(max_bytes=kept) == (0, 0)
    assert store.prune(max_bytes=0) == (3, kept) and store.hits() == {} and store.stats()["entries"] == 0


def test_prune_by_age_removes_what_was_not_used_for_that_long_and_old_temporary_files(tmp_path: Path):
    store = CallStore(tmp_path)
    keys = aged(store, [50, 30, 10, 1])
    store.hit(keys[0])
    store.hit(keys[1])
    back(store, keys[1], 30)
    folder = store.path(keys[0].digest).parent
    stale, fresh = folder / f".{keys[0].digest}.1-2-dead.tmp", folder / f".{keys[0].digest}.1-2-live.tmp"
    stale.write_text("{")
    fresh.write_text("{")
    os.utime(stale, (time.time() - 2 * HOUR, time.time() - 2 * HOUR))
    removed, _ = store.prune(max_age_seconds=20 * HOUR)
    assert removed == 1 and [store.read(k) is not None for k in keys] == [True, False, True, True]
    assert store.hits() == {keys[0].digest: 1}
    assert not stale.exists() and fresh.exists(), "a writer's file of a moment ago stays"
    stats = store.stats()
    assert stats["entries"] == 3 and stats["oldest"] == pytest.approx(time.time() - 10 * HOUR, abs=60)
    assert stats["newest"] == pytest.approx(time.time(), abs=60)


def test_a_prune_folds_the_hits_log_into_one_line_per_entry_and_keeps_the_counts(tmp_path: Path):
    store = CallStore(tmp_path / "cache")
    first, second = base_key(occurrence=0), base_key(occurrence=1)
    for key in (first, second):
        store.write(key, entry())
    for key in (first, first, first, second):
        store.hit(key)
    assert store.hits() == {first.digest: 3, second.digest: 1}
    assert store.prune() == (0, 0)  # nothing removed: the log is folded all the same
    log = (store.root / callcache.HITS_LOG).read_text().splitlines()
    assert sorted(log) == sorted([f"{first.digest} 3", f"{second.digest} 1"])
    store.hit(second)  # a hit after the fold is a line of its own, counted with the folded ones
    assert store.hits() == {first.digest: 3, second.digest: 2}
