"""The call cache through the real workflow: a rerun of the run stage pays for no call a first run made, switching
the mode rebuilds nothing, a killed run's calls are not paid again, no secret reaches an entry, and entries that
shards write at once, or that are torn, are whole or a miss.

A scripted tool agent on 127.0.0.1 stands in for the model: its reply is a function of the request alone (run
``echo WORD`` through bash, then submit WORD), so a call answered from the cache and a call sent give the same
run, and the endpoint counts what it was asked."""

from __future__ import annotations

import collections
import json
import os
import re
import secrets
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import yaml

from agentcompass import callcache
from agentcompass.runtime.models.orchestration import EXIT_ATTEMPT_ERRORS, EXIT_OK
from agentcompass.testing.endpoint import ScriptedEndpoint, tool_call_reply
from conftest import agentcompass, clean_env, jobs_run, jobs_run_with_shards, regular_files, shard_logs

RUN = Path("results/default/r")
CACHE = Path("results") / callcache.CACHE_FOLDER
TASKS = 3
# every scripted reply reports 10 prompt and 2 completion tokens: at these prices a call costs $0.002
PRICING = {"input_per_million": 100.0, "output_per_million": 500.0}
CALL_USD = 0.002
# seconds a call of the pairing model waits for its twin (the same body from another shard)
PAIR_SECONDS = 90.0
GATE_SECONDS = 120.0


class EchoAgent:
    """The model of a tool agent whose reply is a function of the request alone: the first step runs
    ``echo WORD`` through bash, the second submits WORD (the word of the task's prompt). Counts the calls by
    (word, step) and the bodies it was sent.

    ``hold``: a second step waits until ``gate`` is set. ``pair``: a call waits until another call of the same
    body has arrived (``PAIR_SECONDS`` at most; ``paired`` counts those that met theirs). ``endpoint``, when
    set, is the ScriptedEndpoint serving it: each reply then says the Authorization and X-Team-Token headers
    its request came with."""

    def __init__(self, hold: bool = False, pair: bool = False) -> None:
        self.calls: collections.Counter = collections.Counter()
        self.bodies: collections.Counter = collections.Counter()
        self.pair = pair
        self.paired = 0
        self.endpoint: ScriptedEndpoint | None = None
        self.gate = threading.Event()
        if not hold:
            self.gate.set()
        self.cond = threading.Condition()

    def __call__(self, body) -> dict:
        prompt = " ".join(str(m.get("content")) for m in body["messages"])
        word = re.search(r"Repeat the word (w\d+)\.", prompt).group(1)
        step = 1 + sum(1 for m in body["messages"] if m["role"] == "assistant")
        text = json.dumps(body, sort_keys=True)
        with self.cond:
            self.calls[(word, step)] += 1
            self.bodies[text] += 1
            self.cond.notify_all()
            if self.pair and self.cond.wait_for(lambda: self.bodies[text] >= 2, PAIR_SECONDS):
                self.paired += 1
        said = None
        if self.endpoint is not None:
            headers = next(r.headers for r in reversed(self.endpoint.requests) if r.body is body)
            said = f"Called with {headers.get('Authorization')} and {headers.get('X-Team-Token')}."
        if step == 1:
            return tool_call_reply("bash", {"command": f"echo {word}"}, text=said, call_id="c1")
        self.gate.wait(GATE_SECONDS)
        return tool_call_reply("submit", {"answer": word}, text=said, call_id="c2")

    def count(self) -> collections.Counter:
        with self.cond:
            return collections.Counter(self.calls)


def request(endpoint: ScriptedEndpoint, *, timeout: float = 60, cache: str | None = "on", **model) -> dict:
    """A request of TASKS synthetic tasks by the tool agent on the host, the model at ``endpoint``."""
    body: dict = {
        "benchmark": {"id": "synthetic", "params": {"num_tasks": TASKS}},
        "harness": {"id": "tool_agent", "params": {"timeout": timeout}},
        "environment": "host_process",
        "model": {"id": "scripted", "base_url": endpoint.base_url, **model},
    }
    if cache is not None:
        body["execution"] = {"cache": cache}
    return body


def write_config(workdir: Path, body: dict, **config) -> Path:
    path = workdir / "eval.yaml"
    path.write_text(yaml.safe_dump({"runtime": {"progress": False, **config.pop("runtime", {})},
                                    "requests": {"r": body}, **config}))
    return path


def run(workdir: Path, config: Path, *args: str, env: dict | None = None,
        status: int = EXIT_OK) -> subprocess.CompletedProcess:
    """``agentcompass run`` of ``config``; it exits with ``status`` and no traceback."""
    done = agentcompass(workdir, "run", "-c", str(config), "--cores", "2", *args, env=env)
    assert done.returncode == status, done.stdout[-2000:] + done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    return done


def results(workdir: Path) -> dict[str, dict]:
    return {p.parent.parent.name: json.loads(p.read_text())
            for p in sorted((workdir / RUN / "attempts").glob("*/1/result.json"))}


def scores(workdir: Path) -> dict[str, tuple]:
    return {task: (r["status"], r["answer"], r["score"]) for task, r in results(workdir).items()}


def overall(workdir: Path) -> dict:
    return json.loads((workdir / RUN / "metrics.json").read_text())["summary"]["overall"]


def mtimes(root: Path) -> dict[str, int]:
    """Every JSON file under ``root`` (the cache's entries too) and when it was written."""
    return {str(p.relative_to(root)): p.stat().st_mtime_ns for p in root.rglob("*.json")}


def test_a_rerun_of_the_run_stage_is_answered_from_the_cache_and_pays_nothing(workdir: Path):
    model = EchoAgent()
    with ScriptedEndpoint(model) as endpoint:
        first = run(workdir, write_config(workdir, request(endpoint, pricing=PRICING)))
        assert jobs_run(first.stderr)["run"] == TASKS
        paid = len(endpoint.requests)
        assert paid == 2 * TASKS and model.count() == {(f"w{i}", s): 1 for i in range(TASKS) for s in (1, 2)}
        before = scores(workdir)
        assert {s for s, _, _ in before.values()} == {"completed"} and overall(workdir)["accuracy"] == 1.0
        assert overall(workdir)["cost_usd"] == round(paid * CALL_USD, 6) and overall(workdir)["cached_calls"] == 0
        assert all("cached_calls" not in r["usage"] for r in results(workdir).values())

        # a setting of the harness that changes no request body: the run stage runs again, on the cache alone
        again = run(workdir, write_config(workdir, request(endpoint, timeout=30, pricing=PRICING)))
        assert jobs_run(again.stderr)["run"] == TASKS
        assert len(endpoint.requests) == paid  # no call reached the endpoint
    assert scores(workdir) == before
    for result in results(workdir).values():
        assert result["usage"]["calls"] == 0 and result["usage"]["cached_calls"] == 2
        assert result["usage"]["cached_prompt_tokens"] == result["usage"]["prompt_tokens"] == 20
        assert result["usage"]["cached_completion_tokens"] == result["usage"]["completion_tokens"] == 4
    stats = overall(workdir)
    assert (stats["calls"], stats["cached_calls"], stats["cost_usd"]) == (0, paid, 0.0)
    assert stats["saved_usd"] == round(paid * CALL_USD, 6)
    assert f"{paid} calls from the cache (saved $0.0120)" in again.stdout + again.stderr
    # every call of the rerun is a trajectory line served by the cache
    lines = [json.loads(line) for line in (workdir / RUN / "attempts/t0/1/trajectory.jsonl").read_text().splitlines()]
    assert [c["cache"]["served"] for c in lines if c["type"] == "model_call"] == ["hit", "hit"]
    assert sum(callcache.CallStore(workdir / CACHE).hits().values()) == paid  # (the run's end folded the log)


def test_switching_the_cache_mode_alone_rebuilds_nothing(workdir: Path):
    model = EchoAgent()
    with ScriptedEndpoint(model) as endpoint:
        config = write_config(workdir, request(endpoint))
        run(workdir, config)
        paid = len(endpoint.requests)
        before = mtimes(workdir / "results")
        switches = [(config, ("--cache",)), (config, ("--no-cache",)), (config, ("--cache", "refresh")),
                    (config, ("--cache", "replay")),
                    (write_config(workdir, request(endpoint, cache="refresh")), ()),
                    (write_config(workdir, request(endpoint, cache=None)), ())]
        for path, args in switches:
            again = run(workdir, path, *args)
            assert jobs_run(again.stderr) == {} and "Nothing to be done" in again.stderr, (args, again.stderr[-2000:])
        assert len(endpoint.requests) == paid
    assert mtimes(workdir / "results") == before


def test_a_run_killed_mid_attempts_is_restarted_without_paying_again_for_the_calls_it_made(workdir: Path):
    model = EchoAgent(hold=True)  # every second step waits: the kill finds each attempt begun and unfinished
    with ScriptedEndpoint(model) as endpoint:
        config = write_config(workdir, request(endpoint))
        argv = [sys.executable, "-m", "agentcompass.cli", "run", "-c", str(config), "--cores", "2"]
        proc = subprocess.Popen(argv, cwd=workdir, env=clean_env(), stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, start_new_session=True)
        try:
            deadline = time.monotonic() + GATE_SECONDS
            while time.monotonic() < deadline and proc.poll() is None:  # two attempts (--cores 2) at their 2nd step
                if sum(n for (_, step), n in model.count().items() if step == 2) >= 2:
                    break
                time.sleep(0.02)
            assert proc.poll() is None, proc.communicate()[0][-3000:]
            os.killpg(proc.pid, signal.SIGKILL)
            killed = proc.communicate(timeout=60)[0]
        finally:
            model.gate.set()
        at_kill = model.count()
        begun = {word for (word, step) in at_kill if step == 1}
        assert len(begun) >= 2 and not list((workdir / RUN / "attempts").glob("*/1/output.json")), killed[-2000:]

        run(workdir, config)
        after = model.count()
    assert {s for s, _, _ in scores(workdir).values()} == {"completed"} and overall(workdir)["accuracy"] == 1.0
    restart = after - at_kill
    # the restart sent only what the killed run had not been answered: no first step of a begun attempt again
    assert all(after[(word, 1)] == 1 for word in (f"w{i}" for i in range(TASKS))), after
    assert restart == {**{(w, 1): 1 for w in {f"w{i}" for i in range(TASKS)} - begun},
                       **{(f"w{i}", 2): 1 for i in range(TASKS)}}, (at_kill, after)
    for word in begun:
        result = results(workdir)[f"t{word[1:]}"]
        assert result["usage"]["cached_calls"] == 1 and result["usage"]["calls"] == 1


def test_no_secret_reaches_a_cache_entry_or_a_result(workdir: Path, tmp_path: Path):
    core = secrets.token_hex(16)
    key = f'sk-"cache"\\{core}'  # a quote and a backslash: JSON escapes them
    header = f"team-{secrets.token_hex(16)}"
    env = clean_env(CACHE_TEST_KEY=key, CACHE_TEST_HEADER=header)
    cache_dir = tmp_path / "call-cache"
    model = EchoAgent()
    with ScriptedEndpoint(model) as endpoint:
        model.endpoint = endpoint
        model_spec = {"api_key": "${CACHE_TEST_KEY}", "headers": {"X-Team-Token": "${CACHE_TEST_HEADER}"}}
        run(workdir, write_config(workdir, request(endpoint, **model_spec), runtime={"cache_dir": str(cache_dir)}),
            env=env)
        paid = len(endpoint.requests)
        # the rerun's second calls hold the first replies as the entries keep them (the secrets as references):
        # they have the keys the first run's had, so the rerun is served from the cache alone
        run(workdir, write_config(workdir, request(endpoint, timeout=30, **model_spec),
                                  runtime={"cache_dir": str(cache_dir)}), env=env)
        assert len(endpoint.requests) == paid == 2 * TASKS
    # the secrets travelled, and the replies said them
    assert {r.headers["Authorization"] for r in endpoint.requests} == {f"Bearer {key}"}
    assert {r.headers["X-Team-Token"] for r in endpoint.requests} == {header}
    assert any(core in json.dumps(r.body) for r in endpoint.requests)  # a later request held a reply that said it
    assert {s for s, _, _ in scores(workdir).values()} == {"completed"}
    entries = list(callcache.CallStore(cache_dir).entries())
    assert len(entries) >= 2 * TASKS and not (workdir / CACHE).exists()
    forms = {form.encode() for value in (key, header) for form in (value, json.dumps(value)[1:-1])} | {core.encode()}
    files = regular_files(workdir / "results", workdir / ".snakemake", cache_dir)
    holding = [str(p) for p in files if any(form in p.read_bytes() for form in forms)]
    assert holding == [] and len(files) > 30
    hit = json.loads(entries[0][0].read_text())
    assert "${CACHE_TEST_KEY}" in hit["body"] or "${CACHE_TEST_HEADER}" in hit["body"]  # said, as the reference


def test_shards_writing_the_same_entries_at_once_leave_whole_ones_and_a_torn_entry_is_a_miss(workdir: Path):
    # every task asks the same: two shards at once (--cores 2, one attempt each) send the same bodies together
    rows = [{"id": f"t{i}", "q": "Repeat the word w7.", "a": "w7"} for i in range(TASKS)]
    (workdir / "d.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    model = EchoAgent(pair=True)

    def body(endpoint: ScriptedEndpoint, timeout: float, cache: str = "on") -> dict:
        return {**request(endpoint, timeout=timeout, cache=cache),
                "benchmark": {"id": "dataset", "params": {"path": "d.jsonl", "fields": {"id": "id", "input": "q",
                                                                                       "target": "a"}}}}

    def build(path: Path, *args: str, status: int = EXIT_OK) -> dict[str, int]:
        logs = shard_logs(workdir)
        return jobs_run_with_shards(workdir, run(workdir, path, *args, status=status).stderr, logs)

    with ScriptedEndpoint(model) as endpoint:
        shards = {"runtime": {"shard_size": 1}}
        assert build(write_config(workdir, body(endpoint, 60), **shards))["run"] == TASKS
        # each call met its twin (two shards wrote each entry at once); the third task was served from the cache
        assert model.paired == len(endpoint.requests) == 4
        store = callcache.CallStore(workdir / CACHE)
        entries = [path for path, _, _ in store.entries()]
        assert len(entries) == 2  # the two steps' replies, the same for every task
        assert not [p for p in (workdir / CACHE).rglob("*.tmp")]
        by_request = {}
        for path in entries:
            raw = json.loads(path.read_text())  # whole: its body is the one its digest names
            assert raw["key"] == path.stem and raw["status"] == 200
            by_request[raw["key_request"]] = path
        assert {s for s, _, _ in scores(workdir).values()} == {"completed"} and overall(workdir)["accuracy"] == 1.0
        paid = len(endpoint.requests)
        model.pair = False

        # the second step's entry torn, as a write cut short by hand: in mode on, a miss that calls again
        second = next(json.loads(text) for text in model.bodies if len(json.loads(text)["messages"]) > 2)
        torn = by_request[callcache.request_digest(second)]
        torn.write_bytes(torn.read_bytes()[: torn.stat().st_size // 2])
        assert build(write_config(workdir, body(endpoint, 30), **shards))["run"] == TASKS
        sent = [r.body for r in endpoint.requests[paid:]]
        assert sent and all(b == second for b in sent)  # only the torn entry's call was made again
        assert json.loads(torn.read_text())["key"] == torn.stem  # and its entry written whole again
        assert {s for s, _, _ in scores(workdir).values()} == {"completed"}

        # torn again, and replayed: each attempt's error names its second call; no call is made, nothing crashes
        paid = len(endpoint.requests)
        torn.write_bytes(torn.read_bytes()[:100])
        replayed = write_config(workdir, body(endpoint, 20), **shards)
        assert build(replayed, "--cache", "replay", status=EXIT_ATTEMPT_ERRORS)["run"] == TASKS
        assert len(endpoint.requests) == paid
    for result in results(workdir).values():
        assert result["status"] == "run_error" and result["failure_class"] == "endpoint", result
        assert result["metadata"]["cache_miss"]["call"] == 2 and result["metadata"]["cache_miss"]["stage"] == "run"
        assert result["error"].startswith("replay: model call 2 of the run stage")
        assert result["usage"]["cached_calls"] == 1
    # the summary names the misses as one kind, the request's digest as an id
    assert overall(workdir)["errors"] == {"run_error: replay: model call N of the run stage (POST /chat/completions, "
                                          "request H, occurrence N) has no entry": TASKS}
