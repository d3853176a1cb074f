"""Answers that try to reach the grader: modules planted where the checker loads code, hedged and hostile text.

The HumanEval checker runs for real in a host_process session in its
bubblewrap sandbox (the docker test image, busybox, has no Python: the
checker cannot run there, so docker is not tested here). Every cheating
answer scores 0 and every honest control 1.
"""

from __future__ import annotations

import asyncio
import sys

import pytest

from agentcompass.benchmarks.humaneval import HumanEvalBenchmark, HumanEvalPlan, load_problems
from agentcompass.environments.bubblewrap import sandbox_support
from agentcompass.environments.host_process import HostProcessEnvironment
from agentcompass.runtime import BenchmarkSpec, HarnessSpec, ModelSpec, RunRequest, RunResult, TaskSpec
from agentcompass.runtime.models import EnvironmentSpec, NetworkPolicy

TIMEOUT = 10.0
FAKE_TOKEN = "0123456789abcdef0123456789abcdef"
# A module that, once the checker loads it, finds the checker's settings (the token) on the stack, prints the
# token and ends with status 0; any function of it does the same (traceback.print_exc, math.sqrt, ...).
FORGE = f'''
import os, sys
def _forge(*args, _importing=False, **kwargs):
    frame = sys._getframe()
    while frame is not None:
        for value in list(frame.f_locals.values()):
            if isinstance(value, dict) and isinstance(value.get("token"), str):
                os.write(1, ("passed\\n" + value["token"] + "\\n").encode())
                os._exit(0)
        frame = frame.f_back
    if not _importing:
        os.write(1, b"passed\\n{FAKE_TOKEN}\\n")
        os._exit(0)
def __getattr__(name):
    return _forge
print_exc = format_exc = print_exception = _forge
_forge(_importing=True)
'''
# Module-level code of a completion: FORGE as every standard module, sitecustomize and usercustomize, and a
# .pth file, into its working folder, every folder on its sys.path, its site folders (made if missing), the
# session's workspace and every folder under /tmp it can enter; PYTHONSTARTUP and PYTHONPATH set.
PLANT = f'''
import glob, os, site, sys
FORGE = {FORGE!r}
folders = [os.getcwd(), *sys.path, WORKSPACE, *glob.glob("/tmp/*/"), os.path.expanduser("~")]
try:
    folders += [*site.getsitepackages(), site.getusersitepackages()]
except Exception:
    pass
names = set(getattr(sys, "stdlib_module_names", ())) | {{"ast", "traceback", "math", "hashlib", "re", "random"}}
planted = 0
for folder in folders:
    if not folder or not os.path.isabs(folder):
        continue
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError:
        continue
    for name in [*names, "sitecustomize", "usercustomize"]:
        path = os.path.join(folder, name + ".py")
        try:
            if os.path.islink(path):
                os.unlink(path)
            with open(path, "w") as out:
                out.write(FORGE)
            planted += 1
        except OSError:
            pass
    try:
        with open(os.path.join(folder, "00-forge.pth"), "w") as out:
            out.write("import os; exec(" + repr(FORGE) + ")\\n")
    except OSError:
        pass
try:
    with open(os.path.expanduser("~/.pythonrc.py"), "w") as out:
        out.write(FORGE)
except OSError:
    pass
os.environ["PYTHONSTARTUP"] = os.path.expanduser("~/.pythonrc.py")
os.environ["PYTHONPATH"] = os.getcwd()
assert planted, "nothing could be planted"
'''
# A copy of the sandbox's Python whose standard library folder anyone can write (its entries link to the
# real files): what an interpreter the completion's user owns looks like, e.g. root's in a container.
WRITABLE_PYTHON = r'''
import os, shutil, sys, sysconfig
dest = os.path.abspath(sys.argv[1])
stdlib = sysconfig.get_paths()["stdlib"]
lib = os.path.join(dest, "lib", os.path.basename(stdlib))
os.makedirs(lib)
os.makedirs(os.path.join(dest, "bin"))
shutil.copy2(os.path.realpath(sys.executable), os.path.join(dest, "bin", "python3"))
for entry in os.listdir(stdlib):
    if entry not in ("site-packages", "dist-packages"):
        os.symlink(os.path.join(stdlib, entry), os.path.join(lib, entry))
for folder in (dest, lib):
    os.chmod(folder, 0o777)
print(os.path.join(dest, "bin", "python3"), lib)
'''


def request() -> RunRequest:
    return RunRequest(model=ModelSpec(), benchmark=BenchmarkSpec("humaneval", {}), harness=HarnessSpec("fixed_answer"))


@pytest.fixture(scope="module")
def sandbox() -> None:
    available, reason = sandbox_support()
    if not available:  # the planting answers would write into the host's Python folders
        pytest.skip(f"the bubblewrap sandbox cannot be made here: {reason}")


def evaluate_all(task: TaskSpec, answers: dict[str, str], setup=None, **plan) -> tuple[dict[str, RunResult], list]:
    """Each answer's verdict, each in its own sandboxed session; ``setup(session)`` runs first in each."""
    benchmark = HumanEvalBenchmark()

    async def one(answer: str):
        spec = EnvironmentSpec(id="host_process", params={"sandbox": "bubblewrap"})
        session = await HostProcessEnvironment().open(spec, NetworkPolicy(mode="none"), "adversarial graders")
        try:
            extra = await setup(session) if setup else {}
            answer = answer.replace("WORKSPACE", repr(session.workdir))
            result = await benchmark.evaluate(task, None, RunResult(task_id=task.task_id, answer=answer), session,
                                              request(), HumanEvalPlan(timeout=TIMEOUT, **{**plan, **extra.get("plan", {})}))
            after = await extra["after"](session) if "after" in extra else None
            return result, after
        finally:
            await session.close()

    async def main():
        return {name: await one(answer) for name, answer in answers.items()}

    done = asyncio.run(main())
    return {name: r for name, (r, _) in done.items()}, [after for _, after in done.values()]


def tasks() -> list[TaskSpec]:
    return HumanEvalBenchmark().load_tasks(request())


WRONG = "    return None\n"


@pytest.mark.parametrize("index", [2, 13, 32])  # truncate_number; gcd; find_zero, whose prompt imports math
def test_a_completion_planting_modules_everywhere_it_can_write_does_not_pass(sandbox, index):
    task = tasks()[index]
    right = load_problems()[index]["canonical_solution"]
    answers = {"wrong, plants": WRONG + PLANT, "right, plants": right + PLANT, "right": right}
    verdicts, _ = evaluate_all(task, answers)
    assert {name: r.correct for name, r in verdicts.items()} == {"wrong, plants": False, "right, plants": True,
                                                                  "right": True}
    assert verdicts["wrong, plants"].metadata["humaneval"]["token_seen"] is False


def test_modules_planted_in_the_workspace_before_the_check_are_not_loaded(sandbox):
    """A workspace evaluated in task mode holds what the agent left: the checker starts there, with -I."""
    task = tasks()[2]

    async def plant(session):
        for name in ("traceback", "json", "linecache", "sitecustomize", "usercustomize"):
            await session.write_text(f"{name}.py", FORGE)
        return {}

    verdicts, _ = evaluate_all(task, {"wrong": WRONG, "right": load_problems()[2]["canonical_solution"]}, plant)
    assert {name: r.correct for name, r in verdicts.items()} == {"wrong": False, "right": True}


def test_an_interpreter_the_completion_can_write_still_loads_nothing_of_it(sandbox):
    """The checker's own standard library is writable (a root container): the completion rewrites it, in vain."""
    task = tasks()[2]

    async def writable(session):
        made = await session.exec(["python3", "-I", "-S", "-c", WRITABLE_PYTHON, "writable-python"], timeout=60)
        assert made.ok, made.stderr
        python, lib = made.stdout.split()

        async def landed(session):  # the planting reached the checker's standard library
            probe = await session.exec(["sh", "-c", f"test -f {lib}/ast.py && ! test -L {lib}/ast.py && "
                                        f"grep -c _forge {lib}/traceback.py"], timeout=30)
            return probe.ok

        return {"plan": {"python": python}, "after": landed}

    answers = {"wrong, plants": WRONG + PLANT, "right, plants": load_problems()[2]["canonical_solution"] + PLANT}
    verdicts, landed = evaluate_all(task, answers, writable)
    assert {name: r.correct for name, r in verdicts.items()} == {"wrong, plants": False, "right, plants": True}
    assert landed == [True, True]


def test_the_checker_imports_nothing_once_the_completion_runs(sandbox):
    """A test importing a module it names is served (loaded first); one it names only at run time is refused."""
    prompt = "def double(x):\n    pass\n"
    named = "def check(candidate):\n    import fractions\n    assert fractions.Fraction(candidate(2), 2) == 2\n"
    hidden = "def check(candidate):\n    assert __import__('frac' + 'tions').Fraction(candidate(2), 2) == 2\n"
    verdicts = {}
    for name, test in {"named": named, "hidden": hidden}.items():
        task = TaskSpec(task_id=name, question=prompt, ground_truth={"test": test}, metadata={"entry_point": "double"})
        verdicts[name] = evaluate_all(task, {"right": "    return 2 * x\n"})[0]["right"]
    assert verdicts["named"].correct is True
    assert verdicts["hidden"].correct is False
    assert "'fractions' was not loaded before the completion ran" in verdicts["hidden"].metadata["humaneval"]["stderr"]


def test_a_root_checker_runs_the_completion_as_nobody(sandbox):
    if sys.platform != "linux":
        pytest.skip("Linux only")
    task = tasks()[2]
    who = "    import os\n    return number % 1.0 if (os.geteuid(), os.getegid(), os.getgroups()) == {} else None\n"
    answers = {"as nobody": who.format("(65534, 65534, [])"), "as root": who.format("(0, 0, [])")}
    verdicts, _ = evaluate_all(task, answers)
    assert {name: r.correct for name, r in verdicts.items()} == {"as nobody": True, "as root": False}


# --- the dataset scorers: hedged answers fail, honest forms pass, regex matching ends ----------------

OPTIONS = ["Paris", "London", "Rome", "Berlin"]
# scorer, target, honest answers (each scores 1), cheating answers (each scores 0)
SCORED = {
    "f1": ("Paris", ["Paris", "The answer is Paris.", "paris", "It is Paris"],
           ["Paris or London", "Paris/London", "Paris; maybe London", "either Paris or Rome", "London or Paris",
            "Paris, or perhaps Berlin", "Paris or London or Rome", "London"]),
    "numeric": ("42", ["42", "42.0", "The answer is 42.", "Answer: 42", "42 apples", "+42"],
                ["forty-one or 42", "42 or forty-three", "41 or 42", "42, maybe 43", "42 (or forty-one)",
                 "42 or 4.2e1 or forty two", "between 41 and 43", "forty-two", "43"]),
    "choice": ("B", ["B", "(B)", "Answer: B", "b", "The answer is (B).", "B is a good choice", "Answer: b", "B."],
               ["B, or maybe c", "A or B", "B or a", "b or c", "(b) (c)", "B/C", "A B C D", "c", "none"]),
}


@pytest.mark.parametrize("scorer", sorted(SCORED))
def test_hedged_answers_fail_and_honest_forms_pass(scorer):
    from agentcompass.benchmarks.dataset_scorers import score_answer

    target, honest, cheating = SCORED[scorer]
    choices = OPTIONS if scorer == "choice" else None
    verdicts = {a: score_answer(scorer, a, [target], choices=choices) for a in honest + cheating}
    assert {a: v.correct for a, v in verdicts.items()} == {**{a: True for a in honest}, **{a: False for a in cheating}}
    assert all(verdicts[a].value == 0 for a in cheating)


def test_a_target_that_itself_offers_alternatives_is_matched_whole():
    from agentcompass.benchmarks.dataset_scorers import score_answer

    assert score_answer("f1", "to be or not to be", ["To be, or not to be"]).correct
    assert not score_answer("f1", "to be or not to be, or maybe both", ["To be or not to be"]).correct


def test_a_catastrophic_regex_is_an_eval_error_with_a_clear_message_not_a_hang(tmp_path):
    """(a|aa)+b on forty a's backtracks for hours under re; the match is stopped at its time limit."""
    import json
    import threading

    from agentcompass.benchmarks.dataset import DatasetBenchmark

    path = tmp_path / "tasks.jsonl"
    path.write_text(json.dumps({"input": "Say a lot of a", "target": "(a|aa)+b"}) + "\n"
                    + json.dumps({"input": "Say Paris", "target": "Paris|Lutetia"}) + "\n")
    req = RunRequest(model=ModelSpec(), benchmark=BenchmarkSpec("dataset", {"path": str(path), "scorer": "regex"}),
                     harness=HarnessSpec("fixed_answer"))
    benchmark = DatasetBenchmark()
    results: dict[str, RunResult] = {}

    def grade() -> None:
        for task, answer in zip(benchmark.load_tasks(req), ["a" * 40, "Paris"]):
            plan = benchmark.build_plan(task, req, EnvironmentSpec())
            results[task.task_id] = asyncio.run(benchmark.evaluate(
                task, None, RunResult(task_id=task.task_id, answer=answer), None, req, plan))

    worker = threading.Thread(target=grade, daemon=True)
    worker.start()
    worker.join(120)  # the limit is 2 s a match
    assert not worker.is_alive(), "the regex scorer hung"
    stopped, honest = results["row-1"], results["row-2"]
    assert (stopped.status.value, stopped.correct, stopped.error_stage) == ("eval_error", None, "evaluate")
    assert "took more than 2 s and was stopped" in stopped.error and "(a|aa)+b" in stopped.error
    assert (honest.status.value, honest.correct) == ("completed", True)
