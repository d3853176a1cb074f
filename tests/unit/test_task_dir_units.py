"""The task_dir pieces that need no workflow: task.toml mapping, path rewriting, rewards, the Recipe."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest

from agentcompass.benchmarks.task_dir import (
    SHIPPED_TASKS,
    HarborPaths,
    TaskDirBenchmark,
    TaskDirPlan,
    copy_rewritten,
    dockerfile_workdir,
    host_copies,
    load_task,
    network_hints,
    pick_score,
    read_rewards,
    rewrite_paths,
    task_folders,
)
from agentcompass.environments.host_process import HostProcessEnvironment
from agentcompass.harnesses.oracle import OracleHarness
from agentcompass.runtime import Planner, build_run_recipe_registry
from agentcompass.runtime.base import HarnessContext, ScriptReference
from agentcompass.runtime.config import ParameterError
from agentcompass.plugins import load_builtin_components
from agentcompass.runtime.models import (
    BenchmarkSpec,
    EnvironmentSpec,
    HarnessSpec,
    ModelSpec,
    NetworkPolicy,
    PreparedTask,
    RunRequest,
    TaskInput,
)

load_builtin_components()  # the Recipes the plans below go through


def request(environment: EnvironmentSpec | None = None, **params) -> RunRequest:
    return RunRequest(
        model=ModelSpec(), benchmark=BenchmarkSpec("task_dir", params), harness=HarnessSpec("oracle"),
        environment=environment or EnvironmentSpec(),
    )


def plan_for(task_id: str, environment: EnvironmentSpec):
    req = request(environment)
    task = next(t for t in TaskDirBenchmark().load_tasks(req) if t.task_id == task_id)
    planner = Planner(TaskDirBenchmark(), OracleHarness(), build_run_recipe_registry(req))
    return planner.plan(req, task, 1)


# --- path rewriting (host_process) ------------------------------------------------------------


def test_rewrite_moves_harbor_roots_and_the_workdir_and_nothing_else():
    paths = HarborPaths.mapped("/tmp/ws", "/app")
    text = (
        'cat /app/hello.txt > /logs/verifier/reward.txt; cd /app; ls "/tests"\n'
        "keep /application /app.old /my/app /tests.py ~/logs $HOME/logs ./tests http://x/app\n"
    )
    assert rewrite_paths(text, paths.rewrite) == (
        'cat /tmp/ws/hello.txt > /tmp/ws/.harbor/logs/verifier/reward.txt; cd /tmp/ws; ls "/tmp/ws/.harbor/tests"\n'
        "keep /application /app.old /my/app /tests.py ~/logs $HOME/logs ./tests http://x/app\n"
    )
    assert paths.verifier == "/tmp/ws/.harbor/logs/verifier"
    assert rewrite_paths(text, HarborPaths.native().rewrite) == text


def test_copy_rewritten_keeps_binary_files_and_modes(tmp_path: Path):
    source = tmp_path / "src"
    source.mkdir()
    (source / "run.sh").write_text("#!/bin/sh\necho 1 > /logs/verifier/reward.txt\n")
    (source / "run.sh").chmod(0o755)
    (source / "blob.bin").write_bytes(b"\x00\xff/logs/verifier")
    copy_rewritten(source, tmp_path / "dst", {"/logs": "/w/.harbor/logs"})
    assert (tmp_path / "dst/run.sh").read_text() == "#!/bin/sh\necho 1 > /w/.harbor/logs/verifier/reward.txt\n"
    assert (tmp_path / "dst/run.sh").stat().st_mode & 0o777 == 0o755
    assert (tmp_path / "dst/blob.bin").read_bytes() == b"\x00\xff/logs/verifier"


def test_dockerfile_workdir_follows_relative_workdirs_and_resets_at_from(tmp_path: Path):
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text("FROM a AS build\nWORKDIR /src\nFROM b\nWORKDIR /srv\nworkdir app\n")
    assert dockerfile_workdir(dockerfile) == "/srv/app"
    dockerfile.write_text("FROM b\n")
    assert dockerfile_workdir(dockerfile) is None


# --- rewards ------------------------------------------------------------------------------------


def test_every_reward_of_reward_json_is_kept_and_reward_txt_is_the_reward_as_in_harbor():
    assert read_rewards({"reward.txt": None, "reward.json": '{"reward": 0.5, "a": 1, "b": 0}'}) == {
        "reward": 0.5, "a": 1.0, "b": 0.0,
    }
    assert read_rewards({"reward.txt": " 0.25\n", "reward.json": None}) == {"reward": 0.25}
    # Harbor reads reward.txt first: its number is the reward; reward.json's other keys stay
    assert read_rewards({"reward.txt": "1", "reward.json": '{"reward": 0, "tests": 3}'}) == {"tests": 3.0, "reward": 1.0}


def test_the_score_is_reward_key_else_harbors_pick():
    rewards = {"reward": 0.5, "count_file_present": 1.0}
    assert pick_score(rewards, None) == 0.5  # Harbor's primary reward: the 'reward' key
    assert pick_score(rewards, "count_file_present") == 1.0
    assert pick_score({"tests_passed": 0.75}, None) == 0.75  # else the only key
    with pytest.raises(ValueError, match=r"no reward 'style' \(benchmark param reward_key\); it wrote \['count_file_present', 'reward'\]"):
        pick_score(rewards, "style")
    with pytest.raises(ValueError, match=r"no 'reward' key and 2 rewards \['a', 'b'\]: set the benchmark param reward_key"):
        pick_score({"a": 1.0, "b": 0.0}, None)


@pytest.mark.parametrize(
    ("files", "fragment"),
    [
        ({"reward.txt": None, "reward.json": None}, "neither"),
        ({"reward.txt": "passed", "reward.json": None}, "one number"),
        ({"reward.txt": "nan", "reward.json": None}, "finite"),
        ({"reward.txt": None, "reward.json": "[1]"}, "object"),
        ({"reward.txt": None, "reward.json": '{"reward": 1, "note": "fine"}'}, "reward.json's 'note' is \"fine\", not a number"),
        ({"reward.txt": None, "reward.json": '{"reward": true}'}, "'reward' is true, not a number"),
        ({"reward.txt": None, "reward.json": '{}'}, "holds no reward"),
    ],
)
def test_unreadable_rewards_are_errors_that_say_why(files, fragment):
    with pytest.raises(ValueError, match=fragment):
        read_rewards(files)


# --- task.toml --------------------------------------------------------------------------------


def test_network_hints_follow_task_toml_and_default_the_verifier_to_none():
    assert network_hints({}) == {"evaluation_network": "none"}
    assert network_hints({"environment": {"allow_internet": False}}) == {
        "evaluation_network": "none", "run_network": "none", "baseline_network": "none",
    }
    assert network_hints({"environment": {"allow_internet": True}, "agent": {"network_mode": "no-network"}}) == {
        "evaluation_network": "public", "run_network": "none", "baseline_network": "public",
    }
    assert network_hints({"verifier": {"allowed_hosts": ["pypi.org"]}}) == {"evaluation_network": "none"}
    with pytest.raises(ValueError, match="network_mode"):
        network_hints({"agent": {"network_mode": "sometimes"}})


def broken_task(tmp_path: Path, toml: str = 'schema_version = "1.1"\n', instruction: bool = True) -> Path:
    folder = tmp_path / "broken"
    shutil.copytree(SHIPPED_TASKS / "hello-file", folder)
    (folder / "task.toml").write_text(toml)
    if not instruction:
        (folder / "instruction.md").unlink()
    return folder


@pytest.mark.parametrize("toml, instruction, error", [
    ('schema_version = "1.1"\n', False, "broken has no instruction.md (the prompt); add it"),
    ("not = [toml", True, "broken/task.toml is not valid TOML"),
    ("[verifier]\ntimeout_sec = -1\n", True, "broken/task.toml: [verifier].timeout_sec must be a positive number"),
    ("[verifier]\nenv = 3\n", True, "broken/task.toml: [verifier].env must be a table"),
    ("[environment]\nnetwork_mode = 'sideways'\n", True, "broken/task.toml: network_mode must be one of"),
    ("verifier = 'x'\n", True, "broken/task.toml: [verifier] must be a table"),
])
def test_a_task_folder_that_cannot_be_loaded_is_a_task_with_its_load_error(tmp_path: Path, toml, instruction, error):
    task = load_task(broken_task(tmp_path, toml, instruction))
    assert task.task_id == "broken" and task.question == ""
    assert task.load_error.startswith("task_dir: ") and error in task.load_error, task.load_error
    # planning it runs no Benchmark, Harness or Recipe code (each would fail on the folder)
    req = request(EnvironmentSpec(id="docker"))
    plan = Planner(TaskDirBenchmark(), OracleHarness(), build_run_recipe_registry(req)).plan(req, task, 2)
    assert (plan.task_id, plan.attempt, plan.applied_recipes) == ("broken", 2, [])
    assert plan.benchmark_plan == TaskDirPlan() and plan.task_environment.params == {}
    assert TaskDirBenchmark().reference_solution(task, plan.benchmark_plan) is None


def test_a_task_folder_without_its_verifier_is_rejected_with_the_fix(tmp_path: Path):
    folder = tmp_path / "broken"
    folder.mkdir()
    (folder / "task.toml").write_text('schema_version = "1.1"\n')
    (folder / "instruction.md").write_text("do it")
    assert "no tests/test.sh" in load_task(folder).load_error
    with pytest.raises(ValueError, match="holds no task folder"):
        task_folders((tmp_path / "empty").mkdir() or tmp_path / "empty")
    assert task_folders(SHIPPED_TASKS / "hello-file") == [SHIPPED_TASKS / "hello-file"]


# --- planning ------------------------------------------------------------------------------------


def test_docker_plans_build_the_tasks_dockerfile_tagged_by_its_content():
    plan = plan_for("word-count", EnvironmentSpec(id="docker"))
    params = plan.task_environment.params
    assert params["dockerfile"] == str(SHIPPED_TASKS / "word-count/environment/Dockerfile")
    assert params["context"] == str(SHIPPED_TASKS / "word-count/environment")
    assert params["image"].startswith("agentcompass-task:")
    assert plan.applied_recipes == ["task_environment_hints", "task_dockerfile"]
    # [environment] allow_internet = false: every phase without network
    assert (plan.baseline_network, plan.run_network, plan.evaluation_network) == (NetworkPolicy("none"),) * 3
    assert plan.benchmark_plan.layout == "native" and plan.benchmark_plan.environment_copies == []


def test_a_users_image_wins_over_the_tasks_dockerfile():
    plan = plan_for("hello-file", EnvironmentSpec(id="docker", params={"image": "mine:1"}))
    assert plan.task_environment.params == {"image": "mine:1"}
    assert "task_dockerfile" not in plan.applied_recipes


def test_a_tasks_docker_image_is_used_as_it_is(tmp_path: Path):
    folder = tmp_path / "prebuilt"
    shutil.copytree(SHIPPED_TASKS / "hello-file", folder)
    with (folder / "task.toml").open("a") as toml:
        toml.write('\n[environment]\ndocker_image = "local/busybox:latest"\nmemory_mb = 512\ncpus = 1\n')
    req = request(EnvironmentSpec(id="docker"), path=str(folder))
    task = TaskDirBenchmark().load_tasks(req)[0]
    plan = Planner(TaskDirBenchmark(), OracleHarness(), build_run_recipe_registry(req)).plan(req, task, 1)
    assert plan.task_environment.params == {"image": "local/busybox:latest", "memory": "512m", "cpus": 1.0}


def test_host_process_plans_map_harbor_paths_and_copy_the_environment():
    plan = plan_for("fix-sum-script", EnvironmentSpec(id="host_process"))
    assert plan.task_environment.params == {}
    assert plan.benchmark_plan.layout == "mapped" and plan.benchmark_plan.environment_copies == [["sum.sh", "sum.sh"]]
    assert plan.benchmark_plan.workdir == "/app"
    assert plan.evaluation_network == NetworkPolicy("none") and plan.run_network == NetworkPolicy("public")


# --- the oracle and a script reference ---------------------------------------------------------------


def test_the_oracle_runs_a_script_reference_and_leaves_no_copy_behind(tmp_path: Path):
    source = tmp_path / "ref"
    source.mkdir()
    (source / "go.sh").write_text("#!/bin/sh\necho \"$GREETING\" > made.txt\n")
    reference = ScriptReference(source=str(source), script="go.sh", target="refcopy", env={"GREETING": "hi"})
    context = HarnessContext(attempt=1, attempt_dir=tmp_path / "attempt", trajectory_path=tmp_path / "t", reference=reference)
    prepared = PreparedTask(task_id="t", input=TaskInput(prompt="p"))

    async def main():
        session = await HostProcessEnvironment().open(EnvironmentSpec(), NetworkPolicy(), "unit-ref")
        try:
            result = await OracleHarness().run(prepared, session, None, None, context)
            return result, (Path(session.workdir) / "made.txt").read_text(), sorted(p.name for p in Path(session.workdir).iterdir())
        finally:
            await session.close()

    result, made, left = asyncio.run(main())
    assert result.status.value == "completed" and result.answer is None and made == "hi\n"
    assert left == ["made.txt"] and result.artifacts == ["oracle.txt"]
    assert "exit status 0" in (tmp_path / "attempt" / "oracle.txt").read_text()


def test_the_oracle_still_submits_a_value_reference(tmp_path: Path):
    context = HarnessContext(attempt=2, attempt_dir=tmp_path, trajectory_path=tmp_path / "t", reference="Paris")
    result = asyncio.run(OracleHarness().run(PreparedTask(task_id="t", input=TaskInput(prompt="p")), None, None, None, context))
    assert result.answer == "Paris" and result.attempt == 2 and result.artifacts == []


# --- the Dockerfile on host_process ----------------------------------------------------------------


def environment_with(tmp_path: Path, dockerfile: str, files: dict[str, str] | None = None) -> Path:
    environment = tmp_path / "environment"
    environment.mkdir(parents=True)
    (environment / "Dockerfile").write_text(dockerfile)
    for name, text in (files or {"a.txt": "a", "src/b.py": "b", "src/sub/c.py": "c"}).items():
        (environment / name).parent.mkdir(parents=True, exist_ok=True)
        (environment / name).write_text(text)
    return environment


def test_copy_and_add_of_local_files_land_where_docker_puts_them_relative_to_the_workdir(tmp_path: Path):
    environment = environment_with(tmp_path, (
        "# a comment\nFROM python:3 AS build\nRUN make\nFROM python:3-slim\nLABEL x=1\n"
        "WORKDIR /app\nCOPY a.txt .\nCOPY --chown=1000 a.txt /app/data/renamed.txt\n"
        "COPY src /app/lib\nCOPY [\"src/b.py\", \"a.txt\", \"more/\"]\nWORKDIR sub\nADD a.txt \\\n   ./\n"
        "WORKDIR /app\nCOPY a.txt /app\nCMD [\"sh\"]\n"
    ))
    assert host_copies(environment) == [
        ["a.txt", "a.txt"], ["a.txt", "data/renamed.txt"],
        ["src/b.py", "lib/b.py"], ["src/sub/c.py", "lib/sub/c.py"],  # a folder's contents, into the destination
        ["src/b.py", "more/b.py"], ["a.txt", "more/a.txt"],  # several sources: into a folder
        ["a.txt", "sub/a.txt"],  # relative to the WORKDIR of its line
        ["a.txt", "a.txt"],  # /app is a folder (a WORKDIR): the file goes into it
    ]
    # the whole context, the Dockerfile too, as docker copies it
    environment = environment_with(tmp_path / "all", "FROM x\nWORKDIR /srv/app\nCOPY . .\n", {"a.txt": "a"})
    assert host_copies(environment) == [["Dockerfile", "Dockerfile"], ["a.txt", "a.txt"]]


@pytest.mark.parametrize(("line", "fragment"), [
    ("RUN pip install pytest", "runs a command at build time"),
    ("ENV PATH=/opt/bin:$PATH", "sets up the image beyond its files"),
    ("ADD https://example.org/x.txt .", "fetches a URL"),
    ("ADD a.tar.gz .", "unpacks an archive"),
    ("COPY --from=build /out/app .", "takes --from=build"),
    ("COPY a.txt /etc/a.txt", "puts /etc/a.txt outside the WORKDIR /app"),
    ("COPY ../secret .", "from outside the build context"),
    ("COPY missing.txt .", "copies missing.txt, which is not in environment/"),
    ("COPY $SRC .", "uses a variable"),
])
def test_a_dockerfile_host_process_cannot_follow_is_refused_with_the_line_and_the_fix(tmp_path: Path, line, fragment):
    environment = environment_with(tmp_path, f"FROM x\nWORKDIR /app\n{line}\n", {"a.txt": "a", "a.tar.gz": "z"})
    with pytest.raises(ValueError, match="host_process cannot follow; run the task on docker") as error:
        host_copies(environment)
    assert fragment in str(error.value) and f"`{line}`" in str(error.value) and str(environment) in str(error.value)


def test_copies_without_a_workdir_and_a_last_stage_built_on_an_earlier_one_are_refused(tmp_path: Path):
    with pytest.raises(ValueError, match="sets no WORKDIR"):
        host_copies(environment_with(tmp_path, "FROM x\nCOPY a.txt /a.txt\n"))
    with pytest.raises(ValueError, match="builds on the earlier stage 'base'"):
        host_copies(environment_with(tmp_path / "2", "FROM x AS base\nRUN make\nFROM base\nWORKDIR /app\n"))
    assert host_copies(environment_with(tmp_path / "3", "FROM x\n")) == []  # nothing to copy, nothing refused


def test_compose_and_multi_step_tasks_are_load_errors_that_say_so(tmp_path: Path):
    compose = broken_task(tmp_path)
    (compose / "environment" / "docker-compose.yaml").write_text("services: {main: {build: .}}\n")
    (compose / "instruction.md").unlink()  # the reason is the compose file, not what else is missing
    assert "environment/docker-compose.yaml (services side by side)" in load_task(compose).load_error
    steps = tmp_path / "steps-task"
    shutil.copytree(SHIPPED_TASKS / "hello-file", steps)
    (steps / "task.toml").write_text('[[steps]]\nname = "one"\n[[steps]]\nname = "two"\n')
    assert "is a multi-step task ([[steps]] in task.toml or a steps/ folder)" in load_task(steps).load_error


def test_host_process_refuses_only_the_task_whose_dockerfile_it_cannot_follow(tmp_path: Path):
    tasks = tmp_path / "tasks"
    shutil.copytree(SHIPPED_TASKS, tasks)
    dockerfile = tasks / "word-count" / "environment" / "Dockerfile"
    dockerfile.write_text(dockerfile.read_text() + "RUN apk add jq\n")
    host = {t.task_id: t for t in TaskDirBenchmark().load_tasks(request(EnvironmentSpec(id="host_process"), path=str(tasks)))}
    assert host["word-count"].load_error == (
        f"task_dir: {dockerfile}: `RUN apk add jq` runs a command at build time (what it installs or changes, the task "
        "may need), which host_process cannot follow; run the task on docker"
    )
    assert host["hello-file"].load_error is None and host["fix-sum-script"].load_error is None
    docker = TaskDirBenchmark().load_tasks(request(EnvironmentSpec(id="docker"), path=str(tasks)))
    assert all(t.load_error is None for t in docker)
    # the task list differs by provider, so its fingerprint does too
    fingerprints = {TaskDirBenchmark().source_fingerprint(request(EnvironmentSpec(id=e), path=str(tasks)))
                    for e in ("docker", "host_process")}
    assert len(fingerprints) == 2


def test_a_wildcard_copies_every_match_into_the_destination(tmp_path: Path):
    environment = environment_with(tmp_path, "FROM x\nWORKDIR /app\nCOPY src/*.py  lib\n",
                                   {"src/b.py": "b", "src/d.py": "d", "src/e.txt": "e"})
    assert host_copies(environment) == [["src/b.py", "lib/b.py"], ["src/d.py", "lib/d.py"]]


@pytest.mark.parametrize("value", ["", ["reward"]])
def test_a_reward_key_that_is_no_key_is_refused_before_work_starts(value):
    with pytest.raises(ParameterError, match=r"task_dir' params: reward_key must be a key of the verifier's reward.json, got"):
        TaskDirBenchmark().build_config(request(reward_key=value))


def test_a_limit_the_engine_refuses_names_where_it_came_from_and_the_fix_that_applies(tmp_path: Path):
    """A task folder's memory_mb, refused by an engine that cannot enforce it (rootless Podman on cgroup
    v1), names the task and `memory: null`, never "remove memory from the environment's params", which the
    user never set; a limit the user set names the params; `memory: null` there runs the task without it."""
    from agentcompass.environments.docker import DockerConfig
    from agentcompass.environments.docker.engine import _refuse_unenforced_limits
    from agentcompass.pipeline.sessions import limits_from_task
    from agentcompass.runtime.limits import LimitsUnavailableError

    folder = tmp_path / "prebuilt"
    shutil.copytree(SHIPPED_TASKS / "hello-file", folder)
    with (folder / "task.toml").open("a") as toml:
        toml.write('\n[environment]\ndocker_image = "local/busybox:latest"\nmemory_mb = 512\n')
    rootless_v1 = {"security": {"rootless": True}, "cgroupVersion": "v1", "cgroupManager": "cgroupfs",
                   "cgroupControllers": []}

    def refusal(params: dict) -> tuple[str, dict]:
        req = request(EnvironmentSpec(id="docker", params=params), path=str(folder))
        task = TaskDirBenchmark().load_tasks(req)[0]
        plan = Planner(TaskDirBenchmark(), OracleHarness(), build_run_recipe_registry(req)).plan(req, task, 1)
        config = DockerConfig(**{k: v for k, v in plan.task_environment.params.items() if v is not None})
        try:
            _refuse_unenforced_limits(config, rootless_v1)
        except LimitsUnavailableError as exc:
            assert "no cgroup controller for" in str(exc) and "`memory: null`" in str(exc)  # before its origin is known
            return str(exc.with_origin(limits_from_task(req, plan, exc.limits), "docker")), plan.task_environment.params
        return "", plan.task_environment.params

    from_task, _ = refusal({})
    assert "; memory set by the task (512m, put in the plan from the task's own settings by the Recipes " \
        "task_environment_hints, task_dockerfile). Fix:" in from_task, from_task
    assert "Fix: set `memory: null` in the request's environment params (`environment: {id: docker, params: " \
        "{memory: null}}`, or `environments: {docker: {memory: null}}`) to run the task without it" in from_task
    assert "remove memory" not in from_task and "run Podman as root" in from_task

    mine, _ = refusal({"memory": "1g", "pids_limit": 64})
    assert "memory and pids_limit set in the environment's params. Fix: remove memory and pids_limit from the " \
        "environment's params; or run Podman as root" in mine, mine
    assert "null" not in mine

    assert refusal({"memory": None}) == ("", {"image": "local/busybox:latest", "memory": None})  # the fix works


def test_host_process_names_only_the_limits_it_was_given():
    from agentcompass.environments.cgroups import Limits, SessionCgroup
    from agentcompass.runtime.limits import LimitsUnavailableError

    # a session cgroup under a folder that does not exist: it cannot be made, whatever this machine allows
    with pytest.raises(LimitsUnavailableError) as refused:
        SessionCgroup.create(Limits(memory=1 << 30), "agentcompass-no-such-parent/session")
    message = str(refused.value)
    assert "host_process cannot make a cgroup for the limits ['memory'] here" in message, message
    assert "Fix: run as root, or in a delegated cgroup, or use the docker environment; or run without memory" in message
    assert "cpus" not in message and "pids_limit" not in message
