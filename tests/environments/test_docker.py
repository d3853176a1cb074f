"""What only the docker provider does: images, limits, labels, retention, switching live services, clean."""

from __future__ import annotations

import asyncio
import io
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from agentcompass.environments.docker import DockerConfig, DockerEnvironment
from agentcompass.runtime.base import ImageBuildError
from agentcompass.runtime.config import ConfigError, build_component_config
from agentcompass.runtime.models import EnvironmentSpec, NetworkPolicy

from .envkit import TEST_IMAGE, Provider, docker_engine, unique_label

pytestmark = pytest.mark.usefixtures("engine")


@pytest.fixture
def engine(needs_docker):
    import docker

    client = docker.from_env()
    yield client
    client.close()


@pytest.fixture
def docker_provider() -> Provider:
    return Provider("docker", {"image": TEST_IMAGE})


def containers(client, label: str) -> list:
    return client.containers.list(all=True, filters={"label": f"agentcompass.label={label}"})


def test_container_carries_labels_naming_the_run_attempt_and_owner(engine, docker_provider):
    label = unique_label("labels")

    async def main():
        session = await docker_provider.open(label=label)
        try:
            return dict(session.container.labels)
        finally:
            await session.close()

    labels = asyncio.run(main())
    assert labels["agentcompass"] == "1"
    assert labels["agentcompass.label"] == label
    host, pid, _ = labels["agentcompass.owner"].split(":")
    assert int(pid) == os.getpid()
    assert containers(engine, label) == []


def test_limits_an_engine_cannot_enforce_are_refused_when_the_session_opens(needs_podman, engine, docker_provider):
    if docker_engine() != "podman-rootless":
        pytest.skip(f"the engine here ({docker_engine()}) enforces memory, CPU and process limits")
    from agentcompass.environments.cgroups import LimitsUnavailableError

    label = unique_label("limits")
    for limit in ({"memory": "64m"}, {"cpus": 0.5}, {"pids_limit": 16}):
        name = next(iter(limit))
        with pytest.raises(LimitsUnavailableError, match=f"rootless Podman .* no cgroup controller for {name} "):
            asyncio.run(docker_provider.open(label=label, **limit))
    assert containers(engine, label) == []  # refused before any container was made
    # without limits the same engine runs the session
    assert docker_provider.run(lambda s: s.exec(["echo", "fine"])).stdout == "fine\n"


def test_memory_cpu_and_pids_limits_come_from_params(docker_provider):
    if docker_engine() == "podman-rootless":
        pytest.skip("rootless Podman on cgroup v1 refuses limits (the test above checks it)")
    async def body(s):
        limits = s.container.attrs["HostConfig"]
        cgroup = await s.exec(
            "cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null || cut -d' ' -f1 /sys/fs/cgroup/memory.max",
            shell=True,
        )
        # more processes than the limit allows: the fork fails inside the container
        forks = await s.exec("for i in $(seq 40); do sleep 5 & done; wait", shell=True, timeout=30)
        return limits, cgroup, forks

    limits, cgroup, forks = docker_provider.run(body, memory="64m", cpus=0.5, pids_limit=16)
    assert limits["Memory"] == 64 * 1024 * 1024
    assert limits["NanoCpus"] == 500_000_000
    assert limits["PidsLimit"] == 16
    assert int(cgroup.stdout.strip()) == 64 * 1024 * 1024
    assert "can't fork" in forks.stderr or "Resource temporarily unavailable" in forks.stderr


def test_image_is_built_from_a_dockerfile_with_its_workdir_and_build_args(engine, tmp_path):
    context = tmp_path / "task"
    context.mkdir()
    (context / "data.txt").write_text("from the build context\n")
    (context / "Dockerfile").write_text(textwrap.dedent(f"""\
        FROM {TEST_IMAGE}
        ARG GREETING=unset
        COPY data.txt /app/data.txt
        RUN echo "$GREETING" > /app/greeting.txt
        WORKDIR /app
        """))
    provider = Provider("docker", {"dockerfile": str(context / "Dockerfile"), "build_args": {"GREETING": "built"}})

    async def body(s):
        return s.workdir, await s.exec(["cat", "data.txt", "greeting.txt"])

    workdir, cat = provider.run(body)
    assert workdir == "/app"
    assert cat.stdout == "from the build context\nbuilt\n"


def test_a_missing_base_image_is_a_clear_error_naming_it_and_the_engine_is_not_asked(engine, tmp_path):
    # the engine would try to pull it (whatever pull=False says): here a registry on loopback where
    # nothing listens, so that without the check the build fails another way, and no traffic leaves
    missing = "127.0.0.1:9/agentcompass/no-such-base:never"
    context = tmp_path / "task"
    context.mkdir()
    (context / "Dockerfile").write_text(textwrap.dedent(f"""\
        ARG BASE={TEST_IMAGE}
        FROM {TEST_IMAGE} AS tools
        FROM tools
        FROM ${{BASE}}
        RUN echo built
        """))
    label = unique_label("nobase")

    async def main():
        await DockerEnvironment().open(
            EnvironmentSpec(id="docker", params={"dockerfile": str(context / "Dockerfile"), "build_args": {"BASE": missing}}),
            NetworkPolicy(), label,
        )

    with pytest.raises(ImageBuildError) as raised:
        asyncio.run(main())
    assert f"starts FROM '{missing}', which is not on the engine, and nothing is pulled" in str(raised.value)
    assert f"`docker pull {missing}` where a registry is reachable, `docker load`" in str(raised.value)
    assert containers(engine, label) == []


def test_the_engine_ci_starts_reaches_no_registry_for_a_missing_image(engine):
    # .ci/docker-up.sh and .ci/podman-up.sh configure their engine so; asked directly (the provider never
    # asks), it fails at once on this machine
    import docker

    if os.environ.get("AGENTCOMPASS_TEST_OFFLINE_ENGINE") != "1":
        pytest.skip("the engine at DOCKER_HOST is not one .ci/ started (AGENTCOMPASS_TEST_OFFLINE_ENGINE=1 in its env)")
    public = "docker.io/library/agentcompass-no-such-image"
    if docker_engine() == "docker":
        # checked before anything is asked of it: a pull goes to the loopback proxy where nothing listens
        info = engine.info()
        assert (info.get("HttpProxy"), info.get("HttpsProxy"), info.get("NoProxy")) == (
            "http://127.0.0.1:9", "http://127.0.0.1:9", ""), info
        refused = ["127.0.0.1:9", "connection refused"]
    else:
        refused = ["docker.io", "blocked"]  # registries.conf blocks it
    started = time.monotonic()
    try:  # the engine refuses the pull, or streams its error
        pulled = str(list(engine.api.pull(public, tag="never", stream=True, decode=True)))
    except docker.errors.APIError as exc:
        pulled = str(exc)
    with pytest.raises(docker.errors.BuildError) as built:
        engine.images.build(fileobj=io.BytesIO(f"FROM {public}:never\n".encode()), pull=False, rm=True, forcerm=True)
    build_log = str(built.value) + "".join(str(line) for line in built.value.build_log)
    for fragment in refused:
        assert fragment in pulled and fragment in build_log, (fragment, pulled, build_log)
    assert time.monotonic() - started < 10


def test_default_workdir_is_workspace_when_the_image_sets_none(docker_provider):
    async def body(s):
        return s.workdir, await s.exec(["pwd"])

    workdir, pwd = docker_provider.run(body)
    assert workdir == "/workspace" and pwd.stdout == "/workspace\n"


def test_missing_image_is_a_clear_error_and_leaves_no_container(engine):
    label = unique_label("noimage")

    async def main():
        await DockerEnvironment().open(
            EnvironmentSpec(id="docker", params={"image": "local/no-such-image:never"}), NetworkPolicy(), label
        )

    with pytest.raises(RuntimeError, match="not on the engine, and nothing is pulled"):
        asyncio.run(main())
    assert containers(engine, label) == []


@pytest.mark.parametrize(
    ("params", "fragment"),
    [
        ({"image": "x", "memory": "lots"}, "memory"),
        ({"image": "x", "cpus": 0}, "cpus"),
        ({"image": "x", "pids_limit": 0}, "pids_limit"),
        ({"image": "x", "network": "host"}, "network"),
        ({"image": "x", "keep": "sometimes"}, "keep"),
        ({"image": "x", "workdir": "relative"}, "workdir"),
    ],
)
def test_bad_params_are_rejected_with_the_field_named(params, fragment):
    with pytest.raises(ConfigError, match=fragment):
        build_component_config(DockerConfig, params, "environment 'docker' params")


def test_a_plan_with_neither_image_nor_dockerfile_is_rejected_when_planned():
    # a Recipe may supply them (a task's own Dockerfile), so the provider checks each planned spec
    build_component_config(DockerConfig, {}, "environment 'docker' params")
    with pytest.raises(ConfigError, match="set `image`"):
        DockerEnvironment().validate_spec(EnvironmentSpec(id="docker"))
    DockerEnvironment().validate_spec(EnvironmentSpec(id="docker", params={"dockerfile": "Dockerfile"}))


@pytest.mark.parametrize(
    ("keep", "failed", "kept"),
    [
        ("never", True, False),
        ("on_failure", False, False),
        ("on_failure", True, True),
        ("always", False, True),
    ],
)
def test_retention_keeps_the_container_only_when_keep_says_so(engine, docker_provider, keep, failed, kept):
    label = unique_label("keep")

    async def main():
        session = await docker_provider.open(label=label, keep=keep)
        await session.write_text("evidence.txt", "for debugging")
        try:
            async with session:
                if failed:
                    raise ValueError("the attempt failed")
        except ValueError:
            pass

    asyncio.run(main())
    left = containers(engine, label)
    try:
        assert bool(left) == kept
        if kept:
            assert left[0].name.startswith("agentcompass-kept-")
            assert left[0].status == "running"
            assert left[0].exec_run(["cat", "/workspace/evidence.txt"]).output == b"for debugging"
    finally:
        for container in left:
            container.remove(force=True)


def test_a_service_survives_network_switches_and_its_endpoint_is_looked_up_again(docker_provider):
    from .test_conformance import fetch

    async def body(s):
        await s.write_text("www/page.txt", "still here\n")
        await s.exec(["httpd", "-p", "8080", "-h", f"{s.workdir}/www"])
        seen = []
        for mode in ("public", "none", "public"):
            await s.set_network(NetworkPolicy(mode=mode))
            address = await s.endpoint(8080)
            seen.append((mode, address, await asyncio.to_thread(fetch, address, "/page.txt")))
        return seen

    seen = docker_provider.run(body)
    assert [page for _, _, page in seen] == [b"still here\n"] * 3
    # on the bridge the endpoint is the container's address; without a network, a relay on 127.0.0.1
    # (on rootless Podman always a relay: its bridge is not reachable from this machine)
    relayed_on_the_bridge = docker_engine() == "podman-rootless"
    assert seen[0][1].startswith("127.0.0.1:") == relayed_on_the_bridge and seen[1][1].startswith("127.0.0.1:")


def test_container_opened_under_none_is_on_no_network_before_its_first_command(docker_provider):
    async def body(s):
        networks = s.container.attrs["NetworkSettings"]["Networks"]
        return networks, await s.exec(["cat", "/proc/net/route"])

    networks, routes = docker_provider.run(body, mode="none")
    assert networks == {}
    assert routes.stdout.splitlines()[1:] == []


OWNER = """
import asyncio, sys
from agentcompass.environments import DockerEnvironment
from agentcompass.runtime.models import EnvironmentSpec, NetworkPolicy

async def main():
    spec = EnvironmentSpec(id="docker", params={"image": sys.argv[1]})
    session = await DockerEnvironment().open(spec, NetworkPolicy(mode="none"), sys.argv[2])
    print("open", flush=True)
    await asyncio.sleep(600)

asyncio.run(main())
"""


def start_owners(*labels: str) -> list[subprocess.Popen]:
    owners = [subprocess.Popen([sys.executable, "-c", OWNER, TEST_IMAGE, label], stdout=subprocess.PIPE, text=True)
              for label in labels]
    for owner in owners:
        assert owner.stdout.readline().strip() == "open"
    return owners


def clean(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "agentcompass.cli", "clean", *args], capture_output=True, text=True, timeout=120)


def test_clean_removes_the_containers_of_a_killed_run_and_spares_live_ones(engine):
    run_id = f"cleanrun{time.time_ns()}"
    killed_label, live_label, other_label = f"{run_id}-t-1-run", f"{run_id}-t-2-run", f"other{run_id}-t-1-run"
    killed, live, other = start_owners(killed_label, live_label, other_label)
    try:
        killed.kill()
        killed.wait()
        other.kill()
        other.wait()
        assert containers(engine, killed_label), "a killed run leaves its container behind"

        dry = clean("--run", run_id, "--dry-run")
        assert dry.returncode == 0 and killed_label in dry.stdout
        assert containers(engine, killed_label)

        done = clean("--run", run_id)
        assert done.returncode == 0, done.stderr
        assert containers(engine, killed_label) == []
        assert containers(engine, live_label), "a running owner's container is not cleaned"
        assert containers(engine, other_label), "--run selects one run's containers only"

        forced = clean("--run", run_id, "--all")
        assert containers(engine, live_label) == [], forced.stdout
    finally:
        for proc in (killed, live, other):
            proc.kill()
            proc.wait()
        clean("--run", f"other{run_id}")
    assert containers(engine, other_label) == []


def test_docker_host_names_the_engine_whatever_docker_host_in_the_environment_says(monkeypatch, docker_provider):
    from agentcompass.runtime.base import EnvironmentUnavailableError

    host = os.environ.get("DOCKER_HOST")
    if not host:
        pytest.skip("the engine here is Docker's default socket: DOCKER_HOST is unset")
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    # a Podman service's socket (or any engine's) named by the environment's params alone
    assert docker_provider.run(lambda s: s.exec(["echo", "here"]), docker_host=host).stdout == "here\n"
    with pytest.raises(EnvironmentUnavailableError, match="no Docker engine answers at unix:///nonexistent/podman.sock"):
        docker_provider.run(lambda s: s.exec(["true"]), docker_host="unix:///nonexistent/podman.sock")


def test_rootless_podman_relays_serve_its_own_unprivileged_user(needs_podman, docker_provider):
    """On a cluster node agentcompass runs as the user who runs rootless Podman, not as root: an
    endpoint under 'none' and an exposed host socket (a model gateway) still work, made in the
    container's network by a helper that joins the user's own namespaces; the container sees
    only loopback."""
    import json
    import socket
    import tempfile
    import threading

    from .test_conformance import fetch

    host = os.environ.get("DOCKER_HOST", "")
    if docker_engine() != "podman-rootless" or not host.startswith("unix://") or os.geteuid() != 0:
        pytest.skip("needs rootless Podman at DOCKER_HOST and root here, to run the session as the user who runs it")
    owner = os.stat(host.removeprefix("unix://"))

    async def probe(s) -> dict:
        await s.write_text("www/page.txt", "served\n")
        await s.exec(["httpd", "-p", "8080", "-h", f"{s.workdir}/www"])
        await s.set_network(NetworkPolicy(mode="none"))
        page = await asyncio.to_thread(fetch, await s.endpoint(8080), "/page.txt")
        links = await s.exec("ip -o link; ip route", shell=True)
        folder = tempfile.mkdtemp()
        server = socket.socket(socket.AF_UNIX)
        server.bind(f"{folder}/gateway.sock")
        server.listen()

        def serve() -> None:
            conn, _ = server.accept()
            conn.sendall(b"gateway\n")
            conn.close()

        threading.Thread(target=serve, daemon=True).start()
        address = await s.expose_host_socket(Path(f"{folder}/gateway.sock"))
        reply = await s.exec(f"nc -w 3 {address.replace(':', ' ')} </dev/null", shell=True)
        return {"page": page.decode(), "links": links.stdout, "gateway": reply.stdout, "euid": os.geteuid()}

    # first as root (which also imports all it needs: after the switch the interpreter's own files may
    # be out of the user's reach), then as the user
    as_root = docker_provider.run(probe)
    assert as_root["page"] == "served\n" and as_root["gateway"] == "gateway\n" and as_root["euid"] == 0
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child reports through the pipe
        os.close(read)
        try:
            os.setgroups([])
            os.setgid(owner.st_gid)
            os.setuid(owner.st_uid)
            outcome = docker_provider.run(probe)
        except BaseException as exc:
            outcome = {"error": repr(exc)}
        os.write(write, json.dumps(outcome).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        outcome = json.loads(pipe.read() or b'{"error": "the child reported nothing"}')
    os.waitpid(child, 0)
    assert "error" not in outcome, outcome
    assert outcome["euid"] == owner.st_uid != 0
    assert outcome["page"] == "served\n" and outcome["gateway"] == "gateway\n"
    assert [line.split(":")[1].strip() for line in outcome["links"].splitlines() if ": " in line[:4]] == ["lo"], outcome
    assert "default" not in outcome["links"]


def test_clean_finds_a_killed_runs_containers_on_podmans_own_socket_without_docker_host(needs_podman, engine, tmp_path):
    """A run on rootless Podman (its socket at $XDG_RUNTIME_DIR/podman/podman.sock) killed outright:
    `agentcompass clean` in a shell without DOCKER_HOST still finds and removes its container."""
    if not docker_engine().startswith("podman") or not os.environ.get("DOCKER_HOST", "").startswith("unix://"):
        pytest.skip(f"needs Podman's API socket at DOCKER_HOST (the engine here is {docker_engine()})")
    label = f"podmanclean{time.time_ns()}-t-1-run"
    (killed,) = start_owners(label)
    killed.kill()
    killed.wait()
    assert containers(engine, label), "a killed run leaves its container behind"
    runtime_dir = tmp_path / "run-user"
    (runtime_dir / "podman").mkdir(parents=True)
    (runtime_dir / "podman" / "podman.sock").symlink_to(os.environ["DOCKER_HOST"].removeprefix("unix://"))
    env = {k: v for k, v in os.environ.items() if k != "DOCKER_HOST"}
    env["XDG_RUNTIME_DIR"] = str(runtime_dir)
    done = subprocess.run([sys.executable, "-m", "agentcompass.cli", "clean", "--run", label.split("-")[0]],
                          capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    assert label in done.stdout, done.stdout
    assert containers(engine, label) == []
