"""Each built-in scanner's precision and recall on the labelled set of transcripts (tests/data/scanner_set/).

    python scripts/scanner_figures.py [--set tests/data/scanner_set] [--json]

Every case of the set is read as the scan stage reads an attempt (``read_transcript`` on its folder, with its
result.json and its task) and scanned by each built-in scanner as the stage does (``scan_with``). A case is a
positive of a scanner when its label holds the scanner's category (labels.json; the labels are written by hand
in scripts/make_scanner_set.py, which rebuilds the set). The table gives, per scanner: cases, positives, true
positives, false positives, false negatives, precision (tp / (tp + fp)) and recall (tp / (tp + fn)); then each
miss and each false alarm by case name, with the scanner's evidence or the case's description as the reason.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agentcompass.pipeline.bodies.attempt import scan_with  # noqa: E402
from agentcompass.plugins import load_builtin_components  # noqa: E402
from agentcompass.runtime.models import ScanFinding, ScannerSpec, TaskSpec  # noqa: E402
from agentcompass.runtime.transcript import read_transcript  # noqa: E402

SET = ROOT / "tests" / "data" / "scanner_set"
BUILT_IN = ("grader_access", "history_rewrite", "network", "gave_up")
# the most characters of the evidence a false alarm's reason quotes
REASON_LIMIT = 100


def findings(folder: Path) -> dict[str, ScanFinding]:
    """Each built-in scanner's finding in the case ``folder``, as the scan stage makes it."""
    load_builtin_components()
    result = json.loads((folder / "result.json").read_text(encoding="utf-8"))
    task = TaskSpec.from_dict(json.loads((folder / "task.json").read_text(encoding="utf-8")))
    transcript = read_transcript(folder, result, task)
    return {sid: scan_with(ScannerSpec(id=sid), transcript) for sid in BUILT_IN}


def labels(path: Path = SET) -> dict[str, dict[str, Any]]:
    """case -> {"labels": its categories, "description": ...}, from the set's labels.json."""
    return json.loads((path / "labels.json").read_text(encoding="utf-8"))["cases"]


def _ratio(part: int, whole: int) -> float | None:
    return round(part / whole, 3) if whole else None


def figures(path: Path = SET) -> dict[str, dict[str, Any]]:
    """scanner -> its counts, precision, recall, and its misses and false alarms (case, reason)."""
    cases = labels(path)
    found = {name: findings(path / name) for name in sorted(cases)}
    table: dict[str, dict[str, Any]] = {}
    for sid in BUILT_IN:
        tp = fp = fn = 0
        misses, alarms = [], []
        for name, case in sorted(cases.items()):
            finding = found[name][sid]
            if finding.error is not None:
                raise SystemExit(f"{sid} failed on {name}: {finding.error}")
            truth = finding.category in case["labels"]
            if truth and finding.flagged:
                tp += 1
            elif truth:
                fn += 1
                misses.append({"case": name, "reason": case["description"]})
            elif finding.flagged:
                fp += 1
                quoted = (finding.evidence[0].quote if finding.evidence else "")[:REASON_LIMIT].replace("`", "'")
                alarms.append({"case": name, "reason": f"flagged `{quoted}`"})
        table[sid] = {"cases": len(cases), "positives": tp + fn, "true_positives": tp, "false_positives": fp,
                      "false_negatives": fn, "precision": _ratio(tp, tp + fp), "recall": _ratio(tp, tp + fn),
                      "misses": misses, "false_alarms": alarms}
    return table


def _shown(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def table_text(table: dict[str, dict[str, Any]]) -> str:
    """The figures as a Markdown table, then each miss and false alarm: what the guide shows."""
    lines = ["| scanner | cases | positives | true positives | false positives | false negatives | precision | recall |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for sid, row in table.items():
        lines.append(f"| `{sid}` | {row['cases']} | {row['positives']} | {row['true_positives']} | "
                     f"{row['false_positives']} | {row['false_negatives']} | {_shown(row['precision'])} | "
                     f"{_shown(row['recall'])} |")
    lines.append("")
    for sid, row in table.items():
        for kind, key in (("missed", "misses"), ("false alarm", "false_alarms")):
            for item in row[key]:
                lines.append(f"- `{sid}` {kind}: `{item['case']}`: {item['reason']}")
    return "\n".join(lines).rstrip() + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--set", type=Path, default=SET, help="the labelled set (default: %(default)s)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    table = figures(args.set)
    print(json.dumps(table, indent=1) if args.json else table_text(table), end="" if not args.json else "\n")


if __name__ == "__main__":
    main()
