"""A crash loses only the attempts that were running, and two runs never work on the same attempt.

Runs are killed with SIGKILL at random moments (the CLI, its whole process
group, a shard's inner Snakemake, a plain ``snakemake``) and started again with
the same command; a scripted model endpoint counts calls per task. After the
last restart every attempt is there, every file is valid, no attempt whose
output.json existed called the model again, and no run needed a flag.
"""

from __future__ import annotations

import collections
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import jsonschema
import pytest

from agentcompass.pipeline.files import FILE_KINDS, schema_path
from agentcompass.testing.endpoint import Reply, ScriptedEndpoint, completion
from conftest import SNAKEFILE, clean_env

TASKS = 24


class CountingModel:
    """Answers each task's prompt after a short delay and counts the calls per task.

    With ``hold``, every call waits until ``gate`` is set (two minutes at most): a run cannot finish
    before the test lets it."""

    def __init__(self, seed: int, hold: bool = False) -> None:
        self.calls: collections.Counter = collections.Counter()
        self.lock = threading.Lock()
        self.rng = random.Random(seed)
        self.gate = threading.Event()
        if not hold:
            self.gate.set()

    def __call__(self, body) -> Reply:
        prompt = " ".join(str(m.get("content")) for m in body["messages"])
        task = re.search(r"Repeat the word (w\d+)\.", prompt).group(1)  # the synthetic task's own word
        with self.lock:
            self.calls[task] += 1
            delay = self.rng.uniform(0.05, 0.5)
        self.gate.wait(120)
        return Reply(200, completion(task), delay=delay)


def write_config(workdir: Path, endpoint, shard_size: int, name: str = "crash", tasks: int = TASKS) -> Path:
    path = workdir / f"{name}.yaml"
    path.write_text(json.dumps({
        "runtime": {"shard_size": shard_size, "progress": False},
        "requests": {name: {"benchmark": "synthetic", "harness": "chat",
                            "model": {"id": "scripted", "base_url": endpoint.base_url}}},
        "benchmarks": {"synthetic": {"num_tasks": tasks}},
    }))
    return path


def cli(config: Path, cores: int = 6) -> list[str]:
    return [sys.executable, "-m", "agentcompass.cli", "run", "-c", str(config), "--cores", str(cores)]


def plain_snakemake(config: Path, workdir: Path, cores: int = 6) -> list[str]:
    return [sys.executable, "-m", "snakemake", "--snakefile", str(SNAKEFILE), "--directory", str(workdir),
            "--cores", str(cores), "--configfile", str(config)]


def start(argv: list[str], workdir: Path) -> subprocess.Popen:
    return subprocess.Popen(argv, cwd=workdir, env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)


def inner_runs(outer: subprocess.Popen) -> list[int]:
    """The pids of the shard inner runs under ``outer``: its children whose command line is a
    snakemake (new processes), or the children of its fork server of inner runs (forks)."""
    children: dict[int, list[int]] = collections.defaultdict(list)
    cmdlines: dict[int, bytes] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        children[int(stat[stat.rfind(")") + 2:].split()[1])].append(int(entry.name))
        cmdlines[int(entry.name)] = cmdline
    found = []
    for pid in children[outer.pid]:
        if b"forkserver" in cmdlines[pid]:
            found += children[pid]
        elif b"snakemake" in cmdlines[pid]:
            found.append(pid)
    return found


def output_tasks(workdir: Path, name: str) -> set[str]:
    return {p.parent.parent.name for p in (workdir / "results/default" / name / "attempts").glob("*/1/output.json")}


def schema_errors(workdir: Path) -> list[str]:
    """Every JSON file under results/ checked against the schema of its kind; leftover temporary files."""
    validators = {kind: jsonschema.Draft202012Validator(json.loads(schema_path(kind).read_text())) for kind in FILE_KINDS}
    problems = []
    for path in (workdir / "results").rglob("*"):
        if path.name.endswith(".tmp"):
            problems.append(f"{path}: a temporary file of an interrupted write")
        if path.suffix != ".json" or not path.is_file():
            continue
        try:
            data = json.loads(path.read_text())
        except ValueError as exc:
            problems.append(f"{path}: not JSON ({exc})")
            continue
        errors = list(validators[path.stem].iter_errors(data))
        if errors:
            problems.append(f"{path}: {errors[0].message}")
    return problems


def task_word(segment: str) -> str:
    return f"w{int(segment[1:])}"  # attempt folder t07 holds the task asking for w7


# Each restart: how it is started, when it is killed, and what is killed. Every kind of kill point
# is there at least once, at a random moment of its phase: start-up and planning ("early": 0.5 to
# 4 s after the start, or as the run's first attempt finishes if that is sooner), attempts running
# and being written and booked ("mid": once 1 to 4 more attempts have finished), and evaluation,
# metrics and report ("end": once every attempt's output.json exists); the CLI and a plain
# snakemake, the process alone and its whole process group; with shards, before two of the kills
# one shard's inner run dies first while the outer goes on. The last kill is of the process alone:
# the final run starts while the shards' inner runs may still be working, as after any such kill.
# On 2 cores (with shards: two inner runs of one job at a time) and, with shards, in slices of 3,
# so that each kill finds work left: a shard's inner run whose outer run was killed alone goes on
# to the end of its slice.
KILLS = [
    ("cli", "early", "process", False),
    ("snakemake", "early", "group", False),
    ("cli", "mid", "group", True),
    ("snakemake", "mid", "process", False),
    ("cli", "mid", "process", True),
    ("cli", "end", "process", False),
]


@pytest.mark.parametrize("shard_size", [0, 3], ids=["attempt-jobs", "shards-of-3"])
def test_runs_killed_at_random_moments_lose_nothing_and_pay_for_nothing_twice(workdir: Path, shard_size: int):
    rng = random.Random(13 + shard_size)
    model = CountingModel(seed=shard_size)
    kills, recovered, moments = collections.Counter(), 0, []
    with ScriptedEndpoint(model) as endpoint:
        config = write_config(workdir, endpoint, shard_size)
        paid_for: dict[str, int] = {}  # task -> its calls when its output.json was first seen
        for starter, moment, how, inner_first in KILLS:
            proc = start(plain_snakemake(config, workdir, 2) if starter == "snakemake" else cli(config, 2), workdir)
            victim = "cli" if starter == "cli" else "snakemake"
            before = len(output_tasks(workdir, "crash"))
            target = {"early": before + 1, "mid": before + rng.randint(1, 4), "end": TASKS}[moment]
            deadline = time.monotonic() + (rng.uniform(0.5, 4.0) if moment == "early" else 30.0)
            while time.monotonic() < deadline and proc.poll() is None:
                if len(output_tasks(workdir, "crash")) >= target:
                    time.sleep(rng.uniform(0.0, 0.3))
                    break
                time.sleep(0.02)
            moments.append(f"{moment} {before}->{len(output_tasks(workdir, 'crash'))}")
            if proc.poll() is None:
                inner = inner_runs(proc) if shard_size and inner_first else []
                if inner:
                    try:
                        os.kill(rng.choice(inner), signal.SIGKILL)  # one shard's inner run dies; the outer goes on
                        victim = "inner"
                    except ProcessLookupError:  # it ended between being listed and the kill: the outer one dies
                        pass
                    time.sleep(rng.uniform(0.2, 1.5))
                if how == "group":
                    os.killpg(proc.pid, signal.SIGKILL)  # the whole process group, as a lost terminal would
                    victim += "+group"
                else:
                    proc.kill()
            else:
                victim += " (had ended)"
            out = proc.communicate(timeout=120)[0]
            kills[f"{victim} {moment}"] += 1
            assert "--unlock" not in out and "--rerun-incomplete" not in out, out[-3000:]
            assert "Traceback" not in out, out[-3000:]
            recovered += out.count("a run here was interrupted")
            with model.lock:
                for task in output_tasks(workdir, "crash"):
                    paid_for.setdefault(task_word(task), model.calls[task_word(task)])

        final = subprocess.run(cli(config), cwd=workdir, env=clean_env(), capture_output=True, text=True, timeout=600)
        assert final.returncode == 0, final.stdout[-2000:] + final.stderr[-3000:]
        with model.lock:
            calls = dict(model.calls)

    results = list((workdir / "results/default/crash/attempts").glob("*/1/result.json"))
    repeated = {task: (calls[task] - n) for task, n in paid_for.items() if calls[task] != n}
    problems = schema_errors(workdir)
    print(f"\n{shard_size=}: kills {dict(kills)} (outputs before and at each: {moments}); "
          f"restarts that recovered a killed run's files {recovered}; "
          f"attempts {len(results)}/{TASKS}; model calls {sum(calls.values())} for {TASKS} attempts; "
          f"attempts whose output.json existed before a kill {len(paid_for)}, called again {len(repeated)}; "
          f"invalid files {len(problems)}")
    assert len(results) == TASKS  # 0 attempts lost
    assert problems == []  # 0 invalid files, no temporary files left
    assert repeated == {}  # 0 model calls repeated for attempts whose output.json existed
    assert all(json.loads(p.read_text())["status"] == "completed" for p in results)
    assert sum(kills.values()) == len(KILLS)


def wait_for(condition, proc: subprocess.Popen, seconds: float) -> None:
    """Until ``condition()`` holds, ``proc`` has ended, or ``seconds`` have passed."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and proc.poll() is None and not condition():
        time.sleep(0.02)


@pytest.mark.parametrize("offset,shard_size,second", [
    (0.0, 0, "cli"), (0.8, 0, "snakemake"), (2.5, 4, "cli"), (4.0, 4, "snakemake"),
], ids=["together", "0.8s-plain", "2.5s-shards", "4s-shards-plain"])
def test_two_runs_at_once_never_work_on_the_same_attempt(workdir: Path, offset: float, shard_size: int, second: str):
    # the model holds every call until one of the two runs has ended (the one refused): the first is
    # still at work when the second starts, on any machine, and 8 tasks (2 shards) are enough
    model = CountingModel(seed=1, hold=True)
    tasks = 8
    with ScriptedEndpoint(model) as endpoint:
        try:
            config = write_config(workdir, endpoint, shard_size, name="twice", tasks=tasks)
            first = start(cli(config), workdir)
            time.sleep(offset)
            other = start(cli(config) if second == "cli" else plain_snakemake(config, workdir), workdir)
            wait_for(lambda: other.poll() is not None, first, seconds=240)
        finally:
            model.gate.set()
        out_first = first.communicate(timeout=300)[0]
        out_other = other.communicate(timeout=300)[0]
        codes = sorted([first.returncode, other.returncode])
        # one run built everything; the other stopped at once naming it
        refused = out_first if first.returncode else out_other
        assert codes != [0, 0], (out_first[-1500:], out_other[-1500:])  # the first was at work: one was refused
        assert "is being built by another run: pid" in refused and "Nothing was started here" in refused, refused[-3000:]
        assert codes[1] in (1, 4)  # plain snakemake exits 1, the CLI 4
        # whichever stopped, the same command afterwards has nothing left to call the model for
        again = subprocess.run(cli(config), cwd=workdir, env=clean_env(), capture_output=True, text=True, timeout=300)
        assert again.returncode == 0, again.stderr[-3000:]
        with model.lock:
            calls = dict(model.calls)
    results = list((workdir / "results/default/twice/attempts").glob("*/1/result.json"))
    assert len(results) == tasks and schema_errors(workdir) == []
    assert calls == {f"w{i}": 1 for i in range(tasks)}, (out_first[-1500:], out_other[-1500:])


class Built:
    """A finished request of 8 tasks per ``shard_size``, built once for the module's tests that change
    one attempt and run again, on a model endpoint that lives as long as the module: each test works
    on a copy (``shutil.copytree`` with symlinks keeps Snakemake's records and the files' times)."""

    name, tasks = "once", 8

    def __init__(self, base: Path, endpoint, model: CountingModel) -> None:
        self.base, self.endpoint, self.model = base, endpoint, model
        self.runs: dict[int, tuple[Path, collections.Counter]] = {}

    def calls(self) -> collections.Counter:
        with self.model.lock:
            return collections.Counter(self.model.calls)

    def copy(self, shard_size: int, workdir: Path) -> tuple[Path, collections.Counter]:
        """The request copied into ``workdir``: its config, and the model calls its one run made."""
        if shard_size not in self.runs:
            folder = self.base / f"shard-size-{shard_size}"
            folder.mkdir()
            config = write_config(folder, self.endpoint, shard_size, name=self.name, tasks=self.tasks)
            before = self.calls()
            first = subprocess.run(cli(config), cwd=folder, env=clean_env(), capture_output=True, text=True, timeout=300)
            assert first.returncode == 0, first.stderr[-3000:]
            self.runs[shard_size] = folder, self.calls() - before
        folder, made = self.runs[shard_size]
        shutil.copytree(folder, workdir, symlinks=True, dirs_exist_ok=True)
        return workdir / f"{self.name}.yaml", collections.Counter(made)

    def run_again(self, config: Path, made: collections.Counter) -> collections.Counter:
        """The same command again in the copy; the model calls of the copy's two runs."""
        before = self.calls()
        again = subprocess.run(cli(config), cwd=config.parent, env=clean_env(), capture_output=True, text=True,
                               timeout=300)
        assert again.returncode == 0, again.stderr[-3000:]
        return made + (self.calls() - before)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    model = CountingModel(seed=2)
    with ScriptedEndpoint(model) as endpoint:
        yield Built(tmp_path_factory.mktemp("built"), endpoint, model)


def rerun_after_leftovers(workdir: Path, built: Built, segment: str, deleted: tuple[str, ...],
                          leftovers: tuple[str, ...]) -> tuple[Path, list[Path], collections.Counter]:
    """A copy of the finished request: delete ``deleted`` of one attempt and plant half-written ``leftovers``
    in its folder (as a run stopped mid-write leaves them), run it again; the attempt's folder, the planted
    files and the model calls of both runs."""
    config, made = built.copy(0, workdir)
    attempt = workdir / f"results/default/{built.name}/attempts/{segment}/1"
    assert (attempt / "trajectory.jsonl").is_file()
    for file in deleted:
        (attempt / file).unlink()
    planted = [attempt / leftover for leftover in leftovers]
    for path in planted:
        path.write_text('{"half": ')
    return attempt, planted, built.run_again(config, made)


def test_a_rerun_attempt_removes_what_a_killed_write_of_its_trajectory_left(workdir: Path, built: Built):
    """A run killed while rewriting trajectory.jsonl (after the scrub, before the rename) leaves
    ``.trajectory.jsonl.<pid>-<thread>.tmp``; the attempt's next run removes it with the old file."""
    # as if killed before output.json appeared
    attempt, planted, calls = rerun_after_leftovers(workdir, built, "t3", ("output.json", "result.json"),
                                                    (".trajectory.jsonl.4242-1234.tmp",))
    assert (attempt / "result.json").is_file() and calls["w3"] == 2
    assert [p for p in planted if p.exists()] == []
    assert schema_errors(workdir) == []


def test_a_job_removes_what_an_interrupted_write_of_its_outputs_left_unmarked(workdir: Path, built: Built):
    """A run that stops (its parent died, Ctrl-C) while a job writes plan.json may end the job and drop
    its incomplete markers before the write's temporary file is renamed or removed: the next run's
    recovery, which reads the markers, never sees that file. The job that builds the output again
    removes it (found by the random kill test: ``.plan.json.<pid>-<thread>.tmp`` was left)."""
    # evaluate's outputs gone, as a stopped job leaves them
    attempt, planted, calls = rerun_after_leftovers(workdir, built, "t5", ("result.json", "plan.json"),
                                                    (".plan.json.4242-1234.tmp", ".result.json.4242-1234.tmp"))
    assert (attempt / "result.json").is_file() and calls["w5"] == 1  # only evaluate ran again
    assert [p for p in planted if p.exists()] == []
    assert schema_errors(workdir) == []


@pytest.mark.parametrize("shard_size", [0, 4], ids=["attempt-jobs", "shards-of-4"])
def test_an_output_a_killed_job_finished_but_never_booked_is_kept(workdir: Path, built: Built, shard_size: int):
    """A run killed after a run job renamed output.json into place, before Snakemake booked the job,
    leaves the file marked incomplete with its record written (``jobs``). The next run keeps it: it
    calls the model only for what is missing. A shard's inner run, whose targets are files, judged
    its markers only after Snakemake had seen them and scheduled the file again (found by the random
    kill test: the model called twice for one attempt)."""
    from agentcompass.pipeline import engine

    segment = "t7"  # with shards of 4: in the second shard
    config, made = built.copy(shard_size, workdir)
    run = f"results/default/{built.name}"
    attempt = workdir / run / "attempts" / segment / "1"
    # as the kill leaves it: evaluate never ran, the shard never finished, output.json still marked
    for file in ("result.json", "plan.json"):
        (attempt / file).unlink()
    (workdir / run / "shards/1/shard.json").unlink(missing_ok=True)
    records = engine.Records.open(workdir)
    output = f"{run}/attempts/{segment}/1/output.json"
    records.persistence._mark_incomplete(engine._key(records.persistence, output), None)
    assert records.incomplete([output]) == {output}
    calls = built.run_again(config, made)
    assert (attempt / "result.json").is_file() and schema_errors(workdir) == []
    assert engine.Records.open(workdir).incomplete([output]) == set()
    assert calls == {f"w{i}": 1 for i in range(built.tasks)}  # w7 not called again
