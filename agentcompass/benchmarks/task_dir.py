"""``task_dir``: a folder of Harbor-format task folders.

Each task folder holds ``task.toml`` (metadata, timeouts, network), the prompt
``instruction.md``, its sandbox ``environment/Dockerfile`` (plus the files the
Dockerfile copies), the verifier ``tests/test.sh`` and the reference
``solution/solve.sh``. The verifier writes its reward to
``/logs/verifier/reward.txt`` (a number) or ``/logs/verifier/reward.json``
(named numbers); all are kept, and the score is picked as Harbor picks its
primary reward (``reward``, else the only key) or by ``reward_key``.

What each stage sees:

- prepare: on ``docker`` the session runs the image built from the task's
  Dockerfile (Recipe ``task_dockerfile``; base images must be on the engine),
  and the workspace is its WORKDIR. On other providers the workspace stands
  for the WORKDIR and the Dockerfile's COPY/ADD of local files are followed
  (``host_copies``); a Dockerfile that cannot be followed (RUN, ENV, a URL,
  another stage...) makes the task a load error, as do compose and
  multi-step tasks on every provider.
- run: the harness gets the instruction and the workspace, never ``tests/``
  nor ``solution/``. Only the trusted ``oracle`` gets ``solution/`` (as a
  ``ScriptReference``) and runs ``solve.sh`` in its session.
- evaluate: whatever stands at the verifier's folders is removed (links and
  locked folders too), ``tests/`` is copied to ``/tests`` of the evaluation
  session, ``test.sh`` runs from the workspace, every process of the session
  is ended when it exits (what it started, the agent's code it ran), and only
  regular reward files written after it started count.

Harbor's fixed paths (``/tests``, ``/solution``, ``/logs``) exist in a
container. A ``host_process`` session has no filesystem of its own, so there
they live in the workspace under ``.harbor/``, the Dockerfile's WORKDIR is the
workspace, and those absolute paths are rewritten in the copies of
``tests/`` and ``solution/`` that go into the session.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import posixpath
import re
import shutil
import tempfile
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentcompass import PROJECT_ROOT

from agentcompass._util import trees
from agentcompass.benchmarks.config import RuntimeBenchmarkConfig
from agentcompass.runtime import (
    BENCHMARKS,
    HARNESSES,
    BaseBenchmark,
    BenchmarkPlan,
    EnvironmentSpec,
    MetricResult,
    PreparedTask,
    RunRequest,
    RunResult,
    TaskInput,
    TaskOutput,
    TaskSpec,
    TaskStatus,
)
from agentcompass.runtime.base import ScriptReference, after_agent, cancelling
from agentcompass.runtime.config import ConfigError, ParameterError, config_field, plan_field
from agentcompass.secrets import REFERENCE, references, resolve_secret, scrub

SHIPPED_TASKS = PROJECT_ROOT / "examples" / "task_dir"
TASK_TOML = "task.toml"
INSTRUCTION = "instruction.md"
ENVIRONMENT = "environment"
DOCKERFILE = "Dockerfile"
TESTS = "tests"
TEST_SCRIPT = "test.sh"
SOLUTION = "solution"
SOLVE_SCRIPT = "solve.sh"
# Harbor's defaults, where task.toml says nothing
VERIFIER_TIMEOUT = 600.0
# the folder that stands in for Harbor's fixed paths in a host_process workspace
HOST_HARBOR_DIR = ".harbor"
WORKSPACE = "."
_TAIL = 2000
# before the verifier: remove what stands at Harbor's folders (a link itself, never its target; a locked folder
# unlocked first), make the verifier's folder, print the time (seconds) the verifier starts from
_CLEAR = (
    'v=$1; shift; for d in "$@" "$(dirname "$v")"; do if [ -L "$d" ]; then rm -f "$d" || exit 1; '
    'elif [ -e "$d" ] && [ "$d" != "$(dirname "$v")" ]; then chmod -R u+rwX "$d" 2>/dev/null; rm -rf "$d" || exit 1; fi; '
    'done; mkdir -p "$v" && date +%s'
)
# after it: each reward file's kind (file with its mtime in seconds, link, other, none)
_REWARD_FILES = (
    'for n in reward.txt reward.json; do p="$1/$n"; if [ -L "$p" ]; then echo "$n link"; '
    'elif [ -f "$p" ]; then echo "$n file $(stat -c %Y "$p")"; elif [ -e "$p" ]; then echo "$n other"; '
    'else echo "$n none"; fi; done'
)
_NETWORK_MODES = {"public": "public", "no-network": "none", "allowlist": "none"}
# an absolute path that starts with one of the mapped roots (not a part of a longer path or name)
_BEFORE = r"(?<![\w./~$}-])"
_AFTER = r"(?![\w.-])"


def _number(value: Any, name: str) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = math.nan
    if isinstance(value, bool) or not math.isfinite(number):
        raise ConfigError(f"{name} must be a finite number, got {value!r}")
    return number


@dataclass(slots=True)
class TaskDirConfig(RuntimeBenchmarkConfig):
    path: str | None = config_field(
        default=None,
        description="Folder of Harbor task folders (each with task.toml, instruction.md and tests/test.sh; "
        "environment/Dockerfile for docker, solution/solve.sh for the oracle), or one task folder. Task ids "
        "are the folder names, categories task.toml's [metadata] category. A relative path resolves against the working directory; null: the example "
        "tasks shipped in examples/task_dir.",
        stage="tasks",
    )
    verifier_timeout: float | None = config_field(
        default=None,
        description="Seconds tests/test.sh may run before it is stopped (no reward then: an eval_error); "
        "null: the task's [verifier] timeout_sec, else Harbor's 600.",
        stage="evaluate",
    )
    pass_threshold: float = config_field(
        default=1.0,
        description="A reward at or above this counts as correct; the reward itself is the score.",
        stage="evaluate",
    )
    reward_key: str | None = config_field(
        default=None,
        description="Which of the verifier's named rewards is the score (a key of reward.json, or 'reward' for "
        "reward.txt); a key the verifier did not write is an eval_error naming the keys it wrote. null: as Harbor "
        "picks it, the 'reward' key, else the only key.",
        stage="evaluate",
    )

    task_env: list[str] = config_field(
        default=[],
        description="The job's environment variables that task folders may name as ${VAR} in [verifier] env and "
        "[solution] env (a judge's key, say). Task folders are data from elsewhere: one that names any other "
        "variable stops the run when it is planned, naming the task and the variable. Default: none.",
        stage="metrics",  # read only when planning; a plan it allows is the same whatever else it allows
    )

    def __post_init__(self) -> None:
        RuntimeBenchmarkConfig.__post_init__(self)
        if not isinstance(self.task_env, list) or not all(
            isinstance(name, str) and REFERENCE.fullmatch(f"${{{name}}}") for name in self.task_env
        ):
            raise ParameterError(f"task_env must be a list of environment variable names, got {self.task_env!r}",
                                 ["task_env"])
        if self.verifier_timeout is not None:
            self.verifier_timeout = _number(self.verifier_timeout, "verifier_timeout")
            if self.verifier_timeout <= 0:
                raise ConfigError(f"verifier_timeout must be positive, got {self.verifier_timeout}")
        self.pass_threshold = _number(self.pass_threshold, "pass_threshold")
        if self.reward_key is not None and (not isinstance(self.reward_key, str) or not self.reward_key):
            raise ParameterError(f"reward_key must be a key of the verifier's reward.json, got {self.reward_key!r}",
                                 ["reward_key"])
        root = tasks_root(self.path)
        if not root.exists():
            raise ParameterError(f"path {str(root)!r} does not exist (it should be a folder of Harbor tasks)", ["path"])
        if not root.is_dir():
            raise ParameterError(f"path {str(root)!r} is a file, not a folder of Harbor tasks", ["path"])
        # any() stops at the first task folder: this runs for every build_config, so it must stay cheap
        if not (root / TASK_TOML).is_file() and not any(_is_task(p) for p in root.iterdir()):
            raise ParameterError(
                f"path {str(root)!r} holds no task folder (a folder with {TASK_TOML}); point it at a folder "
                "of Harbor tasks or at one task", ["path"],
            )


@dataclass(slots=True)
class TaskDirPlan(BenchmarkPlan):
    task_dir: str = plan_field("")
    # 'native': Harbor's fixed paths exist (a container); 'mapped': they live in the workspace
    layout: str = plan_field("native")
    # the Dockerfile's WORKDIR: where the task's scripts expect the workspace
    workdir: str | None = plan_field(None)
    # on host_process: [file of environment/, path in the workspace], as the Dockerfile's COPY/ADD put them
    environment_copies: list[list[str]] = plan_field([], stage="prepare")
    tests_digest: str = plan_field("", stage="evaluate")
    verifier_timeout: float = plan_field(VERIFIER_TIMEOUT, stage="evaluate")
    verifier_env: dict[str, str] = plan_field({}, stage="evaluate")
    pass_threshold: float = plan_field(1.0, stage="evaluate")
    reward_key: str | None = plan_field(None, stage="evaluate")
    # read by the oracle's run only
    solution_digest: str | None = plan_field(None, stage="run")
    solution_env: dict[str, str] = plan_field({}, stage="run")
    agent_timeout: float | None = plan_field(None, stage="run")


# --- the task folder ----------------------------------------------------------------------


def tasks_root(path: str | None) -> Path:
    return SHIPPED_TASKS if path is None else Path(path).expanduser().resolve()


def _is_task(path: Path) -> bool:
    return path.is_dir() and (path / TASK_TOML).is_file()


def task_folders(root: Path) -> list[Path]:
    """The task folders under ``root`` (or ``root`` itself when it is one), by name."""
    if (root / TASK_TOML).is_file():
        return [root]
    folders = sorted(p for p in root.iterdir() if _is_task(p))
    if not folders:
        raise ValueError(
            f"task_dir: {root} holds no task folder (a folder with {TASK_TOML}); point `path` at a folder of "
            "Harbor tasks or at one task"
        )
    return folders


def read_task_toml(folder: Path) -> dict[str, Any]:
    path = folder / TASK_TOML
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"task_dir: {path} is not valid TOML ({exc}); fix the file") from None


# how deep a task folder's folders may nest (deeper is refused at load; digests stop there)
MOST_DEPTH = 64


def tree_digest(path: Path) -> str | None:
    """A digest of every file name, mode and content under ``path`` (None if it does not exist).

    Links are digested as their target's text (never followed), FIFOs and
    devices not at all (never opened); any name, to ``MOST_DEPTH`` levels.
    """
    if not path.exists():
        return None
    sha = hashlib.sha256()
    if path.is_file():
        sha.update(os.fsencode(path.name) + b"\0")
        sha.update(oct(path.stat().st_mode & 0o777).encode() + b"\0" + path.read_bytes() + b"\0")
        return sha.hexdigest()
    for entry, fd in trees.walk(path, most_depth=MOST_DEPTH):
        if entry.kind not in ("file", "link"):
            continue
        name = os.path.basename(entry.path)
        sha.update(entry.path + b"\0")
        if entry.kind == "link":
            sha.update(b"link\0" + (entry.target or b""))
        else:
            mode = os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode
            sha.update(oct(mode & 0o777).encode() + b"\0" + trees.read_bytes(name, dir_fd=fd))
        sha.update(b"\0")
    return sha.hexdigest()


# the parts of a task folder that go somewhere whole: the build context and workspace, /tests, /solution
_PARTS = (ENVIRONMENT, TESTS, SOLUTION)


def check_links(folder: Path) -> None:
    """Refuse (ValueError naming the file) a task folder with an entry that reaches out of it.

    A task folder is data from elsewhere (git keeps links): its links must
    stay inside the part they belong to, ``environment/``, ``tests/`` or
    ``solution/`` for what is under them and the folder for the rest, and
    must be relative; no link may lead to a FIFO, socket or device, nor
    those exist in it. ``task.toml``, ``instruction.md`` and the three parts
    must be themselves, not links; under ``environment/`` (the build context)
    a link may not name a folder. Links that stay inside are kept.
    """
    real = folder.resolve()
    fix = "replace the link by the file it names (a task folder must hold what it uses)"
    other = "remove it (a task folder holds files, folders and links that stay inside it)"
    for name in (TASK_TOML, INSTRUCTION, *_PARTS):
        if (real / name).is_symlink():
            raise ValueError(f"task_dir: {folder / name} is a symbolic link (to {trees.shown(os.readlink(real / name))}); "
                             f"{name} must be the {'folder' if name in _PARTS else 'file'} itself: {fix}")
    top = {os.fsencode(name) for name in _PARTS}
    checks: list[tuple[Path, str, Any]] = [(real, "the task folder", top.__contains__)]
    checks += [(real / part, f"{part}/", None) for part in _PARTS if (real / part).is_dir()]
    for root, what, prune in checks:
        problem = trees.confined(root, most_depth=MOST_DEPTH, folder_links=root.name != ENVIRONMENT or root == real,
                                 prune=prune)
        if problem is not None:
            where, _, why = problem.partition(": ")
            raise ValueError(f"task_dir: {root / where}: {why.replace('the folder', what)}; "
                             f"{fix if 'symbolic link' in why else other}")


def dockerfile_workdir(dockerfile: Path) -> str | None:
    """The last WORKDIR of the Dockerfile's final stage (None: the base image's)."""
    workdir = None
    for word, args in _stages(dockerfile)[-1]:
        if word == "WORKDIR" and args:
            workdir = posixpath.normpath(posixpath.join(workdir or "/", args.strip("\"'")))
    return workdir


_COMPOSE_FILES = ("docker-compose.yaml", "docker-compose.yml", "compose.yaml", "compose.yml")
# Dockerfile instructions that change nothing a host workspace could hold (the image's metadata, or the
# base image, whose place the host takes on host_process)
_IGNORED = {"FROM", "LABEL", "MAINTAINER", "EXPOSE", "CMD", "ENTRYPOINT", "STOPSIGNAL", "HEALTHCHECK", "SHELL",
            "VOLUME", "ARG", "USER", "ONBUILD"}
_ARCHIVES = (".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tar.xz", ".txz", ".tar.zst")


def _stages(dockerfile: Path) -> list[list[tuple[str, str]]]:
    """The Dockerfile's (INSTRUCTION, arguments) by stage, each from its FROM; continuation lines joined."""
    lines, pending = [], ""
    for raw in dockerfile.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):  # comments and blank lines, inside continuations too
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        lines.append(pending + line)
        pending = ""
    if pending:
        lines.append(pending)
    stages: list[list[tuple[str, str]]] = [[]]
    for line in lines:
        word, *args = line.split(None, 1)
        if word.upper() == "FROM":
            stages.append([])
        stages[-1].append((word.upper(), args[0].strip() if args else ""))
    return stages


def _inside(path: str, root: str) -> str | None:
    """``path`` relative to ``root`` (both absolute, normalized), or None when it is not below it."""
    rel = posixpath.relpath(path, root)
    return None if rel == "." or rel.startswith("../") or rel == ".." else rel


def host_copies(environment: Path) -> list[list[str]]:
    """What the Dockerfile's COPY/ADD put in its WORKDIR, as [file in environment/, path in the workspace] pairs.

    The WORKDIR is the workspace on host_process, so a copy can be followed when it
    is a local file of the build context landing under the WORKDIR. Raises
    ValueError naming the first instruction host_process cannot follow.
    """
    dockerfile = environment / DOCKERFILE
    where = str(dockerfile)
    final = dockerfile_workdir(dockerfile)
    *earlier, steps = _stages(dockerfile)
    if steps and steps[0][0] == "FROM":  # the last stage's base: an image, or an earlier stage by its name
        base = next((w for w in steps[0][1].split() if not w.startswith("--")), "").lower()
        names = {words[-1].lower() for stage in earlier if stage and len(words := stage[0][1].split()) > 2
                 and words[-2].upper() == "AS"}
        if base in names:
            raise ValueError(f"{where}: its last stage builds on the earlier stage {base!r}, which host_process "
                             "cannot follow; run the task on docker")
    workdir, dirs = "/", {"/"}
    copies: list[list[str]] = []
    for word, args in steps:
        line = f"{word} {args}"[:120]
        if word in _IGNORED:
            continue
        if word == "WORKDIR":
            workdir = posixpath.normpath(posixpath.join(workdir, args.strip("\"'")))
            path = workdir
            while path not in dirs:
                dirs.add(path)
                path = posixpath.dirname(path)
            continue
        if word not in ("COPY", "ADD"):
            what = ("runs a command at build time (what it installs or changes, the task may need)" if word == "RUN"
                    else "sets up the image beyond its files (the task's commands would see it)")
            raise ValueError(f"{where}: `{line}` {what}, which host_process cannot follow; run the task on docker")
        copies += _follow_copy(environment, where, line, word, args, workdir, dirs, final)
    if copies and (environment / ".dockerignore").exists():
        raise ValueError(f"{where}: host_process does not follow environment/.dockerignore; run the task on docker")
    return copies


def _follow_copy(environment: Path, where: str, line: str, word: str, args: str, workdir: str, dirs: set[str],
                 final: str | None) -> list[list[str]]:
    def refuse(why: str) -> ValueError:
        return ValueError(f"{where}: `{line}` {why}, which host_process cannot follow; run the task on docker")

    if "$" in args or "<<" in args:
        raise refuse("uses a variable or a here-document")
    words = args.split()
    flags = [w for w in words if w.startswith("--")]
    if any(not (f.startswith("--chown=") or f == "--link") for f in flags):
        raise refuse(f"takes {' '.join(flags)} (another stage or image, or a changed mode)")
    rest = args[len(" ".join(flags)):].strip() if flags else args
    try:
        paths = json.loads(rest) if rest.startswith("[") else rest.split()
    except json.JSONDecodeError:
        raise refuse("is not valid JSON form") from None
    if len(paths) < 2:
        raise refuse("names no source or no destination")
    *sources, dest = paths
    if final in (None, "/"):
        raise refuse("copies files but the Dockerfile sets no WORKDIR (the folder that stands for the workspace)")
    target_dir = posixpath.normpath(posixpath.join(workdir, dest))
    into = dest.endswith("/") or len(sources) > 1 or target_dir in dirs
    copies: list[list[str]] = []
    for source in sources:
        if "://" in source or source.startswith("git@"):
            raise refuse("fetches a URL")
        if word == "ADD" and source.endswith(_ARCHIVES):
            raise refuse("unpacks an archive")
        pattern = posixpath.normpath(source.lstrip("/") or ".")
        if pattern == ".." or pattern.startswith("../"):
            raise refuse("copies from outside the build context (environment/)")
        matches = sorted(environment.glob(pattern)) if pattern != "." else [environment]
        if not matches:
            raise refuse(f"copies {source}, which is not in environment/")
        for match in matches:
            if match.is_dir():  # a folder's contents go into the destination
                files = sorted(p for p in match.rglob("*") if p.is_file())
                pairs = [(f, posixpath.join(target_dir, f.relative_to(match).as_posix())) for f in files]
            else:  # a file goes into a destination folder, else becomes the destination
                inside = into or len(matches) > 1
                pairs = [(match, posixpath.join(target_dir, match.name) if inside else target_dir)]
            for file, target in pairs:
                rel = _inside(target, final)
                if rel is None:
                    raise refuse(f"puts {target} outside the WORKDIR {final}, the folder that stands for the workspace")
                copies.append([file.relative_to(environment).as_posix(), rel])
                parent = posixpath.dirname(target)
                while parent not in dirs:
                    dirs.add(parent)
                    parent = posixpath.dirname(parent)
    return copies


def _seconds(section: dict, where: str) -> float | None:
    value = section.get("timeout_sec")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ValueError(f"task_dir: {where}.timeout_sec must be a positive number of seconds, got {value!r}")
    return float(value)


def _network(section: dict, environment_section: bool = False) -> str | None:
    """The phase policy a task.toml section asks for, if it asks (allowlists become 'none')."""
    mode = section.get("network_mode")
    if mode is None and section.get("allowed_hosts"):
        mode = "allowlist"
    if mode is not None:
        if mode not in _NETWORK_MODES:
            raise ValueError(f"task_dir: network_mode must be one of {sorted(_NETWORK_MODES)}, got {mode!r}")
        return _NETWORK_MODES[mode]
    if environment_section and "allow_internet" in section:
        return "public" if section["allow_internet"] else "none"
    return None


def network_hints(config: dict) -> dict[str, str]:
    """Phase policies from task.toml: [agent] and [verifier] over [environment]; the verifier defaults to none."""
    base = _network(config.get("environment") or {}, environment_section=True)
    hints = {"evaluation_network": _network(config.get("verifier") or {}) or base or "none"}
    run = _network(config.get("agent") or {}) or base
    if run:
        hints["run_network"] = run
    if base:
        hints["baseline_network"] = base
    return hints


def docker_hints(folder: Path, config: dict) -> dict[str, Any]:
    """The task's image for the docker provider: [environment] docker_image, else built from the Dockerfile."""
    environment = folder / ENVIRONMENT
    section = config.get("environment") or {}
    if section.get("docker_image"):
        hints: dict[str, Any] = {"image": str(section["docker_image"])}
    elif (environment / DOCKERFILE).is_file():
        hints = {
            "dockerfile": str(environment / DOCKERFILE),
            "context": str(environment),
            "image": f"agentcompass-task:{str(tree_digest(environment))[:20]}",  # the folder exists
        }
    else:
        return {}
    if section.get("memory_mb") is not None:
        hints["memory"] = f"{int(section['memory_mb'])}m"
    elif section.get("memory") is not None:
        hints["memory"] = str(section["memory"]).lower()
    if section.get("cpus") is not None:
        hints["cpus"] = float(section["cpus"])
    return hints


def _json_safe(value: Any) -> Any:
    """TOML values as JSON (dates become strings)."""
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_safe(v) for v in value]
    return value if isinstance(value, (str, int, float, bool)) or value is None else str(value)


def load_task(folder: Path) -> TaskSpec:
    """The task of one folder; a folder that cannot be loaded is a task whose ``load_error`` says why."""
    try:
        return _load_task(folder)
    except (ValueError, TypeError, OSError) as exc:  # TOML and UTF-8 errors are ValueErrors
        message = str(exc) or type(exc).__name__
        if str(folder) not in message:  # a setting's error names the setting: add the file
            message = f"task_dir: {folder / TASK_TOML}: {message.removeprefix('task_dir: ')}"
        return TaskSpec(task_id=folder.name, metadata={"task_dir": str(folder)}, load_error=message)


def _load_task(folder: Path) -> TaskSpec:
    check_links(folder)
    config = read_task_toml(folder)
    compose = next((name for name in _COMPOSE_FILES if (folder / ENVIRONMENT / name).is_file()), None)
    if compose:
        raise ValueError(
            f"task_dir: {folder} runs its environment from {ENVIRONMENT}/{compose} (services side by side), which "
            "agentcompass does not run; leave the task out (benchmark param task_ids) or give it one "
            f"{ENVIRONMENT}/{DOCKERFILE}"
        )
    if config.get("steps") or (folder / "steps").is_dir():
        raise ValueError(
            f"task_dir: {folder} is a multi-step task ([[steps]] in {TASK_TOML} or a steps/ folder), which agentcompass "
            "does not run (it runs one instruction and one verifier per task); leave the task out (benchmark param "
            "task_ids)"
        )
    instruction = folder / INSTRUCTION
    if not instruction.is_file():
        raise ValueError(f"task_dir: {folder} has no {INSTRUCTION} (the prompt); add it")
    if not (folder / TESTS / TEST_SCRIPT).is_file():
        raise ValueError(f"task_dir: {folder} has no {TESTS}/{TEST_SCRIPT} (the verifier); add it")
    for section in ("verifier", "agent", "solution"):
        if not isinstance(config.get(section) or {}, dict):
            raise ValueError(f"task_dir: {folder / TASK_TOML}: [{section}] must be a table")
    # what planning reads of task.toml, checked now: planning fails for the whole request
    _plan_settings(config)
    metadata = config.get("metadata") or {}
    dockerfile = folder / ENVIRONMENT / DOCKERFILE
    category = metadata.get("category")
    return TaskSpec(
        task_id=folder.name,
        question=instruction.read_text(encoding="utf-8"),
        category=str(category) if category is not None else None,
        metadata={
            "task_dir": str(folder),
            "harbor": {
                "name": (config.get("task") or {}).get("name"),
                "schema_version": str(config.get("schema_version", config.get("version", ""))),
                "metadata": _json_safe(metadata),
            },
            "environment_digest": tree_digest(folder / ENVIRONMENT),
            "workdir": dockerfile_workdir(dockerfile) if dockerfile.is_file() else None,
            # what host_process copies into the workspace, or why it cannot follow the Dockerfile
            "host_process": _host_setup(folder / ENVIRONMENT),
            # read by the Recipes task_environment_hints (networks) and task_dockerfile (the image)
            "environment": {**network_hints(config), "docker": docker_hints(folder, config)},
        },
    )


def _host_setup(environment: Path) -> dict[str, Any]:
    """The Dockerfile followed for host_process: its copies, or the reason it cannot be followed."""
    if not (environment / DOCKERFILE).is_file():  # no Dockerfile (an image named in task.toml): every file, as it is
        files = sorted(p for p in environment.rglob("*") if p.is_file()) if environment.is_dir() else []
        return {"copies": [[f.relative_to(environment).as_posix()] * 2 for f in files], "refused": None}
    try:
        return {"copies": host_copies(environment), "refused": None}
    except ValueError as exc:
        return {"copies": [], "refused": str(exc)}


# --- Harbor's fixed paths in a session ------------------------------------------------------


@dataclass(frozen=True)
class HarborPaths:
    """Where Harbor's directories are in one session, and how task scripts must be rewritten for it."""

    tests: str
    solution: str
    logs: str
    rewrite: dict[str, str]

    @property
    def verifier(self) -> str:
        return posixpath.join(self.logs, "verifier")

    @classmethod
    def native(cls) -> "HarborPaths":
        return cls("/tests", "/solution", "/logs", {})

    @classmethod
    def mapped(cls, root: str, workdir: str | None) -> "HarborPaths":
        base = posixpath.join(root, HOST_HARBOR_DIR)
        rewrite = {f"/{name}": posixpath.join(base, name) for name in ("tests", "solution", "logs")}
        if workdir and workdir != "/" and workdir not in rewrite:
            rewrite[workdir] = root
        return cls(rewrite["/tests"], rewrite["/solution"], rewrite["/logs"], rewrite)

    @classmethod
    def for_plan(cls, plan: TaskDirPlan, root: str) -> "HarborPaths":
        return cls.mapped(root, plan.workdir) if plan.layout == "mapped" else cls.native()


def rewrite_paths(text: str, rewrite: dict[str, str]) -> str:
    """``text`` with every absolute path under a key of ``rewrite`` moved to its value."""
    if not rewrite:
        return text
    roots = "|".join(re.escape(k) for k in sorted(rewrite, key=len, reverse=True))
    return re.sub(f"{_BEFORE}({roots}){_AFTER}", lambda m: rewrite[m.group(1)], text)


def copy_rewritten(source: Path, target: Path, rewrite: dict[str, str]) -> None:
    """Copy ``source`` to ``target``, rewriting the paths in every text file (modes kept)."""
    shutil.copytree(source, target, symlinks=True)
    for file in sorted(p for p in target.rglob("*") if p.is_file() and not p.is_symlink()):
        data = file.read_bytes()
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            continue  # not text: copied as it is
        if "\0" not in text:
            file.write_text(rewrite_paths(text, rewrite), encoding="utf-8")


async def upload_folder(session, source: Path, target: str, rewrite: dict[str, str]) -> None:
    if not rewrite:
        await session.upload(source, target)
        return
    with tempfile.TemporaryDirectory(prefix="agentcompass-harbor-") as staging:
        staged = Path(staging) / source.name
        copy_rewritten(source, staged, rewrite)
        await session.upload(staged, target)


@dataclass
class HarborSolution(ScriptReference):
    """``solution/`` of a task folder: copied to /solution (or its stand-in) and ``solve.sh`` run."""

    layout: str = "native"
    workdir: str | None = None

    async def place(self, session) -> str:
        if self.layout != "mapped":
            return await super().place(session)
        await session.exec(["true"])  # opens the session: its root is known from here on
        paths = HarborPaths.mapped(session.workdir, self.workdir)
        await upload_folder(session, Path(self.source), paths.solution, paths.rewrite)
        return paths.solution

    async def run(self, session):
        try:
            return await super().run(session)
        finally:
            # the stand-in folder goes too: the workspace is the agent's again (unless its time limit ended it)
            if self.layout == "mapped" and not cancelling():
                await after_agent(session, ["rm", "-rf", HOST_HARBOR_DIR], f"removing {HOST_HARBOR_DIR}")


def _env_table(env: Any, where: str) -> dict[str, str]:
    if not isinstance(env, dict):
        raise ValueError(f"task_dir: {where}.env must be a table of names and values, got {env!r}")
    values = {}
    for key, value in env.items():
        if not isinstance(value, (str, int, float)) or isinstance(value, bool):
            raise ValueError(f"task_dir: {where}.env.{key} must be a string, got {value!r}")
        values[str(key)] = str(value)
    return values


def _plan_settings(toml: dict[str, Any]) -> dict[str, Any]:
    """The timeouts and env tables of task.toml that a plan holds."""
    verifier, agent, solution = (toml.get(s) or {} for s in ("verifier", "agent", "solution"))
    return {
        "verifier_timeout": _seconds(verifier, "[verifier]"),
        "verifier_env": _env_table(verifier.get("env") or {}, "[verifier]"),
        "solution_env": _env_table(solution.get("env") or {}, "[solution]"),
        "agent_timeout": _seconds(agent, "[agent]"),
    }


def read_rewards(verifier_files: dict[str, str | None]) -> dict[str, float]:
    """Harbor's reward files as named rewards: every key of reward.json, and reward.txt's number as 'reward'.

    As in Harbor, reward.txt's number wins over a 'reward' key of reward.json;
    the other keys of reward.json are kept. Every value must be a finite number.
    """
    text, data = verifier_files.get("reward.txt"), verifier_files.get("reward.json")
    if text is None and data is None:
        raise ValueError("the verifier wrote neither /logs/verifier/reward.txt nor reward.json")
    rewards: dict[str, float] = {}
    if data is not None:
        try:
            parsed = json.loads(data)
        except json.JSONDecodeError as exc:
            raise ValueError(f"reward.json is not JSON ({exc})") from None
        if not isinstance(parsed, dict):
            raise ValueError("reward.json must be an object of numbers such as {\"reward\": 1.0}")
        for key, value in parsed.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ValueError(
                    f"reward.json's {key!r} is {json.dumps(value)[:80]}, not a number: every value of reward.json "
                    "must be a finite number (a named reward)"
                )
            rewards[key] = float(value)
    if text is not None:
        rewards["reward"] = _reward_number(text)
    if not rewards:
        raise ValueError("reward.json holds no reward (an empty object)")
    return rewards


def pick_score(rewards: dict[str, float], reward_key: str | None) -> float:
    """The score among named rewards: ``reward_key``, else Harbor's pick (the 'reward' key, else the only key)."""
    if reward_key is not None:
        if reward_key not in rewards:
            raise ValueError(
                f"the verifier wrote no reward {reward_key!r} (benchmark param reward_key); it wrote {sorted(rewards)}"
            )
        return rewards[reward_key]
    if "reward" in rewards:
        return rewards["reward"]
    if len(rewards) == 1:
        return next(iter(rewards.values()))
    raise ValueError(
        f"reward.json has no 'reward' key and {len(rewards)} rewards {sorted(rewards)}: set the benchmark param "
        "reward_key to the one that is the score"
    )


def _reward_number(text: str) -> float:
    try:
        value = float(text.strip())
    except ValueError:
        raise ValueError(f"reward.txt must hold one number, got {text.strip()[:80]!r}") from None
    if not math.isfinite(value):
        raise ValueError(f"reward.txt must hold a finite number, got {text.strip()!r}")
    return value


# --- the Benchmark ------------------------------------------------------------------------------


def _native(environment: EnvironmentSpec) -> bool:
    """Harbor's fixed paths exist (docker's container); elsewhere they are mapped into the workspace."""
    return environment.id == "docker"



@BENCHMARKS.register()
class TaskDirBenchmark(BaseBenchmark[TaskDirPlan]):
    """Harbor-format task folders: instruction, Dockerfile environment, test.sh reward, solve.sh reference."""

    id = "task_dir"
    # 2: named rewards, reward_key, the Dockerfile followed on host_process, a sealed verifier;
    # 3: every process of the session ended before the reward files are read
    version = "3"
    config_class = TaskDirConfig
    plan_class = TaskDirPlan

    def load_tasks(self, req: RunRequest) -> list[TaskSpec]:
        config = self.build_config(req)
        tasks = [load_task(folder) for folder in task_folders(tasks_root(config.path))]
        if _native(req.environment):
            return tasks
        # a Dockerfile that host_process cannot follow: that task is refused, the others run
        return [
            TaskSpec(task_id=t.task_id, metadata={"task_dir": t.metadata["task_dir"]}, load_error=f"task_dir: {refused}")
            if t.load_error is None and (refused := t.metadata["host_process"]["refused"]) else t
            for t in tasks
        ]

    def source_fingerprint(self, req: RunRequest) -> str | None:
        # the task list depends on the provider too (host_process refuses what it cannot follow)
        layout = "native" if _native(req.environment) else "mapped"
        return f"{tree_digest(tasks_root(self.build_config(req).path))}-{layout}"

    def build_plan(self, task: TaskSpec, req: RunRequest, environment: EnvironmentSpec) -> TaskDirPlan:
        config = self.build_config(req)
        folder = Path(task.metadata["task_dir"])
        settings = _plan_settings(read_task_toml(folder))
        # a reference is resolved by the job that runs the verifier (or the oracle): an unset one is
        # refused here, before any attempt runs, as the config's own references are
        tables = [("verifier", settings["verifier_env"])]
        if req.execution.preflight is not None or (not req.harness.is_none and HARNESSES.get(req.harness.id).is_oracle):
            tables.append(("solution", settings["solution_env"]))
        for table, env in tables:
            refused = [name for name in references(env) if name not in config.task_env]
            if refused:
                raise ValueError(
                    f"task_dir: {folder / TASK_TOML} [{table}.env] refers to ${{{refused[0]}}}, which this request "
                    f"does not let task folders read; a task folder is data from elsewhere, and this would hand it "
                    f"the job's {refused[0]}. If the task may have it, add it to the benchmark's params: "
                    f"task_env: [{refused[0]}]")
            unset = [name for name in references(env) if name not in os.environ]
            if unset:
                raise ValueError(
                    f"task_dir: {folder / TASK_TOML} [{table}.env] refers to ${{{unset[0]}}}, but environment "
                    f"variable {unset[0]} is not set; export {unset[0]}=... before running (it is read by the job "
                    "that uses it, and never written)")
        has_solution = (folder / SOLUTION / SOLVE_SCRIPT).is_file()
        native = _native(environment)
        return TaskDirPlan(
            task_dir=str(folder),
            layout="native" if native else "mapped",
            workdir=task.metadata.get("workdir"),
            environment_copies=[] if native else task.metadata["host_process"]["copies"],
            tests_digest=tree_digest(folder / TESTS) or "",  # loading checked tests/test.sh is there
            verifier_timeout=config.verifier_timeout or settings["verifier_timeout"] or VERIFIER_TIMEOUT,
            verifier_env=settings["verifier_env"],
            pass_threshold=config.pass_threshold,
            reward_key=config.reward_key,
            solution_digest=tree_digest(folder / SOLUTION) if has_solution else None,
            solution_env=settings["solution_env"],
            agent_timeout=settings["agent_timeout"],
        )

    def aggregate_metrics(self, results: list[RunResult], req: RunRequest) -> MetricResult:
        """The base metrics, and ``rewards/<key>``: the mean of each named reward over the attempts that hold it."""
        metric = super().aggregate_metrics(results, req)
        values: dict[str, list[float]] = {}
        for result in results:
            for key, value in ((result.metadata.get("verifier") or {}).get("rewards") or {}).items():
                values.setdefault(key, []).append(float(value))
        for key in sorted(values):
            metric.metrics[f"rewards/{key}"] = sum(values[key]) / len(values[key])
        return metric

    async def prepare_task(self, task, env, req, plan) -> PreparedTask:
        _ = req
        plan = self._require_plan(plan)
        environment = Path(plan.task_dir) / ENVIRONMENT
        for source, target in plan.environment_copies:  # in the Dockerfile's order: a later COPY wins
            await env.upload(environment / source, target)
        return PreparedTask(
            task_id=task.task_id,
            category=task.category,
            input=TaskInput(prompt=task.question, workspace=WORKSPACE),
            output=TaskOutput(
                answer="Nothing to return: do the task in the workspace (your working directory); "
                "its final state is checked."
            ),
            metadata={"harbor_task": task.metadata["harbor"]["name"] or task.task_id},
        )

    def evaluation_seconds(self, plan: BenchmarkPlan) -> float:
        return self._require_plan(plan).verifier_timeout

    def reference_solution(self, task: TaskSpec, plan: BenchmarkPlan) -> HarborSolution | None:
        if task.load_error is not None:
            return None  # a folder that could not be loaded has no solution; its attempt never runs
        plan = self._require_plan(plan)
        if plan.solution_digest is None:
            raise ValueError(
                f"task_dir: task {task.task_id!r} has no {SOLUTION}/{SOLVE_SCRIPT}, so the oracle cannot run it; "
                "add one or leave the task out (benchmark param task_ids)"
            )
        return HarborSolution(
            source=str(Path(plan.task_dir) / SOLUTION),
            script=SOLVE_SCRIPT,
            target=HarborPaths.native().solution,
            env=dict(plan.solution_env),
            timeout=plan.agent_timeout,
            fingerprint=plan.solution_digest,
            layout=plan.layout,
            workdir=plan.workdir,
        )

    async def evaluate(self, task, prepared, result, env, req, plan) -> RunResult:
        _ = prepared, req
        plan = self._require_plan(plan)
        secrets = list(plan.verifier_env.values())
        # ${VAR} references are resolved only here, in the job that runs the verifier
        env_values = resolve_secret(plan.verifier_env)
        await env.exec(["true"])  # opens the session: its root is known from here on
        paths = HarborPaths.for_plan(plan, env.workdir)
        # a fresh verifier: nothing the agent left at these paths counts (files, links, locked folders)
        owned = [posixpath.join(env.workdir, HOST_HARBOR_DIR)] if plan.layout == "mapped" else [paths.tests, paths.verifier]
        cleared = await env.exec(["sh", "-c", _CLEAR, "sh", paths.verifier, *owned])
        if not cleared.ok or not cleared.stdout.strip().isdigit():
            raise RuntimeError(f"task_dir: could not prepare {paths.verifier} for the verifier: {cleared.stderr.strip()}")
        started = int(cleared.stdout.strip())
        await upload_folder(env, Path(plan.task_dir) / TESTS, paths.tests, paths.rewrite)
        test = posixpath.join(paths.tests, TEST_SCRIPT)
        # the verifier may run the agent's code: when it exits, every process of the session but the provider's
        # init is ended, so nothing it started runs on while its reward files are read
        ran = await env.exec_and_end(
            ["sh", "-c", 'chmod +x "$1" && exec "$1"', "sh", test], env=env_values, timeout=plan.verifier_timeout
        )
        files: dict[str, str | None] = {}
        problems = []
        listed = await env.exec(["sh", "-c", _REWARD_FILES, "sh", paths.verifier])
        for line in listed.stdout.splitlines():
            name, kind, *rest = line.split()
            mtime = int(rest[0]) if rest and rest[0].isdigit() else None
            if kind == "file" and mtime is not None and mtime >= started:
                files[name] = await env.read_text(posixpath.join(paths.verifier, name))
            elif kind == "file" and mtime is None:
                problems.append(f"{name}: its time could not be read (`stat -c %Y` failed in the session)")
            elif kind != "none":
                why = {"link": "is a symbolic link", "other": "is not a regular file"}.get(kind, "is older than the verifier's run")
                problems.append(f"{name} {why}: a reward counts only from a file the verifier wrote")
        verifier = {
            "exit_status": ran.returncode,
            "timed_out": ran.timed_out,
            "stdout": scrub(ran.stdout[-_TAIL:], secrets),
            "stderr": scrub(ran.stderr[-_TAIL:], secrets),
        }
        if ran.timed_out:
            # as in Harbor: a verifier that did not finish gives no verdict, whatever it wrote before
            problems.insert(0, "it did not finish, so no reward it wrote counts")
        try:
            if problems:
                raise ValueError("; ".join(problems))
            rewards = read_rewards(files)
            reward = pick_score(rewards, plan.reward_key)
        except ValueError as exc:
            why = f"timed out after {plan.verifier_timeout} s" if ran.timed_out else f"exited with status {ran.returncode}"
            return dataclasses.replace(
                result, status=TaskStatus.EVAL_ERROR, error_stage="evaluate", correct=None, score=None,
                error=f"task_dir verifier ({TESTS}/{TEST_SCRIPT} {why}): {exc}; its stderr ends: "
                f"{verifier['stderr'][-500:].strip()}",
                metadata={**result.metadata, "verifier": verifier},
            )
        return dataclasses.replace(
            result,
            status=TaskStatus.COMPLETED,
            score=reward,
            correct=reward >= plan.pass_threshold,
            metadata={**result.metadata, "verifier": {**verifier, "rewards": rewards}},
        )
