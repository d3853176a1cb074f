"""The task list is a checkpoint until it exists, then it is read at parse time.

``tasks.json`` and ``plans.json`` (with ``run_info.json``) are written by
checkpoints: on a first run, or when a change rebuilds them, the attempts
appear only once they are written. When all three exist and Snakemake would
not rebuild them, the workflow reads them while it parses instead, and the DAG
is static: Snakemake builds it in one pass rather than building it, then
re-evaluating every job that depends on a checkpoint (most of a no-op rerun's
time at a thousand attempts).

"Would not rebuild" is Snakemake's own rule, read from its own records: the
output exists, its metadata records the params, code and input the rule has
now, it is not marked incomplete, it is not older than its input, and the
invocation does not force it. Any doubt keeps the checkpoint, which is always
correct, only slower.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from . import engine


@dataclass(frozen=True)
class BulkOutput:
    """One output of a bulk rule and what its rule would record for it now."""

    path: Path
    rule: str
    params: tuple[str, ...]
    inputs: tuple[Path, ...] = ()


def _norm(path: str | Path) -> str:
    return os.path.normpath(str(path))


def _forced(workflow, outputs: list[BulkOutput]) -> bool:
    force = engine.forcing(workflow)
    # A job Snakemake spawns (a cluster job runs one) gets --force for its own target job
    # only, never a bulk rule's: those are localrules, built by the main process.
    if force.forceall or (force.forcetargets and engine.is_main_process(workflow)):
        return True
    forced = {_norm(entry) for entry in force.forcerun}
    return any(o.rule in forced or _norm(o.path) in forced for o in outputs)


def _current(workflow, records: engine.Records, output: BulkOutput) -> bool:
    if not output.path.exists():
        return False
    record = records.record(output.path)
    if record is None or record.params is None:
        return False
    if not engine.code_is_current(workflow, output.rule, record.code) or record.params != records.params_of(output.params):
        return False
    if sorted(_norm(p) for p in record.input or []) != sorted(_norm(p) for p in output.inputs):
        return False
    if records.incomplete([output.path]):
        return False
    mtime = output.path.stat().st_mtime
    return all(p.exists() and p.stat().st_mtime <= mtime for p in output.inputs)


def settled(workflow, outputs: list[BulkOutput]) -> bool:
    """True when Snakemake would rebuild none of ``outputs`` in this invocation."""
    records = engine.Records.of(workflow)
    if records is None or _forced(workflow, outputs):
        return False
    return all(_current(workflow, records, output) for output in outputs)
