"""A storm of 429s slows a run and fails no attempt: the real workflow, the real ``mini`` behind the model
gateway, and a scripted endpoint on 127.0.0.1 that refuses most calls for a few seconds."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
import yaml

from agentcompass.environments.netns import network_isolation
from agentcompass.harnesses.mini_swe_agent import MiniSweAgentHarness
from agentcompass.runtime import ratelimit
from agentcompass.runtime.ratelimit import EndpointLimit
from agentcompass.testing.dependencies import needs
from agentcompass.testing.endpoint import Reply, ScriptedEndpoint, completion, rate_limited
from conftest import clean_env, snakemake
from test_mini_swe_agent import tool_call_reply

pytestmark = [
    pytest.mark.skipif(not network_isolation()[0], reason=f"host_process cannot isolate a 'none' phase here: "
                       f"{network_isolation()[1]}"),
    needs(*MiniSweAgentHarness.dependencies),
]

# How long the storm lasts from the first call, and which calls in it are answered: one in ANSWERED_EVERY,
# each after ANSWER_SECONDS (so calls overlap).
STORM_SECONDS = 4.0
ANSWERED_EVERY = 5
ANSWER_SECONDS = 0.3
SOLVER = ["echo Paris > answer.txt", "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && cat answer.txt"]


class Storm:
    """``reply(body)``: 429 to most calls for ``STORM_SECONDS`` from the first (every third with Retry-After: 1,
    the others with none), then the model's answers: the chat's, or mini's two steps."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.started: float | None = None
        self.count = self.refused = 0
        self.ended: float | None = None

    def __call__(self, body: dict) -> Reply:
        with self.lock:
            now = time.time()
            self.started = self.started or now
            self.count += 1
            if now - self.started < STORM_SECONDS and self.count % ANSWERED_EVERY:
                self.refused += 1
                return rate_limited(1 if self.refused % 3 == 0 else None)
            if self.ended is None and now - self.started >= STORM_SECONDS:
                self.ended = now
        if body["model"] == "solver":
            step = sum(1 for m in body["messages"] if m["role"] == "assistant")
            return Reply(200, tool_call_reply(step, SOLVER[min(step, len(SOLVER) - 1)]), delay=ANSWER_SECONDS)
        return Reply(200, completion("Paris"), delay=ANSWER_SECONDS)


def test_a_storm_of_429s_ends_with_every_attempt_completed_and_the_limit_drops_then_recovers(workdir: Path):
    storm = Storm()
    with ScriptedEndpoint(storm) as endpoint:
        fast = {"retry_backoff": 0.2, "retry_backoff_max": 1, "max_model_retries": 0}
        requests = {
            "chat": {"benchmark": {"id": "example_exact_match", "params": {"limit": 2}},
                     "harness": {"id": "chat", "params": {**fast, "follow_ups": ["Sure?", "Really?", "Final?"]}},
                     "model": {"id": "scripted", "base_url": endpoint.base_url},
                     "execution": {"attempts": 3}},
            "mini": {"benchmark": {"id": "example_exact_match", "params": {"task_ids": ["capital-france"]}},
                     "harness": {"id": "mini_swe_agent", "params": {"step_limit": 4, "model_retries": 1}},
                     "environment": {"id": "host_process", "run_network": "none"},
                     "model": {"id": "solver", "base_url": endpoint.base_url}},
        }
        config = workdir / "storm.yaml"
        config.write_text(yaml.safe_dump({"requests": requests}))
        started = time.monotonic()
        done = snakemake(workdir, "--configfile", str(config), "--cores", "8", env=clean_env())
        seconds = time.monotonic() - started
    assert done.returncode == 0, done.stderr[-3000:]
    assert storm.refused >= 10 and storm.ended is not None, "the storm refused most calls, then ended"

    results = [json.loads(p.read_text()) for p in sorted((workdir / "results/default").glob("*/attempts/*/*/result.json"))]
    assert len(results) == 7
    assert [r["status"] for r in results] == ["completed"] * 7, [r.get("error") for r in results]
    assert all(r["usage"]["retries"] == 0 for r in results), "waiting on a rate limit uses no retry"
    waited = sum(r["usage"].get("rate_limited", 0) for r in results)
    assert waited == storm.refused, "each refusal was waited on, by the client or the gateway"
    mini = json.loads((workdir / "results/default/mini/attempts/capital-france/1/result.json").read_text())
    assert mini["correct"] is True
    mini_lines = [json.loads(line) for line in
                  (workdir / "results/default/mini/attempts/capital-france/1/trajectory.jsonl").read_text().splitlines()]
    assert mini["usage"].get("rate_limited", 0) == sum(1 for r in mini_lines if r.get("rate_limited"))

    # the run's limit of this endpoint, as its log recorded it: the allowed number and the calls in flight drop
    # in the storm, and grow again after it
    limit = EndpointLimit(workdir / ratelimit.RUN_FOLDER / ratelimit.slug_of(endpoint.base_url))
    lines = limit.lines()
    rejections = [line for line in lines if line.event in ("lowered", "rejected")]
    assert len(rejections) == storm.refused and rejections[0].event == "lowered"
    lowest = min(line.allowed for line in lines)
    assert lowest <= max(1.0, rejections[0].in_flight / 2) and lowest < ratelimit.CEILING
    assert min(line.in_flight for line in rejections) < max(2, rejections[0].in_flight)
    raised = [line for line in lines if line.event == "raised" and line.time >= rejections[-1].time]
    assert raised and raised[-1].allowed >= lowest + 2, lines[-10:]
    assert max(line.in_flight for line in raised) >= 2, lines[-10:]
    assert seconds < 120
