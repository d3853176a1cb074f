"""Task data as an adversary: a task folder set (git keeps links) whose links reach out of it.

A hostile task folder is that task's own load error, naming the file; the honest
tasks beside it run and score, and nothing the links name reaches the prompt, the
workspace, the verifier, the image or any file under ``results/``. Both providers:
host_process in its sandbox, and docker (skipped, saying why, when no engine answers).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
from pathlib import Path

import pytest
import yaml
from conftest import agentcompass, files_holding

from agentcompass.benchmarks import task_dir
from agentcompass.benchmarks.task_dir import SHIPPED_TASKS, check_links, load_task, tree_digest
from test_task_dir import environment_of
from environments.envkit import TEST_IMAGE

HONEST = "hello-file"  # its solve.sh writes the file its test.sh checks: the oracle scores 1


def hostile_task_set(tmp_path: Path, canary: Path) -> Path:
    """One honest task and one task per kind of hostile entry, each a copy of the honest one."""
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    honest = SHIPPED_TASKS / HONEST

    def task(name: str) -> Path:
        folder = tasks / name
        shutil.copytree(honest, folder)
        return folder

    task("honest")
    folder = task("instruction-to-host")  # the prompt would carry a host file
    (folder / "instruction.md").unlink()
    (folder / "instruction.md").symlink_to(canary)
    folder = task("environment-to-etc")  # the workspace, or the image's build context, would carry /etc
    (folder / "environment" / "x").symlink_to("/etc")
    folder = task("tests-out")  # the verifier would run a file from outside the folder
    (folder / "tests" / "test.sh").unlink()
    (folder / "tests" / "test.sh").symlink_to(os.path.relpath(canary, folder / "tests"))
    folder = task("fifo-in-solution")  # reading it at load (or tarring it) blocks or copies a node
    os.mkfifo(folder / "solution" / "pipe")
    return tasks


HOSTILE = {
    "instruction-to-host": "instruction.md is a symbolic link",
    "environment-to-etc": "environment/x: is a symbolic link to the absolute path /etc",
    "tests-out": "tests/test.sh: is a symbolic link to ",
    "fifo-in-solution": "solution/pipe: is a FIFO",
}


@pytest.mark.parametrize("provider", ["host_process", "docker"])
def test_hostile_task_folders_fail_at_load_naming_the_file_and_the_honest_one_scores(
        provider, tmp_path: Path, workdir: Path):
    secret = f"canary-{secrets.token_hex(8)}"
    canary = tmp_path / "host-only.txt"
    canary.write_text(f"{secret}\n")
    tasks = hostile_task_set(tmp_path, canary)
    config = workdir / "tasks.yaml"
    config.write_text(yaml.safe_dump({"requests": {"tasks": {
        "benchmark": {"id": "task_dir", "params": {"path": str(tasks)}},
        "harness": "oracle", "model": {"id": "none"}, "environment": environment_of(provider),
    }}}))
    done = agentcompass(workdir, "run", "--config", str(config))
    assert "Traceback" not in done.stderr and "metrics.json" in done.stdout, done.stderr[-3000:]
    attempts = workdir / "results/default/tasks/attempts"
    results = {p.parent.parent.name: json.loads(p.read_text()) for p in attempts.glob("*/1/result.json")}
    assert sorted(results) == sorted(["honest", *HOSTILE])
    assert results["honest"]["status"] == "completed" and results["honest"]["score"] == 1.0, results["honest"]
    for name, why in HOSTILE.items():
        result = results[name]
        assert (result["status"], result["error_stage"]) == ("run_error", "load"), (name, result)
        assert result["error"].startswith(f"task_dir: {tasks / name}/"), (name, result["error"])
        assert why in result["error"], (name, result["error"])
        assert not (attempts / name / "1" / "workspace").exists()  # no sandbox was opened for it
    # the host file the links name is nowhere: not in a prompt, a workspace, a verdict, a log, the report
    hits, read = files_holding(secret, workdir / "results", workdir / ".snakemake")
    assert read > 20 and hits == []


def test_links_that_stay_inside_their_part_are_kept_the_others_refused(tmp_path: Path):
    def fresh(name: str) -> Path:
        folder = tmp_path / name
        shutil.copytree(SHIPPED_TASKS / HONEST, folder)
        return folder

    inside = fresh("inside")
    (inside / "tests" / "alias.sh").symlink_to("test.sh")  # a link within tests/: kept, as a link
    (inside / "solution" / "dangling").symlink_to("not-there")
    (inside / "notes").mkdir()
    (inside / "notes" / "prompt").symlink_to("../instruction.md")
    (inside / "tests" / os.fsdecode(b"name-\xff\x1b[31m\nx")).write_text("any name\n")
    assert load_task(inside).load_error is None
    assert tree_digest(inside) != tree_digest(SHIPPED_TASKS / HONEST)

    cases = {
        # the verifier's script, put in the workspace: inside the task folder, but out of environment/
        "peek": (("environment", "peek"), "../tests/test.sh", "leads outside environment/"),
        # a chain: an inside link to an inside link to the host
        "chain": (("tests", "a"), "b", "leads outside tests/"),
        # a folder link in the build context (the docker client walks it: a loop never ends)
        "loop": (("environment", "loop"), ".", "a symbolic link to a folder"),
        "device": (("tests", "null"), "/dev/null", "the absolute path /dev/null"),
        "prompt-inside": (("instruction.md",), "tests/test.sh", "instruction.md is a symbolic link"),
        "part-link": (("solution",), "tests", "solution is a symbolic link"),
    }
    for name, (parts, target, why) in cases.items():
        folder = fresh(name)
        path = folder.joinpath(*parts)
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()
        path.symlink_to(target)
        if name == "chain":
            (folder / "tests" / "b").symlink_to("../../../etc")
        error = load_task(folder).load_error
        assert error is not None and why in error and str(folder.joinpath(*parts)) in error, (name, error)

    deep = fresh("deep")
    path = deep / "environment"
    for _ in range(task_dir.MOST_DEPTH + 1):
        path = path / "d"
    path.mkdir(parents=True)
    error = load_task(deep).load_error
    assert error is not None and f"nest deeper than {task_dir.MOST_DEPTH} levels" in error
    # what check_links raises is what load_task reports
    with pytest.raises(ValueError, match="nest deeper"):
        check_links(deep)


def test_a_docker_build_context_with_a_link_out_is_refused_before_the_engine_builds(needs_docker, tmp_path: Path):
    import docker

    from agentcompass.environments.docker import DockerConfig
    from agentcompass.environments.docker.images import _build
    from agentcompass.runtime.base import ImageBuildError

    context = tmp_path / "context"
    context.mkdir()
    (context / "Dockerfile").write_text(f"FROM {TEST_IMAGE}\nCOPY . /ctx/\n")
    (context / "etc").symlink_to("/etc")
    config = DockerConfig(dockerfile=str(context / "Dockerfile"), context=str(context),
                                     image=f"agentcompass-test-context:{secrets.token_hex(4)}")
    client = docker.from_env()
    try:
        with pytest.raises(ImageBuildError, match="etc: is a symbolic link to the absolute path /etc"):
            _build(client, config, config.dockerfile)
        with pytest.raises(docker.errors.ImageNotFound):
            client.images.get(config.image)
        # without the link the same context builds: the refusal was the link's
        (context / "etc").unlink()
        _build(client, config, config.dockerfile)
        client.images.get(config.image)
    finally:
        try:
            client.images.remove(config.image, force=True)
        except docker.errors.ImageNotFound:
            pass
        client.close()
