"""The text ``agentcompass status`` prints: each request's counts, its failed attempts, its forecast,
and the files that would rerun, grouped by stage (in the stage table's order) and reason."""

from __future__ import annotations

from collections import defaultdict

from agentcompass._util.display import visible
from agentcompass.runtime.models import FailureClass
from agentcompass.stages import names
from agentcompass.stages import stage as stage_of
from agentcompass.status.prediction import PendingJob, RequestStatus

# Failed attempts listed without --verbose.
SHOWN_ERRORS = 5
_CLASSES = frozenset(c.value for c in FailureClass)
# the longest part of an error's first line shown
ERROR_CHARS = 300


def render(statuses: list[RequestStatus], verbose: bool = False) -> str:
    lines = []
    for s in statuses:
        counts = ", ".join(f"{k} {v}" for k, v in sorted(s.counts.items())) or "no attempts yet"
        lines.append(f"{s.name}  ({s.path})")
        lines.append(f"  attempts: {counts}")
        shown = s.errors if verbose else s.errors[:SHOWN_ERRORS]
        for error in shown:
            stage = f" at {error.stage}" if error.stage else ""
            if error.failure_class in _CLASSES:  # a result.json of an older version names none
                stage += f" [{error.failure_class}]"
            first_line = error.error.strip().splitlines()[0] if error.error.strip() else ""
            lines.append(f"    {error.status}{stage}: {visible(error.task_id)} attempt {error.attempt}: "
                         f"{visible(first_line[:ERROR_CHARS])}")
        if len(shown) < len(s.errors):
            lines.append(f"    ... and {len(s.errors) - len(shown)} more failed attempt(s) (-v lists them all)")
        lines += [f"  {line}" for line in s.forecast]
        if s.problem:
            lines.append(f"  cannot tell what would rerun: {s.problem}")
        if not s.pending:
            if not s.problem:
                lines.append("  up to date: nothing would rerun")
            continue
        grouped: dict[tuple[str, str], list[PendingJob]] = defaultdict(list)
        for job in s.pending:
            grouped[(job.rule, job.reason)].append(job)
        lines.append("  would rerun:")
        order = names()
        for (rule, reason), jobs in sorted(grouped.items(), key=lambda kv: order.index(kv[0][0])):
            lines.append(f"    {stage_of(rule).shown} x{len(jobs)}: {reason}")
            if verbose:
                for job in jobs:
                    lines.append(f"      {job.outputs[0] if job.outputs else rule}")
    return "\n".join(lines)
