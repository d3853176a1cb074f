"""What a killed run left half-booked, set right before the next run decides what to build.

Snakemake marks a job's outputs incomplete when the job starts and books it
(its record of params, code and input) when the job ends, some time after the
file was written. A run killed in between leaves a finished file marked
incomplete, which Snakemake would build again: a model paid twice. So every
job records its output just before the file appears (``jobs.Jobs``: the
record is written, then the file is renamed into place), and before the next
run's Snakemake reads the markers to decide what to build
(``engine.before_markers_are_read``), each marked file of the folders it
holds is judged:

- the file is there and its record holds the params and code its rule has
  now: it was finished; the marker goes and the file is kept;
- the file is there but not so recorded (a change since, or a write that
  never got its record): the file goes, and it is built again;
- the file is not there: the marker goes (its job is simply built again).

Temporary files of interrupted writes go too. Only a run holding the folder's
lock does this (``locks``): a marker then belongs to a process that is gone.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Callable, Iterable

from agentcompass._util.jsonio import interrupted_writes
from agentcompass._util.logs import LOG

from . import engine


@dataclass(frozen=True)
class Output:
    """A file a job of this process would write, and how to compute the params its rule has now."""

    path: str
    rule: str
    params: Callable[[], Iterable]


@dataclass
class Recovered:
    kept: list[str] = field(default_factory=list)
    rebuilt: list[str] = field(default_factory=list)
    cleared: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.kept or self.rebuilt or self.cleared)

    def summary(self) -> str:
        return (f"a run here was interrupted: kept {len(self.kept)} file(s) it had finished, "
                f"removed {len(self.rebuilt)} it had not, cleared {len(self.cleared)} marker(s) of jobs it had started")


def marked(records: engine.Records | None, paths: Iterable[str]) -> set[str]:
    """Those of ``paths`` Snakemake marks incomplete (quick when nothing is marked anywhere)."""
    if records is None or not records.any_incomplete():
        return set()
    return records.incomplete(list(paths))


def recover(workflow, records: engine.Records, outputs: Iterable[Output]) -> Recovered:
    """Judge every marked file among ``outputs``, in their order (see the module's docstring).

    Give the bulk files first: the attempt files' params are read from them.
    """
    done = Recovered()
    by_path = {o.path: o for o in outputs}
    flagged = marked(records, by_path)
    for path in (p for p in by_path if p in flagged):
        output = by_path[path]
        for leftover in interrupted_writes(path):
            leftover.unlink(missing_ok=True)
        if not os.path.exists(path):
            records.unmark(path)
            done.cleared.append(path)
            continue
        record = records.record(path)
        try:
            now = records.params_of(output.params())
        except Exception:  # its params cannot be known before a checkpoint reruns: build it again
            now = None
        if record is not None and now is not None and record.params == now \
                and engine.code_is_current(workflow, output.rule, record.code):
            records.unmark(path)
            done.kept.append(path)
        else:
            os.unlink(path)
            records.unmark(path)
            done.rebuilt.append(path)
    if done:
        LOG.info(done.summary())
    return done
