"""``results_table``: one CSV row per attempt, and the attempts per status."""

from __future__ import annotations

from pathlib import Path

from agentcompass._util import display
from agentcompass._util.jsonio import write_text_atomic
from agentcompass.runtime import ANALYZERS, BaseAnalyzer, RunRequest


@ANALYZERS.register()
class ResultsTableAnalyzer(BaseAnalyzer):
    """Writes results.csv (every column of agentcompass.results.load, one row per attempt) and by_status.csv."""

    id = "results_table"

    def analyze(self, req: RunRequest, results, out_dir: Path) -> list[Path]:
        _ = req
        out_dir.mkdir(parents=True, exist_ok=True)
        frame = results.sort_values(["task_id", "attempt"], kind="stable")
        table = out_dir / "results.csv"
        write_text_atomic(table, display.csv_text(frame, index=False))
        by_status = out_dir / "by_status.csv"
        write_text_atomic(by_status, display.csv_text(frame.groupby("status").size().rename("attempts")))
        return [table, by_status]
