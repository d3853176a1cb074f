"""majority_vote: reading answers, voting, and a failed model call."""

from __future__ import annotations

import asyncio
import socket

from agentcompass.benchmarks.majority_vote import MajorityVoteBenchmark, MajorityVotePlan, final_integer, majority
from agentcompass.runtime import (
    BenchmarkSpec,
    EnvironmentSpec,
    ExecutionPlan,
    ExecutionSpec,
    HarnessPlan,
    HarnessSpec,
    ModelSpec,
    PreparedTask,
    RunRequest,
    TaskInput,
)


def test_the_final_integer_of_a_reply_is_its_answer():
    assert final_integer("12 * 3 = 36, plus 4 gives\n40") == 40
    assert final_integer("The answer is 1,234.") == 1234
    assert final_integer("minus: -7") == -7
    assert final_integer("no idea") is None


def test_the_most_frequent_answer_wins_and_a_tie_goes_to_the_first_seen():
    assert majority([3, 5, 5, None, 3, 5]) == 5
    assert majority([7, 3, 3, 7]) == 7
    assert majority([None, None]) is None


def test_an_unreachable_model_makes_a_run_error_not_a_crash():
    with socket.socket() as probe:  # a loopback port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    req = RunRequest(model=ModelSpec(id="m", base_url=f"http://127.0.0.1:{port}/v1"),
                     benchmark=BenchmarkSpec("majority_vote"), harness=HarnessSpec("none"))
    plan = ExecutionPlan(
        task_id="arith-0", attempt=1, benchmark_id="majority_vote", task_environment=EnvironmentSpec(),
        evaluation_environment=None, evaluation_environment_mode="task", baseline_network=None, run_network=None,
        evaluation_network=None, benchmark_plan=MajorityVotePlan(samples=2, timeout=5.0),
        harness_plan=HarnessPlan(), execution=ExecutionSpec(),
    )
    prepared = PreparedTask(task_id="arith-0", input=TaskInput(prompt="What is 1 * 1 + 1?"))
    result = asyncio.run(MajorityVoteBenchmark().run_task(prepared, None, req, plan))
    assert result.status.value == "run_error" and "model call failed" in result.error
