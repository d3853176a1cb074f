"""Every host-side wait on what the agent can touch has a deadline, and what it started ends with it.

The agent is root in its sandbox. The host_process file helper runs out of
its reach (test_memory.py shows it cannot find it), so these tests stall the
helper from the host (SIGSTOP, or its pipes held open), as whatever else could
stall it would. The agent replaces a program the host runs
after it (docker), opens hundreds of idle connections to its model gateway,
and makes its tests print a line the swebench package's log parsers take
hours over. Each time the host's wait ends within its deadline plus
``GRACE``, the attempt fails as out of its limits (class ``limit``, never
retried), nothing the wait started is left on the host, and a neighbour
session keeps working.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from agentcompass.environments.bubblewrap import sandbox_support
from agentcompass.environments.leftovers import SESSION_VAR, marked_processes
from agentcompass.environments.netns import RELAY_MAX_CONNECTIONS, TcpRelay
from agentcompass.errors import DeadlineError
from agentcompass.gateway import MAX_CONNECTIONS, ModelGateway
from agentcompass.harnesses.mini_swe_agent import MiniSweAgentConfig, MiniSweAgentHarness
from agentcompass.harnesses.tool_agent import ToolAgentConfig, ToolAgentHarness
from agentcompass.runtime import HarnessContext
from agentcompass.runtime.base import ScriptReference, retryable
from agentcompass.runtime.failures import classify
from agentcompass.runtime.models import (
    BenchmarkSpec,
    FailureClass,
    HarnessPlan,
    HarnessSpec,
    ModelSpec,
    PreparedTask,
    TaskInput,
)
from agentcompass.runtime.models import RunRequest
from agentcompass.testing.endpoint import ScriptedEndpoint, completion, tool_call_reply
from environments.envkit import TEST_IMAGE, Provider, require_docker

# What ending a wait may take beyond its deadline: killing what it started, the copy threads giving up
# (they look every 0.2 s), reaping. The figure the guide states (docs/security.md).
GRACE = 5.0
DEADLINE = 3.0  # a session's call_timeout in these tests (CALL_TIMEOUT, 600 s, by default)

# Run on the host: every Python process of one session (its environment holds the mark given) whose
# command line names the file helper is stopped ("stop") or has its pipes opened and kept ("hold"), as long as
# it runs.
FREEZER = r"""
import os, signal, sys, time
me, mode, mark, held, seen = os.getpid(), sys.argv[1], sys.argv[2].encode(), [], set()
while True:
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me or name in seen:
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                cmd = f.read()
            with open(f"/proc/{name}/environ", "rb") as f:
                marked = mark in f.read().split(b"\0")
        except OSError:
            continue
        # the helper itself, never what starts it (the freezer would catch a `setpriv` before it set its
        # parent-death signal: a stall the agent cannot make, as it cannot see any of these)
        if b"transfer" + b".py" not in cmd or not marked or b"python" not in os.path.basename(cmd.split(b"\0")[0]):
            continue
        seen.add(name)
        if mode == "stop":
            try:
                os.kill(int(name), signal.SIGSTOP)
            except OSError:
                pass
        else:
            for fd in (0, 1, 2):
                try:
                    held.append(os.open(f"/proc/{name}/fd/{fd}", os.O_RDWR | os.O_NONBLOCK))
                except OSError:
                    pass
    time.sleep(0.002)
"""


def _sandboxed() -> Provider:
    available, reason = sandbox_support()
    if not available:
        pytest.skip(f"host_process cannot make its sandbox here: {reason}")
    return Provider("host_process", {"sandbox": "bubblewrap"})


def _helpers(session) -> list[str]:
    """The session's file helpers still on the host (nsenter, setpriv or the helper itself), by pid and name."""
    found = []
    for pid in marked_processes(SESSION_VAR, session.session_id):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"transfer.py" in cmd:
            program = cmd.split(b"\0")[0].decode(errors="replace")
            found.append(f"{pid} {program}")
    return found


def _freezer(session_id: str, mode: str) -> subprocess.Popen:
    """The FREEZER on the host, for one session's helpers; the caller kills it."""
    return subprocess.Popen([sys.executable, "-I", "-S", "-c", FREEZER, mode, f"{SESSION_VAR}={session_id}"])


async def _start_freezer(session, mode: str, request) -> None:
    freezer = _freezer(session.session_id, mode)
    request.addfinalizer(lambda: (freezer.kill(), freezer.wait()))
    await asyncio.sleep(0.5)


@pytest.mark.parametrize("mode", ["stop", "hold"])
def test_a_file_helper_stopped_or_held_ends_its_call_within_the_deadline(mode: str, tmp_path: Path, request):
    provider = _sandboxed()
    (tmp_path / "in.txt").write_text("into the sandbox\n")

    async def body(session):
        session.call_timeout = DEADLINE
        await session.write_text("data.txt", "x" * 100_000)
        await _start_freezer(session, mode, request)
        calls = {
            "read_text": lambda: session.read_text("data.txt"),
            "download": lambda: session.download("data.txt", tmp_path / "out.txt"),
            "upload": lambda: session.upload(tmp_path / "in.txt", "in.txt"),
            "write_text": lambda: session.write_text("more.txt", "y"),
            "exists": lambda: session.exists("data.txt"),
        }
        outcomes = {}
        for name, call in calls.items():
            started = time.monotonic()
            try:
                # a wait with no deadline fails here, long before pytest's own time limit
                await asyncio.wait_for(call(), DEADLINE + 60)
                outcome = "done"
            except DeadlineError:
                outcome = "deadline"
            except OSError as exc:
                outcome = f"error: {exc}"
            outcomes[name] = (outcome, round(time.monotonic() - started, 2), _helpers(session))
        return outcomes, session

    outcomes, session = provider.run(body)
    for name, (outcome, seconds, left) in outcomes.items():
        assert seconds <= DEADLINE + GRACE, (name, outcome, seconds)
        assert left == [], (name, outcome, left)  # ended with the call, not at the session's close
    assert {outcome for outcome, _, _ in outcomes.values()} <= {"deadline", "done"}, outcomes
    if mode == "stop":
        # a call whose helper the freezer caught ended at its deadline, as a DeadlineError (on a loaded
        # machine a helper may finish before the freezer's next look: that call is done, in time)
        assert any(outcome == "deadline" for outcome, _, _ in outcomes.values()), outcomes
    assert provider.leftovers(session) == []


# A job that opens a session, prints its id, and (once the test's freezer runs) makes a file call the
# freezer stops; then it waits on the call until it is killed.
KILLED_JOB = """
import asyncio, sys
from agentcompass.environments import HostProcessEnvironment
from agentcompass.runtime.models import EnvironmentSpec, NetworkPolicy

async def main():
    spec = EnvironmentSpec(id="host_process", params={"sandbox": "bubblewrap", "workspace_root": sys.argv[1]})
    session = await HostProcessEnvironment().open(spec, NetworkPolicy(mode="public"), "ctest-killed-job")
    await session.write_text("data.txt", "x")
    print(session.session_id, flush=True)
    await asyncio.sleep(1)
    await session.read_text("data.txt")

asyncio.run(main())
"""


def test_a_job_killed_during_a_stopped_file_call_leaves_no_process_on_the_host(tmp_path: Path):
    _sandboxed()
    job = subprocess.Popen([sys.executable, "-c", KILLED_JOB, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    freezer = None
    try:
        assert job.stdout is not None
        session_id = job.stdout.readline().strip()
        assert session_id, "the job did not open its session"
        freezer = _freezer(session_id, "stop")

        def left() -> list[str]:
            found = []
            for pid in marked_processes(SESSION_VAR, session_id):
                try:
                    found.append(Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode())
                except OSError:
                    pass
            return found

        def stopped_helper() -> bool:
            for pid in marked_processes(SESSION_VAR, session_id):
                try:
                    cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
                    state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
                except (OSError, IndexError):
                    continue
                if b"transfer.py" in cmd and state == "T":
                    return True
            return False

        deadline = time.monotonic() + 10
        while not stopped_helper() and time.monotonic() < deadline:
            time.sleep(0.1)
        # the call is stopped: its helper (and what started it on the host) waits there, stopped
        assert stopped_helper(), left()
    finally:
        job.kill()
        job.wait()
        if freezer is not None:
            freezer.kill()
            freezer.wait()
    deadline = time.monotonic() + GRACE
    while left() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert left() == []


def test_the_attempts_time_limit_ends_a_tool_agent_whose_helper_is_stopped(tmp_path: Path, request):
    """The run stage's task_timeout (a wait_for around the harness) ends a file call that stalls, with
    the default call_timeout: the attempt ends within task_timeout plus GRACE, nothing left."""
    provider = _sandboxed()
    task_timeout = 4.0
    script = [
        tool_call_reply("read_file", {"path": "data.txt"}, call_id="frozen"),
        tool_call_reply("submit", {"answer": "never"}),
    ]
    config = ToolAgentConfig()
    req = RunRequest(model=ModelSpec(id="m", base_url="http://127.0.0.1:1/v1"),
                     benchmark=BenchmarkSpec(id="b"), harness=HarnessSpec(id="tool_agent"))
    plan = HarnessPlan(harness_id="tool_agent", params=dataclasses.asdict(config))
    context = HarnessContext(attempt=1, attempt_dir=tmp_path, trajectory_path=tmp_path / "trajectory.jsonl",
                             timeout=task_timeout)
    prepared = PreparedTask(task_id="t", input=TaskInput(prompt="Work."))

    async def body(session):
        await session.write_text("data.txt", "x")
        await _start_freezer(session, "stop", request)
        started = time.monotonic()
        try:
            await asyncio.wait_for(ToolAgentHarness().run(prepared, session, req, plan, context), task_timeout)
            ended = "returned"
        except asyncio.TimeoutError:
            ended = "timed out"
        return ended, time.monotonic() - started, _helpers(session), session

    with ScriptedEndpoint(script=script) as endpoint:
        req = dataclasses.replace(req, model=dataclasses.replace(req.model, base_url=endpoint.base_url))
        ended, seconds, left, session = provider.run(body)
    assert ended == "timed out" and seconds <= task_timeout + GRACE, (ended, seconds)
    assert left == []
    assert provider.leftovers(session) == []


# --- a program the host runs after the agent (docker: a root agent replaces it) ---------------------


def test_a_program_the_agent_replaced_ends_the_hosts_command_after_it_at_its_deadline(needs_docker, tmp_path: Path):
    require_docker()
    provider = Provider("docker", {"image": TEST_IMAGE})
    solution = tmp_path / "solution"
    solution.mkdir()
    # the oracle's script: rm, which the host runs after it to remove the reference, now sleeps
    (solution / "solve.sh").write_text("#!/bin/sh\nrm -f /bin/rm\nprintf '#!/bin/sh\\nexec sleep 1000\\n' > /bin/rm\n"
                                       "chmod +x /bin/rm\n")
    reference = ScriptReference(source=str(solution), script="solve.sh", target="/solution", timeout=30)

    async def body(session):
        session.call_timeout = DEADLINE
        started = time.monotonic()
        try:
            await asyncio.wait_for(reference.run(session), DEADLINE + 60)
            outcome = "returned"
        except DeadlineError as exc:
            outcome = exc
        seconds = time.monotonic() - started
        sleeping = await session.exec(["sh", "-c", "ps | grep -c 'sleep 100[0]'"], timeout=30)
        return outcome, seconds, sleeping.stdout.strip()

    outcome, seconds, sleeping = provider.run(body)
    assert isinstance(outcome, DeadlineError), outcome
    assert "removing the reference solution" in str(outcome)
    assert seconds <= DEADLINE + GRACE + 30  # the solve.sh itself ran first (well under its 30 s)
    assert sleeping == "0"  # the command that timed out was ended with what it started


def test_a_stage_deadline_ends_its_body_as_a_deadline_error_and_leaves_the_bodys_own_timeouts_alone():
    """What the run stage's copies after the harness and the evaluate stage are wrapped in."""
    from agentcompass._util.aio import deadline

    async def stalled() -> None:
        async with deadline(0.2, "the stage"):
            await asyncio.sleep(60)

    async def own_timeout() -> None:
        async with deadline(60, "the stage"):
            raise TimeoutError("the body's own")

    started = time.monotonic()
    with pytest.raises(DeadlineError, match="the stage did not finish within 0.2 s"):
        asyncio.run(stalled())
    assert time.monotonic() - started < GRACE
    with pytest.raises(TimeoutError, match="the body's own"):
        asyncio.run(own_timeout())


def test_a_deadline_is_the_attempts_limit_never_retried():
    exc = DeadlineError("a file call", 600)
    assert classify(exc, "run") == FailureClass.LIMIT and classify(exc, "evaluate") == FailureClass.LIMIT
    assert not retryable(exc)
    assert not isinstance(exc, TimeoutError)  # the run stage reads a TimeoutError as task_timeout


# --- connections to the gateway ---------------------------------------------------------------------

HOLD_COUNT = 400
HOLD_PY = (
    "import socket, sys, time\n"
    "host, port = sys.argv[1], int(sys.argv[2])\n"
    "held = []\n"
    "for _ in range({count}):\n"
    "    try:\n"
    "        held.append(socket.create_connection((host, port), timeout=5))\n"
    "    except OSError:\n"
    "        pass\n"
    "time.sleep(60)\n"
)


def _hold_command(provider: Provider, host: str, port: int) -> str:
    """A background command in the session: HOLD_COUNT connections to host:port, opened and kept idle."""
    if provider.name == "host_process":
        script = HOLD_PY.format(count=HOLD_COUNT).replace("\n", "\\n")
        return f"(printf '{script}' > hold.py && {sys.executable} -I -S hold.py {host} {port}) >/dev/null 2>&1 &"
    return (f"i=0; while [ $i -lt {HOLD_COUNT} ]; do (sleep 60 </dev/null | nc {host} {port} >/dev/null 2>&1 &) "
            ">/dev/null 2>&1; i=$((i+1)); done")


def _open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


def _chat(token: str) -> str:
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]})
    return (f"POST /chat/completions HTTP/1.1\r\nHost: gateway\r\nContent-Type: application/json\r\n"
            f"Authorization: Bearer {token}\r\nConnection: close\r\nContent-Length: {len(body)}\r\n\r\n{body}")


def _ask(path: Path, data: bytes) -> bytes:
    """Send ``data`` (if any) to the Unix socket at ``path``; the whole reply."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(10)
        conn.connect(str(path))
        if data:
            conn.sendall(data)
        reply = b""
        while chunk := conn.recv(65536):
            reply += chunk
    return reply


def test_the_gateway_holds_at_most_its_connections_and_answers_one_more_503(tmp_path: Path):
    trajectory = tmp_path / "trajectory.jsonl"
    with ScriptedEndpoint(reply=lambda body: completion("ok")) as upstream, \
            ModelGateway(upstream.base_url, "sk-key", trajectory) as gateway:
        held = []
        for _ in range(MAX_CONNECTIONS):
            conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            conn.connect(str(gateway.socket_path))
            held.append(conn)
        time.sleep(0.5)  # each one taken by a thread of the gateway, which waits for its request
        crowded = [_ask(gateway.socket_path, b"") for _ in range(3)]  # answered before they say anything
        for conn in held:
            conn.close()
        time.sleep(0.5)
        answered = _ask(gateway.socket_path, _chat(gateway.token).encode())
        refused = gateway.connections_refused
    assert all(reply.startswith(b"HTTP/1.0 503 ") for reply in crowded), crowded
    assert b"too_many_connections" in crowded[0]
    assert answered.startswith(b"HTTP/1.0 200 "), answered[:200]
    assert refused == 3
    records = [json.loads(line) for line in trajectory.read_text().splitlines()]
    assert [r["status"] for r in records] == [503, 200]  # the crowd recorded once


def test_a_relay_holds_at_most_its_connections_and_closes_one_more():
    server = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                accepted.append(server.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    relay = TcpRelay(lambda: socket.create_connection(server.getsockname()[:2]))
    host, port = relay.address.split(":")
    clients = [socket.create_connection((host, int(port)), timeout=10) for _ in range(RELAY_MAX_CONNECTIONS + 10)]
    try:
        deadline = time.monotonic() + 10
        while relay.refused < 10 and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)
        assert relay.refused == 10 and len(accepted) == RELAY_MAX_CONNECTIONS, (relay.refused, len(accepted))
    finally:
        relay.close()
        server.close()
        for conn in clients + accepted:
            conn.close()


@pytest.mark.parametrize("provider_name", ["host_process", "docker"])
def test_idle_connections_to_the_gateway_end_that_attempt_only(provider_name: str, tmp_path: Path):
    if provider_name == "docker":
        require_docker()
        provider = Provider("docker", {"image": TEST_IMAGE})
    else:
        provider = _sandboxed()
    with ScriptedEndpoint(reply=lambda body: completion("ok")) as upstream, \
            ModelGateway(upstream.base_url, "sk-a", tmp_path / "a.jsonl") as mine, \
            ModelGateway(upstream.base_url, "sk-b", tmp_path / "b.jsonl") as neighbours:

        async def main():
            a = await provider.open("none")
            b = await provider.open("none")
            try:
                host_a, port_a = (await a.expose_host_socket(mine.socket_path)).split(":")
                host_b, port_b = (await b.expose_host_socket(neighbours.socket_path)).split(":")
                before = _open_descriptors()
                held = await a.exec(_hold_command(provider, host_a, int(port_a)), shell=True, timeout=120)
                assert held.ok, held
                await asyncio.sleep(3)  # every connection made, and idle
                during = _open_descriptors()
                own = await provider.connect(a, host_a, int(port_a), _chat(mine.token))
                other = await provider.connect(b, host_b, int(port_b), _chat(neighbours.token))
                # the neighbour's engine and file calls work too
                await b.write_text("note.txt", "still here")
                note = await b.read_text("note.txt")
                return before, during, own, other, note
            finally:
                await a.close()
                await b.close()

        before, during, own, other, note = asyncio.run(main())
        refused_mine, refused_neighbours = mine.connections_refused, neighbours.connections_refused
    assert refused_mine > 0 and refused_neighbours == 0
    # at most the caps' worth of descriptors in this process: the gateway's one per connection, and on docker
    # the relay's two (host_process's relay is a process of the sandbox's network)
    assert during - before <= MAX_CONNECTIONS + 2 * RELAY_MAX_CONNECTIONS + 16, (before, during)
    assert not own.stdout.startswith("HTTP/1.0 200") and not own.stdout.startswith("HTTP/1.1 200"), own
    assert other.stdout.startswith("HTTP/") and " 200 " in other.stdout.splitlines()[0], other
    assert note == "still here"


def test_an_agent_that_crowds_its_gateway_fails_its_own_attempt_as_out_of_limits(tmp_path: Path):
    """mini_swe_agent's program (here a script the agent controls, which forges a submission too)
    opens more connections than the gateway takes: the attempt fails, class limit, never retried."""
    provider = _sandboxed()
    hold = HOLD_PY.format(count=HOLD_COUNT).replace("time.sleep(60)", "time.sleep(3)").replace("\n", "\\n")
    program = (
        "#!/bin/sh\n"
        # the gateway's address is the value of model.model_kwargs.api_base
        'for a in "$@"; do case "$a" in model.model_kwargs.api_base=*) base="${a#*=}";; esac; done\n'
        'base=${base#\\"}; base=${base%\\"}; base=${base#http://}; host=${base%:*}; port=${base##*:}\n'
        f"printf '{hold}' > /tmp/hold.py\n"
        f'{sys.executable} -I -S /tmp/hold.py "$host" "$port"\n'
        'for a in "$@"; do [ "$prev" = -o ] && out="$a"; prev="$a"; done\n'
        """printf '{"info": {"exit_status": "Submitted", "submission": "forged"}, "messages": []}' > "$out"\n"""
    )
    req = RunRequest(model=ModelSpec(id="m", base_url="http://127.0.0.1:1/v1"),
                     benchmark=BenchmarkSpec(id="b"), harness=HarnessSpec(id="mini_swe_agent"))
    context = HarnessContext(attempt=1, attempt_dir=tmp_path, trajectory_path=tmp_path / "trajectory.jsonl")
    prepared = PreparedTask(task_id="t", input=TaskInput(prompt="Work."))

    async def body(session):
        await session.write_text("fake-mini", program)
        assert (await session.exec(["chmod", "+x", "fake-mini"])).ok
        config = MiniSweAgentConfig(executable=f"{session.workdir}/fake-mini", timeout=120)
        plan = HarnessPlan(harness_id="mini_swe_agent", params=dataclasses.asdict(config))
        return await MiniSweAgentHarness().run(prepared, session, req, plan, context)

    with ScriptedEndpoint(script=[]) as endpoint:
        req = dataclasses.replace(req, model=dataclasses.replace(req.model, base_url=endpoint.base_url))
        result = provider.run(body, mode="none")
    assert result.status.is_error and result.failure_class == FailureClass.LIMIT, (result.status, result.error)
    assert f"more than {MAX_CONNECTIONS} connections" in result.error


# --- grading with the swebench package ------------------------------------------------------------------


def _sympy_instance() -> dict:
    import swebench_kit as kit

    spec = {"problem_statement": "p", "patch": "", "test_patch": "", "FAIL_TO_PASS": ["test_calc.py:test_add"],
            "test_files": ["tests/test_calc.py"]}
    # graded with sympy's log parser, whose pattern backtracks over every long line
    return {**kit.instance("demo__calc-1", "0" * 40, spec, "demo__calc-1"), "log_parser": "parse_log_sympy"}


def _log(line: str) -> str:
    from swebench.harness.constants import APPLY_PATCH_PASS, END_TEST_OUTPUT, START_TEST_OUTPUT

    return f"{APPLY_PATCH_PASS}:\n+ : '{START_TEST_OUTPUT}'\n{line}\n+ : '{END_TEST_OUTPUT}'\n"


def _graders() -> list[int]:
    """This process's children that run the grader."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            parent = int(Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()[1])
            cmd = Path(f"/proc/{name}/cmdline").read_bytes()
        except (OSError, IndexError, ValueError):
            continue
        if parent == os.getpid() and b"get_eval_report" in cmd:
            found.append(int(name))
    return found


def test_a_400_kb_log_line_ends_swebench_grading_within_its_deadline():
    pytest.importorskip("swebench")
    from agentcompass.benchmarks.swebench import grade

    instance = _sympy_instance()
    prediction = {"instance_id": instance["instance_id"], "model_name_or_path": "agentcompass", "model_patch": "x"}
    # the honest control: a short log is graded, its test found
    report, statuses = asyncio.run(grade(instance, prediction, _log("test_add ok"), timeout=60))
    assert statuses == {"test_add": "PASSED"}, (report, statuses)
    # what a conftest.py of the agent's patch prints: one line of 400 KB
    started = time.monotonic()
    with pytest.raises(DeadlineError) as raised:
        asyncio.run(grade(instance, prediction, _log("a " * 200_000), timeout=DEADLINE))
    seconds = time.monotonic() - started
    assert seconds <= DEADLINE + GRACE, seconds
    assert "grading the test log" in str(raised.value)
    assert _graders() == []  # the grader was killed and reaped
