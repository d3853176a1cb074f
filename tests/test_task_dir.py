"""``task_dir`` through the real workflow: Harbor task folders on host_process and docker.

The shipped examples (examples/task_dir) must pass with the oracle on both
providers, and a harness that is not the oracle must never see ``tests/`` or
``solution/``: neither in prepared.json, nor in the saved workspace, nor in
its run-phase session.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from agentcompass.benchmarks.task_dir import SHIPPED_TASKS
from agentcompass.environments.netns import network_isolation
from conftest import agentcompass, clean_env, jobs_run, snakemake
from environments.envkit import require_docker

PROBE_DRIVER = Path(__file__).parent / "drivers" / "workspace_probe_workflow.py"
SHIPPED = sorted(p.name for p in SHIPPED_TASKS.iterdir() if (p / "task.toml").is_file())


def environment_of(provider: str) -> dict:
    if provider == "docker":
        require_docker()  # skips, saying why, when no engine answers
        return {"id": "docker"}
    # every task's verifier runs under network 'none'
    available, reason = network_isolation()
    if not available:
        pytest.skip(f"host_process cannot isolate the verifier's 'none' phase here: {reason}")
    return {"id": "host_process"}


def write_config(workdir: Path, harness: str, environment: dict, params: dict | None = None, name: str = "tasks") -> Path:
    config = {"requests": {name: {
        "benchmark": {"id": "task_dir", "params": params or {}},
        "harness": harness,
        "model": {"id": "none"},
        "environment": environment,
    }}}
    path = workdir / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def results_of(workdir: Path, name: str = "tasks") -> dict[str, dict]:
    base = workdir / "results" / "default" / name / "attempts"
    return {p.parent.parent.name: json.loads(p.read_text()) for p in base.glob("*/1/result.json")}


def copy_tasks(tmp_path: Path) -> Path:
    target = tmp_path / "tasks"
    shutil.copytree(SHIPPED_TASKS, target)
    return target


# host_process: the smoke set's sandbox (every verifier runs under network 'none')
@pytest.mark.parametrize("provider", [pytest.param("host_process", marks=pytest.mark.smoke), "docker"])
def test_oracle_passes_every_shipped_task(provider, workdir: Path):
    config = write_config(workdir, "oracle", environment_of(provider))
    done = snakemake(workdir, "--configfile", str(config))
    assert done.returncode == 0, done.stderr[-3000:]
    results = results_of(workdir)
    assert sorted(results) == SHIPPED and len(SHIPPED) >= 3
    for task_id, result in results.items():
        assert result["status"] == "completed", (task_id, result["error"])
        assert result["score"] == 1.0 and result["correct"] is True, (task_id, result["metadata"])
    metrics = json.loads((workdir / "results/default/tasks/metrics.json").read_text())
    assert metrics["metrics"]["accuracy"] == 1.0 and metrics["counts"] == {"completed": len(SHIPPED)}
    # the verifier's reward file decided: word-count writes reward.json with a second number
    assert results["word-count"]["metadata"]["verifier"]["rewards"] == {"reward": 1.0, "count_file_present": 1.0}
    # every named reward's mean: 'reward' over the three tasks, count_file_present over word-count's attempt
    assert metrics["metrics"]["rewards/reward"] == 1.0 and metrics["metrics"]["rewards/count_file_present"] == 1.0


@pytest.mark.parametrize("provider", ["host_process", "docker"])
def test_other_harnesses_never_see_tests_or_solution_and_score_0(provider, workdir: Path):
    config = write_config(workdir, "test_workspace_probe", environment_of(provider))
    done = subprocess.run([sys.executable, str(PROBE_DRIVER), str(workdir), str(config)], cwd=workdir,
                          env=clean_env(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    results = results_of(workdir)
    assert sorted(results) == SHIPPED
    secrets = hidden_material()
    # host_process shares the host's files: a /tests or /logs of the host's own (none of ours: our
    # verifier's paths are rewritten into the workspace's .harbor) is no sign of a leak
    hosts_own = [p for p in ("/tests", "/solution", "/logs/verifier") if provider == "host_process" and os.path.exists(p)]
    for task_id, result in results.items():
        attempt = workdir / "results/default/tasks/attempts" / task_id / "1"
        # the run phase: its own listing of the workspace, and Harbor's folders absent
        listing = result["answer"]
        assert result["metadata"]["listing_ok"] and result["metadata"]["present"] == hosts_own, (task_id, result["metadata"])
        assert not any(name in listing for name in ("test.sh", "solve.sh", ".harbor")), listing
        # prepared.json and the saved workspace snapshot hold none of the tests' or the solution's text
        prepared = (attempt / "prepared.json").read_text()
        snapshot = "".join(p.read_text(errors="replace") for p in (attempt / "workspace").rglob("*") if p.is_file())
        for text in secrets[task_id]:
            assert text not in prepared and text not in snapshot, (task_id, text)
        assert json.loads(prepared)["input"]["prompt"] == (SHIPPED_TASKS / task_id / "instruction.md").read_text()
        # changing nothing solves nothing
        assert result["status"] == "completed" and result["score"] == 0.0 and result["correct"] is False
    # the environment's own files did reach the workspace
    assert "sum.sh" in results["fix-sum-script"]["answer"] and "input.txt" in results["word-count"]["answer"]


def hidden_material() -> dict[str, list[str]]:
    """Per task, the non-trivial lines of its tests/ and solution/ files."""
    hidden = {}
    for task_id in SHIPPED:
        lines = []
        for folder in ("tests", "solution"):
            for file in (SHIPPED_TASKS / task_id / folder).rglob("*"):
                lines += [line.strip() for line in file.read_text().splitlines() if len(line.strip()) > 12]
        hidden[task_id] = lines
    return hidden


def test_an_edited_verifier_reruns_only_evaluation(tmp_path: Path, workdir: Path):
    environment_of("host_process")
    tasks = copy_tasks(tmp_path)
    # two tasks: the one whose verifier is edited, and one left as it was
    config = write_config(workdir, "oracle", {"id": "host_process"},
                          {"path": str(tasks), "task_ids": ["hello-file", "fix-sum-script"]})
    first = snakemake(workdir, "--configfile", str(config))
    assert first.returncode == 0, first.stderr[-3000:]
    assert all(r["correct"] for r in results_of(workdir).values())
    # a verifier that now wants another greeting: the oracle's file no longer passes
    test = tasks / "hello-file" / "tests" / "test.sh"
    test.write_text(test.read_text().replace("Hello, agentcompass!", "Hello, somebody else!"))
    second = snakemake(workdir, "--configfile", str(config))
    assert second.returncode == 0, second.stderr[-3000:]
    ran = jobs_run(second.stdout + second.stderr)
    assert ran.get("evaluate") == 1 and "prepare" not in ran and "run" not in ran, ran
    results = results_of(workdir)
    assert results["hello-file"]["score"] == 0.0 and results["fix-sum-script"]["score"] == 1.0


def test_a_failing_solution_is_a_run_error_and_a_missing_reward_an_eval_error(tmp_path: Path, workdir: Path):
    environment_of("host_process")
    tasks = copy_tasks(tmp_path)
    (tasks / "hello-file" / "solution" / "solve.sh").write_text("#!/bin/sh\necho 'no luck' >&2\nexit 3\n")
    (tasks / "word-count" / "tests" / "test.sh").write_text("#!/bin/sh\necho 'forgot the reward'\n")
    config = write_config(workdir, "oracle", {"id": "host_process"}, {"path": str(tasks)})
    done = snakemake(workdir, "--configfile", str(config))
    assert done.returncode == 0, done.stderr[-3000:]
    results = results_of(workdir)
    hello, words = results["hello-file"], results["word-count"]
    assert hello["status"] == "run_error" and "solve.sh exited with status 3: no luck" in hello["error"]
    assert words["status"] == "eval_error" and "neither /logs/verifier/reward.txt nor reward.json" in words["error"]
    assert words["metadata"]["verifier"]["stdout"] == "forgot the reward\n"
    # the reference script failing is the harness's run; a verifier that decided nothing, the verifier's
    assert (hello["failure_class"], words["failure_class"]) == ("harness", "verifier")
    assert results["fix-sum-script"]["correct"] is True
    log = workdir / "results/default/tasks/attempts/hello-file/1/oracle.txt"
    assert "exit status 3" in log.read_text()


def test_an_unset_variable_of_verifier_env_stops_the_run_before_any_attempt(tmp_path: Path, workdir: Path):
    """A ``${VAR}`` of task.toml's [verifier.env] is resolved only by the job that runs the verifier;
    an unset one is refused at planning (naming the file, the table and the variable), not at scoring."""
    environment_of("host_process")
    tasks = copy_tasks(tmp_path)
    toml = tasks / "hello-file" / "task.toml"
    toml.write_text(toml.read_text() + '\n[verifier.env]\nGREETING_TOKEN = "${AC_TEST_UNSET_GREETING}"\n')
    config = write_config(workdir, "oracle", {"id": "host_process"},
                          {"path": str(tasks), "task_ids": ["hello-file"], "task_env": ["AC_TEST_UNSET_GREETING"]})
    env = clean_env()
    env.pop("AC_TEST_UNSET_GREETING", None)
    done = snakemake(workdir, "--configfile", str(config), env=env)
    assert done.returncode != 0
    assert f"{toml} [verifier.env] refers to ${{AC_TEST_UNSET_GREETING}}" in done.stderr, done.stderr[-3000:]
    assert "export AC_TEST_UNSET_GREETING=..." in done.stderr
    assert not (workdir / "results/default/tasks/attempts").exists()  # no sandbox opened, nothing run
    done = snakemake(workdir, "--configfile", str(config), env=clean_env(AC_TEST_UNSET_GREETING="hello"))
    assert done.returncode == 0, done.stderr[-3000:]
    assert results_of(workdir)["hello-file"]["correct"] is True


def test_a_task_folder_names_only_the_variables_the_request_lets_it_read(tmp_path: Path, workdir: Path):
    """Task folders are data from elsewhere: one whose [verifier.env] or [solution.env] names a variable of the
    job that ``task_env`` does not list (the model's key, say) stops the run at planning, naming both."""
    environment_of("host_process")
    tasks = copy_tasks(tmp_path)
    toml = tasks / "word-count" / "task.toml"
    toml.write_text(toml.read_text() + '\n[solution.env]\nSTOLEN = "${AC_TEST_MODEL_KEY}"\n')
    config = write_config(workdir, "oracle", {"id": "host_process"}, {"path": str(tasks)})
    done = snakemake(workdir, "--configfile", str(config), env=clean_env(AC_TEST_MODEL_KEY="sk-test-not-for-tasks"))
    assert done.returncode != 0
    assert f"{toml} [solution.env] refers to ${{AC_TEST_MODEL_KEY}}, which this request does not let" in done.stderr
    assert "task_env: [AC_TEST_MODEL_KEY]" in done.stderr, done.stderr[-3000:]
    assert not (workdir / "results/default/tasks/attempts").exists()  # no sandbox opened, nothing run


def test_a_reward_written_before_the_verifier_timed_out_is_no_verdict(tmp_path: Path, workdir: Path):
    environment_of("host_process")
    tasks = copy_tasks(tmp_path)
    (tasks / "hello-file" / "tests" / "test.sh").write_text(
        "#!/bin/sh\nmkdir -p /logs/verifier\necho 1 > /logs/verifier/reward.txt\necho written\nsleep 120\n")
    # writing the reward takes the verifier a few hundredths of a second
    config = write_config(workdir, "oracle", {"id": "host_process"},
                          {"path": str(tasks), "task_ids": ["hello-file"], "verifier_timeout": 2})
    done = snakemake(workdir, "--configfile", str(config))
    assert done.returncode == 0, done.stderr[-3000:]
    hello = results_of(workdir)["hello-file"]
    assert hello["status"] == "eval_error" and hello["score"] is None, hello
    assert "timed out after 2.0 s): it did not finish, so no reward it wrote counts" in hello["error"], hello["error"]
    assert hello["metadata"]["verifier"]["timed_out"] is True
    assert hello["metadata"]["verifier"]["stdout"] == "written\n"  # the reward was there before the timeout


def test_a_task_folder_that_cannot_be_loaded_fails_alone_without_a_sandbox_or_a_model_call(tmp_path: Path, workdir: Path):
    from agentcompass.testing.endpoint import ScriptedEndpoint, completion

    environment_of("host_process")
    tasks = tmp_path / "tasks"  # one task that loads beside the two that do not
    loaded = ["hello-file"]
    for name in (*loaded, "bad-toml", "no-prompt"):
        shutil.copytree(SHIPPED_TASKS / "hello-file", tasks / name)
    (tasks / "bad-toml" / "task.toml").write_text("[verifier\ntimeout_sec = 10\n")
    (tasks / "no-prompt" / "instruction.md").unlink()
    with ScriptedEndpoint(lambda body: completion("done")) as endpoint:
        config = workdir / "tasks.yaml"
        config.write_text(yaml.safe_dump({"requests": {"tasks": {
            "benchmark": {"id": "task_dir", "params": {"path": str(tasks)}},
            "harness": "chat", "model": {"id": "scripted", "base_url": endpoint.base_url},
        }}}))
        done = agentcompass(workdir, "run", "--config", str(config))
    # the run went to its end (its exit status is the CLI's account of the failed attempts)
    assert "Traceback" not in done.stderr and "metrics.json" in done.stdout, done.stderr[-3000:]
    results = results_of(workdir)
    assert sorted(results) == sorted([*loaded, "bad-toml", "no-prompt"])
    assert all(results[task]["status"] == "completed" for task in loaded)
    bad_toml, no_prompt = results["bad-toml"], results["no-prompt"]
    assert bad_toml["status"] == no_prompt["status"] == "run_error"
    assert bad_toml["error_stage"] == no_prompt["error_stage"] == "load"
    assert bad_toml["error"].startswith(f"task_dir: {tasks / 'bad-toml' / 'task.toml'} is not valid TOML")
    assert no_prompt["error"] == f"task_dir: {tasks / 'no-prompt'} has no instruction.md (the prompt); add it"
    # the model answered the loaded tasks only, and no sandbox was opened for the others
    assert len(endpoint.requests) == len(loaded)
    attempts = workdir / "results/default/tasks/attempts"
    assert (attempts / "hello-file/1/workspace").is_dir()
    assert not (attempts / "bad-toml/1/workspace").exists() and not (attempts / "no-prompt/1/workspace").exists()
    metrics = json.loads((workdir / "results/default/tasks/metrics.json").read_text())
    assert metrics["counts"] == {"completed": len(loaded), "run_error": 2}
    status = agentcompass(workdir, "status", "--config", str(config))
    assert status.returncode == 0, status.stderr
    assert f"attempts: completed {len(loaded)}, run_error 2" in status.stdout
    assert f"run_error at load [task]: no-prompt attempt 1: {no_prompt['error']}" in status.stdout
    assert "run_error at load [task]: bad-toml attempt 1: task_dir: " in status.stdout


def test_config_docs_document_every_parameter(workdir: Path):
    done = agentcompass(workdir, "config", "docs", "benchmark", "task_dir")
    assert done.returncode == 0, done.stderr
    for name in ("path", "verifier_timeout", "pass_threshold", "reward_key", "task_ids", "categories", "limit"):
        assert name in done.stdout, name
    assert "examples/task_dir" in done.stdout and "timeout_sec" in done.stdout


def test_a_missing_tasks_folder_is_a_clear_error_before_any_job(tmp_path: Path, workdir: Path):
    config = write_config(workdir, "oracle", {"id": "host_process"}, {"path": str(tmp_path / "nowhere")})
    done = snakemake(workdir, "--configfile", str(config))
    assert done.returncode != 0
    assert "nowhere" in done.stderr and "does not exist (it should be a folder of Harbor tasks)" in done.stderr
    assert "benchmark.params.path" in done.stderr
    assert not (workdir / "results").exists()
    (tmp_path / "no-tasks" / "just-a-folder").mkdir(parents=True)
    config = write_config(workdir, "oracle", {"id": "host_process"}, {"path": str(tmp_path / "no-tasks")})
    done = snakemake(workdir, "--configfile", str(config))
    assert done.returncode != 0 and "holds no task folder (a folder with task.toml)" in done.stderr
    assert not (workdir / "results").exists()


def test_task_selection_and_categories_use_the_standard_params(workdir: Path):
    environment_of("host_process")
    config = write_config(workdir, "oracle", {"id": "host_process"}, {"categories": ["files", "text"], "limit": 1})
    done = snakemake(workdir, "--configfile", str(config))
    assert done.returncode == 0, done.stderr[-3000:]
    assert list(results_of(workdir)) == ["hello-file"]


@pytest.mark.parametrize("provider", ["host_process", "docker"])
def test_a_scripted_tool_agent_solves_a_shipped_task(provider, workdir: Path):
    """The model (scripted, on 127.0.0.1) reads the instruction, writes the file through bash, submits."""
    from agentcompass.testing.endpoint import ScriptedEndpoint, tool_call_reply

    def model(body):
        step = sum(1 for m in body["messages"] if m["role"] == "assistant")
        if step == 0:
            assert "hello.txt" in body["messages"][-1]["content"]  # the instruction is the prompt
            return tool_call_reply("bash", {"command": "printf 'Hello, agentcompass!\\n' > hello.txt && ls"}, call_id="c1")
        return tool_call_reply("submit", {"answer": "done"}, call_id="c2")

    with ScriptedEndpoint(model) as endpoint:
        config = {"requests": {"agent": {
            "benchmark": {"id": "task_dir", "params": {"task_ids": ["hello-file"]}},
            "harness": "tool_agent",
            "model": {"id": "scripted", "base_url": endpoint.base_url},
            "environment": environment_of(provider),
        }}}
        path = workdir / "agent.yaml"
        path.write_text(yaml.safe_dump(config))
        done = snakemake(workdir, "--configfile", str(path))
    assert done.returncode == 0, done.stderr[-3000:]
    result = results_of(workdir, "agent")["hello-file"]
    assert result["status"] == "completed", result["error"]
    assert result["score"] == 1.0 and result["correct"] is True, result["metadata"]
    assert len(endpoint.requests) == 2
    tool_output = endpoint.requests[1].body["messages"][-1]["content"]
    assert "hello.txt" in tool_output and "solve.sh" not in tool_output and "test.sh" not in tool_output


SHELL_DRIVER = Path(__file__).parent / "drivers" / "shell_agent_workflow.py"
# Where Harbor's folders are for the agent: /tests and /logs in a container, .harbor/ of the workspace on host_process
_HARBOR = 'if [ "$(pwd)" = /app ]; then H=; else H="$(pwd)/.harbor"; fi; mkdir -p "$H/logs/verifier"; '
# Each agent tries to win hello-file without writing hello.txt (its verifier writes reward.txt: 1 or 0)
ADVERSARIES = {
    # a reward written before the verifier runs
    "early-reward": 'echo 1 > "$H/logs/verifier/reward.txt"; echo \'{"reward": 1}\' > "$H/logs/verifier/reward.json"',
    # its own verifier in place of the task's
    "own-tests": 'mkdir -p "$H/tests" && printf \'#!/bin/sh\\necho 1 > %s/logs/verifier/reward.txt\\n\' "$H" '
                 '> "$H/tests/test.sh" && chmod +x "$H/tests/test.sh"',
    # reward.txt a link to a file of its own, and the whole folder a link to a folder of its own
    "linked-reward": 'echo 1 > one.txt; ln -s "$(pwd)/one.txt" "$H/logs/verifier/reward.txt"; '
                     'mkdir -p decoy/logs/verifier && echo 1 > decoy/logs/verifier/reward.txt; '
                     '[ -n "$H" ] && rm -rf "$H" && ln -s "$(pwd)/decoy" "$H"',
    # the verifier's folder locked with a reward inside
    "locked-folder": 'echo 1 > "$H/logs/verifier/reward.txt"; chmod 000 "$H/logs/verifier"; chmod 555 "$H/logs" "$H"',
    # .harbor a file where the folder should be
    "harbor-file": 'rm -rf .harbor; echo 1 > .harbor',
}


@pytest.mark.parametrize("provider", ["host_process", "docker"])
def test_what_the_agent_leaves_behind_never_decides_the_verdict(provider, tmp_path: Path, workdir: Path):
    # the honest agent also leaves a link that climbs above its workspace's parent (WORKDIR /srv/job):
    # the evaluation session gets it as a link, on docker as on host_process (Docker's own extraction
    # refused it: eval_error)
    honest = "printf 'Hello, agentcompass!\\n' > hello.txt; ln -s ../../etc/hostname up"
    results = run_shell_agents(provider, tmp_path, workdir, {**ADVERSARIES, "honest": honest},
                               workdirs={"honest": "/srv/job"})
    assert sorted(results) == sorted([*ADVERSARIES, "honest"])
    for name, result in results.items():
        assert result["answer"] == "armed\n", (name, result["metadata"])
    # the same verifier rewards the agent that did the task
    assert results["honest"]["status"] == "completed" and results["honest"]["score"] == 1.0
    for name in ADVERSARIES:
        result = results[name]
        assert result["status"] == "completed" and result["score"] == 0.0 and result["correct"] is False, (name, result)
        assert result["metadata"]["verifier"]["rewards"] == {"reward": 0.0}, (name, result["metadata"])


def run_shell_agents(provider: str, tmp_path: Path, workdir: Path, agents: dict[str, str],
                     workdirs: dict[str, str] | None = None) -> dict[str, dict]:
    """One hello-file task per agent, its instruction the agent's script, its WORKDIR /app or the one
    ``workdirs`` gives; the results by task."""
    environment = environment_of(provider)
    if provider == "host_process":  # the workspaces side by side, in this test's folder
        (tmp_path / "sessions").mkdir()
        environment["params"] = {"workspace_root": str(tmp_path / "sessions")}
    tasks = tmp_path / "tasks"
    for name, attack in agents.items():
        shutil.copytree(SHIPPED_TASKS / "hello-file", tasks / name)
        (tasks / name / "instruction.md").write_text(_HARBOR + attack + "\necho armed\n")
        for moved in ("environment/Dockerfile", "tests/test.sh"):
            text = (tasks / name / moved).read_text()
            (tasks / name / moved).write_text(text.replace("/app", (workdirs or {}).get(name, "/app")))
    config = write_config(workdir, "test_shell_agent", environment, {"path": str(tasks)})
    done = subprocess.run([sys.executable, str(SHELL_DRIVER), str(workdir), str(config)], cwd=workdir,
                          env=clean_env(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return results_of(workdir)


# a process left behind that writes reward.txt into every workspace beside its own, so into the verifier's too
BACKGROUND_WRITER = (
    "setsid sh -c ': adversary-writer; i=0; while [ $i -lt 600 ]; do "
    'for d in ../*/.harbor/logs/verifier /logs/verifier; do [ -d "$d" ] && echo 1 > "$d/reward.txt"; done; '
    "i=$((i+1)); sleep 0.1; done' </dev/null >/dev/null 2>&1 &"
)


def processes_running(text: str) -> list[int]:
    """The host's processes whose command line holds ``text``."""
    pids = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if text.encode() in cmdline.read_bytes():
                pids.append(int(cmdline.parent.name))
        except OSError:  # it ended meanwhile
            continue
    return pids


@pytest.mark.parametrize("provider", ["host_process", "docker"])
def test_a_process_the_agent_leaves_running_is_gone_before_the_verifier(provider, tmp_path: Path, workdir: Path):
    from agentcompass.environments.bubblewrap import sandbox_support

    writer = BACKGROUND_WRITER
    if provider == "docker" or sandbox_support()[0]:
        # a container or the sandbox's PID namespace: even a writer with no environment (no session
        # markers) ends with the session; plain host processes are found by their markers only
        writer = "env -i PATH=/usr/bin:/bin " + writer
    try:
        results = run_shell_agents(provider, tmp_path, workdir, {"background-writer": writer})
    finally:
        writers = processes_running(": adversary-writer")
        for pid in writers:  # ours, if it outlived its session: stopped before anything is asserted
            os.kill(pid, 9)
    result = results["background-writer"]
    assert result["answer"] == "armed\n", result["metadata"]
    assert result["status"] == "completed" and result["score"] == 0.0, result
    assert writers == [], "the background writer outlived the agent's session"


def test_named_rewards_reach_result_and_metrics_and_reward_key_picks_the_score(tmp_path: Path, workdir: Path):
    environment_of("host_process")
    tasks = copy_tasks(tmp_path)
    # fix-sum-script now writes a reward.json with a value that is not a number
    test = tasks / "fix-sum-script" / "tests" / "test.sh"
    test.write_text(test.read_text() + 'echo \'{"reward": 1, "note": "all good"}\' > /logs/verifier/reward.json\n')
    # reward files that count for nothing: a link, and a file from before the verifier started
    for name, script in {
        "linked-reward": "echo 1 > /logs/one.txt; ln -s /logs/one.txt /logs/verifier/reward.txt",
        "old-reward": "echo 1 > /logs/verifier/reward.txt; touch -d '2001-01-01 00:00' /logs/verifier/reward.txt",
    }.items():
        shutil.copytree(tasks / "hello-file", tasks / name)
        (tasks / name / "tests" / "test.sh").write_text(f"#!/bin/sh\n{script}\n")
    config = write_config(workdir, "oracle", {"id": "host_process"}, {"path": str(tasks), "reward_key": "count_file_present"})
    done = snakemake(workdir, "--configfile", str(config))
    assert done.returncode == 0, done.stderr[-3000:]
    results = results_of(workdir)
    words, hello, fix = results["word-count"], results["hello-file"], results["fix-sum-script"]
    assert words["status"] == "completed" and words["score"] == 1.0
    assert words["metadata"]["verifier"]["rewards"] == {"reward": 1.0, "count_file_present": 1.0}
    # reward.txt only: the key asked for is not there, and the error says which keys are
    assert hello["status"] == "eval_error" and hello["score"] is None
    assert "the verifier wrote no reward 'count_file_present' (benchmark param reward_key); it wrote ['reward']" in hello["error"]
    assert fix["status"] == "eval_error"
    assert "reward.json's 'note' is \"all good\", not a number" in fix["error"]
    linked, old = results["linked-reward"], results["old-reward"]
    assert linked["status"] == old["status"] == "eval_error"
    assert "reward.txt is a symbolic link: a reward counts only from a file the verifier wrote" in linked["error"]
    assert "reward.txt is older than the verifier's run" in old["error"]
    metrics = json.loads((workdir / "results/default/tasks/metrics.json").read_text())
    assert metrics["metrics"]["rewards/count_file_present"] == 1.0 and metrics["metrics"]["rewards/reward"] == 1.0
    assert metrics["counts"] == {"completed": 1, "eval_error": 4}


def write_task(folder: Path, dockerfile: str, files: dict[str, str], test: str, solve: str) -> None:
    """A task folder: hello-file's task.toml, and the given Dockerfile, environment files and scripts."""
    shutil.copytree(SHIPPED_TASKS / "hello-file", folder)
    (folder / "environment" / "Dockerfile").write_text(dockerfile)
    for name, text in files.items():
        (folder / "environment" / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / "environment" / name).write_text(text)
    (folder / "tests" / "test.sh").write_text(test)
    (folder / "solution" / "solve.sh").write_text(solve)


def test_host_process_follows_the_dockerfile_or_refuses_that_task_alone(tmp_path: Path, workdir: Path):
    environment_of("host_process")
    tasks = tmp_path / "tasks"
    # COPY of a folder and of a renamed file below the WORKDIR: placed there, and the scripts run from the WORKDIR
    write_task(
        tasks / "nested-copy",
        "FROM local/busybox:latest\nWORKDIR /srv/app\nCOPY data/ /srv/app/data/\nCOPY notes.txt input/words.txt\n"
        "COPY [\"extra.txt\", \"/srv/app/\"]\n",
        {"data/a.txt": "one two\n", "data/deep/b.txt": "three\n", "notes.txt": "four five six\n", "extra.txt": "x\n",
         "unused.txt": "never copied\n"},
        "#!/bin/sh\nmkdir -p /logs/verifier\n"
        "if [ \"$(pwd)\" = /srv/app ] && [ \"$(cat /srv/app/total.txt)\" = 6 ] && [ -f /srv/app/extra.txt ] "
        "&& [ ! -e unused.txt ] && [ ! -e Dockerfile ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n",
        "#!/bin/sh\ncat data/a.txt data/deep/b.txt input/words.txt | wc -w | tr -d ' ' > total.txt\n",
    )
    write_task(tasks / "needs-install", "FROM local/busybox:latest\nWORKDIR /app\nRUN apk add --no-cache jq\n", {},
               "#!/bin/sh\necho 1 > /logs/verifier/reward.txt\n", "#!/bin/sh\n")
    write_task(tasks / "two-services", "FROM local/busybox:latest\nWORKDIR /app\n", {},
               "#!/bin/sh\necho 1 > /logs/verifier/reward.txt\n", "#!/bin/sh\n")
    (tasks / "two-services" / "environment" / "docker-compose.yaml").write_text("services:\n  main: {build: .}\n  db: {image: x}\n")
    (tasks / "two-services" / "instruction.md").unlink()  # as compose tasks may have it elsewhere: the compose file is the reason
    shutil.copytree(SHIPPED_TASKS / "hello-file", tasks / "in-steps")
    with (tasks / "in-steps" / "task.toml").open("a") as toml:
        toml.write('\n[[steps]]\nname = "first"\n\n[[steps]]\nname = "second"\n')
    shutil.copytree(SHIPPED_TASKS / "hello-file", tasks / "hello-file")
    config = write_config(workdir, "oracle", {"id": "host_process"}, {"path": str(tasks)})
    done = snakemake(workdir, "--configfile", str(config))
    assert done.returncode == 0, done.stderr[-3000:]
    results = results_of(workdir)
    assert sorted(results) == ["hello-file", "in-steps", "needs-install", "nested-copy", "two-services"]
    for name in ("hello-file", "nested-copy"):
        assert results[name]["status"] == "completed" and results[name]["score"] == 1.0, (name, results[name])
    reasons = {
        "needs-install": "`RUN apk add --no-cache jq` runs a command at build time",
        "two-services": "runs its environment from environment/docker-compose.yaml",
        "in-steps": "is a multi-step task",
    }
    for name, reason in reasons.items():
        result = results[name]
        assert (result["status"], result["error_stage"]) == ("run_error", "load"), (name, result)
        assert reason in result["error"], (name, result["error"])
    # what the Dockerfile copies is the workspace the agent starts from (prepare's snapshot): nothing else of environment/
    snapshot = workdir / "results/default/tasks/attempts/nested-copy/1/workspace"
    assert sorted(p.relative_to(snapshot).as_posix() for p in snapshot.rglob("*") if p.is_file()) == [
        "data/a.txt", "data/deep/b.txt", "extra.txt", "input/words.txt",
    ]


def test_an_image_that_does_not_build_fails_its_attempt_alone_and_retry_builds_it_again(
        needs_docker, tmp_path: Path, workdir: Path):
    tasks = tmp_path / "tasks"
    for name in ("hello-file", "no-build"):
        shutil.copytree(SHIPPED_TASKS / "hello-file", tasks / name)
    dockerfile = tasks / "no-build" / "environment" / "Dockerfile"
    good = dockerfile.read_text().replace("local/busybox:latest", os.environ["AGENTCOMPASS_TEST_IMAGE"])
    dockerfile.write_text(good + "RUN echo the-step-that-fails && false\n")
    config = write_config(workdir, "oracle", {"id": "docker"}, {"path": str(tasks)})
    done = agentcompass(workdir, "run", "--config", str(config))
    assert done.returncode == 1, done.stdout + done.stderr[-3000:]  # a failed attempt, not a failed job
    results = results_of(workdir)
    assert results["hello-file"]["status"] == "completed" and results["hello-file"]["correct"] is True
    broken = results["no-build"]
    assert (broken["status"], broken["failure_class"], broken["error_stage"]) == ("run_error", "infrastructure",
                                                                                  "prepare"), broken
    # the build's error: the end of its log, bounded
    assert "ImageBuildError" in broken["error"] and "the-step-that-fails" in broken["error"], broken["error"]
    assert len(broken["error"]) < 3000
    metrics = json.loads((workdir / "results/default/tasks/metrics.json").read_text())
    assert metrics["counts"] == {"completed": 1, "run_error": 1}
    assert metrics["summary"]["overall"]["failures"] == {"infrastructure": 1}

    # retry prepares it again (the build runs again: it fails the same way) ...
    again = agentcompass(workdir, "retry", "--config", str(config), "--only", "infrastructure")
    assert again.returncode == 1, again.stdout + again.stderr[-3000:]
    assert jobs_run(again.stdout + again.stderr).get("prepare") == 1, again.stderr[-3000:]
    assert results_of(workdir)["no-build"]["failure_class"] == "infrastructure"
    # ... and, its Dockerfile fixed, builds it
    dockerfile.write_text(good)
    fixed = agentcompass(workdir, "retry", "--config", str(config), "--only", "infrastructure")
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr[-3000:]
    assert results_of(workdir)["no-build"]["correct"] is True
