"""``results_table``: one CSV row per attempt, and the accuracy per category."""

from __future__ import annotations

from pathlib import Path

from agentcompass.runtime import ANALYZERS, BaseAnalyzer, RunRequest, RunResult


@ANALYZERS.register()
class ResultsTableAnalyzer(BaseAnalyzer):
    """Writes results.csv (one row per attempt) and by_status.csv (counts per status)."""

    id = "results_table"

    def analyze(self, req: RunRequest, results: list[RunResult], out_dir: Path) -> list[Path]:
        out_dir.mkdir(parents=True, exist_ok=True)
        rows = [
            {
                "task_id": r.task_id,
                "attempt": r.attempt,
                "status": r.status.value,
                "correct": r.correct,
                "score": r.score,
                "error": r.error or "",
            }
            for r in results
        ]
        import pandas as pd  # imported when a report is written: it costs a second at every parse

        frame = pd.DataFrame(rows, columns=["task_id", "attempt", "status", "correct", "score", "error"])
        frame = frame.sort_values(["task_id", "attempt"], kind="stable")
        table = out_dir / "results.csv"
        frame.to_csv(table, index=False)
        by_status = out_dir / "by_status.csv"
        frame.groupby("status").size().rename("attempts").to_csv(by_status)
        return [table, by_status]
