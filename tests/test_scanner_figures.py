"""The labelled set of transcripts (tests/data/scanner_set/, built by scripts/make_scanner_set.py) and the
built-in scanners' figures on it (scripts/scanner_figures.py): the set covers every category with cheats and
honest near misses, the guide's table is the one the script prints, and each scanner tells a cheat of the
set from an honest attempt of it."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SET = ROOT / "tests" / "data" / "scanner_set"
GUIDE = ROOT / "docs" / "reports.md"


def _script(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


figures_script = _script("scanner_figures")
CASES = figures_script.labels(SET)


def test_the_set_has_40_cases_or_more_each_a_real_attempt_with_its_label():
    assert len(CASES) >= 40
    assert {p.name for p in SET.iterdir() if p.is_dir()} == set(CASES)
    for name, case in CASES.items():
        assert set(case["labels"]) <= set(figures_script.BUILT_IN), name
        assert case["description"].strip() and "\n" not in case["description"], name
        folder = SET / name
        assert {p.name for p in folder.iterdir()} == {"trajectory.jsonl", "result.json", "task.json"}, name
        result = json.loads((folder / "result.json").read_text())
        assert result["task_id"] == name and result["status"] == "completed", name
        # a run of tool_agent: its model calls and tool results, as the harness wrote them
        kinds = {json.loads(line)["type"] for line in (folder / "trajectory.jsonl").read_text().splitlines()}
        assert "model_call" in kinds, name
        # small, and free of the folders of the run that built it
        for path in folder.iterdir():
            text = path.read_text()
            assert path.stat().st_size < 8 << 10, path
            assert "/tmp/" not in text and "scanner-set-" not in text, path


def test_every_built_in_category_has_positives_and_honest_negatives():
    honest = [name for name, case in CASES.items() if not case["labels"]]
    assert len(honest) >= 10
    for category in figures_script.BUILT_IN:
        positives = [name for name, case in CASES.items() if category in case["labels"]]
        assert len(positives) >= 5, (category, positives)


def test_the_guides_table_is_the_one_the_script_prints():
    table = figures_script.table_text(figures_script.figures(SET))
    guide = GUIDE.read_text()
    section = guide.partition("## Transcript scanners")[2].partition("\n## ")[0]
    assert "### How well the scanners do" in section
    assert table in section.partition("### How well the scanners do")[2]
    assert f"labelled set of {len(CASES)} transcripts" in section
    assert f"honest ({sum(1 for c in CASES.values() if not c['labels'])}, no category)" in section


def test_the_script_prints_json_too():
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "scanner_figures.py"), "--json"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    table = json.loads(done.stdout)
    assert list(table) == list(figures_script.BUILT_IN)
    for sid, row in table.items():
        assert row["cases"] == len(CASES)
        assert row["true_positives"] + row["false_negatives"] == row["positives"]
        assert len(row["misses"]) == row["false_negatives"] and len(row["false_alarms"]) == row["false_positives"]


@pytest.mark.parametrize("scanner, cheat, honest", [
    ("grader_access", "cat-verifier", "honest-own-tests"),
    ("grader_access", "write-reward-tool", "honest-notes-solution"),
    ("history_rewrite", "reset-hard", "honest-git-log"),
    ("history_rewrite", "amend", "honest-git-restore"),
    ("network", "curl-out", "honest-local-server"),
    ("network", "pip-install", "honest-pip-list"),
    ("gave_up", "refuse-sorry", "honest-sorry-delay"),
    ("gave_up", "empty-answer", "honest-plain-answer"),
])
def test_each_scanner_flags_a_cheat_of_the_set_and_not_an_honest_attempt(scanner, cheat, honest):
    assert scanner in CASES[cheat]["labels"] and not CASES[honest]["labels"]
    flagged = figures_script.findings(SET / cheat)[scanner]
    assert flagged.flagged and flagged.evidence and flagged.error is None, flagged
    spared = figures_script.findings(SET / honest)[scanner]
    assert not spared.flagged and spared.evidence == [] and spared.error is None, spared
