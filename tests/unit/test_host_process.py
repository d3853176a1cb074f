"""The host_process Environment session: exec, files, cleanup, network policy."""

from __future__ import annotations

import asyncio
import gc
import os
import time
from pathlib import Path

import pytest

from agentcompass.environments.host_process import HostProcessEnvironment
from agentcompass.runtime.config import ConfigError
from agentcompass.runtime.models import EnvironmentSpec, NetworkPolicy


def with_session(body, spec: EnvironmentSpec | None = None):
    """Open a session, run ``await body(session)``, close it; return (result, workdir)."""

    async def main():
        session = await HostProcessEnvironment().open(spec or EnvironmentSpec(), NetworkPolicy(), "unit test/label")
        try:
            return await body(session), session.workdir
        finally:
            await session.close()

    return asyncio.run(main())


def run(body, spec=None):
    return with_session(body, spec)[0]


def process_gone(pid: int) -> bool:
    """True once ``pid`` no longer exists (a zombie waiting for its reaper counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return True
    return state in ("Z", "X")


# --- exec ---------------------------------------------------------------------------


def test_exec_argv_list_returns_returncode_stdout_stderr():
    async def body(s):
        return await s.exec(["sh", "-c", "echo out; echo err >&2; exit 3"])

    result = run(body)
    assert result.returncode == 3
    assert result.stdout == "out\n"
    assert result.stderr == "err\n"
    assert result.timed_out is False
    assert not result.ok


def test_exec_argv_list_is_not_interpreted_by_a_shell():
    async def body(s):
        return await s.exec(["echo", "$HOME; echo injected"])

    result = run(body)
    assert result.ok
    assert result.stdout == "$HOME; echo injected\n"


def test_exec_shell_string():
    async def body(s):
        return await s.exec("printf '%s-%s' a b && echo | wc -l", shell=True)

    result = run(body)
    assert result.ok
    assert result.returncode == 0
    assert result.stdout.split() == ["a-b1"]


def test_exec_rejects_wrong_command_shapes():
    async def body(s):
        with pytest.raises(TypeError):
            await s.exec("echo hi")
        with pytest.raises(TypeError):
            await s.exec(["echo", "hi"], shell=True)
        with pytest.raises(TypeError):
            await s.exec(["echo", 1])
        return True

    assert run(body)


def test_exec_env_vars_are_added_to_an_environment_that_keeps_the_jobs_keys_out(monkeypatch):
    """A sandboxed command sees PATH, HOME, locale..., and what the caller gives; not the job's API keys."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-job-secret")
    monkeypatch.setenv("LC_ALL", "C.UTF-8")

    async def body(s):
        shown = await s.exec(["sh", "-c", 'echo "$AC_UNIT_VAR|$LC_ALL|$OPENAI_API_KEY"'], env={"AC_UNIT_VAR": "value"})
        listing = await s.exec(["env"])
        return shown, listing

    shown, listing = run(body)
    assert shown.stdout == "value|C.UTF-8|\n"
    assert "sk-job-secret" not in listing.stdout and "PATH=" in listing.stdout


def test_exec_runs_in_workdir_by_default_and_in_cwd_when_given():
    async def body(s):
        await s.write_text("sub/dir/marker.txt", "x")
        default = await s.exec(["pwd"])
        relative = await s.exec(["pwd"], cwd="sub/dir")
        absolute = await s.exec(["ls"], cwd=str(Path(s.workdir) / "sub" / "dir"))
        return default, relative, absolute, s.workdir

    default, relative, absolute, workdir = run(body)
    real = os.path.realpath(workdir)
    assert os.path.realpath(default.stdout.strip()) == real
    assert os.path.realpath(relative.stdout.strip()) == os.path.join(real, "sub", "dir")
    assert absolute.stdout.split() == ["marker.txt"]


def test_exec_input_text_and_bytes():
    async def body(s):
        text = await s.exec(["cat"], input="hello\nworld\n")
        raw = await s.exec(["wc", "-c"], input=b"\x00\x01\x02")
        none = await s.exec(["cat"])  # stdin is closed, not inherited
        return text, raw, none

    text, raw, none = run(body)
    assert text.stdout == "hello\nworld\n"
    assert raw.stdout.strip() == "3"
    assert none.stdout == "" and none.ok


def test_exec_timeout_returns_timed_out_quickly_and_kills_the_child():
    async def body(s):
        started = time.monotonic()
        result = await s.exec("sleep 30 & echo $! > pid; wait", shell=True, timeout=0.5)
        elapsed = time.monotonic() - started
        pid = int((await s.read_text("pid")).strip())
        return result, elapsed, pid

    # the PID a command reports is this machine's only outside the sandbox's PID namespace
    result, elapsed, pid = run(body, EnvironmentSpec(params={"sandbox": "off"}))
    assert result.timed_out is True
    assert not result.ok
    assert result.returncode != 0
    assert elapsed < 10
    deadline = time.monotonic() + 5
    while not process_gone(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert process_gone(pid), f"background child {pid} survived the timeout"


def test_exec_timeout_with_argv_list():
    async def body(s):
        return await s.exec(["sleep", "30"], timeout=0.3)

    result = run(body)
    assert result.timed_out is True


def test_exec_within_timeout_is_not_timed_out():
    async def body(s):
        return await s.exec(["true"], timeout=30)

    result = run(body)
    assert result.ok and result.timed_out is False


# --- files ----------------------------------------------------------------------------


def test_upload_and_download_file_round_trip(tmp_path):
    payload = bytes(range(256)) * 40
    local = tmp_path / "in.bin"
    local.write_bytes(payload)
    back = tmp_path / "out" / "back.bin"

    async def body(s):
        await s.upload(local, "deep/nested/file.bin")
        exists = await s.exists("deep/nested/file.bin")
        await s.download("deep/nested/file.bin", back)
        return exists

    assert run(body) is True
    assert back.read_bytes() == payload


def test_upload_and_download_directory_tree_round_trip(tmp_path):
    tree = tmp_path / "tree"
    (tree / "a" / "b").mkdir(parents=True)
    (tree / "top.txt").write_text("top")
    (tree / "a" / "mid.bin").write_bytes(b"\x00\xff" * 100)
    (tree / "a" / "b" / "leaf.txt").write_text("leaf\n")
    (tree / "empty").mkdir()
    out = tmp_path / "downloaded"

    async def body(s):
        await s.upload(tree, "copy")
        listing = await s.exec(["sh", "-c", "cd copy && find . | sort"])
        is_dir = await s.is_dir("copy/a/b")
        await s.download("copy", out)
        return listing.stdout, is_dir

    listing, is_dir = run(body)
    assert is_dir
    assert "./a/b/leaf.txt" in listing.split()

    def snapshot(root: Path):
        return {
            str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None)
            for p in sorted(root.rglob("*"))
        }

    assert snapshot(out) == snapshot(tree)


def test_write_text_read_text_exists_is_dir():
    async def body(s):
        assert not await s.exists("notes/a.txt")
        await s.write_text("notes/a.txt", "héllo\n")
        return (
            await s.read_text("notes/a.txt"),
            await s.exists("notes/a.txt"),
            await s.is_dir("notes"),
            await s.is_dir("notes/a.txt"),
            await s.exists("notes/missing"),
            await s.read_text(str(Path(s.workdir) / "notes" / "a.txt")),
        )

    text, exists, notes_is_dir, file_is_dir, missing, absolute = run(body)
    assert text == "héllo\n"
    assert exists is True
    assert notes_is_dir is True
    assert file_is_dir is False
    assert missing is False
    assert absolute == "héllo\n"


def test_written_file_is_visible_to_commands():
    async def body(s):
        await s.write_text("x.txt", "content")
        return await s.exec(["cat", "x.txt"])

    assert run(body).stdout == "content"


def test_endpoint_is_on_localhost():
    async def body(s):
        return await s.endpoint(8080)

    assert run(body) == "127.0.0.1:8080"


# --- lifecycle --------------------------------------------------------------------------


def test_close_removes_the_workspace():
    async def body(s):
        await s.write_text("f.txt", "x")
        assert os.path.isdir(s.workdir)
        return s.workdir

    workdir, _ = with_session(body)
    assert not os.path.exists(workdir)


def test_keep_workspace_leaves_it_and_workspace_root_is_used(tmp_path):
    spec = EnvironmentSpec(params={"workspace_root": str(tmp_path), "keep_workspace": True})

    async def body(s):
        await s.write_text("kept.txt", "x")
        return s.workdir

    workdir, _ = with_session(body, spec)
    assert Path(workdir).parent == tmp_path
    assert (Path(workdir) / "kept.txt").read_text() == "x"


def test_each_session_gets_its_own_workspace():
    async def main():
        env = HostProcessEnvironment()
        a = await env.open(EnvironmentSpec(), NetworkPolicy(), "same")
        b = await env.open(EnvironmentSpec(), NetworkPolicy(), "same")
        try:
            return a.workdir, b.workdir
        finally:
            await a.close()
            await b.close()

    a, b = asyncio.run(main())
    assert a != b


def test_session_works_as_async_context_manager():
    async def main():
        session = await HostProcessEnvironment().open(EnvironmentSpec(), NetworkPolicy(), "ctx")
        async with session as s:
            await s.write_text("a", "b")
            workdir = s.workdir
        return workdir

    assert not os.path.exists(asyncio.run(main()))


def isolation(monkeypatch, available: bool) -> None:
    """Pretend this machine can (or cannot) make network namespaces."""
    from agentcompass.environments import netns

    monkeypatch.setattr(netns, "network_isolation", lambda: (available, "" if available else "namespaces are off here"))


def test_network_none_is_refused_where_isolation_is_unavailable(monkeypatch):
    from agentcompass.environments.netns import NetworkIsolationError

    isolation(monkeypatch, False)
    env = HostProcessEnvironment()
    with pytest.raises(NetworkIsolationError, match="namespaces are off here") as refused:
        env.resolve_network_policy(NetworkPolicy(mode="none"), "run")
    assert "never runs such a phase with the network open" in str(refused.value)
    assert isinstance(refused.value, ConfigError)
    with pytest.raises(NetworkIsolationError):
        asyncio.run(env.open(EnvironmentSpec(), NetworkPolicy(mode="none"), "label"))

    async def body(s):
        with pytest.raises(NetworkIsolationError):
            await s.set_network(NetworkPolicy(mode="none"))
        return s.network_mode, await s.exec(["true"])

    mode, still_works = run(body)
    assert mode == "public" and still_works.ok


def test_resolve_network_policy_accepts_none_where_isolation_is_available(monkeypatch):
    isolation(monkeypatch, True)
    env = HostProcessEnvironment()
    assert env.resolve_network_policy(NetworkPolicy(), "run") == NetworkPolicy(mode="public")
    assert env.resolve_network_policy(NetworkPolicy(mode="none"), "evaluation") == NetworkPolicy(mode="none")


def test_open_with_unknown_param_raises():
    async def main():
        await HostProcessEnvironment().open(EnvironmentSpec(params={"gpus": 2}), NetworkPolicy(), "label")

    with pytest.raises(ConfigError, match="gpus"):
        asyncio.run(main())


def test_exec_timeout_is_bounded_when_a_descendant_escapes_the_process_group():
    async def body(s):
        pidfile = Path(s.workdir) / "daemon.pid"
        try:
            return await asyncio.wait_for(
                s.exec("setsid sh -c 'echo $$ > daemon.pid; exec sleep 30' & wait", shell=True, timeout=0.2),
                timeout=1.5,
            )
        finally:
            for _ in range(100):
                if pidfile.exists() and pidfile.read_text().strip():
                    break
                await asyncio.sleep(0.01)
            if pidfile.exists() and pidfile.read_text().strip():
                try:
                    os.kill(int(pidfile.read_text()), 9)
                except ProcessLookupError:
                    pass
            # let the abandoned subprocess transport close while the loop still runs
            gc.collect()
            await asyncio.sleep(0.05)

    result = run(body)
    assert result.timed_out is True


def test_a_none_phase_the_machine_cannot_isolate_names_the_fix_wherever_none_came_from(monkeypatch):
    """The 'none' may be the benchmark's or the task's (a task folder's allow_internet = false), which the user
    never set: the fix named is the request's own policy, which overrides theirs."""
    from agentcompass.environments import bubblewrap, netns

    monkeypatch.setattr(bubblewrap, "sandbox_support", lambda: (False, "no user namespaces here"))
    monkeypatch.setattr(netns, "network_isolation", lambda: (False, "no user namespaces here"))
    for refuse, what in ((bubblewrap.require_sandbox, "host_process (network policy 'none' in this session)"),
                         (netns.require_isolation, "host_process (run phase)")):
        with pytest.raises(ConfigError) as refused:
            refuse(what)
        message = str(refused.value)
        assert message.startswith(what) and "no user namespaces here" in message, message
        assert "to 'public' in the request's environment (`run_network: public`, likewise `baseline_network` and " \
            "`evaluation_network`; a request's policy overrides the benchmark's or the task's)" in message, message
