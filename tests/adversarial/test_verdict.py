"""The verdict is read when nothing of the agent runs, and a failure's class is what the host saw.

A verifier that runs the agent's code (the shipped ``fix-sum-script`` runs the
agent's ``sum.sh``) lets that code leave a process behind: one that writes
``1.00`` over ``reward.txt`` once the verifier has written its own. Before any
result is read, every process of the evaluation session but the provider's own
init is ended (``end_processes``), on host_process in its bubblewrap sandbox
and on docker (skipped, saying why, when no engine answers). And an agent that
writes mini-swe-agent's trajectory itself, or sends the gateway a malformed
call, cannot pick the class its failure is given.
"""

from __future__ import annotations

import asyncio
import json
import secrets
from pathlib import Path

import pytest
import yaml
from conftest import clean_env, snakemake

from adversarial.test_privileges import run_solutions
from agentcompass.benchmarks.swebench import DEPENDENCY as SWEBENCH
from agentcompass.benchmarks.task_dir import SHIPPED_TASKS
from agentcompass.environments.netns import network_isolation
from agentcompass.harnesses.mini_swe_agent import MiniSweAgentHarness
from agentcompass.testing.dependencies import needs
from agentcompass.testing.endpoint import ScriptedEndpoint
from environments.envkit import Provider, require_docker, sandboxed_provider


@pytest.fixture(params=["host_process", "docker"])
def sandboxed(request) -> Provider:
    return sandboxed_provider(request.param)


# --- the session operation -----------------------------------------------------------------------

# A "verifier" that leaves three processes writing into reward.txt: one in the background, one that
# dropped its whole environment (the session's markers with it), one in a session of its own when the
# sandbox has setsid. Each waits until the verifier wrote its reward (or, ``after_exit``, until the
# verifier exited), then writes 1.00 over it, again and again (a rename: never a half-written file).
def leftovers(token: str, after_exit: bool = False) -> str:
    wait = "while kill -0 $$ 2>/dev/null; do sleep 0.02; done" if after_exit else \
        "while [ ! -s reward.txt ]; do sleep 0.02; done"
    loop = f": {token}; {wait}; while :; do echo 1.00 > r.\\$\\$ && mv -f r.\\$\\$ reward.txt; sleep 0.02; done"
    return (
        f'loop="{loop}"\n'
        '(eval "$loop") </dev/null >/dev/null 2>&1 &\n'
        'env -i /bin/sh -c "$loop" </dev/null >/dev/null 2>&1 &\n'
        'if command -v setsid >/dev/null; then setsid /bin/sh -c "$loop" </dev/null >/dev/null 2>&1 & fi\n'
        "sleep 0.2\n"
        "echo 0.00 > reward.txt\n"
    )


def survivors(token: str) -> str:
    """A command that lists what is left of those loops (the pattern does not match its own text)."""
    return f"for f in /proc/[0-9]*/cmdline; do grep -l '[:] {token}' \"$f\" 2>/dev/null; done; echo listed"


@pytest.fixture(params=["host_process", "off", "docker"])
def ending(request) -> Provider:
    """A provider as end_processes meets it: in the sandbox, without it, in a container."""
    if request.param == "off":
        return Provider("host_process", {"sandbox": "off"})
    return sandboxed_provider(request.param)


def test_no_process_of_the_verifier_runs_once_the_sessions_processes_are_ended(ending: Provider):
    token = f"leftover-{secrets.token_hex(6)}"

    async def body(s):
        ran = await s.exec(leftovers(token), shell=True, timeout=30)
        await s.end_processes()
        left = await s.exec(survivors(token), shell=True, timeout=30)
        first = await s.read_text("reward.txt")
        await asyncio.sleep(0.5)  # time enough for a loop that survived to write again
        later = await s.read_text("reward.txt")
        # the session goes on: a process started after runs, and ends with the next call
        await s.exec("sleep 300 </dev/null >/dev/null 2>&1 &", shell=True, timeout=30)
        await s.end_processes()
        after = await s.exec("echo still here", shell=True, timeout=30)
        return ran, left, first, later, after

    ran, left, first, later, after = ending.run(body)
    assert ran.returncode == 0, ran
    assert left.stdout == "listed\n", left.stdout
    # what stands is what stood when the processes ended (the loops may have got in before), and stays
    assert later == first
    assert after.stdout == "still here\n"


def test_a_verifier_run_ends_what_it_started_the_moment_it_exits(sandboxed: Provider):
    """Leftovers that wait for the verifier to exit before they write never write: ``exec_and_end`` ends
    them when it exits; with a plain ``exec`` (the control) they write 1.00 over its reward."""
    ended, kept = f"leftover-{secrets.token_hex(6)}", f"leftover-{secrets.token_hex(6)}"

    async def body(s):
        verifier = await s.exec_and_end(["/bin/sh", "-c", leftovers(ended, after_exit=True)], timeout=30)
        await asyncio.sleep(0.5)
        sealed = await s.read_text("reward.txt"), await s.exec(survivors(ended), shell=True, timeout=30)
        await s.exec(leftovers(kept, after_exit=True), shell=True, timeout=30)
        await asyncio.sleep(0.5)
        return verifier, sealed, (await s.read_text("reward.txt"), await s.exec(survivors(kept), shell=True, timeout=30))

    verifier, (reward, left), (control, control_left) = sandboxed.run(body)
    assert verifier.returncode == 0, verifier
    assert reward == "0.00\n" and left.stdout == "listed\n", (reward, left.stdout)
    assert control.strip() == "1.00"
    assert control_left.stdout.count("cmdline") >= 2, control_left.stdout


# --- the cheat through the real workflow ---------------------------------------------------------

# The agent's sum.sh still subtracts (every check fails), but forks a process that finds the verifier
# (its outermost ancestor run as `/bin/sh .../test.sh`), waits for it to exit, then writes 1.00 over its
# reward.txt, again and again (a rename: never a half-written file).
CHEATING_SUM = r"""#!/bin/sh
is_test() {
  set -- $(tr '\0' ' ' < "/proc/$1/cmdline" 2>/dev/null)
  [ $# -eq 2 ] && [ "$1" = /bin/sh ] && case "$2" in */test.sh) true;; *) false;; esac
}
(
  for f in /logs/verifier/reward.txt "$PWD/.harbor/logs/verifier/reward.txt"; do
    [ -d "${f%/*}" ] && r=$f
  done
  t=
  p=$PPID
  while [ "${p:-0}" -gt 1 ]; do
    is_test "$p" && t=$p
    read -r _ _ _ p _ < "/proc/$p/stat" || break
  done
  [ -n "$r" ] && [ -n "$t" ] || exit 0
  while kill -0 "$t" 2>/dev/null; do sleep 0.02; done
  while :; do echo 1.00 > "$r.$$" && mv -f "$r.$$" "$r"; sleep 0.02; done
) </dev/null >/dev/null 2>&1 &
total=0
for n in "$@"; do
    total=$((total - n))
done
echo "$total"
"""
CHEAT = f"cat > sum.sh <<'EOF'\n{CHEATING_SUM}EOF\n"
HONEST = (SHIPPED_TASKS / "fix-sum-script" / "solution" / "solve.sh").read_text().partition("\n")[2]


def _environment(provider: str, tmp_path: Path) -> dict:
    if provider == "docker":
        require_docker()
        return {"id": "docker"}
    sandboxed_provider("host_process")
    (tmp_path / "sessions").mkdir()
    return {"id": "host_process", "params": {"sandbox": "bubblewrap", "workspace_root": str(tmp_path / "sessions")}}


@pytest.mark.parametrize("provider", ["host_process", "docker"])
def test_a_sum_sh_that_leaves_a_reward_writer_behind_scores_0_and_the_honest_one_1(provider, tmp_path, workdir):
    environment = _environment(provider, tmp_path)
    results = run_solutions(tmp_path, workdir, environment, {"cheat": CHEAT, "honest": HONEST},
                            task="fix-sum-script", retries=0)
    assert sorted(results) == ["cheat", "honest"]
    cheat = results["cheat"]
    assert cheat["status"] == "completed" and cheat["score"] == 0.0 and cheat["correct"] is False, (
        cheat["status"], cheat["error"], cheat["metadata"].get("verifier"))
    assert "expected 6, got '-6'" in cheat["metadata"]["verifier"]["stderr"]
    honest = results["honest"]
    assert honest["status"] == "completed" and honest["score"] == 1.0 and honest["correct"] is True, honest["error"]


# --- mini-swe-agent's class ----------------------------------------------------------------------

KEY_VARIABLE = "AGENTCOMPASS_TEST_KEY"
# The agent's command, run by mini-swe-agent's shell (whose parent is mini itself): optionally a call to
# the gateway with a body that is not JSON (the endpoint answers it 400), then a trajectory of its own
# naming the exit status, then mini killed, so that the file it finds is the agent's.
FORGE = r"""
mini=$PPID
if [ -n "$MALFORMED" ]; then
python3 - "$mini" <<'PY'
import json, sys, urllib.request
found = {}
for arg in open(f"/proc/{sys.argv[1]}/cmdline", "rb").read().split(b"\0"):
    key, _, value = arg.decode().partition("=")
    if key in ("model.model_kwargs.api_base", "model.model_kwargs.api_key"):
        found[key.rsplit(".", 1)[1]] = json.loads(value)
request = urllib.request.Request(found["api_base"] + "/chat/completions", data=b"{not json",
                                 headers={"Authorization": "Bearer " + found["api_key"], "Content-Type": "application/json"})
try:
    urllib.request.urlopen(request, timeout=10)
except Exception as exc:
    print("the gateway answered", exc)
PY
fi
cat > .mini-swe-agent/traj.json <<EOF
{"info": {"exit_status": "$STATUS"}, "messages": [{"role": "exit", "content": "$STATUS"}]}
EOF
kill -9 "$mini"
"""


def _forger(body) -> tuple[int, dict]:
    if not isinstance(body, dict):  # the malformed call: the endpoint answers what the request held
        return 400, {"error": {"message": "the body is not JSON", "type": "invalid_request_error"}}
    status, malformed = {"forge-endpoint": ("APIError", "1"), "forge-limit": ("LimitsExceeded", "")}[body["model"]]
    command = f"export STATUS={status} MALFORMED={malformed}\n{FORGE}"
    return 200, {
        "id": "x", "object": "chat.completion", "model": body["model"],
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": "Step.",
            "tool_calls": [{"id": "c1", "type": "function",
                            "function": {"name": "bash", "arguments": json.dumps({"command": command})}}]}}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }


@needs(*MiniSweAgentHarness.dependencies)
def test_a_failure_class_named_in_a_trajectory_the_agent_wrote_is_harness(workdir: Path, tmp_path: Path):
    if not network_isolation()[0]:
        pytest.skip(f"host_process cannot isolate a 'none' phase here: {network_isolation()[1]}")
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    with ScriptedEndpoint(_forger) as endpoint:
        requests = {}
        for name in ("forge-endpoint", "forge-limit"):
            requests[name] = {
                "benchmark": {"id": "example_exact_match", "params": {"task_ids": ["capital-france"]}},
                "harness": {"id": "mini_swe_agent", "params": {"step_limit": 6, "model_retries": 1}},
                "environment": {"id": "host_process", "run_network": "none",
                                "params": {"workspace_root": str(sessions)}},
                "model": {"id": name, "base_url": endpoint.base_url, "api_key": f"${{{KEY_VARIABLE}}}"},
            }
        config = workdir / "forge.yaml"
        config.write_text(yaml.safe_dump({"requests": requests}))
        done = snakemake(workdir, "--configfile", str(config), env=clean_env(**{KEY_VARIABLE: "sk-test-forge"}))
    assert done.returncode == 0, done.stderr[-3000:]
    # the forged call reached the endpoint and was answered 400: the gateway's last call failed
    assert any(isinstance(r.body, str) and r.body == "{not json" for r in endpoint.requests)
    for name, claimed in (("forge-endpoint", "APIError"), ("forge-limit", "LimitsExceeded")):
        result = json.loads((workdir / f"results/default/{name}/attempts/capital-france/1/result.json").read_text())
        assert result["status"] == "run_error", result
        assert result["failure_class"] == "harness", (name, result["failure_class"], result["error"])
        assert result["metadata"]["exit_status"] == claimed  # what the trajectory said: kept, never the class
        assert "failure" not in result["metadata"]  # no endpoint status stands beside it


# --- SWE-bench's log ------------------------------------------------------------------------------

PATCH = "diff --git a/calc.py b/calc.py\n--- a/calc.py\n+++ b/calc.py\n@@ -1,2 +1,2 @@\n def add(a, b):\n-    return a - b\n+    return a + b\n"
TEST_PATCH = ("diff --git a/tests/test_calc.py b/tests/test_calc.py\n--- a/tests/test_calc.py\n+++ b/tests/test_calc.py\n"
              "@@ -1,1 +1,5 @@\n from calc import add, mul\n+\n+\n+def test_add():\n+    assert add(2, 3) == 5\n")


def _crafted_instance():
    import swebench_kit as kit

    from agentcompass.benchmarks.swebench import load_instance, test_spec

    row = kit.instance("demo__calc-1", "a" * 40, {
        "problem_statement": "add(2, 3) returns -1", "patch": PATCH, "test_patch": TEST_PATCH,
        "FAIL_TO_PASS": ["tests/test_calc.py::test_add"], "test_files": ["tests/test_calc.py"],
    }, "demo_1776_calc-1")
    task = load_instance(row, "a crafted row")
    assert task.load_error is None, task.load_error
    test_spec({**task.metadata["swebench"], **task.ground_truth})  # the package makes its spec of it
    return task, {**task.metadata["swebench"], **task.ground_truth}


@needs(SWEBENCH)
@pytest.mark.parametrize("printed", ["Cannot allocate memory", "Could not resolve host: github.com", "Killed"])
def test_a_swebench_log_that_reads_as_a_broken_machine_is_an_unresolved_completed_attempt(printed):
    """What the patched tests print is the patch's to choose: the package's advice stays metadata."""
    from swebench.harness.constants import APPLY_PATCH_PASS

    from agentcompass.benchmarks.swebench import graded
    from agentcompass.runtime import RunResult, TaskStatus

    task, instance = _crafted_instance()
    # the patch applied, and its tests printed the text and no test status: no parseable test output
    log = f"{APPLY_PATCH_PASS}:\nChecking patch calc.py...\nApplied patch calc.py cleanly.\n+ python -m pytest\n{printed}\n"
    result = asyncio.run(graded(task.task_id, instance, RunResult(task_id=task.task_id, answer=PATCH), PATCH, log,
                                "git apply --verbose", False))
    assert result.status == TaskStatus.COMPLETED and result.failure_class is None, result
    assert result.score == 0.0 and result.correct is False
    report = result.metadata["swebench"]["report"]
    assert report["infra_failure"] is True and report["infra_failure_reason"] in ("out_of_memory", "network_unreachable")
    assert report["resolved"] is False


@needs(SWEBENCH)
def test_a_swebench_log_whose_tests_pass_is_resolved():
    """The control: the same instance and grading, a log of passing tests, resolved."""
    from swebench.harness.constants import APPLY_PATCH_PASS, END_TEST_OUTPUT, START_TEST_OUTPUT

    from agentcompass.benchmarks.swebench import graded
    from agentcompass.runtime import RunResult, TaskStatus

    task, instance = _crafted_instance()
    log = (f"{APPLY_PATCH_PASS}:\nApplied patch calc.py cleanly.\n{START_TEST_OUTPUT}\n"
           "PASSED tests/test_calc.py::test_add\nPASSED tests/test_calc.py::test_mul\n"
           f"{END_TEST_OUTPUT}\n")
    result = asyncio.run(graded(task.task_id, instance, RunResult(task_id=task.task_id, answer=PATCH), PATCH, log,
                                "git apply --verbose", False))
    assert result.status == TaskStatus.COMPLETED and result.score == 1.0 and result.correct is True, (
        result.metadata["swebench"]["report"])


@pytest.mark.parametrize("status, failed", [
    (None, False), (200, False), (400, False), (404, False), (405, False), (413, False), (422, False),
    (401, True), (403, True), (408, True), (429, True), (500, True), (502, True), (503, True), (504, True),
])
def test_only_a_status_the_request_cannot_cause_is_an_endpoint_failure(status, failed):
    """A 4xx that answers what the request held is the agent's doing: its commands can send the gateway anything."""
    from agentcompass.runtime.failures import endpoint_failed

    assert endpoint_failed(status) is failed


# --- unit: how the engine's process list says the container's processes are gone ------------------

KEEPALIVE_CMD = "/bin/sh -c trap '' HUP INT QUIT PIPE TERM USR2 ALRM; ..."


class _Keepalive:
    """Stands in for a container whose init ends every other process at SIGUSR1 and forks a new blocker;
    ``stuck`` processes do not end (a process in uninterruptible sleep)."""

    def __init__(self, podman: bool, leftovers: list[tuple[str, str]], stuck: tuple[str, ...] = ()) -> None:
        self.id, self.name = "c0ffee", "agentcompass-unit"
        self.podman = podman
        self.init = "1" if podman else "4242"
        self.attrs = {"State": {"Pid": 4242, "Running": True}}
        self.next_pid = 5000
        self.rows = [(self.init, "0" if podman else "4000", KEEPALIVE_CMD), self._fork()]
        self.rows += [(f"{4300 + n}", parent, cmd) for n, (parent, cmd) in enumerate(leftovers)]
        self.stuck = stuck
        self.signals: list[str] = []

    def _fork(self) -> tuple[str, str, str]:
        self.next_pid += 1
        return (str(self.next_pid), self.init, KEEPALIVE_CMD)

    def reload(self) -> None:
        pass

    def kill(self, signal: str) -> None:
        self.signals.append(signal)
        self.rows = [row for row in self.rows if row[0] == self.init or row[0] in self.stuck] + [self._fork()]

    def top(self) -> dict:
        if self.podman:
            titles = ["USER", "PID", "PPID", "%CPU", "ELAPSED", "TTY", "TIME", "COMMAND"]
            return {"Titles": titles, "Processes": [["root", pid, ppid, "0.0", "1s", "?", "0s", cmd]
                                                    for pid, ppid, cmd in self.rows]}
        titles = ["UID", "PID", "PPID", "C", "STIME", "TTY", "TIME", "CMD"]
        return {"Titles": titles, "Processes": [["root", pid, ppid, "0", "12:00", "?", "00:00:00", cmd]
                                                for pid, ppid, cmd in self.rows]}


@pytest.mark.parametrize("podman", [False, True])
def test_the_engines_process_list_shows_when_only_init_and_its_blocker_are_left(podman, monkeypatch):
    from agentcompass.environments.docker import DockerConfig, session as docker_session
    from agentcompass.environments.docker.session import DockerSession

    parent = "1" if podman else "4242"
    # a loop reparented to init, one that names itself as init does, one left by an exec (its parent outside)
    container = _Keepalive(podman, [(parent, "sh -c while :; do echo 1.00 > reward.txt; done"),
                                    (parent, KEEPALIVE_CMD), ("0" if podman else "4000", "sleep 300")])
    session = DockerSession(None, container, DockerConfig(image="x"), "/w", "unit")
    session._end_processes_now()
    assert container.signals == ["SIGUSR1"]
    assert [row[0] for row in container.rows] == [container.init, str(container.next_pid)]

    # one that does not end: an error naming it once the deadline passed, never a return
    monkeypatch.setattr(docker_session, "END_PROCESSES_SECONDS", 0.3)
    container = _Keepalive(podman, [(parent, KEEPALIVE_CMD)], stuck=("4300",))
    session = DockerSession(None, container, DockerConfig(image="x"), "/w", "unit")
    with pytest.raises(RuntimeError, match="were still there 0.3 s after they were ended: 4300"):
        session._end_processes_now()
    assert len(container.signals) > 1
