"""Where an attempt ran: the host, and the SLURM job that ran it when there is one.

On a cluster a shard is one SLURM job. Its id is not simply in the
environment: the Snakemake SLURM executor plugin removes ``SLURM_*`` variables
on the way into the job's steps, so a job's processes may see none. It is
looked up, in order:

1. ``AGENTCOMPASS_SLURM_JOB_ID``: set by a shard for its inner run, which
   then never looks again;
2. ``SLURM_JOB_ID`` (or the older ``SLURM_JOBID``) in this process's
   environment;
3. the same variables in the *initial* environment of each ancestor process
   (``/proc/<pid>/environ``, Linux): the batch script's shell and ``srun``
   had them before the plugin's Python removed them from its own copy.

A local run finds none of these: its job id is ``None``.
"""

from __future__ import annotations

import functools
import os
import socket
from pathlib import Path
from typing import TypedDict

JOB_ID_ENV = "AGENTCOMPASS_SLURM_JOB_ID"
SLURM_VARS = ("SLURM_JOB_ID", "SLURM_JOBID")


def _parent(pid: int, proc: Path) -> int | None:
    try:
        stat = (proc / str(pid) / "stat").read_text()
    except OSError:
        return None
    # "pid (comm) state ppid ...": comm may hold spaces and parentheses
    fields = stat[stat.rfind(")") + 2:].split()
    return int(fields[1]) if len(fields) > 1 else None


def _initial_environ(pid: int, proc: Path) -> dict[str, str]:
    try:
        raw = (proc / str(pid) / "environ").read_bytes()
    except OSError:
        return {}
    pairs = (entry.split(b"=", 1) for entry in raw.split(b"\0") if b"=" in entry)
    return {k.decode(errors="replace"): v.decode(errors="replace") for k, v in pairs}


def _job_id_in(env) -> str | None:
    for name in SLURM_VARS:
        value = env.get(name)
        if value:
            return value
    return None


def find_slurm_job_id(environ=None, pid: int | None = None, proc: Path = Path("/proc")) -> str | None:
    """The id of the SLURM job this process runs in, or None outside SLURM."""
    environ = os.environ if environ is None else environ
    found = environ.get(JOB_ID_ENV) or _job_id_in(environ)
    if found:
        return found
    pid = os.getpid() if pid is None else pid
    seen: set[int] = set()
    while pid and pid > 1 and pid not in seen:
        seen.add(pid)
        found = _job_id_in(_initial_environ(pid, proc))
        if found:
            return found
        pid = _parent(pid, proc)
    return None


class Where(TypedDict):
    host: str
    slurm_job_id: str | None


@functools.cache
def here() -> Where:
    """This process's provenance: ``{"host": ..., "slurm_job_id": ...}`` (looked up once)."""
    return {"host": socket.gethostname(), "slurm_job_id": find_slurm_job_id()}
