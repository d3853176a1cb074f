"""The session contract every Environment provider must keep, run against each provider.

Cases follow Inspect AI's sandbox self-check where it applies to our contract
(files, exec, timeouts, working directory), plus what it does not check: phase
network policies, directory transfer, endpoints, network switching and
cleanup. Servers a test starts listen on this machine's own addresses; no
test sends traffic anywhere else.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path

import pytest

from agentcompass.runtime.base import OUTPUT_LIMIT, SandboxDiedError
from agentcompass.runtime.models import NetworkPolicy
from .envkit import SERVER_GREETING, HostServer, docker_engine, snapshot

UTF8_TEXT = "héllo wörld — 你好, мир, 🙂\n"


# --- text files ------------------------------------------------------------------------


def test_write_text_then_read_text_returns_the_same_utf8_text(provider):
    async def body(s):
        await s.write_text("notes.txt", UTF8_TEXT)
        return await s.read_text("notes.txt")

    assert provider.run(body) == UTF8_TEXT


def test_zero_length_text_file_reads_back_empty(provider):
    async def body(s):
        await s.write_text("empty.txt", "")
        return await s.read_text("empty.txt"), await s.exec(["wc", "-c", "empty.txt"])

    text, size = provider.run(body)
    assert text == ""
    assert size.stdout.split()[0] == "0"


def test_text_file_name_may_contain_spaces(provider):
    async def body(s):
        await s.write_text("with space/a file.txt", "spaced")
        return await s.read_text("with space/a file.txt"), await s.exec(["cat", "with space/a file.txt"])

    text, cat = provider.run(body)
    assert text == "spaced" and cat.stdout == "spaced"


def test_write_text_creates_missing_directories_for_relative_and_absolute_paths(provider):
    async def body(s):
        absolute = f"{s.workdir}/abs/deeper/file.txt"
        await s.write_text("rel/deeper/file.txt", "relative")
        await s.write_text(absolute, "absolute")
        return (
            await s.read_text(f"{s.workdir}/rel/deeper/file.txt"),
            await s.read_text("abs/deeper/file.txt"),
            await s.is_dir("rel/deeper"),
        )

    assert provider.run(body) == ("relative", "absolute", True)


def test_write_text_replaces_an_existing_file(provider):
    async def body(s):
        await s.write_text("f.txt", "a much longer first version\n")
        await s.write_text("f.txt", "second\n")
        return await s.read_text("f.txt")

    assert provider.run(body) == "second\n"


def test_read_text_of_a_missing_file_raises_file_not_found(provider):
    async def body(s):
        with pytest.raises(FileNotFoundError):
            await s.read_text("no/such/file.txt")
        return True

    assert provider.run(body)


def test_read_text_of_a_directory_raises_is_a_directory(provider):
    async def body(s):
        await s.write_text("d/inside.txt", "x")
        with pytest.raises(IsADirectoryError):
            await s.read_text("d")
        return True

    assert provider.run(body)


def test_write_text_onto_a_directory_raises_is_a_directory(provider):
    async def body(s):
        await s.write_text("d/inside.txt", "x")
        with pytest.raises(IsADirectoryError):
            await s.write_text("d", "would replace a directory")
        return await s.read_text("d/inside.txt")

    assert provider.run(body) == "x"


def test_exists_and_is_dir_tell_files_directories_and_missing_paths(provider):
    async def body(s):
        await s.write_text("dir/file.txt", "x")
        return [
            (await s.exists(p), await s.is_dir(p))
            for p in ("dir", "dir/file.txt", "missing", "dir/missing", f"{s.workdir}/dir")
        ]

    assert provider.run(body) == [(True, True), (True, False), (False, False), (False, False), (True, True)]


def test_files_written_by_commands_are_read_and_written_files_are_seen_by_commands(provider):
    async def body(s):
        await s.exec("printf 'from a command' > made.txt", shell=True)
        await s.write_text("given.txt", "from write_text")
        return await s.read_text("made.txt"), await s.exec(["cat", "given.txt"])

    made, cat = provider.run(body)
    assert made == "from a command"
    assert cat.stdout == "from write_text"


# --- binary files and directories ----------------------------------------------------------


def test_binary_file_round_trips_byte_identically(provider, tmp_path):
    payload = bytes(range(256)) * 64 + b"\x00\r\n\xff"
    local = tmp_path / "in.bin"
    local.write_bytes(payload)
    empty = tmp_path / "empty.bin"
    empty.write_bytes(b"")

    async def body(s):
        await s.upload(local, "deep/nested/file.bin")
        await s.upload(empty, "empty.bin")
        size = await s.exec(["wc", "-c", "deep/nested/file.bin"])
        await s.download("deep/nested/file.bin", tmp_path / "out" / "back.bin")
        await s.download("empty.bin", tmp_path / "out" / "empty.bin")
        return size

    size = provider.run(body)
    assert int(size.stdout.split()[0]) == len(payload)
    assert (tmp_path / "out" / "back.bin").read_bytes() == payload
    assert (tmp_path / "out" / "empty.bin").read_bytes() == b""


def test_large_binary_file_round_trips_byte_identically(provider, tmp_path):
    payload = os.urandom(24 * 1024 * 1024)
    local = tmp_path / "large.bin"
    local.write_bytes(payload)

    async def body(s):
        # an absolute path inside the session: host_process shares the host's file system
        await s.upload(local, f"{s.workdir}/big/large.bin")
        await s.download(f"{s.workdir}/big/large.bin", tmp_path / "back.bin")

    provider.run(body)
    assert (tmp_path / "back.bin").read_bytes() == payload


def test_directory_tree_round_trips_byte_identically(provider, tmp_path):
    tree = tmp_path / "tree"
    (tree / "a" / "b").mkdir(parents=True)
    (tree / "empty").mkdir()
    (tree / "top.txt").write_text(UTF8_TEXT)
    (tree / "a" / "mid.bin").write_bytes(os.urandom(70_000))
    (tree / "a" / "b" / "leaf.txt").write_text("leaf\n")
    (tree / "a" / "b" / "zero").write_bytes(b"")
    (tree / "run.sh").write_text("#!/bin/sh\necho ran\n")
    (tree / "run.sh").chmod(0o755)
    (tree / "a" / "link").symlink_to("b/leaf.txt")
    out = tmp_path / "downloaded"

    async def body(s):
        await s.upload(tree, "copy")
        listing = await s.exec("cd copy && find . | sort", shell=True)
        ran = await s.exec(["./copy/run.sh"])
        through_link = await s.read_text("copy/a/link")
        await s.download("copy", out)
        return listing.stdout.split(), ran.stdout, through_link

    listing, ran, through_link = provider.run(body)
    assert "./a/b/leaf.txt" in listing and "./empty" in listing
    assert ran == "ran\n"
    assert through_link == "leaf\n"
    assert snapshot(out) == snapshot(tree)


def test_links_are_copied_as_links_whatever_their_target_text(provider, tmp_path):
    # a workspace's links as an agent may leave them: climbing above the folder the copy lands in
    # (Docker's own extraction refuses such a link), above the root, absolute, dangling; each
    # arrives as a link with the same text, in and out, and nothing is written through one
    links = {
        "up": "../../etc/hostname",
        "far": "../" * 12 + "etc/hostname",
        "abs": "/etc/hostname",
        "dangling": "../../no/such/file",
        "sub/up": "../../../landed",
    }
    tree = tmp_path / "job"
    (tree / "sub").mkdir(parents=True)
    (tree / "sub" / "file.txt").write_text("kept\n")
    for name, target in links.items():
        (tree / name).symlink_to(target)
    out = tmp_path / "back"
    show = "; ".join(f'printf "%s\\n" "$(readlink job/{name})"' for name in links)

    async def body(s):
        await s.upload(tree, "job")
        shown = await s.exec(f"{show}; test -e landed || test -e ../landed || echo none-landed", shell=True)
        await s.download("job", out)
        return shown

    shown = provider.run(body)
    assert shown.returncode == 0, shown
    assert shown.stdout.splitlines() == [*links.values(), "none-landed"]
    assert {name: os.readlink(out / name) for name in links} == links
    assert snapshot(out) == snapshot(tree)


def test_upload_into_an_existing_directory_merges_with_its_files(provider, tmp_path):
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "new.txt").write_text("new")

    async def body(s):
        await s.write_text("target/old.txt", "old")
        await s.upload(tree, "target")
        return sorted((await s.exec(["ls", "target"])).stdout.split())

    assert provider.run(body) == ["new.txt", "old.txt"]


def test_upload_of_a_file_onto_an_existing_directory_raises_is_a_directory(provider, tmp_path):
    local = tmp_path / "file.txt"
    local.write_text("a file")

    async def body(s):
        await s.write_text("target/old.txt", "old")
        with pytest.raises(IsADirectoryError):
            await s.upload(local, "target")
        await s.upload(local, "target/old.txt")  # onto an existing file: replaces it
        await s.upload(local, "with space/a file.bin")
        return (
            sorted((await s.exec(["ls", "target"])).stdout.split()),
            await s.read_text("target/old.txt"),
            await s.read_text("with space/a file.bin"),
        )

    assert provider.run(body) == (["old.txt"], "a file", "a file")


def test_download_of_a_missing_path_raises_file_not_found(provider, tmp_path):
    async def body(s):
        with pytest.raises(FileNotFoundError):
            await s.download("missing", tmp_path / "never")
        return True

    assert provider.run(body)
    assert not (tmp_path / "never").exists()


# --- exec ------------------------------------------------------------------------------------


def test_exec_argv_returns_stdout_stderr_and_returncode(provider):
    async def body(s):
        return await s.exec(["sh", "-c", "echo out; echo err >&2; exit 3"])

    result = provider.run(body)
    assert (result.returncode, result.stdout, result.stderr, result.timed_out) == (3, "out\n", "err\n", False)
    assert not result.ok


def test_exec_argv_is_not_interpreted_by_a_shell(provider):
    async def body(s):
        return await s.exec(["echo", "$HOME; echo injected", "*"])

    assert provider.run(body).stdout == "$HOME; echo injected *\n"


def test_exec_shell_string_is_interpreted_by_sh(provider):
    async def body(s):
        return await s.exec("A=shell; printf '%s-%s\\n' $A ok | tr a-z A-Z && exit 0", shell=True)

    result = provider.run(body)
    assert result.ok and result.stdout == "SHELL-OK\n"


def test_exec_rejects_a_string_without_shell_and_a_list_with_shell(provider):
    async def body(s):
        with pytest.raises(TypeError):
            await s.exec("echo hi")
        with pytest.raises(TypeError):
            await s.exec(["echo", "hi"], shell=True)
        with pytest.raises(TypeError):
            await s.exec(["echo", 1])
        return True

    assert provider.run(body)


def test_exec_output_and_stderr_keep_utf8(provider):
    async def body(s):
        return await s.exec(["sh", "-c", 'printf "%s" "$1"; printf "%s" "$1" >&2', "sh", UTF8_TEXT])

    result = provider.run(body)
    assert result.stdout == UTF8_TEXT and result.stderr == UTF8_TEXT


def test_exec_env_vars_reach_the_command(provider):
    async def body(s):
        return await s.exec(["sh", "-c", 'echo "$AC_ONE|$AC_TWO"'], env={"AC_ONE": "1", "AC_TWO": "two words é"})

    assert provider.run(body).stdout == "1|two words é\n"


def test_exec_input_reaches_stdin_as_text_binary_and_shell_special_characters(provider):
    special = "$HOME `id` \"quoted\" 'single' \\ * ; | &\n"

    async def body(s):
        return (
            await s.exec(["cat"], input=UTF8_TEXT),
            await s.exec(["wc", "-c"], input=b"\x00\x01\x02\xff"),
            await s.exec("cat", shell=True, input=special),
            await s.exec(["cat"]),
        )

    text, binary, shell_special, without = provider.run(body)
    assert text.stdout == UTF8_TEXT
    assert binary.stdout.strip() == "4"
    assert shell_special.stdout == special
    assert without.ok and without.stdout == ""  # no input: stdin is empty, never the caller's


def test_exec_large_input_and_output_do_not_deadlock(provider):
    data = os.urandom(6 * 1024 * 1024).hex()  # 12 MB through cat: more than any pipe buffer both ways

    async def body(s):
        return await s.exec(["cat"], input=data, timeout=120)

    result = provider.run(body)
    assert result.ok and not result.timed_out
    # what is kept of it: the head and the tail (OUTPUT_LIMIT), the middle counted
    half = OUTPUT_LIMIT // 2
    assert result.stdout.startswith(data[:half]) and result.stdout.endswith(data[-half:])
    assert result.cut == len(data) - 2 * half and f"{result.cut} bytes of this output cut here" in result.stdout


def test_exec_large_command_line(provider):
    words = [f"word{i}" for i in range(10_000)]

    async def body(s):
        return await s.exec(["sh", "-c", 'echo "$#"; echo "$@" | wc -c', "sh", *words])

    count, size = provider.run(body).stdout.split()
    assert int(count) == len(words)
    assert int(size) == len(" ".join(words)) + 1


def test_exec_runs_in_workdir_and_in_relative_or_absolute_cwd(provider):
    async def body(s):
        await s.write_text("sub/dir/marker.txt", "x")
        return (
            s.workdir,
            await s.exec(["pwd"]),
            await s.exec(["pwd"], cwd="sub/dir"),
            await s.exec(["ls"], cwd=f"{s.workdir}/sub/dir"),
        )

    workdir, default, relative, absolute = provider.run(body)
    real = os.path.realpath(workdir) if provider.name == "host_process" else workdir
    assert default.stdout.strip() == real
    assert relative.stdout.strip() == f"{real}/sub/dir"
    assert absolute.stdout.split() == ["marker.txt"]


def test_exec_in_a_missing_cwd_raises_file_not_found(provider):
    async def body(s):
        with pytest.raises(FileNotFoundError):
            await s.exec(["pwd"], cwd="no/such/dir")
        return True

    assert provider.run(body)


def test_exec_of_a_missing_or_non_executable_program_reports_127_or_126(provider):
    async def body(s):
        await s.write_text("not-executable.sh", "echo never\n")
        return await s.exec(["no-such-program-here"]), await s.exec([f"{s.workdir}/not-executable.sh"])

    missing, not_executable = provider.run(body)
    assert missing.returncode == 127 and missing.stderr
    assert not_executable.returncode == 126 and not_executable.stderr
    assert "never" not in not_executable.stdout


def test_exec_killed_by_a_signal_exits_with_128_plus_the_signal(provider):
    async def body(s):
        return await s.exec("kill -9 $$", shell=True), await s.exec(["sh", "-c", "kill -TERM $$"])

    killed, terminated = provider.run(body)
    assert (killed.returncode, killed.timed_out) == (137, False)
    assert terminated.returncode == 143


def test_exec_as_another_user_and_as_an_unknown_one(provider):
    if provider.name == "host_process" and os.geteuid() != 0:
        pytest.skip("host_process runs a command as another user only when agentcompass runs as root")

    async def body(s):
        # a uid, not a name: the docker test image has no /etc/passwd
        return (
            await s.exec(["id", "-u"], user="65534"),
            await s.exec(["id", "-u"]),
            await s.exec(["id", "-u"], user="no-such-user-here"),
        )

    other, default, unknown = provider.run(body)
    assert other.ok and other.stdout.strip() == "65534", other
    assert default.ok and default.stdout.strip() == "0"
    assert unknown.returncode == 126 and "unable to find user no-such-user-here" in unknown.stderr, unknown


def test_exec_as_another_user_without_root_is_refused_on_host_process():
    if os.geteuid() == 0:
        pytest.skip("agentcompass runs as root here: host_process can change the user")
    from .envkit import Provider

    async def body(s):
        with pytest.raises(PermissionError, match="needs agentcompass to run as root"):
            await s.exec(["id", "-u"], user="65534")
        return True

    assert Provider("host_process").run(body)


def test_exec_within_its_timeout_is_not_timed_out(provider):
    async def body(s):
        return await s.exec(["sh", "-c", "sleep 0.1; echo done"], timeout=30)

    result = provider.run(body)
    assert result.ok and not result.timed_out and result.stdout == "done\n"


def test_exec_that_dies_of_a_signal_quickly_is_not_timed_out(provider):
    async def body(s):
        started = time.monotonic()
        result = await s.exec("kill -9 $$", shell=True, timeout=30)
        return result, time.monotonic() - started

    result, elapsed = provider.run(body)
    assert not result.timed_out and result.returncode != 0
    assert elapsed < 10


def test_exec_timeout_reports_timed_out_and_returns_promptly(provider):
    async def body(s):
        started = time.monotonic()
        result = await s.exec(["sleep", "60"], timeout=0.5)
        return result, time.monotonic() - started

    result, elapsed = provider.run(body)
    assert result.timed_out and not result.ok and result.returncode != 0
    assert elapsed < 10


ALIVE = (
    # the PIDs listed in the file whose process still exists and is not a zombie
    'for p in $(cat "$1"); do [ -e /proc/$p ] || continue; '
    'state=$(sed "s/.*) //" /proc/$p/stat | cut -d" " -f1); [ "$state" = Z ] || echo $p; done'
)


def test_exec_timeout_kills_the_whole_process_tree_including_escaped_children(provider):
    tree = (
        "sleep 300 & echo $! >> pids; "
        "sh -c 'sleep 300 & echo $! >> pids; wait' & "
        "setsid sh -c 'echo $$ >> pids; exec sleep 300' & "
        "sleep 0.3; wait"
    )

    async def body(s):
        result = await s.exec(tree, shell=True, timeout=1.5)
        deadline = time.monotonic() + 10
        while True:
            alive = await s.exec(["sh", "-c", ALIVE, "sh", "pids"])
            if not alive.stdout.split() or time.monotonic() > deadline:
                return result, await s.read_text("pids"), alive.stdout.split()
            await asyncio.sleep(0.1)

    result, pids, alive = provider.run(body)
    assert result.timed_out
    assert len(pids.split()) == 3, pids
    assert alive == [], f"processes survived the timeout: {alive}"


# --- limits ------------------------------------------------------------------------------------

HOG = "x=$(head -c 100000000 /dev/zero | tr '\\0' a); echo ${#x}"  # holds 100 MB in a shell variable
FORKS = "i=0; while [ $i -lt 40 ]; do sleep 2 & i=$((i+1)); done; wait"


def require_limits_on(provider, *controllers: str) -> None:
    if provider.name == "docker" and docker_engine() == "podman-rootless":
        from agentcompass.environments.cgroups import LimitsUnavailableError

        # refused when the session opens (tests/environments/test_docker.py checks how), never ignored
        with pytest.raises(LimitsUnavailableError, match="no cgroup controller for"):
            provider.run(lambda s: asyncio.sleep(0), memory="512m", cpus=1.0, pids_limit=100)
        pytest.skip("rootless Podman on cgroup v1 cannot enforce limits: the session is refused (checked)")
    if provider.name == "host_process":
        from agentcompass.environments.cgroups import LimitsUnavailableError, require_limits

        try:
            require_limits(controllers)
        except LimitsUnavailableError as exc:
            pytest.skip(str(exc))


def test_memory_limit_kills_what_takes_more(provider):
    require_limits_on(provider, "memory")

    async def body(s):
        try:
            return await s.exec(HOG, shell=True, timeout=120), await s.exec(["echo", "fine"])
        except SandboxDiedError as exc:
            return exc, None

    hog, after = provider.run(body, memory="32m")
    if isinstance(hog, SandboxDiedError):
        # docker only: the kernel may pick the container's init, and the sandbox ends with it
        assert provider.name == "docker" and "out of memory" in str(hog), hog
    else:
        assert hog.returncode == 137 and "100000000" not in hog.stdout, hog
        assert after.ok and after.stdout == "fine\n"


def test_pids_limit_holds_for_the_whole_session(provider):
    require_limits_on(provider, "pids")

    async def body(s):
        return await s.exec(["echo", "fine"]), await s.exec(FORKS, shell=True, timeout=120)

    small, forks = provider.run(body, pids_limit=16)
    assert small.ok and small.stdout == "fine\n"
    assert forks.returncode != 0 and "fork" in forks.stderr.lower(), forks


def test_limits_are_checked_before_a_session_opens(provider):
    from agentcompass.runtime.config import ConfigError

    for bad in ({"memory": "lots"}, {"cpus": 0}, {"pids_limit": 0}):
        with pytest.raises(ConfigError):
            provider.environment.build_config(provider.spec(**bad))


# --- network policies ------------------------------------------------------------------------------

ROUTES_AND_LINKS = "cat /proc/net/dev; echo ===; cat /proc/net/route"


def interfaces_and_routes(output: str) -> tuple[list[str], list[str]]:
    dev, _, route = output.partition("===\n")
    names = [line.split(":")[0].strip() for line in dev.splitlines()[2:] if ":" in line]
    routes = [line for line in route.splitlines()[1:] if line.strip()]
    return sorted(names), routes


def test_public_phase_reaches_a_server_on_this_machine(provider, host_server):
    async def body(s):
        return await provider.connect(s, host_server.address, host_server.port)

    result = provider.run(body, mode="public")
    assert result.ok, result
    assert result.stdout.strip() == SERVER_GREETING


def test_none_phase_cannot_reach_a_server_on_this_machine(isolating_provider, host_server):
    provider = isolating_provider

    async def body(s):
        return await provider.connect(s, host_server.address, host_server.port)

    result = provider.run(body, mode="none")
    assert not result.ok and not result.timed_out
    assert SERVER_GREETING not in result.stdout
    assert host_server.connections == 0


def test_none_phase_sees_only_loopback_and_no_route(isolating_provider):
    async def body(s):
        return await s.exec(ROUTES_AND_LINKS, shell=True), await s.exec(["ip", "-o", "link"])

    views, ip_link = isolating_provider.run(body, mode="none")
    assert interfaces_and_routes(views.stdout) == (["lo"], [])
    assert [line.split(":")[1].strip() for line in ip_link.stdout.splitlines()] == ["lo"]


def test_none_phase_keeps_its_own_loopback_working(isolating_provider):
    provider = isolating_provider

    async def body(s):
        await s.write_text("www/index.html", "inside\n")
        port = provider.free_port()
        started = await s.exec(provider.serve_command(port, f"{s.workdir}/www"), shell=True)
        for _ in range(100):
            fetched = await provider.connect(s, "127.0.0.1", port, "GET /index.html HTTP/1.0\r\n\r\n")
            if fetched.ok:
                break
            await asyncio.sleep(0.1)
        return started, fetched

    started, fetched = provider.run(body, mode="none")
    assert started.ok
    assert fetched.ok, fetched
    assert fetched.stdout.startswith("HTTP/1.") and fetched.stdout.endswith("inside\n")


def test_set_network_switches_back_and_forth(isolating_provider, host_server):
    provider = isolating_provider
    async def body(s):
        seen = []
        for mode in ("none", "public", "none", "public"):
            await s.set_network(NetworkPolicy(mode=mode))
            views = await s.exec(ROUTES_AND_LINKS, shell=True)
            reached = await provider.connect(s, host_server.address, host_server.port)
            seen.append((mode, interfaces_and_routes(views.stdout), reached.ok))
        return seen

    seen = provider.run(body, mode="public")
    for mode, (links, routes), reached in seen:
        if mode == "none":
            assert (links, routes, reached) == (["lo"], [], False), mode
        else:
            assert reached, mode
            assert links != ["lo"] and routes, mode
    assert host_server.connections == 2


# --- endpoints ------------------------------------------------------------------------------------


def fetch(address: str, path: str) -> bytes:
    """GET over HTTP from this process, retrying while the server starts."""
    deadline = time.monotonic() + 15
    while True:
        try:
            with urllib.request.urlopen(f"http://{address}{path}", timeout=5) as response:
                return response.read()
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


@pytest.mark.parametrize("mode", ["public", "none"])
def test_endpoint_reaches_a_service_listening_in_the_session(provider, mode):
    if mode == "none" and provider.name == "host_process":
        from agentcompass.environments.netns import network_isolation

        if not network_isolation()[0]:
            pytest.skip("host_process cannot isolate here")

    async def body(s):
        await s.write_text("www/page.txt", f"served under {mode}\n")
        port = provider.free_port()
        started = await s.exec(provider.serve_command(port, f"{s.workdir}/www"), shell=True)
        assert started.ok, started
        address = await s.endpoint(port)
        return await asyncio.to_thread(fetch, address, "/page.txt")

    assert provider.run(body, mode=mode) == f"served under {mode}\n".encode()


def test_endpoint_is_looked_up_again_after_each_switch(isolating_provider):
    provider = isolating_provider

    async def body(s):
        await s.write_text("www/page.txt", "switching\n")
        pages = []
        for mode in ("none", "public", "none"):
            await s.set_network(NetworkPolicy(mode=mode))
            # host_process ends a phase's processes on a switch to 'none': serve anew in each phase
            port = provider.free_port()
            await s.exec(provider.serve_command(port, f"{s.workdir}/www"), shell=True)
            address = await s.endpoint(port)
            pages.append(await asyncio.to_thread(fetch, address, "/page.txt"))
        return pages

    assert provider.run(body, mode="public") == [b"switching\n"] * 3


# --- lifecycle ----------------------------------------------------------------------------------------


def test_sessions_do_not_share_a_workspace(provider):
    async def main():
        a = await provider.open()
        b = await provider.open()
        try:
            await a.write_text("mine.txt", "a")
            return await b.exists(f"{b.workdir}/mine.txt"), await a.exists("mine.txt")
        finally:
            await a.close()
            await b.close()

    assert asyncio.run(main()) == (False, True)


@pytest.mark.parametrize("mode", ["public", "none"])
def test_close_leaves_no_process_or_container_behind(provider, mode):
    if mode == "none" and provider.name == "host_process":
        from agentcompass.environments.netns import network_isolation

        if not network_isolation()[0]:
            pytest.skip("host_process cannot isolate here")

    async def main():
        session = await provider.open(mode)
        await session.exec("(sleep 300 & setsid sleep 300 & nohup sleep 300 &) >/dev/null 2>&1", shell=True)
        before = provider.leftovers(session)
        await session.close()
        return session, before

    session, before = asyncio.run(main())
    assert before, "the check must see the session's processes or container while it is open"
    deadline = time.monotonic() + 5
    while provider.leftovers(session) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert provider.leftovers(session) == []


def test_async_with_closes_the_session(provider):
    async def main():
        session = await provider.open()
        async with session as s:
            await s.exec("sleep 300 >/dev/null 2>&1 &", shell=True)
        return session

    session = asyncio.run(main())
    deadline = time.monotonic() + 5
    while provider.leftovers(session) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert provider.leftovers(session) == []


# --- what the sandbox holds -------------------------------------------------------------------
#
# Checked by what a command in the sandbox sees: its /proc, the Unix sockets it can reach, the
# host files it can change, its network links. A leak here is a way to the job's own secrets
# (its /proc/<pid>/environ) or to a service of the host (a Docker engine's socket).

SECRET_VAR = "AGENTCOMPASS_PROBE_SECRET"
# every environ in the sandbox's /proc that holds the value, one per line: "PID VALUE-FOUND"
SCAN_ENVIRONS = 'for f in /proc/[0-9]*/environ; do tr "\\0" "\\n" < "$f" 2>/dev/null | grep -q "$1" && echo "${f%/environ}"; done; true'


@pytest.mark.parametrize("mode", ["public", "none"])
def test_sandbox_sees_its_own_processes_and_not_the_jobs_environment(sandboxed_provider, mode, request):
    secret = f"probe-{uuid.uuid4().hex}"
    # a process of the job that holds a secret in its environment, as the job holds an API key
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], env={**os.environ, SECRET_VAR: secret})
    request.addfinalizer(holder.kill)

    async def body(s):
        scanned = await s.exec(["sh", "-c", SCAN_ENVIRONS, "sh", secret])
        # the scan finds a value where it is: in the command's own environment
        own = await s.exec(["sh", "-c", SCAN_ENVIRONS, "sh", "visible-to-itself"], env={"AC_OWN": "visible-to-itself"})
        listing = await s.exec("ls /proc | grep -E '^[0-9]+$'", shell=True)
        ours = await s.exec(["cat", f"/proc/{holder.pid}/cmdline"])
        return scanned, own, listing, ours

    scanned, own, listing, ours = sandboxed_provider.run(body, mode=mode)
    assert scanned.stdout == "", f"the job's secret is readable in the sandbox at {scanned.stdout.split()}"
    assert own.stdout.strip(), own
    assert "time.sleep(120)" not in ours.stdout
    assert len(listing.stdout.split()) < 20, f"the sandbox sees processes not its own: {listing.stdout.split()}"


class UnixServer(HostServer):
    """A listening Unix socket at a path on this machine (or abstract, in this network), counting connections."""

    def __init__(self, path: str) -> None:
        self.path = path
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(path)
        sock.listen()
        self.start(sock)

    def close(self) -> None:
        self.sock.close()
        if not self.path.startswith("\0"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)


@pytest.fixture
def planted_sockets(tmp_path):
    """Listening Unix sockets where a job's own processes reach them: under /tmp, under the working
    directory (where the results folder is), and an abstract one."""
    near_results = Path(tempfile.mkdtemp(prefix=".probe-", dir=os.getcwd()))
    servers = [
        UnixServer(str(tmp_path / "planted.sock")),
        UnixServer(str(near_results / "planted.sock")),
        UnixServer(f"\0agentcompass-probe-{uuid.uuid4().hex}"),
    ]
    yield servers
    for server in servers:
        server.close()
    shutil.rmtree(near_results, ignore_errors=True)


UNIX_CONNECT_PY = (
    "import socket, sys\n"
    "for path in sys.argv[1:]:\n"
    "    s = socket.socket(socket.AF_UNIX)\n"
    "    try:\n"
    "        s.connect(path.replace('@', '\\0', 1) if path.startswith('@') else path)\n"
    "        print('CONNECTED', path, s.recv(100))\n"
    "    except OSError as exc:\n"
    "        print('UNREACHABLE', path, exc)\n"
)


@pytest.mark.parametrize("mode", ["public", "none"])
def test_sandbox_reaches_no_host_unix_socket_but_the_one_it_is_handed(sandboxed_provider, mode, planted_sockets):
    provider = sandboxed_provider
    paths = [s.path.replace("\0", "@", 1) for s in planted_sockets]
    files, abstract = paths[:2], paths[2]
    if provider.name == "host_process" and mode == "public":
        # the host's network, and with it its abstract sockets: see docs/environments.md
        paths = files
    handed = planted_sockets[0]

    async def body(s):
        seen = await s.exec(["sh", "-c", 'for p; do [ -e "$p" ] && echo "$p"; done; true', "sh", *files])
        listed = await s.exec(["cat", "/proc/net/unix"])
        tried = None
        if provider.name == "host_process":
            tried = await s.exec([sys.executable, "-c", UNIX_CONNECT_PY, *paths])
        host, port = (await s.expose_host_socket(Path(handed.path))).split(":")
        through = await provider.connect(s, host, int(port))
        return seen, listed, tried, through

    seen, listed, tried, through = provider.run(body, mode=mode)
    assert seen.ok and seen.stdout == "", f"host socket files are in the sandbox: {seen.stdout.split()}"
    if abstract in paths:
        assert listed.ok and abstract not in listed.stdout, "the host's abstract socket is in the sandbox's network"
    if tried is not None:
        assert "CONNECTED" not in tried.stdout and tried.stdout.count("UNREACHABLE") == len(paths), tried
    assert through.ok and through.stdout.strip() == SERVER_GREETING, through
    assert [s.connections for s in planted_sockets] == [1, 0, 0]


@pytest.mark.parametrize("mode", ["public", "none"])
def test_sandbox_writes_only_its_workspace_and_a_private_tmp(sandboxed_provider, mode, tmp_path):
    host_file = tmp_path / "host.txt"
    host_file.write_text("the host's own\n")
    probe = f"agentcompass-probe-{uuid.uuid4().hex}"
    writes = (
        f'echo changed > "{host_file}"; echo new > "{tmp_path}/new.txt"; touch /etc/{probe}; '
        f'touch "$HOME/{probe}"; echo private > /tmp/{probe}; echo mine > mine.txt; '
        f'cat /tmp/{probe} mine.txt'
    )

    async def main():
        a = await sandboxed_provider.open(mode)
        b = await sandboxed_provider.open(mode)
        try:
            wrote = await a.exec(writes, shell=True)
            other = await b.exec(["ls", "/tmp"])
            return wrote, await a.read_text("mine.txt"), other
        finally:
            await a.close()
            await b.close()

    wrote, mine, other = asyncio.run(main())
    assert wrote.stdout == "private\nmine\n", wrote
    assert mine == "mine\n"
    assert host_file.read_text() == "the host's own\n"
    assert not (tmp_path / "new.txt").exists()
    assert not os.path.exists(f"/etc/{probe}") and not os.path.exists(os.path.expanduser(f"~/{probe}"))
    assert not os.path.exists(f"/tmp/{probe}")
    assert probe not in other.stdout, "sessions share /tmp"
