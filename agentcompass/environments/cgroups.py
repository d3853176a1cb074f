"""Resource limits of a host_process session: one cgroup per session, as a container has.

``memory``, ``cpus`` and ``pids_limit`` mean what they mean for docker: the
memory, CPU time and number of processes of every process the session
started, together (an rlimit would not do: ``RLIMIT_AS`` counts one
process's address space, ``RLIMIT_NPROC`` every process of the user on the
machine). The session's cgroup is made beside nothing but itself, under the
cgroup of the agentcompass process, in each controller's hierarchy (cgroup v1)
or in the unified one (v2); every command joins it before it starts, and its
descendants inherit it. It needs write access to those hierarchies (root, or a
delegated cgroup); where there is none, limits are refused when the config is
resolved.
"""

from __future__ import annotations

import functools
import os
import re
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from agentcompass.runtime.config import ConfigError, parse_int
from agentcompass.runtime.limits import LimitsUnavailableError

_ROOT = Path("/sys/fs/cgroup")
_CPU_PERIOD_US = 100_000
_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
_SIZE = re.compile(r"^([0-9]+(?:\.[0-9]+)?)([bkmg]?)$")
# Joins each cgroup whose cgroup.procs file is named before "--", then runs the rest.
_JOIN = 'while [ "$1" != -- ]; do echo $$ > "$1" || exit 125; shift; done; shift; exec "$@"'


# each cgroup controller and the param whose limit it enforces
LIMIT_PARAMS = {"memory": "memory", "cpu": "cpus", "pids": "pids_limit"}


def memory_bytes(size: str) -> int:
    """'512m' or '2g' (as docker's ``--memory`` takes them) in bytes."""
    match = _SIZE.match(str(size).strip().lower())
    if not match:
        raise ConfigError(f"memory must be a size such as '512m' or '2g', got {size!r}")
    return int(float(match.group(1)) * _UNITS[match.group(2)])


def check_limits(config) -> None:
    """Validate and normalise a config's ``memory``, ``cpus`` and ``pids_limit`` (docker's names), in place."""
    if config.memory is not None:
        if isinstance(config.memory, bool):
            raise ConfigError(f"memory must be a size such as '512m' or '2g', got {config.memory!r}")
        memory_bytes(str(config.memory))
        config.memory = str(config.memory)
    if config.cpus is not None:
        try:
            config.cpus = float(config.cpus)
        except (TypeError, ValueError):
            raise ConfigError(f"cpus must be a number of cores, got {config.cpus!r}") from None
        if not config.cpus > 0:
            raise ConfigError(f"cpus must be positive, got {config.cpus!r}")
    if config.pids_limit is not None:
        config.pids_limit = parse_int(config.pids_limit, "pids_limit", minimum=1)


@dataclass(frozen=True)
class Limits:
    memory: int | None = None  # bytes
    cpus: float | None = None
    pids: int | None = None

    def __bool__(self) -> bool:
        return any(v is not None for v in (self.memory, self.cpus, self.pids))

    def controllers(self) -> list[str]:
        wanted = [("memory", self.memory), ("cpu", self.cpus), ("pids", self.pids)]
        return [name for name, value in wanted if value is not None]


def _unified() -> bool:
    return (_ROOT / "cgroup.controllers").exists()


def _own_path(controller: str) -> str:
    """The cgroup of this process in ``controller``'s hierarchy ('' for the unified one)."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, names, path = line.split(":", 2)
        if names.split(",") == [""] if controller == "" else controller in names.split(","):
            return path
    raise LimitsUnavailableError(f"this process is in no cgroup of the {controller or 'unified'} hierarchy")


def _parent(controller: str) -> Path:
    """Where the session's cgroup is made for ``controller``."""
    if _unified():
        return _ROOT / _own_path("").lstrip("/")
    for mount in _ROOT.iterdir():
        if controller in mount.name.split(","):
            return mount / _own_path(controller).lstrip("/")
    raise LimitsUnavailableError(f"no cgroup hierarchy has the {controller} controller (not under {_ROOT})")


def _settings(limits: Limits, unified: bool) -> dict[str, dict[str, str]]:
    """The files to write, by controller."""
    out: dict[str, dict[str, str]] = {}
    if limits.memory is not None:
        out["memory"] = {"memory.max" if unified else "memory.limit_in_bytes": str(limits.memory)}
    if limits.cpus is not None:
        quota = max(int(limits.cpus * _CPU_PERIOD_US), 1000)
        out["cpu"] = (
            {"cpu.max": f"{quota} {_CPU_PERIOD_US}"} if unified
            else {"cpu.cfs_period_us": str(_CPU_PERIOD_US), "cpu.cfs_quota_us": str(quota)}
        )
    if limits.pids is not None:
        out["pids"] = {"pids.max": str(limits.pids)}
    return out


class SessionCgroup:
    """The cgroup(s) of one session, with its limits written; commands join it through ``wrap``."""

    def __init__(self, directories: list[Path]) -> None:
        self.directories = directories

    @classmethod
    def create(cls, limits: Limits, name: str) -> "SessionCgroup":
        unified = _unified()
        made: list[Path] = []
        try:
            for controller, files in _settings(limits, unified).items():
                directory = _parent(controller) / name
                if unified:
                    # a child may use a controller only when its parent hands it down
                    (directory.parent / "cgroup.subtree_control").write_text(f"+{controller}")
                if directory not in made:  # v2: one directory for every controller
                    directory.mkdir()
                    made.append(directory)
                for file, value in files.items():
                    (directory / file).write_text(value)
        except (OSError, LimitsUnavailableError) as exc:
            cls(made).remove()
            raise LimitsUnavailableError(
                f"host_process cannot make a cgroup for the limits {limits.controllers()} here: {exc}; "
                "limits need write access to the cgroup hierarchy",
                tuple(LIMIT_PARAMS[controller] for controller in limits.controllers()),
                "run as root, or in a delegated cgroup, or use the docker environment",
            ) from None
        return cls(made)

    def wrap(self, argv: list[str]) -> list[str]:
        """``argv``, started in the session's cgroup (its descendants stay there)."""
        procs = [str(d / "cgroup.procs") for d in self.directories]
        return ["sh", "-c", _JOIN, "sh", *procs, "--", *argv]

    def remove(self, seconds: float = 5.0) -> None:
        """Remove the cgroups once their processes are gone (they are being killed)."""
        deadline = time.monotonic() + seconds
        for directory in self.directories:
            while True:
                try:
                    directory.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        break  # left for the machine's owner: an empty cgroup holds nothing
                    time.sleep(0.02)
        self.directories = []


@functools.lru_cache(maxsize=8)
def require_limits(controllers: tuple[str, ...]) -> None:
    """Raise ``LimitsUnavailableError`` unless a session cgroup with ``controllers`` can be made here."""
    probe = Limits(
        memory=1 << 30 if "memory" in controllers else None,
        cpus=1.0 if "cpu" in controllers else None,
        pids=1000 if "pids" in controllers else None,
    )
    SessionCgroup.create(probe, f"agentcompass-probe-{os.getpid()}-{uuid.uuid4().hex[:8]}").remove()
