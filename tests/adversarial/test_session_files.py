"""The agent against the session's file calls: the same hostile cases on every provider.

The agent is root in its sandbox and controls the workspace: it plants links
to host files, FIFOs, device nodes, sparse files and deep trees, and names
paths outside the workspace. Whatever it does, a file call (``read_text``,
``write_text``, ``upload``, ``download``, ``exists``, ``is_dir``) reaches
only what the sandbox shows (host_process in its bubblewrap sandbox, docker),
or, with host_process's ``sandbox: off``, only the workspace; a copy out
lands regular files, folders and links only, within its limits.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import os
import socket
import stat
import sys
import uuid
from pathlib import Path

import pytest

from agentcompass.environments.bubblewrap import sandbox_support
from agentcompass.environments.transfer import READ_LIMIT, CopyLimitError
from agentcompass.harnesses.tool_agent import ToolAgentConfig, ToolAgentHarness
from agentcompass.runtime import HarnessContext
from agentcompass.runtime.models import (
    BenchmarkSpec,
    HarnessPlan,
    HarnessSpec,
    ModelSpec,
    PreparedTask,
    RunRequest,
    TaskInput,
)
from agentcompass.testing.endpoint import ScriptedEndpoint, tool_call_reply
from environments.envkit import Provider, require_docker

SECRET_VARIABLE = "AGENTCOMPASS_PLANTED_SECRET"


def _provider(name: str) -> Provider:
    if name == "docker":
        require_docker()
        from environments.envkit import TEST_IMAGE

        return Provider("docker", {"image": TEST_IMAGE})
    available, reason = sandbox_support()
    if not available and name == "host_process":
        pytest.skip(f"host_process cannot make its sandbox here: {reason}")
    return Provider("host_process", {"sandbox": "bubblewrap" if name == "host_process" else "off"})


@pytest.fixture(params=["host_process", "docker"])
def sandboxed(request) -> Provider:
    """A provider whose file calls act in the sandbox's view."""
    return _provider(request.param)


@pytest.fixture(params=["host_process", "docker", "host_process_off"])
def any_provider(request) -> Provider:
    """Every provider, host_process without its sandbox too (file calls confined to the workspace)."""
    return _provider(request.param)


@pytest.fixture
def secret(monkeypatch) -> str:
    """A secret only the job holds: in its environment, as the API key a ${VAR} reference resolves to."""
    value = f"planted-secret-{uuid.uuid4().hex}"
    monkeypatch.setenv(SECRET_VARIABLE, value)
    return value


@pytest.fixture
def host_files(tmp_path: Path, secret: str) -> Path:
    """A folder of the host the agent must never reach: a secret file and a canary."""
    folder = tmp_path / "host-only"
    folder.mkdir()
    (folder / "secret.txt").write_text(secret)
    (folder / "canary.txt").write_text("untouched")
    return folder


def _untouched(folder: Path, secret: str) -> None:
    assert sorted(p.name for p in folder.iterdir()) == ["canary.txt", "secret.txt"]
    assert (folder / "canary.txt").read_text() == "untouched"
    assert (folder / "secret.txt").read_text() == secret


def _landed(local: Path) -> dict[str, bytes | str]:
    """What a copy left on the host: each regular file's bytes, each link's target (never followed)."""
    found: dict[str, bytes | str] = {}
    if not os.path.lexists(local):
        return found
    paths = [local, *local.rglob("*")] if local.is_dir() and not local.is_symlink() else [local]
    for path in paths:
        mode = os.lstat(path).st_mode
        if stat.S_ISLNK(mode):
            found[str(path)] = os.readlink(path)
        elif stat.S_ISREG(mode):
            found[str(path)] = path.read_bytes()
        else:
            assert stat.S_ISDIR(mode), f"{path} landed as {stat.filemode(mode)}"
    return found


async def _attempt(call) -> object:
    """The call's value, or the OSError or ValueError it raised (a refusal is an answer too)."""
    try:
        return await asyncio.wait_for(call, 120)  # a FIFO or device opened by mistake would hang: fail instead
    except (OSError, ValueError) as exc:
        return exc


# --- what a path names ------------------------------------------------------------------


def test_proc_self_environ_is_a_sandboxed_process_s_never_the_job_s(any_provider, secret, tmp_path, monkeypatch):
    # the job's working folder holds what the agent wants (the run's tasks.json, with the ground truth)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tasks.json").write_text(json.dumps({"answer": secret}))

    async def body(s):
        paths = ["/proc/self/environ", "/proc/1/environ", "/proc/self/cwd/tasks.json",
                 f"/proc/{os.getpid()}/environ", f"/proc/{os.getpid()}/cwd/tasks.json", f"{tmp_path}/tasks.json"]
        read = {p: await _attempt(s.read_text(p)) for p in paths}
        out = tmp_path / "out"
        copied = {p: await _attempt(s.download(p, out / str(i))) for i, p in enumerate(paths)}
        return read, copied

    read, copied = any_provider.run(body)
    for path, value in read.items():
        assert secret not in str(value), f"read_text({path!r}) showed the job's secret"
    assert secret.encode() not in b"".join(
        v if isinstance(v, bytes) else v.encode() for v in _landed(tmp_path / "out").values())
    if any_provider.params.get("sandbox") == "off":
        assert all(isinstance(v, PermissionError) for v in read.values()), read  # outside the workspace
    else:
        environ = read["/proc/self/environ"]
        assert not isinstance(environ, str) or SECRET_VARIABLE not in environ


def test_writes_outside_the_workspace_never_reach_the_host(any_provider, host_files, secret, tmp_path):
    tag = uuid.uuid4().hex
    planted = [Path(sys.prefix) / "lib" / f"agentcompass-planted-{tag}.pth", Path(f"/etc/agentcompass-planted-{tag}")]
    local = tmp_path / "local.txt"
    local.write_text("owned")

    async def body(s):
        up = "../" * 40
        results = [
            await _attempt(s.write_text(str(host_files / "canary.txt"), "owned")),
            await _attempt(s.write_text(f"{up}{host_files}/canary.txt", "owned")),
            await _attempt(s.write_text(f"{up}{host_files}/new.txt", "owned")),
            await _attempt(s.write_text(str(planted[0]), "# planted by the agent\n")),  # would run at the next start
            await _attempt(s.upload(local, str(host_files / "canary.txt"))),
            await _attempt(s.upload(local, f"{up}{host_files}/uploaded.txt")),
            await _attempt(s.write_text(str(planted[1]), "owned")),
        ]
        return results

    try:
        results = any_provider.run(body)
    finally:
        leaked = [str(p) for p in planted if p.exists()]
        for path in planted:
            path.unlink(missing_ok=True)
    assert not leaked, f"a file call wrote on the host: {leaked}"
    _untouched(host_files, secret)
    if any_provider.params.get("sandbox") == "off":
        assert all(isinstance(r, PermissionError) for r in results), results


def test_host_folders_are_read_only_to_file_calls_in_the_host_process_sandbox(tmp_path):
    # (a container's /etc is the image's own: root in it may write there)
    local = tmp_path / "local.txt"
    local.write_text("owned")
    tag = uuid.uuid4().hex
    canary = Path(f"/etc/agentcompass-canary-{tag}")  # the test's own file: nothing of the host is at stake
    planted = [Path(f"/usr/agentcompass-planted-{tag}.txt"), Path(sys.prefix, f"agentcompass-planted-{tag}.txt")]
    canary.write_text("untouched")

    async def body(s):
        return [await _attempt(s.write_text(str(canary), "owned")),
                await _attempt(s.upload(local, str(canary))),
                await _attempt(s.upload(local, str(planted[0]))),
                await _attempt(s.write_text(str(planted[1]), "owned"))]

    try:
        results = _provider("host_process").run(body)
        kept = canary.read_text()
    finally:
        canary.unlink()
        leaked = [str(p) for p in planted if p.exists()]
        for path in planted:
            path.unlink(missing_ok=True)
    assert not leaked, f"a file call wrote on the host: {leaked}"
    assert kept == "untouched"
    for result in results:
        assert isinstance(result, OSError) and "Read-only file system" in str(result), result


def test_a_failed_call_leaves_nothing_behind(any_provider, tmp_path):
    async def body(s):
        missing = [await _attempt(s.download("no/such/file", tmp_path / "never")),
                   await _attempt(s.read_text("no/such/file")), await _attempt(s.exists("no/such/file"))]
        return missing, await s.exists("no")

    (download, read, exists), made = any_provider.run(body)
    assert isinstance(download, FileNotFoundError) and isinstance(read, FileNotFoundError) and exists is False
    assert made is False and not os.path.lexists(tmp_path / "never")


# --- links the agent plants -------------------------------------------------------------


def test_links_planted_in_the_workspace_are_never_followed_on_the_host(any_provider, host_files, secret, tmp_path):
    local_file = tmp_path / "upload.txt"
    local_file.write_text("uploaded")
    local_tree = tmp_path / "tree"
    (local_tree / "sub").mkdir(parents=True)
    (local_tree / "sub" / "file.txt").write_text("uploaded")
    out = tmp_path / "out"

    async def body(s):
        planted = await s.exec(["sh", "-c", 'ln -s "$1/secret.txt" file-link && ln -s "$1" dir-link && '
                                'mkdir -p target && ln -s "$1" target/sub', "sh", str(host_files)])
        assert planted.ok, planted
        calls = {
            "read file-link": s.read_text("file-link"),
            "read dir-link/secret.txt": s.read_text("dir-link/secret.txt"),
            "exists": s.exists("dir-link/secret.txt"),
            "is_dir": s.is_dir("dir-link"),
            "download file-link": s.download("file-link", out / "file-link"),
            "download dir-link": s.download("dir-link", out / "dir-link"),
            "download dir-link/secret.txt": s.download("dir-link/secret.txt", out / "secret"),
            "download workspace": s.download(s.workdir, out / "workspace"),
            "write file-link": s.write_text("file-link", "owned"),
            "write dir-link/new.txt": s.write_text("dir-link/new.txt", "owned"),
            "upload onto file-link": s.upload(local_file, "file-link"),
            "upload into dir-link": s.upload(local_tree, "dir-link"),
            "upload into target (its sub is a link)": s.upload(local_tree, "target"),
        }
        results = {name: await _attempt(call) for name, call in calls.items()}
        results["after"] = await s.exec(["sh", "-c", "ls -la target target/sub; cat target/sub/file.txt"])
        return results

    results = any_provider.run(body)
    _untouched(host_files, secret)
    for name, value in results.items():
        assert secret not in str(value), f"{name} showed the host file: {value!r}"
    landed = _landed(out)
    assert all(secret.encode() != v and (not isinstance(v, bytes) or secret.encode() not in v) for v in landed.values())
    # the workspace's links came out as links, pointing where they pointed
    assert landed.get(str(out / "workspace" / "file-link")) == str(host_files / "secret.txt")
    assert landed.get(str(out / "workspace" / "dir-link")) == str(host_files)
    if any_provider.params.get("sandbox") == "off":
        for name in ("read file-link", "read dir-link/secret.txt", "write file-link", "write dir-link/new.txt"):
            assert isinstance(results[name], OSError) and "follow no link" in str(results[name]), (name, results[name])
    # the upload replaced the planted link with a folder of its own, and wrote there
    assert "uploaded" in results["after"].stdout


# --- what is not a file -----------------------------------------------------------------


def _plant_specials(provider: Provider, session) -> list[str]:
    """A FIFO, a socket and a character device in the workspace, made as the agent could; their names."""
    if provider.name == "host_process":
        root = Path(session.workdir)
        os.mkfifo(root / "fifo")
        with socket.socket(socket.AF_UNIX) as server:
            server.bind(str(root / "socket"))
        os.mknod(root / "null-device", stat.S_IFCHR | 0o666, os.makedev(1, 3))
        return ["fifo", "socket", "null-device"]
    return []


def test_fifos_sockets_and_devices_are_skipped_and_listed_on_download(sandboxed, tmp_path, caplog):
    caplog.set_level(logging.WARNING)
    out = tmp_path / "out"
    local_tree = tmp_path / "tree"
    local_tree.mkdir()
    (local_tree / "plain.txt").write_text("plain")
    os.mkfifo(local_tree / "local-fifo")

    async def body(s):
        await s.write_text("plain.txt", "plain")
        names = _plant_specials(sandboxed, s)
        if sandboxed.name == "docker":
            made = await s.exec(["sh", "-c", "mkfifo fifo && mknod null-device c 1 3"])
            names = ["fifo"] + (["null-device"] if made.ok else [])
        calls = {
            "download": s.download(s.workdir, out / "workspace"),
            "download fifo": s.download("fifo", out / "fifo"),
            "read fifo": s.read_text("fifo"),
            "write fifo": s.write_text("fifo", "x"),
            "upload": s.upload(local_tree, "uploaded"),
        }
        results = {name: await _attempt(call) for name, call in calls.items()}
        results["uploaded"] = await s.exec(["sh", "-c", "ls -A uploaded"])
        return names, results

    names, results = sandboxed.run(body)
    assert results["download"] is None, results["download"]
    landed = {Path(p).name for p in _landed(out / "workspace")}
    assert "plain.txt" in landed and not landed & set(names)
    assert not os.path.lexists(out / "fifo")
    for name in ("download fifo", "read fifo"):
        assert isinstance(results[name], OSError), (name, results[name])
    # a write never waits on the FIFO: refused (host_process), or the FIFO replaced by a file (docker's engine)
    assert isinstance(results["write fifo"], OSError) or sandboxed.name == "docker", results["write fifo"]
    warnings = "\n".join(r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING)
    for name in names:
        assert repr(name) in warnings, f"{name} was not listed: {warnings}"
    assert "(FIFO)" in warnings
    # an upload sends no FIFO either: the provider would make one
    assert results["upload"] is None and results["uploaded"].stdout.split() == ["plain.txt"]
    assert "'local-fifo' (FIFO)" in warnings


def test_a_sparse_file_stays_small_when_copied_out(sandboxed, tmp_path):
    size = 200 * 1024 * 1024
    out = tmp_path / "out"

    async def body(s):
        made = await s.exec(["sh", "-c", f"dd if=/dev/zero of=sparse.bin bs=1 count=0 seek={size} 2>/dev/null && "
                             f"printf marker | dd of=sparse.bin bs=1 seek={size // 2} conv=notrunc 2>/dev/null"])
        assert made.ok, made
        await s.download(s.workdir, out)
        await s.download("sparse.bin", tmp_path / "alone.bin")

    sandboxed.run(body)
    for copy in (out / "sparse.bin", tmp_path / "alone.bin"):
        st = os.stat(copy)
        assert st.st_size == size
        assert st.st_blocks * 512 < 16 * 1024 * 1024, f"{copy} takes {st.st_blocks * 512} bytes on disk"
        with open(copy, "rb") as f:
            f.seek(size // 2)
            assert f.read(6) == b"marker"


def test_a_tree_deeper_than_the_limit_is_a_clear_error(sandboxed, tmp_path):
    deep = "/".join(["d"] * 1100)

    async def body(s):
        made = await s.exec(["mkdir", "-p", deep])
        assert made.ok, made
        try:
            return await _attempt(s.download(s.workdir, tmp_path / "out"))
        finally:
            await s.exec(["rm", "-rf", "d"])

    error = sandboxed.run(body)
    assert isinstance(error, CopyLimitError), error
    assert "nested more than 128 levels deep" in str(error) and "out of session" in str(error)


def test_a_tree_over_the_entry_or_size_limit_is_a_clear_error(sandboxed, tmp_path):
    async def body(s):
        made = await s.exec(["sh", "-c", "mkdir many && cd many && seq 1 300 | xargs touch && "
                             "dd if=/dev/urandom of=big.bin bs=1024 count=2048 2>/dev/null && "
                             f"dd if=/dev/zero of=../huge.bin bs=1 count=0 seek={READ_LIMIT + 1} 2>/dev/null"])
        assert made.ok, made
        s.copy_limits.files = 200
        over_files = await _attempt(s.download("many", tmp_path / "files"))
        s.copy_limits.files, s.copy_limits.size = 100_000, 1024 * 1024
        over_size = await _attempt(s.download("many", tmp_path / "size"))
        over_read = await _attempt(s.read_text("huge.bin"))
        return over_files, over_size, over_read

    over_files, over_size, over_read = sandboxed.run(body)
    assert isinstance(over_files, CopyLimitError) and "more than 200 entries" in str(over_files), over_files
    assert isinstance(over_size, CopyLimitError) and "more than 1048576 bytes" in str(over_size), over_size
    assert isinstance(over_read, CopyLimitError) and "reading 'huge.bin'" in str(over_read), over_read
    assert f"more than {READ_LIMIT} bytes, the most a session's read_text returns" in str(over_read)


# --- through the agent's own tools --------------------------------------------------------


def test_tool_agent_read_file_and_write_file_reach_only_the_sandbox(host_files, secret, tmp_path):
    if not sandbox_support()[0]:
        pytest.skip(f"host_process cannot make its sandbox here: {sandbox_support()[1]}")
    script = [
        tool_call_reply("read_file", {"path": "/proc/self/environ"}, call_id="environ"),
        tool_call_reply("read_file", {"path": str(host_files / "secret.txt")}, call_id="secret"),
        tool_call_reply("write_file", {"path": "../" * 40 + str(host_files / "canary.txt"), "content": "owned"},
                        call_id="canary"),
        tool_call_reply("submit", {"answer": "done"}),
    ]
    config = ToolAgentConfig()
    req = RunRequest(model=ModelSpec(id="m", base_url="http://127.0.0.1:1/v1", api_key=f"${{{SECRET_VARIABLE}}}"),
                     benchmark=BenchmarkSpec(id="b"), harness=HarnessSpec(id="tool_agent"))
    plan = HarnessPlan(harness_id="tool_agent", params=dataclasses.asdict(config))
    context = HarnessContext(attempt=1, attempt_dir=tmp_path, trajectory_path=tmp_path / "trajectory.jsonl")
    prepared = PreparedTask(task_id="t", input=TaskInput(prompt="Work."))
    provider = _provider("host_process")

    with ScriptedEndpoint(script=script) as endpoint:
        req = dataclasses.replace(req, model=dataclasses.replace(req.model, base_url=endpoint.base_url))
        result = provider.run(lambda s: ToolAgentHarness().run(prepared, s, req, plan, context))
        sent = json.dumps([r.body for r in endpoint.requests])
    assert result.answer == "done"
    assert secret not in sent and secret not in (tmp_path / "trajectory.jsonl").read_text()
    _untouched(host_files, secret)
