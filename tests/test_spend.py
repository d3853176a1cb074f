"""Limits and budgets through the real workflow, against a scripted endpoint on 127.0.0.1 whose every reply
reports known usage (10 prompt and 2 completion tokens: $0.002 at PRICING).

Per-attempt limits end attempts with the ``limit`` class on ``chat``, ``tool_agent`` and the model gateway
(mini-swe-agent); a dollar budget stops a run with attempts missing, its spend within the stated bound, and
the same command with a larger budget finishes them without one call made twice; two shards draw from one
budget."""

from __future__ import annotations

import collections
import json
import re
import threading
from pathlib import Path

import pytest
import yaml

from agentcompass import spend
from agentcompass.harnesses.mini_swe_agent import MiniSweAgentHarness
from agentcompass.runtime.models.orchestration import EXIT_BUDGET, EXIT_OK
from agentcompass.testing.dependencies import needs
from agentcompass.testing.endpoint import ScriptedEndpoint, completion, tool_call_reply
from conftest import agentcompass

PRICING = {"input_per_million": 100.0, "output_per_million": 500.0}
CALL_USD = 0.002  # 10 prompt and 2 completion tokens at PRICING
CALL_TOKENS = 12


class Words:
    """The model of the synthetic tasks ("Repeat the word wN."): a tool agent runs ``echo WORD`` then submits
    WORD; a chat call answers WORD. Counts its calls by (word, step)."""

    def __init__(self) -> None:
        self.calls: collections.Counter = collections.Counter()
        self.lock = threading.Lock()

    def __call__(self, body) -> dict:
        prompt = " ".join(str(m.get("content")) for m in body["messages"])
        word = re.search(r"Repeat the word (w\d+)\.", prompt).group(1)
        step = 1 + sum(1 for m in body["messages"] if m["role"] == "assistant")
        with self.lock:
            self.calls[(word, step)] += 1
        if not body.get("tools"):
            return completion(word)
        if step == 1:
            return tool_call_reply("bash", {"command": f"echo {word}"}, call_id="c1")
        return tool_call_reply("submit", {"answer": word}, call_id="c2")


def request(endpoint: ScriptedEndpoint, harness: str, tasks: int, execution: dict | None = None) -> dict:
    return {"benchmark": {"id": "synthetic", "params": {"num_tasks": tasks}},
            "harness": {"id": harness, "params": {"retry_backoff": 0}}, "environment": "host_process",
            "model": {"id": "scripted", "base_url": endpoint.base_url, "pricing": PRICING},
            "execution": execution or {}}


def write(workdir: Path, requests: dict, **runtime) -> Path:
    path = workdir / "eval.yaml"
    path.write_text(yaml.safe_dump({"runtime": {"progress": False, **runtime}, "requests": requests}))
    return path


def run(workdir: Path, config: Path, status: int, cores: str = "2"):
    done = agentcompass(workdir, "run", "-c", str(config), "--cores", cores)
    assert done.returncode == status, done.stdout[-3000:] + done.stderr[-3000:]
    assert "Traceback" not in done.stdout + done.stderr, done.stderr[-3000:]
    return done


def results(workdir: Path, name: str) -> dict[str, dict]:
    return {p.parent.parent.name: json.loads(p.read_text())
            for p in sorted((workdir / "results/default" / name / "attempts").glob("*/1/result.json"))}


def test_limits_end_attempts_with_the_limit_class_on_chat_and_tool_agent(workdir: Path):
    words = Words()
    with ScriptedEndpoint(words) as endpoint:
        config = write(workdir, {
            # one call of 12 tokens goes past 10: its reply is withheld
            "chat_tokens": request(endpoint, "chat", 2, {"limits": {"total_tokens": 10}}),
            # one call costs $0.002, more than $0.001
            "chat_dollars": request(endpoint, "chat", 2, {"limits": {"cost_usd": 0.001}}),
            # the first call (12 tokens) is within 20, the second (24) goes past it
            "tool_tokens": request(endpoint, "tool_agent", 2, {"limits": {"total_tokens": 20}}),
            # two calls cost $0.004: the third is refused before it is sent... the agent submits at its second
            "tool_dollars": request(endpoint, "tool_agent", 2, {"limits": {"cost_usd": 0.003}}),
            "tool_within": request(endpoint, "tool_agent", 2, {"limits": {"total_tokens": 24, "calls": 2}}),
        })
        done = run(workdir, config, status=1)
    assert "execution.limits" in done.stdout
    for name, limit in (("chat_tokens", "total_tokens"), ("chat_dollars", "cost_usd"), ("tool_tokens", "total_tokens"),
                        ("tool_dollars", "cost_usd")):
        for task, result in results(workdir, name).items():
            assert result["status"] == "run_error" and result["failure_class"] == "limit", (name, task, result)
            assert result["metadata"]["limit"]["limit"] == limit
            assert f"execution.limits.{limit}" in result["error"]
            assert result["correct"] is None
            # what it did is kept: its calls are counted, and its trajectory holds them and the refusal
            assert result["usage"]["calls"] >= 1
            lines = [json.loads(x) for x in (workdir / "results/default" / name / "attempts" / task / "1" /
                                             "trajectory.jsonl").read_text().splitlines()]
            assert any(line.get("refused") == "limit" for line in lines)
    # the tool agent's calls past its limit: the second call went past 20 tokens; with $0.003 the second call
    # ($0.004 in all) went past it too
    assert all(r["usage"]["calls"] == 2 for r in results(workdir, "tool_tokens").values())
    assert all(r["usage"]["calls"] == 2 for r in results(workdir, "tool_dollars").values())
    # usage may reach a limit, never pass it: two calls of 12 tokens are exactly 24
    within = results(workdir, "tool_within")
    assert [r["status"] for r in within.values()] == ["completed", "completed"]
    assert all(r["correct"] for r in within.values())
    # metrics.json counts them in the limit class
    metrics = json.loads((workdir / "results/default/tool_tokens/metrics.json").read_text())
    assert metrics["summary"]["overall"]["failures"] == {"limit": 2}


def test_a_dollar_budget_stops_the_run_and_a_larger_one_finishes_it_without_paying_twice(workdir: Path):
    words = Words()
    tasks, budget = 6, 0.005
    with ScriptedEndpoint(words) as endpoint:
        config = write(workdir, {"r": request(endpoint, "chat", tasks, {"budget": {"cost_usd": budget}})})
        done = run(workdir, config, status=EXIT_BUDGET)
        first = sum(words.calls.values())
        ledger = spend.request_ledger(workdir / "results/default/r").read()
        finished = results(workdir, "r")
        # no new attempt starts once $0.005 is paid: the third call makes $0.006; the bound is what the attempts
        # in flight (at most 2 at once, one call each) may pay past it
        assert 3 <= len(finished) < tasks
        assert ledger.calls == first == len(finished)
        assert budget <= ledger.cost_usd <= budget + 2 * CALL_USD
        assert ledger.cost_usd == pytest.approx(first * CALL_USD)
        waiting = tasks - len(finished)
        line = next(x for x in done.stdout.splitlines() if x.startswith("r: budget spent"))
        assert f"{waiting} attempt{'s' if waiting != 1 else ''} wait" in line
        assert f"${ledger.cost_usd:.4f} paid" in line and "execution.budget.cost_usd: $0.0050" in line
        assert all(r["status"] == "completed" for r in finished.values())  # nothing started was failed

        # the same command with a larger budget goes on where it stopped
        config = write(workdir, {"r": request(endpoint, "chat", tasks, {"budget": {"cost_usd": 1.0}})})
        run(workdir, config, status=EXIT_OK)
    assert len(results(workdir, "r")) == tasks
    assert sum(words.calls.values()) == tasks and set(words.calls.values()) == {1}  # no call made twice
    assert spend.request_ledger(workdir / "results/default/r").read().cost_usd == pytest.approx(tasks * CALL_USD)


def test_two_shards_draw_from_one_budget(workdir: Path):
    words = Words()
    tasks, budget = 8, 0.007
    with ScriptedEndpoint(words) as endpoint:
        config = write(workdir, {"r": request(endpoint, "chat", tasks, {"budget": {"cost_usd": budget}})},
                       shard_size=4)
        done = run(workdir, config, status=EXIT_BUDGET)
    assert len(list((workdir / "results/default/r/shards").glob("*/"))) == 2
    ledger = spend.request_ledger(workdir / "results/default/r").read()
    # together they did not pass the budget by more than the attempts in flight (2 jobs at once) could pay
    assert budget <= ledger.cost_usd <= budget + 2 * CALL_USD
    assert ledger.calls == sum(words.calls.values()) == len(results(workdir, "r")) < tasks
    assert "budget spent" in done.stdout


def test_a_run_budget_in_tokens_spans_the_requests(workdir: Path):
    words = Words()
    with ScriptedEndpoint(words) as endpoint:
        config = write(workdir, {name: request(endpoint, "chat", 3) for name in ("a", "b")},
                       budget={"total_tokens": 3 * CALL_TOKENS})
        done = run(workdir, config, status=EXIT_BUDGET, cores="1")
    paid = sum(words.calls.values())
    assert 3 <= paid <= 4  # the fourth call may be in flight when the third spends the budget
    assert "runtime.budget.total_tokens: 36" in done.stdout
    # each request's own ledger holds its calls, the run's holds them all
    assert sum(spend.request_ledger(workdir / "results/default" / n).read().calls for n in "ab") == paid


def test_a_cost_limit_or_budget_without_prices_is_refused_before_any_work(workdir: Path):
    with ScriptedEndpoint(Words()) as endpoint:
        body = request(endpoint, "chat", 1, {"budget": {"cost_usd": 1.0}})
        del body["model"]["pricing"]
        done = agentcompass(workdir, "run", "-c", str(write(workdir, {"r": body})))
        assert not endpoint.requests
    assert done.returncode == 2, done.stdout + done.stderr
    assert "execution.budget.cost_usd counts dollars at the Model's prices" in done.stderr
    assert "Traceback" not in done.stderr and not (workdir / "results").exists()


def mini_reply(body) -> dict:
    """A mini-swe-agent that never submits: each step runs ``echo``; every reply reports 100 + 7 tokens."""
    step = sum(1 for m in body["messages"] if m["role"] == "assistant")
    reply = tool_call_reply("bash", {"command": f"echo step {step}"}, call_id=f"call_{step}")
    reply["usage"] = {"prompt_tokens": 100, "completion_tokens": 7, "total_tokens": 107}
    return reply


@needs(*MiniSweAgentHarness.dependencies)
def test_limits_hold_for_an_agent_behind_the_gateway(workdir: Path, tmp_path: Path):
    """mini-swe-agent's calls pass the model gateway: the call that goes past the attempt's tokens (or dollars)
    is answered with a 400 the agent sees, and the attempt ends with the limit class."""
    with ScriptedEndpoint(mini_reply) as endpoint:
        requests = {}
        for name, limits in (("tokens", {"total_tokens": 150}), ("dollars", {"cost_usd": 0.01})):
            requests[name] = {
                "benchmark": {"id": "example_exact_match", "params": {"task_ids": ["capital-france"]}},
                "harness": {"id": "mini_swe_agent", "params": {"step_limit": 10, "model_retries": 1}},
                "environment": {"id": "host_process", "params": {"workspace_root": str(tmp_path)}},
                "model": {"id": "looper", "base_url": endpoint.base_url, "pricing": PRICING},
                "execution": {"limits": limits}}
        run(workdir, write(workdir, requests), status=1)
        sent = len(endpoint.requests)
    for name, limit in (("tokens", "total_tokens"), ("dollars", "cost_usd")):
        result = results(workdir, name)["capital-france"]
        assert result["failure_class"] == "limit" and result["metadata"]["limit"]["limit"] == limit, result
        # 107 tokens ($0.0135) a call: the second call goes past 150 tokens, the first past $0.01
        assert result["usage"]["calls"] == (2 if name == "tokens" else 1)
        lines = [json.loads(x) for x in (workdir / "results/default" / name / "attempts/capital-france/1" /
                                         "trajectory.jsonl").read_text().splitlines()]
        refused = [x for x in lines if x.get("source") == "gateway" and x.get("status") == 400]
        assert refused and f"execution.limits.{limit}" in refused[0]["error"]
    assert sent == 3  # the agent's calls after the refusal were never sent


def test_status_says_what_the_budget_holds(workdir: Path):
    words = Words()
    with ScriptedEndpoint(words) as endpoint:
        config = write(workdir, {"r": request(endpoint, "chat", 4, {"budget": {"cost_usd": 0.003}})})
        before = agentcompass(workdir, "status", "-c", str(config))
        run(workdir, config, status=EXIT_BUDGET, cores="1")
        after = agentcompass(workdir, "status", "-c", str(config))
    assert before.returncode == after.returncode == 0, before.stderr + after.stderr
    assert "budget: $0.0000 of $0.0030 paid (execution.budget.cost_usd, spend.json): $0.0030 left" in before.stdout
    paid = spend.request_ledger(workdir / "results/default/r").read().cost_usd
    assert (f"budget: ${paid:.4f} of $0.0030 paid (execution.budget.cost_usd, spend.json): spent: the next run starts "
            "no attempt; raise it to continue") in after.stdout
