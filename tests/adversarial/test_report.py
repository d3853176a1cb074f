"""What the agent leaves in its workspace, as an adversary of the report, the result loaders and `clean`.

The final workspace is kept under ``results/``: links to host files (the
project's ``.env``, a planted host-only file), FIFOs, names that are not UTF-8 or
hold a terminal escape, a newline or ``<script>``, and folders 1,100 levels deep.
The report shows links as links and names as text, never reads through a link or
opens a FIFO, and every run, rerun, ``agentcompass report`` and ``agentcompass
clean`` ends without a traceback. The workflow tests run a task folder whose
``solve.sh`` acts as the agent under ``oracle``, on both providers (host_process
in its sandbox; docker skipped, saying why, when no engine answers).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from conftest import agentcompass, clean_env, files_holding

from agentcompass import report, results

from agentcompass._util import trees
from agentcompass.benchmarks.task_dir import SHIPPED_TASKS
from agentcompass.environments.leftovers import SESSION_RECORD_SUFFIX
from test_task_dir import environment_of


DEPTH = 1100
# the names the agent plants, as bytes, and how the report shows them
NAMES = {
    b"bad-\xff\xfe.txt": "bad-\\xff\\xfe.txt",
    b"esc-\x1b[31mred\nline.txt": "esc-\\x1b[31mred\\nline.txt",
    b"<script>alert(1)<": "<script>alert(1)<",
}
# the agent's part of solve.sh: links out, odd names (printf's octal escapes make the bytes); its FIFOs and
# devices are the copy's to skip (a kept folder holding them is test_a_kept_attempt_folder_...)
PLANT = r"""
ln -s "$HOST_FILE" leak-host
ln -s "$PROJECT_ENV" leak-env
ln -s ../../../../../../../../../../../../../.. leak-root
printf 'odd name\n' > "$(printf 'bad-\377\376.txt')"
printf 'escape\n' > "$(printf 'esc-\033[31mred\nline.txt')"
printf '</script><script>alert(2)</script>\n' > '<script>alert(1)<'
"""
DEEP = f"""
i=0; while [ $i -lt {DEPTH} ]; do mkdir d && cd d || exit 1; i=$((i+1)); done
echo deep > bottom.txt
"""


@pytest.fixture(autouse=True)
def deep_trees_removed(tmp_path: Path):
    """The trees these tests leave are removed after each test: pytest's own cleanup of old temporary
    folders (shutil.rmtree, recursive) fails on 1,100 levels."""
    yield
    for child in tmp_path.iterdir():
        trees.remove_tree(child, ignore_errors=True)


def planting_task(tmp_path: Path, name: str, script: str, env: dict[str, str]) -> Path:
    """A copy of hello-file whose solve.sh also runs ``script`` in the workspace (the task still scores 1)."""
    tasks = tmp_path / "tasks"
    folder = tasks / name
    shutil.copytree(SHIPPED_TASKS / "hello-file", folder)
    solve = folder / "solution" / "solve.sh"
    solve.write_text(solve.read_text() + "cd /app || exit 1\n" + script)
    toml = folder / "task.toml"
    table = "".join(f'{key} = "{value}"\n' for key, value in env.items())
    toml.write_text(toml.read_text() + ("\n[solution.env]\n" + table if env else ""))
    return tasks


def run_oracle(workdir: Path, tasks: Path, provider: str, tmp: Path) -> subprocess.CompletedProcess:
    config = workdir / "tasks.yaml"
    config.write_text(yaml.safe_dump({"requests": {"tasks": {
        "benchmark": {"id": "task_dir", "params": {"path": str(tasks)}},
        "harness": "oracle", "model": {"id": "none"}, "environment": environment_of(provider),
    }}}))
    # a temp folder of its own: what the sessions leave there is this test's to see
    return agentcompass(workdir, "run", "--config", str(config), env=clean_env(TMPDIR=str(tmp)))


def attempt_data(workdir: Path, task: str) -> dict:
    text = (workdir / "results/default/tasks/report/data/attempts" / f"{task}.1.js").read_text()
    return json.loads(text[len("AC_ATTEMPT("):].rstrip().rstrip(";").rstrip(")"))


@pytest.mark.parametrize("provider", ["host_process", "docker"])
def test_the_report_shows_the_agents_links_as_links_and_its_names_as_text(provider, tmp_path: Path, workdir: Path):
    secret_host, secret_env = (f"canary-{secrets.token_hex(8)}" for _ in range(2))
    host_file = tmp_path / "host-only.txt"
    host_file.write_text(f"{secret_host}\n")
    (workdir / ".env").write_text(f"OPENAI_API_KEY={secret_env}\n")
    tasks = planting_task(tmp_path, "planter", PLANT, {"HOST_FILE": str(host_file),
                                                        "PROJECT_ENV": str(workdir / ".env")})
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    done = run_oracle(workdir, tasks, provider, tmp)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-3000:]
    run = workdir / "results/default/tasks"
    result = json.loads((run / "attempts/planter/1/result.json").read_text())
    assert result["status"] == "completed" and result["score"] == 1.0, result
    kept = run / "attempts/planter/1/final_workspace"
    assert os.readlink(kept / "leak-host") == str(host_file)  # the agent's link is kept, as a link
    files = attempt_data(workdir, "planter")["files"]
    assert files["final_workspace/leak-host"] == f"[a symbolic link to {host_file}: not followed]"
    assert files["final_workspace/leak-env"] == f"[a symbolic link to {workdir / '.env'}: not followed]"
    for raw, shown in NAMES.items():
        assert f"final_workspace/{shown}" in files, sorted(files)
    assert files["final_workspace/<script>alert(1)<"] == "</script><script>alert(2)</script>\n"
    # neither secret under report/ (nor anywhere in results/: no copy step read through the links)
    for secret in (secret_host, secret_env):
        hits, read = files_holding(secret, run / "report")
        assert read >= 5 and hits == []
        assert files_holding(secret, workdir / "results", workdir / ".snakemake")[0] == []
    # the page's own markup holds no tag the data brought: the name sits in a data file, as a JSON string
    for page in ("index.html", "attempt.html"):
        assert "alert(" not in (run / "report" / page).read_text()
    # every loader reads the run: status, runs, the Python API, a rebuilt report
    for command in (["status", "--config", str(workdir / "tasks.yaml")], ["runs"], ["report", str(run)]):
        shown = agentcompass(workdir, *command)
        assert shown.returncode == 0 and "Traceback" not in shown.stderr, (command, shown.stderr[-2000:])
    assert len(results.load(workdir / "results")) == 1
    assert not list(tmp.glob("agentcompass-*")), list(tmp.iterdir())  # every session's workspace was removed


@pytest.mark.parametrize("provider", ["host_process", "docker"])
def test_a_tree_1100_levels_deep_leaves_no_workspace_and_crashes_nothing(provider, tmp_path: Path, workdir: Path):
    tasks = planting_task(tmp_path, "deep", DEEP, {})
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    done = run_oracle(workdir, tasks, provider, tmp)
    # the attempt may be refused for its depth; the run, its report and its sessions' cleanup never crash
    assert "Traceback" not in done.stderr and "metrics.json" in done.stdout, done.stderr[-3000:]
    run = workdir / "results/default/tasks"
    assert (run / "report" / "index.html").is_file()
    assert not list(tmp.glob("agentcompass-*")), list(tmp.iterdir())
    # a rerun removes the kept workspace of the attempt before it runs again, whatever its depth
    again = run_oracle(workdir, tasks, provider, tmp)
    assert "Traceback" not in again.stderr, again.stderr[-3000:]


def plant_tree(root: Path, secret_target: Path) -> None:
    """What a hostile agent leaves: deep folders, odd names, a FIFO, a locked folder, links out."""
    root.mkdir(parents=True)
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(DEPTH):  # by descriptor: the path soon passes what one system call takes
            os.mkdir("d", dir_fd=fd)
            child = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = child
        with open(os.open("bottom.txt", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd), "w") as handle:
            handle.write("deep\n")
    finally:
        os.close(fd)
    for raw in NAMES:
        (root / os.fsdecode(raw)).write_text("odd name\n")
    os.mkfifo(root / "pipe")
    (root / "leak").symlink_to(secret_target)
    (root / "leak-folder").symlink_to(secret_target.parent)
    locked = root / "locked"
    (locked / "inner").mkdir(parents=True)
    (locked / "inner" / "file").write_text("x")
    os.chmod(locked / "inner", 0)
    os.chmod(locked, 0o500)


def test_a_kept_attempt_folder_of_any_depth_and_names_builds_the_report(tmp_path: Path):
    secret = f"canary-{secrets.token_hex(8)}"
    host_file = tmp_path / "host" / "secret.txt"
    host_file.parent.mkdir()
    host_file.write_text(secret)
    run = tmp_path / "results" / "default" / "r"
    attempt = run / "attempts" / "t" / "1"
    attempt.mkdir(parents=True)
    (run / "request.json").write_text(json.dumps({"output": {"namespace": "default", "run_id": "r"}}))
    (run / "tasks.json").write_text(json.dumps({"tasks": [{"task_id": "t", "category": None}]}))
    (attempt / "result.json").write_text(json.dumps({"task_id": "t", "status": "completed", "score": 1.0,
                                                      "correct": True, "error": "\ud800 a lone surrogate"}))
    plant_tree(attempt / "final_workspace", host_file)
    (attempt / "outputs").mkdir()
    (attempt / "outputs" / "answer.txt").symlink_to(host_file)  # in the place of a file the run downloads
    index = report.build(run)
    assert index.is_file()
    hits, read = files_holding(secret, run / "report")
    assert read >= 5 and hits == []
    files = attempt_data_at(run, "t")["files"]
    assert files["outputs/answer.txt"] == f"[a symbolic link to {host_file}: not followed]"
    assert files["final_workspace/leak-folder"].startswith("[a symbolic link to ")
    assert any(name.endswith("d/d/") and "left out" in text for name, text in files.items())
    assert "final_workspace/bad-\\xff\\xfe.txt" in files and "final_workspace/esc-\\x1b[31mred\\nline.txt" in files
    assert results.last_change(run) is not None and len(list(results.rows(results.open_run(run)))) == 1
    trees.remove_tree(attempt / "final_workspace")
    assert not (attempt / "final_workspace").exists() and host_file.read_text() == secret


def attempt_data_at(run: Path, task: str) -> dict:
    text = (run / "report/data/attempts" / f"{task}.1.js").read_text()
    return json.loads(text[len("AC_ATTEMPT("):].rstrip().rstrip(";").rstrip(")"))


def test_clean_removes_a_leftover_workspace_of_any_depth_and_never_what_its_links_name(workdir: Path):
    tmp = workdir / "tmp"
    target = workdir / "host" / "keep.txt"
    target.parent.mkdir(parents=True)
    target.write_text("kept\n")
    workspace = tmp / "agentcompass-deadbeef"
    plant_tree(workspace, target)
    # a session whose agentcompass process is gone (pid 1 never has this start time)
    record = {"owner": f"{os.uname().nodename}:1:no-such-start", "label": "r-t-1-run"}
    Path(f"{workspace}{SESSION_RECORD_SUFFIX}").write_text(json.dumps(record))
    done = agentcompass(workdir, "clean", env=clean_env(TMPDIR=str(tmp)))
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert f"removed workspace {workspace}" in done.stdout
    assert not workspace.exists() and not Path(f"{workspace}{SESSION_RECORD_SUFFIX}").exists()
    assert target.read_text() == "kept\n" and sorted(p.name for p in target.parent.iterdir()) == ["keep.txt"]
