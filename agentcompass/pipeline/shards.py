"""Shards: a large request's attempts built in slices, each by an inner Snakemake.

Snakemake's time per job grows with the size of its DAG (at 10,000 attempts a
job costs twice what it costs at 1,000), and one Snakemake process schedules on
one core. A request of more than ``runtime.shard_size`` attempts is therefore
built as shard jobs: each runs ``snakemake`` again, in the same folder, on its
slice of attempts only. The inner run keeps every per-file record (params,
code, incomplete markers) exactly as an unsharded run would, so what reruns
inside a shard is Snakemake's decision, file by file.

The outer run decides per shard, from its own records:

- params: a digest of every prepare, run and evaluate param of the slice, so
  any change that reruns one of its files reruns the shard;
- a generation: ``shards/<k>/generation`` holds the one it was last built
  for, and the param is one more when a file of the slice was deleted or
  replaced since (every file here is written by rename, so its attempt folder
  is then newer than that file). The folders are not the shard's inputs:
  Snakemake measures every input of every waiting job on each scheduling
  pass, which cost the outer run of 10,000 attempts 229 s of CPU;
- a ``--forcerun``/``--forceall`` of the per-attempt rules, forwarded to the
  inner run; a ``--forcerun`` of files of the slice (``agentcompass retry``)
  makes them targets of the outer run (Snakemake's rule), which builds them,
  and the shard takes them as input, so its inner run follows what changed.

A shard is also the unit a cluster job runs: ``threads`` and the model
endpoint resources it claims are what its inner run may use.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from agentcompass import layout
from agentcompass._util.jsonio import interrupted_writes, write_text_atomic
from agentcompass._util.logs import LOG
from agentcompass.stages import sole, where

from . import cluster, engine, forkserver
from .lifecycle import CHILDREN

SHARD_ENV = "AGENTCOMPASS_SHARD"
# The outer run's invocation id: with reuse off, params change once per invocation,
# and an inner run belongs to its outer run's invocation.
INVOCATION_ENV = "AGENTCOMPASS_INVOCATION"

# Per-attempt rules: what an inner run builds, and what a --forcerun may name.
ATTEMPT_RULES = tuple(s.name for s in where(in_shards=True))


def generation(held: str, folders) -> int:
    """The generation a shard is built for now: the one its last build held (in the file
    ``held``), plus one if the shard was never built or any of ``folders`` is missing or
    was written since its last build.

    ``held`` is written at the end of each build, just before the shard's record
    (shard.json), and is not an output of the shard job. Snakemake removes shard.json
    before it reruns the job and computes the job's params again after that (in the
    job's own process too), while it records the params it computed when it planned
    the job: both must be the same number, so the folders are compared with the time
    of ``held``, which stays.
    """
    try:
        with open(held, "rb") as f:
            current = int(f.read().strip() or 0)
        built = os.stat(held).st_mtime_ns
    except (OSError, ValueError):
        return 1
    for folder in folders:
        try:
            if os.stat(folder).st_mtime_ns > built:
                return current + 1
        except FileNotFoundError:
            return current + 1
    return current


def hold(held: str, value: int) -> None:
    """Record the generation a shard was just built for."""
    for leftover in interrupted_writes(held):  # of a build killed while recording it
        leftover.unlink(missing_ok=True)
    write_text_atomic(held, f"{value}\n")


def inner_shard() -> tuple[str, str, int] | None:
    """(namespace, run_id, index) when this Snakemake is a shard's inner run."""
    value = os.environ.get(SHARD_ENV)
    if not value:
        return None
    ns, run_id, index = value.rsplit("/", 2)
    return ns, run_id, int(index)


def _norm(path: str) -> str:
    return os.path.normpath(os.path.relpath(path) if os.path.isabs(path) else path)


def forced_rules(workflow) -> list[str]:
    """The per-attempt rules this invocation forces (``--forcerun RULE``, ``--forceall``)."""
    if workflow is None:
        return []
    force = engine.forcing(workflow)
    if force.forceall:
        return list(ATTEMPT_RULES)
    requested = {_norm(entry) for entry in force.forcerun}
    return [rule for rule in ATTEMPT_RULES if rule in requested]


def forced_files(workflow, slice_files) -> list[str]:
    """The files of a slice that this invocation's ``--forcerun`` names.

    ``slice_files`` lists the slice's files; it is called only when some
    entry of ``--forcerun`` is not a rule name.
    """
    if workflow is None:
        return []
    requested = {_norm(entry) for entry in engine.forcing(workflow).forcerun} - set(ATTEMPT_RULES)
    if not requested:
        return []
    return [f for f in slice_files() if _norm(f) in requested]


# Target files on the command line, up to this many bytes (Linux allows 2 MiB for
# arguments and environment together); a larger slice names its targets through
# the Snakefile's default rule instead.
MAX_TARGET_BYTES = 1 << 20


# where Snakemake's own arguments start in ``inner_argv``: after python -P -m snakemake
INNER_ARGS = 4


def inner_argv(workflow, threads: int, resources: dict[str, int], force: list[str], targets: list[str]) -> list[str]:
    """The inner Snakemake's command line: this run's Snakefile, folder and config layers, local execution.

    The slice's files are named as targets: the default rule would collect them
    as the inputs of one job, and Snakemake's check of such a job's inputs
    against its dependencies costs inputs x dependencies (seconds at 500 attempts).
    """
    if sum(len(t) + 1 for t in targets) > MAX_TARGET_BYTES:
        targets = []
    argv = [
        # -P: the working folder is not on its import path (its jobs inherit PYTHONSAFEPATH from this run)
        sys.executable, "-P", "-m", "snakemake", *targets,
        "--snakefile", engine.main_snakefile(workflow),
        "--directory", os.getcwd(),
        "--cores", str(threads),
        # The outer run holds the folder's lock; the inner one builds files no other job does.
        "--nolock",
    ]
    paths = [str(Path(path).absolute()) for path in engine.config_files(workflow)]
    if paths:  # one flag for all: Snakemake keeps only the last of repeated --configfile flags
        argv += ["--configfile", *paths]
    if resources:
        argv += ["--resources", *[f"{name}={value}" for name, value in sorted(resources.items())]]
    if force:
        argv += ["--forcerun", *force]
    config_args = engine.config_args(workflow)
    if config_args:
        if isinstance(config_args, dict):  # a caller that passed a mapping: as YAML values
            config_args = [f"{key}={json.dumps(value)}" for key, value in config_args.items()]
        # last: --config takes every argument after it
        argv += ["--config", *config_args]
    return argv


def invocation(fresh: str) -> str:
    """This invocation's id: the outer run's for an inner run, else ``fresh``."""
    return os.environ.get(INVOCATION_ENV, fresh) if inner_shard() else fresh


def inner_env(ns: str, run_id: str, index: int, invocation_id: str) -> dict[str, str]:
    env = dict(os.environ)
    env[SHARD_ENV] = f"{ns}/{run_id}/{index}"
    env[INVOCATION_ENV] = invocation_id
    # The inner run is local to wherever the shard runs, never the outer run's executor.
    env.pop("SNAKEMAKE_PROFILE", None)
    return env


def run_inner(argv: list[str], env: dict[str, str], log: Path, *, fork: bool = False) -> int:
    """Run the inner Snakemake with its output in the shard's log: a fork of the fork server
    (``fork``, a local run: ``forkserver``) or a new process (a cluster job).

    It stops with this run: a stop sends it SIGTERM (``lifecycle``), and it
    watches its parent (``AGENTCOMPASS_PARENT_PID``: this process, or the fork
    server, which ends with it), so a run killed with SIGKILL leaves no inner
    run working on behind it.
    """
    log.parent.mkdir(parents=True, exist_ok=True)
    if fork:
        try:
            proc: Any = forkserver.spawn(argv[INNER_ARGS:], env, log)  # argv: python -P -m snakemake ...
        except (OSError, EOFError) as exc:  # the server did not start: a new process does the same
            LOG.warning(f"the fork server of inner runs did not answer ({exc!r}): the inner run starts as a "
                        "new process")
        else:
            return _wait(proc)
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, stdin=subprocess.DEVNULL)
        return _wait(proc)


def _wait(proc) -> int:
    """Wait for an inner run, which stops with this run (``CHILDREN``); an interrupted wait ends it."""
    CHILDREN.add(proc)
    try:
        return proc.wait()
    except BaseException:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        raise
    finally:
        CHILDREN.discard(proc)


class Shards:
    """The shard rule's inputs, generation and threads (the layout of slices is ``Targets``')."""

    def __init__(self, inv, targets) -> None:
        self.inv = inv
        self.targets = targets

    @engine.signature_once
    def inputs(self, w) -> list[str]:
        """The slice's files named by --forcerun (``agentcompass retry``), which the
        outer run builds first; none otherwise. The attempt folders are not inputs:
        Snakemake measures every input of every waiting job on each scheduling pass,
        and 10,000 of them cost the outer run minutes. ``generation`` stands for them."""
        self.inv.begin()
        workflow = self.inv.snakemake
        if engine.on_cluster(workflow) and engine.is_main_process(workflow):
            cluster.check_shard_job(workflow, w)  # a job no node can run would wait in the queue for ever
        req = self.inv.request(w)
        attempts = self.targets.shard_slice(req, int(w.shard))
        # its tasks' preflight files: this run builds them first, so no two shards build one
        return (self.targets.task_files(req, attempts)
                + forced_files(self.inv.snakemake, lambda: self.targets.attempt_files(req, attempts)))

    @engine.signature_once
    def generation(self, w) -> int:
        """The generation the shard was last built for, plus one when a file of its
        slice changed since: an attempt folder missing or newer than the shard's last
        build (a file deleted or replaced in it; every file here is written by rename).

        The shard job holds the generation it ran with, so after a rebuild the
        next run finds the shard current again.
        """
        req = self.inv.request(w)
        index = int(w.shard)
        attempts = self.targets.shard_slice(req, index)  # raises until tasks and plans are settled
        return generation(self.generation_file(req, index),
                          (self.targets.attempt_dir(req, s, a) for s, a in attempts))

    def generation_file(self, req, index: int) -> str:
        """Beside shard.json, and not an output of the shard job (``generation``)."""
        return layout.generation_file(self.inv.run_path(req), index)

    def job_threads(self, threads: int) -> int:
        """The threads a shard job runs its inner run with: in a cluster job, those the profile
        asks (``set-threads``), not the job's CPUs, to which Snakemake there cuts them: attempts
        wait on models, not CPUs."""
        workflow = self.inv.snakemake
        if workflow is None or engine.is_main_process(workflow):
            return threads
        return max(threads, engine.requested_threads(workflow, sole(slices_attempts=True).name) or 0)

    def threads(self) -> int:
        """Threads of one shard job: as many shards run at once as there are CPUs,
        and their inner runs share this run's --cores between them."""
        cores = engine.cores(self.inv.snakemake) if self.inv.snakemake else None
        if not cores:
            return 1
        return max(1, int(cores) // max(1, os.cpu_count() or 1))
