"""The scan contracts: what a transcript scanner found in one attempt, and scan.json, every scanner's finding.

A finding never changes a score: it stands beside it (docs/results.md). Its evidence quotes the agent's
own text, cut to ``QUOTE_LIMIT`` characters and made printable by the scanner that wrote it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .codec import OMIT_EMPTY, Contract, ContractError

# the most characters of one quote of the transcript a finding holds
QUOTE_LIMIT = 200
# the most pieces of evidence one finding holds (a flag needs one; more is the report's to show)
EVIDENCE_LIMIT = 20


@dataclass
class ScanEvidence(Contract):
    """One place of the transcript a finding points at: the step (the line of trajectory.jsonl, from 0),
    the tool call made there, the file it names and a short quote."""

    step: int | None = field(default=None, metadata={"description": "the line of trajectory.jsonl, from 0"})
    tool: str | None = field(default=None, metadata={"description": "the tool (or command) the agent called"})
    file: str | None = field(default=None, metadata={"description": "the file or address it names"})
    quote: str = field(default="", metadata={"description": "the agent's text there, cut and made printable"})
    # left out while None: the evidence of a scanner of one category (every built-in's) is written as before
    category: str | None = field(default=None, metadata={
        OMIT_EMPTY: True, "description": "the category this evidence is for, when its scanner asks about several "
                                         "(the judge scanner)"})

    def __post_init__(self) -> None:
        super().__post_init__()
        if len(self.quote) > QUOTE_LIMIT:
            raise ContractError(f"ScanEvidence.quote holds at most {QUOTE_LIMIT} characters, got {len(self.quote)}")


@dataclass
class ScanFinding(Contract):
    """What one scanner found in one attempt: flagged or not, the category, how sure, and where.

    ``error`` is set (and ``flagged`` false) when the scanner could not read what it needed."""

    id: str
    version: str
    flagged: bool
    category: str
    confidence: float = field(metadata={"description": "from 0 (no reason to believe it) to 1 (certain)"})
    evidence: list[ScanEvidence] = field(default_factory=list)
    params: dict[str, Any] = field(default_factory=dict)
    error: str | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0.0 <= self.confidence <= 1.0:
            raise ContractError(f"ScanFinding.confidence must be within 0 and 1, got {self.confidence!r}")
        if len(self.evidence) > EVIDENCE_LIMIT:
            self.evidence = self.evidence[:EVIDENCE_LIMIT]


@dataclass
class ScanRecord(Contract):
    """scan.json of one attempt: each selected scanner's finding, in the request's order."""

    task_id: str
    attempt: int
    flagged: bool = field(metadata={"description": "whether any scanner flagged the attempt"})
    scanners: list[ScanFinding] = field(default_factory=list)
