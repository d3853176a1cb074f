"""Host memory is not the agent's to spend: each host-side buffer of what the agent makes is capped.

The agent prints 300 MB, asks for a 500 MB sparse file as text, forges huge
headers into a copy's stream and sends a 300 MB request body to its gateway.
Each time the work runs in a child Python process, as it runs in a job, and
the test reads the child's peak resident memory (``VmHWM``, reset after the
setup) against ``MEMORY_BOUND``, the bound ``docs/security.md`` states for
what one attempt's agent can make the job hold. The caps are also tried at
their limits (a file of ``READ_LIMIT`` bytes, a body of ``BODY_LIMIT``), where
the memory they cost is largest.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import socket
import subprocess
import sys
import tarfile
import textwrap
import time
from pathlib import Path

import pytest

from agentcompass.environments import transfer
from agentcompass.gateway import BODY_LIMIT
from agentcompass.runtime.base import OUTPUT_LIMIT
from agentcompass.runtime.model_client import RECORD_LIMIT, REPLY_LIMIT, Trajectory
from environments.conftest import provider, sandboxed_provider  # noqa: F401 (fixtures)
from environments.envkit import Provider, unique_label

# What the job's memory may grow by, whatever one attempt's agent prints, writes or sends (docs/security.md)
MEMORY_BOUND = 64 << 20
MB = 1 << 20

# Run in the child first: the peak of its resident memory, measured from the moment the work starts.
PRELUDE = textwrap.dedent('''
    import asyncio, json, os, sys

    def status(field):
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
        raise LookupError(field)

    def start():
        """The resident memory now; the peak counts from here (reset where the kernel allows it)."""
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
        except OSError:
            pass
        return status("VmRSS")

    def grown(base):
        return status("VmHWM") - base

    async def open_session(name, params, label):
        from agentcompass.environments import DockerEnvironment, HostProcessEnvironment
        from agentcompass.runtime.models import EnvironmentSpec, NetworkPolicy
        env = HostProcessEnvironment() if name == "host_process" else DockerEnvironment()
        return await env.open(EnvironmentSpec(id=name, params=params), NetworkPolicy(mode="public"), label)
''')


def in_child(script: str, *args: str, timeout: float = 600) -> dict:
    """Run ``script`` (after PRELUDE) in a child Python with ``args``; the JSON object it prints last."""
    ran = subprocess.run([sys.executable, "-c", PRELUDE + textwrap.dedent(script), *args], capture_output=True,
                         text=True, timeout=timeout)
    assert ran.returncode == 0, ran.stderr[-4000:]
    return json.loads(ran.stdout.strip().splitlines()[-1])


def session_args(chosen: Provider) -> list[str]:
    return [chosen.name, json.dumps(chosen.params), unique_label("mem")]


# --- what a command prints ----------------------------------------------------------------


PRINTS = '''
    async def main():
        session = await open_session(sys.argv[1], json.loads(sys.argv[2]), sys.argv[3])
        try:
            await session.exec(["true"])
            base = start()
            # 300 MB on stdout between two markers, 50 MB on stderr
            ran = await session.exec(
                "echo BEGIN; yes 0123456789abcdefghijklmnopqrstuvwxyz | head -c 300000000; echo; echo END; "
                "yes e | head -c 50000000 >&2", shell=True, timeout=600)
            return {"grown": grown(base), "returncode": ran.returncode, "cut": ran.cut, "out": len(ran.stdout),
                    "err": len(ran.stderr), "head": ran.stdout[:6], "tail": ran.stdout[-4:],
                    "note": "bytes of this output cut here" in ran.stdout}
        finally:
            await session.close()

    print(json.dumps(asyncio.run(main())))
'''


def test_300_mb_printed_keeps_head_and_tail_within_the_bound(sandboxed_provider: Provider):  # noqa: F811
    report = in_child(PRINTS, *session_args(sandboxed_provider))
    print(f"300 MB printed on {sandboxed_provider.name}: the job grew by {report['grown'] / MB:.1f} MB")
    assert report["returncode"] == 0
    assert report["head"] == "BEGIN\n" and report["tail"] == "END\n"  # the head and the tail, kept
    assert report["note"]  # and it says it was cut
    assert report["out"] <= OUTPUT_LIMIT + 1000 and report["err"] <= OUTPUT_LIMIT + 1000
    assert report["cut"] >= 350_000_000 - 2 * OUTPUT_LIMIT
    assert report["grown"] < MEMORY_BOUND, f"the job grew by {report['grown'] / MB:.1f} MB"


# --- read_text of a big file ----------------------------------------------------------------


READS = '''
    from agentcompass.environments.transfer import READ_LIMIT, CopyLimitError

    async def main():
        session = await open_session(sys.argv[1], json.loads(sys.argv[2]), sys.argv[3])
        try:
            made = await session.exec(
                "dd if=/dev/zero of=sparse bs=1 count=0 seek=500000000 2>/dev/null && "
                f"yes 0123456789abcdef | head -c {READ_LIMIT} > at-limit", shell=True, cwd=session.workdir)
            assert made.ok, made.stderr
            base = start()
            try:
                await session.read_text("sparse")
                refused = None
            except CopyLimitError as exc:
                refused = str(exc)
            sparse = grown(base)
            base = start()
            text = await session.read_text("at-limit")
            return {"refused": refused, "sparse": sparse, "at_limit": grown(base), "read": len(text)}
        finally:
            await session.close()

    print(json.dumps(asyncio.run(main())))
'''


def test_a_500_mb_sparse_file_is_refused_unread_and_one_at_the_limit_fits(sandboxed_provider: Provider):  # noqa: F811
    report = in_child(READS, *session_args(sandboxed_provider))
    print(f"read_text on {sandboxed_provider.name}: 500 MB sparse file {report['sparse'] / MB:.1f} MB, "
          f"a file of READ_LIMIT {report['at_limit'] / MB:.1f} MB")
    assert report["refused"] and "read_text" in report["refused"], report
    assert report["sparse"] < 16 * MB, f"the job grew by {report['sparse'] / MB:.1f} MB"
    assert report["read"] == transfer.READ_LIMIT
    assert report["at_limit"] < MEMORY_BOUND, f"the job grew by {report['at_limit'] / MB:.1f} MB"


def test_read_text_without_the_sandbox_has_the_same_limit(tmp_path: Path):
    confined = transfer.Confined(str(tmp_path), transfer.Limits())
    with open(tmp_path / "sparse", "wb") as f:
        f.truncate(500_000_000)
    with pytest.raises(transfer.CopyLimitError, match="read_text"):
        confined.read("sparse")
    (tmp_path / "small").write_text("ok")
    assert confined.read("small") == b"ok"


# --- the copy stream -------------------------------------------------------------------------


FORGED = '''
    import io, tarfile, tempfile, time
    from agentcompass.environments import transfer

    class Forged(io.RawIOBase):
        """A tar stream: ``head`` then ``size`` bytes of filler made as they are read (never held whole)."""

        def __init__(self, head, size, filler=b"a"):
            super().__init__()
            self.head, self.left, self.filler = head, size, filler * (1 << 16)
            self.read_bytes = 0

        def readable(self):
            return True

        def readinto(self, buffer):
            if self.head:
                n = min(len(buffer), len(self.head))
                buffer[:n], self.head = self.head[:n], self.head[n:]
            elif self.left:
                n = min(len(buffer), self.left, len(self.filler))
                buffer[:n] = self.filler[:n]
                self.left -= n
            else:
                return 0
            self.read_bytes += n
            return n

    def header(name, kind, size):
        info = tarfile.TarInfo(name)
        info.type, info.size = kind, size
        return info.tobuf(format=tarfile.USTAR_FORMAT)

    size = 400_000_000
    PATH_RECORD = b"20 path=aaaaaaaaaaa\\n".ljust(512, b"\\0")
    streams = {
        # a GNU long name and a pax header said to hold 400 MB, their data following
        "gnu_long_name": lambda: Forged(header("f", tarfile.GNUTYPE_LONGNAME, size), size),
        "pax_header": lambda: Forged(header("f", tarfile.XHDTYPE, size), size),
        # a 40 KB pax header of digits: quadratic in tarfile's own parser
        "pax_digits": lambda: Forged(header("f", tarfile.XHDTYPE, 40_000), 40_000, b"1"),
        "pax_digits_space": lambda: Forged(header("f", tarfile.XHDTYPE, 40_000) + b"40000 ", 39_994, b"1"),
        # many extended headers in a row before any entry
        "header_run": lambda: Forged(b"".join(header("f", tarfile.XHDTYPE, 512) + PATH_RECORD for _ in range(1000)), 0),
    }
    report = {}
    with tempfile.TemporaryDirectory() as folder:
        for name, make in streams.items():
            stream = make()
            base = start()
            started = time.monotonic()
            try:
                transfer.extract_local(stream, f"{folder}/{name}", transfer.Limits())
                error = None
            except OSError as exc:
                error = str(exc)
            report[name] = {"error": error, "seconds": time.monotonic() - started, "grown": grown(base),
                            "read": stream.read_bytes}
    print(json.dumps(report))
'''


def test_forged_headers_in_a_copy_stream_are_refused_unread_in_bounded_time_and_memory():
    report = in_child(FORGED)
    print({name: f"{seen['grown'] / MB:.1f} MB, {seen['seconds']:.3f} s" for name, seen in report.items()})
    for name, seen in report.items():
        assert seen["error"] and "not a valid archive" in seen["error"], (name, seen)
        assert seen["seconds"] < 2, (name, seen)
        assert seen["grown"] < 16 * MB, (name, f"the job grew by {seen['grown'] / MB:.1f} MB")
        assert seen["read"] < 2 * MB, (name, "the forged data was read")


def test_every_entry_of_a_copy_stream_counts_against_the_entry_limit(tmp_path: Path):
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w", format=tarfile.PAX_FORMAT) as tar:
        root = tarfile.TarInfo("root")
        root.type = tarfile.DIRTYPE
        tar.addfile(root)
        for number in range(50):  # all outside the copied folder: skipped, and counted
            tar.addfile(tarfile.TarInfo(f"elsewhere/{number}"), io.BytesIO(b""))
    data.seek(0)
    with pytest.raises(transfer.CopyLimitError, match="more than 10 entries"):
        transfer.extract_local(data, str(tmp_path / "out"), transfer.Limits(files=10))


def test_long_names_and_links_still_copy_through_the_bounded_reader(tmp_path: Path):
    source = tmp_path / "source"
    deep = source
    for level in range(15):  # a path of 15 names of 200 bytes: pax headers of about 3 KB
        deep = deep / (f"{level:03d}" + "n" * 197)
    deep.mkdir(parents=True)
    (deep / "file").write_text("deep")
    os.symlink("t" * 3000, deep / "link")
    stream = io.BytesIO()
    transfer.pack_local(stream, str(source), transfer.Limits())
    stream.seek(0)
    assert transfer.extract_local(stream, str(tmp_path / "copy"), transfer.Limits()) == []
    landed = tmp_path / "copy" / deep.relative_to(source)
    assert (landed / "file").read_text() == "deep" and os.readlink(landed / "link") == "t" * 3000


WATCHER = r'''
import os, sys, time
found, seen, deadline = [], set(), time.monotonic() + float(sys.argv[2])
while time.monotonic() < deadline:
    time.sleep(0.001)
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                command = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if (pid, command) in seen:
            continue
        seen.add((pid, command))
        if "transfer" + ".py" in command and pid != str(os.getpid()):
            found.append(command)
            try:  # write a forged header into its output: a GNU long name said to hold 400 MB
                with open(f"/proc/{pid}/fd/1", "wb") as out:
                    out.write(b"x" * 100 + b"\0" * 56 + b"0000644\0" * 3 + b"%011o\0" % 400_000_000)
            except OSError:
                pass
with open(sys.argv[1], "w") as f:
    f.write(f"{len(seen)}\n" + "\n".join(found))
'''


def test_no_command_of_the_sandbox_sees_the_file_helper(sandboxed_provider: Provider, tmp_path: Path):  # noqa: F811
    if sandboxed_provider.name != "host_process":
        pytest.skip("on docker the engine writes a copy's stream: no process of the container holds it")

    async def body(session):
        made = await session.exec("mkdir data && yes 0123456789 | head -c 20000000 > data/big && echo small > data/s",
                                  shell=True, cwd=session.workdir)
        assert made.ok, made.stderr
        await session.exec(f"{sys.executable} -I -S -c \"$W\" {session.workdir}/watched 8 >/dev/null 2>&1 &",
                           shell=True, env={"W": WATCHER})
        await asyncio.sleep(0.5)
        for number in range(6):
            await session.download("data", tmp_path / f"copy{number}")
            assert await session.read_text("data/s") == "small\n"
        for _ in range(100):
            if await session.exists("watched"):
                break
            await asyncio.sleep(0.2)
        return await session.read_text("watched")

    watched = sandboxed_provider.run(body)
    count, _, found = watched.partition("\n")
    assert int(count) >= 1  # it saw processes: its own at least
    assert found == "", f"a command of the sandbox saw the file helper: {found}"
    for number in range(6):
        assert (tmp_path / f"copy{number}" / "big").stat().st_size == 20_000_000


# --- the gateway -------------------------------------------------------------------------------


# the end of a child program that measures the gateway: an upstream that reads each request and answers
# next_reply() (defined above it), a gateway before it, and the child's growth once the test has sent its calls
SERVES_A_GATEWAY = '''
    class Upstream(QuietHandler):
        def do_POST(self):
            left = int(self.headers.get("Content-Length") or 0)
            while left > 0:  # read and dropped: this server's memory is the child's too
                got = self.rfile.read(min(left, 1 << 16))
                if not got:
                    break
                left -= len(got)
            send_json(self, next_reply())

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Upstream)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    with ModelGateway(f"http://127.0.0.1:{server.server_address[1]}/v1", "sk-upstream", sys.argv[1]) as gateway:
        base = start()
        print(json.dumps({"socket": str(gateway.socket_path), "token": gateway.token}), flush=True)
        sys.stdin.readline()  # the test has sent what it sends
        report = {"grown": grown(base), "usage": gateway.usage()}
    server.shutdown()
    print(json.dumps(report))
'''


GATEWAY = '''
    import http.server, threading
    from agentcompass.gateway import ModelGateway
    from agentcompass.testing.endpoint import QuietHandler, send_json

    def next_reply():
        return json.dumps({"choices": [{"message": {"role": "assistant", "content": "ok"}}],
                           "usage": {"prompt_tokens": 1, "completion_tokens": 1}}).encode()

''' + SERVES_A_GATEWAY


def send(path: str, token: str | None, size: int, sent: int) -> tuple[int, int, float]:
    """A POST of a ``size``-byte body, of which ``sent`` bytes are sent before the reply is read;
    the reply's status, how many bytes of the body went out, and the seconds to the reply."""
    auth = f"Authorization: Bearer {token}\r\n" if token else ""
    started = time.monotonic()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(60)
        conn.connect(path)
        conn.sendall((f"POST /chat/completions HTTP/1.1\r\nHost: g\r\nContent-Type: application/json\r\n{auth}"
                      f"Content-Length: {size}\r\n\r\n").encode())
        out = 0
        chunk = b"x" * (1 << 20)
        try:
            while out < sent:
                out += conn.send(chunk[:sent - out])
        except OSError:
            pass  # the gateway closed the connection: it read no more
        reply = b""
        try:
            while b"\r\n" not in reply and (data := conn.recv(65536)):
                reply += data
        except OSError:
            pass
    return int(reply.split(b" ", 2)[1]), out, time.monotonic() - started


def test_a_300_mb_request_body_is_refused_before_it_is_read(tmp_path: Path):
    trajectory = tmp_path / "trajectory.jsonl"
    child = subprocess.Popen([sys.executable, "-c", PRELUDE + textwrap.dedent(GATEWAY), str(trajectory)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdin is not None
        ready = json.loads(child.stdout.readline())
        path, token = ready["socket"], ready["token"]
        huge = 300_000_000
        wrong = send(path, "not-the-token", huge, 4 * MB)
        refused = send(path, token, huge, 4 * MB)
        # at the limit: taken, and recorded cut
        taken = [send(path, token, BODY_LIMIT, BODY_LIMIT) for _ in range(3)]
        child.stdin.write("done\n")
        child.stdin.flush()
        report = json.loads(child.stdout.readline())
        assert child.wait(60) == 0, child.stderr.read() if child.stderr else ""
    finally:
        child.kill()
    print(f"gateway: 401 after {wrong[2]:.3f} s, 413 after {refused[2]:.3f} s; grew by {report['grown'] / MB:.1f} MB")
    assert wrong[0] == 401 and refused[0] == 413
    assert all(status == 200 for status, _, _ in taken)
    assert report["usage"]["calls"] == 3
    assert report["grown"] < MEMORY_BOUND, f"the gateway grew by {report['grown'] / MB:.1f} MB"
    records = [json.loads(line) for line in trajectory.read_text().splitlines()]
    assert [r["status"] for r in records] == [401, 413, 200, 200, 200]
    assert all("agentcompass_cut" in r["request"] for r in records[2:])  # recorded cut, saying so
    assert trajectory.stat().st_size < 3 * (RECORD_LIMIT // 8)


# --- model replies and trajectories ----------------------------------------------------------


REPLIES = '''
    import http.server, threading
    from agentcompass.errors import ModelCallError
    from agentcompass.runtime.model_client import ModelCallConfig, ModelClient
    from agentcompass.runtime.models import ModelSpec

    class Upstream(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            size = 300_000_000
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            if self.path.startswith("/with-length"):
                self.send_header("Content-Length", str(size))
            self.end_headers()
            chunk = b" " * (1 << 20)
            try:
                for _ in range(size >> 20):
                    self.wfile.write(chunk)
            except OSError:
                pass

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Upstream)
    threading.Thread(target=server.serve_forever, daemon=True).start()

    async def main():
        report = {}
        for name in ("with-length", "no-length"):
            model = ModelSpec(id="m", base_url=f"http://127.0.0.1:{server.server_address[1]}/{name}")
            async with ModelClient(model, ModelCallConfig(max_model_retries=0, timeout=120)) as client:
                base = start()
                try:
                    await client.complete([{"role": "user", "content": "hi"}])
                    error = None
                except ModelCallError as exc:
                    error = str(exc)
                report[name] = {"error": error, "grown": grown(base)}
        return report

    print(json.dumps(asyncio.run(main())))
'''


def test_a_300_mb_model_reply_is_an_error_read_no_further_than_the_limit():
    report = in_child(REPLIES)
    print({name: f"{seen['grown'] / MB:.1f} MB" for name, seen in report.items()})
    for name, seen in report.items():
        assert seen["error"] and f"more than {REPLY_LIMIT} bytes" in seen["error"], (name, seen)
        assert seen["grown"] < MEMORY_BOUND, (name, f"the job grew by {seen['grown'] / MB:.1f} MB")


def test_a_trajectory_records_a_long_body_cut_and_says_so(tmp_path: Path):
    trajectory = Trajectory(tmp_path / "t.jsonl")
    trajectory.append("model_call", request={"messages": [{"role": "user", "content": "x" * (20 * MB)}]},
                      reply={"ok": True}, status=200)
    trajectory.append("model_call", request={"messages": [{"role": "user", "content": "short"}]}, status=200)
    lines = (tmp_path / "t.jsonl").read_text().splitlines()
    assert len(lines[0]) < RECORD_LIMIT
    first = json.loads(lines[0])
    assert first["request"]["bytes"] > 20 * MB and "agentcompass_cut" in first["request"]
    assert first["reply"] == {"ok": True} and first["status"] == 200
    assert json.loads(lines[1])["request"]["messages"][0]["content"] == "short"


def test_docker_s_exec_stream_keeps_head_and_tail_whatever_its_frames():
    """The engine's multiplexed stream (8-byte headers, then payloads) read as it comes: a frame larger than
    what is kept, and frames split anywhere, land in their streams' heads and tails."""
    import threading

    from agentcompass.environments.docker.streams import _read_frames

    def frame(kind: int, payload: bytes) -> bytes:
        return bytes([kind, 0, 0, 0]) + len(payload).to_bytes(4, "big") + payload

    stream = frame(1, b"BEGIN" + b"o" * (3 * MB)) + frame(2, b"err") + frame(1, b"x" * 1000 + b"END")
    ours, engine = socket.socketpair()

    def send() -> None:
        for start in range(0, len(stream), 7919):  # cut at every kind of place, headers too
            engine.sendall(stream[start:start + 7919])
        engine.close()

    threading.Thread(target=send, daemon=True).start()
    out, err = _read_frames(ours)
    ours.close()
    assert out.text().startswith("BEGIN") and out.text().endswith("x" * 1000 + "END")
    assert out.cut == 5 + 3 * MB + 1003 - OUTPUT_LIMIT
    assert err.text() == "err" and err.cut == 0


ORACLE = '''
    import pathlib, tempfile
    from agentcompass.harnesses.oracle import LOG_NAME, OracleHarness
    from agentcompass.runtime import HarnessContext
    from agentcompass.runtime.base import ScriptReference
    from agentcompass.runtime.models import HarnessPlan, PreparedTask, TaskInput

    async def main():
        folder = pathlib.Path(tempfile.mkdtemp())
        (folder / "solution").mkdir()
        (folder / "solution" / "solve.sh").write_text(
            "#!/bin/sh\\necho BEGIN; yes 0123456789abcdef | head -c 300000000; echo; echo END\\n")
        reference = ScriptReference(source=str(folder / "solution"), script="solve.sh", target="/tmp/solution",
                                    timeout=600)
        context = HarnessContext(attempt=1, attempt_dir=folder / "attempt", trajectory_path=folder / "t.jsonl",
                                 reference=reference)
        session = await open_session(sys.argv[1], json.loads(sys.argv[2]), sys.argv[3])
        try:
            base = start()
            # the oracle reads no request or plan
            result = await OracleHarness().run(PreparedTask(task_id="t", input=TaskInput(prompt="x")), session,
                                               None, HarnessPlan(harness_id="oracle"), context)
            grew = grown(base)
        finally:
            await session.close()
        log = (folder / "attempt" / LOG_NAME).read_text()
        return {"grown": grew, "status": result.status.value, "bytes": len(log.encode()),
                "begins": "--- stdout\\nBEGIN\\n" in log, "ends": log.endswith("END\\n--- stderr\\n"),
                "note": "bytes of this output cut here" in log}

    print(json.dumps(asyncio.run(main())))
'''


def test_an_oracle_printing_300_mb_writes_its_head_and_tail_into_results(sandboxed_provider: Provider):  # noqa: F811
    report = in_child(ORACLE, *session_args(sandboxed_provider))
    print(f"oracle printing 300 MB on {sandboxed_provider.name}: oracle.txt {report['bytes']} bytes, "
          f"the job grew by {report['grown'] / MB:.1f} MB")
    assert report["status"] == "completed"
    assert report["begins"] and report["ends"] and report["note"], report
    assert report["bytes"] <= 2 * OUTPUT_LIMIT
    assert report["grown"] < MEMORY_BOUND, f"the job grew by {report['grown'] / MB:.1f} MB"


@pytest.mark.parametrize("streamed", [False, True])
def test_a_reply_too_long_to_record_whole_is_recorded_cut_and_its_tokens_still_count(tmp_path: Path, streamed: bool):
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from agentcompass.gateway import ModelGateway

    text = "y" * (2 * RECORD_LIMIT)
    usage = {"prompt_tokens": 7, "completion_tokens": 5}
    if streamed:
        events = [{"choices": [{"delta": {"content": text}}]}, {"choices": [], "usage": usage}]
        data = "".join(f"data: {json.dumps(e)}\n\n" for e in events).encode() + b"data: [DONE]\n\n"
    else:
        data = json.dumps({"choices": [{"message": {"role": "assistant", "content": text}}], "usage": usage}).encode()

    class Upstream(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream" if streamed else "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Upstream)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    trajectory = tmp_path / "t.jsonl"
    try:
        with ModelGateway(f"http://127.0.0.1:{server.server_address[1]}/v1", "sk", trajectory) as gateway:
            status, _, _ = send(str(gateway.socket_path), gateway.token, 2, 2)
            used = gateway.usage()
    finally:
        server.shutdown()
        server.server_close()
    assert status == 200
    assert (used["prompt_tokens"], used["completion_tokens"]) == (7, 5)
    record = json.loads(trajectory.read_text())
    assert record["reply"]["bytes"] == len(data) and "agentcompass_cut" in record["reply"]


TRANSLATING = '''
    import http.server, itertools, threading
    from agentcompass.gateway import TRANSLATE_REPLY_LIMIT, ModelGateway
    from agentcompass.testing.endpoint import QuietHandler, send_json

    def calls(arguments):
        return [{"id": f"call_{i}", "type": "function", "function": {"name": "bash", "arguments": a}}
                for i, a in enumerate(arguments)]

    def reply(tool_calls):
        return json.dumps({"choices": [{"finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": None, "tool_calls": tool_calls}}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1}}).encode()

    # the model's replies in turn: ten thousand tool calls; one call of arguments at the translated limit
    replies = itertools.cycle([reply(calls(["{}"] * 10_000)),
                               reply(calls([json.dumps({"c": "x" * (TRANSLATE_REPLY_LIMIT - 300)})]))])

    next_reply = replies.__next__

''' + SERVES_A_GATEWAY


def post(socket_path: str, path: str, token: str, body: bytes) -> int:
    """POST ``body`` to the gateway at ``socket_path``; the reply's status, its body read whole and dropped."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(60)
        conn.connect(socket_path)
        conn.sendall((f"POST {path} HTTP/1.1\r\nHost: g\r\nContent-Type: application/json\r\nAuthorization: Bearer "
                      f"{token}\r\nConnection: close\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body)
        first = conn.recv(65536)
        while conn.recv(1 << 20):
            pass
    return int(first.split(b" ", 2)[1])


def test_translating_what_the_agent_sends_and_the_model_replies_stays_within_the_bound(tmp_path: Path):
    def messages(count: int, stream: bool = True) -> bytes:
        return json.dumps({"model": "m", "max_tokens": 8, "stream": stream,
                           "messages": [{"role": "user", "content": "a"}] * count}).encode()

    long_tools = json.dumps({"model": "m", "input": "hi", "stream": True, "instructions": "i" * (1 << 20), "tools": [
        {"type": "function", "name": "t", "description": "d" * (BODY_LIMIT - (2 << 20)), "parameters": {}}]}).encode()
    calls = [("/responses", long_tools), ("/responses", long_tools),  # each with both replies of the model
             ("/v1/messages", messages(30_000)), ("/v1/messages", messages(30_000, stream=False)),
             ("/v1/messages", messages(BODY_LIMIT // 40)),  # far more values than are translated: refused
             ("/v1/messages", b"[" * (BODY_LIMIT // 2) + b"]" * (BODY_LIMIT // 2))]
    child = subprocess.Popen([sys.executable, "-c", PRELUDE + textwrap.dedent(TRANSLATING), str(tmp_path / "t.jsonl")],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdin is not None
        ready = json.loads(child.stdout.readline())
        statuses = [post(ready["socket"], path, ready["token"], body) for path, body in calls]
        child.stdin.write("done\n")
        child.stdin.flush()
        report = json.loads(child.stdout.readline())
        assert child.wait(60) == 0, child.stderr.read() if child.stderr else ""
    finally:
        child.kill()
    print(f"gateway translating: grew by {report['grown'] / MB:.1f} MB")
    assert statuses == [200, 200, 200, 200, 400, 400]
    assert report["usage"]["calls"] == 4
    assert report["grown"] < MEMORY_BOUND, f"the gateway grew by {report['grown'] / MB:.1f} MB"
