"""``agentcompass cache``: what the call cache holds, pruning it by hand, and the pruning a run does when it ends.

The command is called as ``agentcompass.cli.main`` on a store written through ``CallStore``; the run's
pruning goes through the real command and Snakemake, with a scripted endpoint on 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
import yaml

from agentcompass import callcache, cli
from agentcompass.cli.cache import human_bytes, parse_age, parse_size
from agentcompass.testing.endpoint import ScriptedEndpoint, completion
from conftest import agentcompass

HOUR = 3600


@pytest.fixture(autouse=True)
def _no_user_config(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("AGENTCOMPASS_USER_CONFIG", "")
    monkeypatch.chdir(tmp_path)


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def key(n: int) -> callcache.CallKey:
    return callcache.CallKey("http://127.0.0.1:1/v1", "m", "openai_chat", "/chat/completions",
                             callcache.request_digest({"n": n}), 1, "run", 0)


def fill(store: callcache.CallStore, ages_hours: list[float], size: int = 2000) -> list[callcache.CallKey]:
    """One entry of about ``size`` bytes per age, its time that many hours ago."""
    keys = []
    now = time.time()
    for n, age in enumerate(ages_hours):
        k = key(n)
        store.write(k, callcache.Entry(200, "application/json", b'{"pad": "' + b"x" * size + b'"}'))
        os.utime(store.path(k.digest), (now - age * HOUR, now - age * HOUR))
        keys.append(k)
    return keys


def test_sizes_and_ages_are_read_in_their_units_and_a_bad_one_says_what_is_wanted(capsys, tmp_path: Path):
    assert parse_size("2G") == 2 << 30 and parse_size("500m") == 500 << 20 and parse_size("1.5GiB") == 3 << 29
    assert parse_size("4096") == parse_size("4K") == parse_size("4 KB") == 4096 and parse_size("0") == 0
    assert parse_age("30d") == parse_age("30") == 30 * 86400 and parse_age("12h") == 12 * HOUR
    assert parse_age("2w") == 14 * 86400 and parse_age("90m") == 5400 and parse_age("5s") == 5
    assert human_bytes(512) == "512 B" and human_bytes(1536) == "1.5 KiB" and human_bytes(10 << 30) == "10.0 GiB"
    for flag, bad in (("--max-size", "2Q"), ("--max-size", "-1G"), ("--max-size", "lots"),
                      ("--older-than", "30y"), ("--older-than", "-3d"), ("--older-than", "")):
        code, out, err = run_cli(capsys, "cache", "prune", f"{flag}={bad}", "--results-dir", str(tmp_path))
        assert code == 2 and out == "", (flag, bad)
        assert f"{flag} {bad!r}: expected a number" in err and "such as" in err
    code, _, err = run_cli(capsys, "cache", "--max-size", "1G", "--results-dir", str(tmp_path))
    assert code == 2 and "prune's" in err and "agentcompass cache prune --max-size" in err


def test_show_prints_the_folder_entries_size_hits_and_times(capsys, tmp_path: Path):
    store = callcache.CallStore(tmp_path / "results" / callcache.CACHE_FOLDER)
    code, out, _ = run_cli(capsys, "cache")  # the default results folder, which holds no cache yet
    assert code == 0 and "results/.call-cache (none yet)" in out and "entries: 0" in out and "oldest:  -" in out
    keys = fill(store, [30, 2, 0.1])
    store.hit(keys[1])
    store.hit(keys[1])
    store.hit(keys[2])
    total = sum(size for _, size, _ in store.entries())
    code, out, _ = run_cli(capsys, "cache", "show")
    assert code == 0
    lines = dict(line.split(":", 1) for line in out.splitlines())
    assert lines["folder"].strip() == "results/.call-cache"
    assert lines["entries"].strip() == "3" and lines["hits"].strip() == "3"
    assert lines["size"].strip() == human_bytes(total) and total > 6000
    assert lines["oldest"].strip().endswith("UTC (1 days ago)")  # a hit renews an entry's time: not keys[1]'s
    assert lines["newest"].strip().endswith("ago)") and "s ago" in lines["newest"]
    code, out, _ = run_cli(capsys, "cache", "--json")
    assert json.loads(out) == {**store.stats(), "root": "results/.call-cache"}


def test_the_folder_is_cache_dir_else_the_configs_else_the_results_folders(capsys, tmp_path: Path):
    own, configured, results = tmp_path / "own", tmp_path / "configured", tmp_path / "elsewhere"
    fill(callcache.CallStore(own), [1])
    fill(callcache.CallStore(configured), [1, 2])
    fill(callcache.CallStore(results / callcache.CACHE_FOLDER), [1, 2, 3])
    config = tmp_path / "eval.yaml"
    config.write_text(yaml.safe_dump({"runtime": {"cache_dir": str(configured)}}))
    plain = tmp_path / "plain.yaml"
    plain.write_text(yaml.safe_dump({"runtime": {"results_dir": str(results)}}))

    def shown(*args: str) -> dict:
        code, out, err = run_cli(capsys, "cache", "--json", *args)
        assert code == 0, err
        return json.loads(out)

    assert shown("--cache-dir", str(own))["entries"] == 1
    assert shown("--config", str(config))["entries"] == 2
    assert shown("--config", str(config), "--cache-dir", str(own))["root"] == str(own)
    assert shown("--config", str(plain))["entries"] == 3
    assert shown("--results-dir", str(results))["root"] == str(results / callcache.CACHE_FOLDER)
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"runtime": {"cache_max_bytes": -5}}))
    code, _, err = run_cli(capsys, "cache", "prune", "--config", str(bad))
    assert code == 2 and "cache_max_bytes" in err


def test_prune_removes_the_entries_used_longest_ago_and_says_what_it_removed(capsys, tmp_path: Path):
    store = callcache.CallStore(tmp_path / "results" / callcache.CACHE_FOLDER)
    keys = fill(store, [50 * 24, 40 * 24, 3, 2, 1])
    store.hit(keys[0])  # used now: no longer the oldest
    store.hit(keys[3])
    sizes = [store.path(k.digest).stat().st_size for k in keys]  # alike, within a few bytes
    code, out, _ = run_cli(capsys, "cache", "prune", "--older-than", "30d")
    assert code == 0 and "removed 1 entry" in out and "4 kept" in out and "2 hits" in out
    assert not store.path(keys[1].digest).exists() and store.path(keys[0].digest).exists()
    code, out, _ = run_cli(capsys, "cache", "prune", "--max-size", str(sizes[0] + sizes[3] + 100), "--json")
    report = json.loads(out)
    assert code == 0 and report["removed"] == 2 and report["freed_bytes"] == sizes[2] + sizes[4]
    assert [store.read(k) is not None for k in keys] == [True, False, False, True, False]  # keys[2] and [4] went
    assert report["kept"]["entries"] == 2 and report["kept"]["hits"] == 2
    code, out, _ = run_cli(capsys, "cache", "prune", "--max-size", "0")
    assert code == 0 and "removed 2 entries" in out and "0 kept (0 B, 0 hits)" in out
    assert store.hits() == {}


def test_prune_with_no_bound_given_prunes_to_the_configs(capsys, tmp_path: Path):
    store = callcache.CallStore(tmp_path / "results" / callcache.CACHE_FOLDER)
    keys = fill(store, [5 * 24, 1])
    config = tmp_path / "eval.yaml"
    config.write_text(yaml.safe_dump({"runtime": {"cache_max_age_days": 2}}))
    code, out, _ = run_cli(capsys, "cache", "prune", "--config", str(config))
    assert code == 0 and "removed 1 entry" in out and "at most 10.0 GiB and none unused for over 2 days" in out
    assert [store.read(k) is not None for k in keys] == [False, True]
    config.write_text(yaml.safe_dump({"runtime": {"cache_max_bytes": None}}))
    code, _, err = run_cli(capsys, "cache", "prune", "--config", str(config))
    assert code == 2 and "no bound" in err and "--max-size or --older-than" in err


# --- the pruning of a run that ends ----------------------------------------------------------------

PAD = 8000  # the bytes of an entry written before the run: several times one of the run's


def cached_run(workdir: Path, endpoint: ScriptedEndpoint, cache: str, max_bytes: int, shard_size: int) -> str:
    """A request of two tasks (one model call each) named after the mode, run with that cache mode; its output."""
    config = workdir / "eval.yaml"
    config.write_text(yaml.safe_dump({
        "requests": {cache: {"benchmark": {"id": "example_exact_match", "params": {"limit": 2}}, "harness": "chat",
                             "model": {"id": "scripted", "base_url": endpoint.base_url}}},
        "runtime": {"cache_max_bytes": max_bytes, "shard_size": shard_size},
    }))
    done = agentcompass(workdir, "run", "--config", str(config), f"--cache={cache}")
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    return done.stdout + done.stderr


@pytest.mark.parametrize("shard_size", [0, 1])
def test_a_run_that_used_the_cache_prunes_it_when_it_ends_the_entries_used_longest_ago_first(workdir: Path,
                                                                                              shard_size: int):
    store = callcache.CallStore(workdir / "results" / callcache.CACHE_FOLDER)
    old = fill(store, [3, 2, 1], size=PAD)
    size = store.path(old[0].digest).stat().st_size
    bound = size + 6000  # the newest entry from before and the run's two (each well under 3000 bytes)
    with ScriptedEndpoint(lambda body: completion("Paris")) as endpoint:
        output = cached_run(workdir, endpoint, "off", bound, shard_size)  # no cache used: nothing pruned
        assert [store.read(k) is not None for k in old] == [True] * 3 and "pruned" not in output
        output = cached_run(workdir, endpoint, "on", bound, shard_size)
    assert [store.read(k) is not None for k in old] == [False, False, True]
    run_entries = [p for p, _, _ in store.entries() if p.stem != old[2].digest]
    assert len(run_entries) == 2 and all(p.stat().st_size < 3000 for p in run_entries)
    assert sum(s for _, s, _ in store.entries()) <= bound
    assert {json.loads(p.read_text())["key_stage"] for p in run_entries} == {"run"}
    assert output.count("pruned 2 entries") == 1
    shard_logs = list(workdir.glob("results/default/on/shards/*/shard.log"))
    assert len(shard_logs) == 2 * shard_size, "each attempt a shard of its own"
    assert not any("pruned" in log.read_text() for log in shard_logs), "only the outer run prunes"
