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
    load_task,
    network_hints,
    read_rewards,
    rewrite_paths,
    task_folders,
)
from agentcompass.environments.host_process import HostProcessEnvironment
from agentcompass.harnesses.oracle import OracleHarness
from agentcompass.runtime import Planner, build_run_recipe_registry
from agentcompass.runtime.base import HarnessContext, ScriptReference
from agentcompass.runtime.registry import load_builtin_components
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


def test_reward_json_wins_over_reward_txt_and_keeps_every_number():
    assert read_rewards({"reward.txt": "0\n", "reward.json": '{"reward": 0.5, "a": 1, "note": "x"}'}) == {
        "reward": 0.5, "a": 1.0,
    }
    assert read_rewards({"reward.txt": " 0.25\n", "reward.json": None}) == {"reward": 0.25}
    # reward.json without 'reward' takes reward.txt's number, as Harbor does
    assert read_rewards({"reward.txt": "1", "reward.json": '{"tests": 3}'}) == {"tests": 3.0, "reward": 1.0}


@pytest.mark.parametrize(
    ("files", "fragment"),
    [
        ({"reward.txt": None, "reward.json": None}, "neither"),
        ({"reward.txt": "passed", "reward.json": None}, "one number"),
        ({"reward.txt": "nan", "reward.json": None}, "finite"),
        ({"reward.txt": None, "reward.json": "[1]"}, "object"),
        ({"reward.txt": None, "reward.json": '{"a": 1, "b": 2}'}, "no 'reward' key"),
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
    assert plan.benchmark_plan.layout == "native" and not plan.benchmark_plan.copy_environment


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
    assert plan.benchmark_plan.layout == "mapped" and plan.benchmark_plan.copy_environment
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
