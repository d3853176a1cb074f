"""The report of a scanned run: its Flagged attempts, each piece of evidence linked to its step, and the
attempts table's flagged column; what scan.json says is the agent's text, shown as text.

One real run builds it: example_exact_match with the chat harness against a scripted model on 127.0.0.1
that refuses one task ("I'm sorry, ...": the gave_up scanner flags it) and answers the other right.
The hostile case is that run's folder copied, with a scan.json edited as an attacker would have it, and
its report built again (``agentcompass.report.build``).
"""

from __future__ import annotations

import html
import json
import re
import shutil
from html.parser import HTMLParser
from pathlib import Path

import pytest
from conftest import agentcompass

from agentcompass import report, results
from agentcompass.testing.endpoint import ScriptedEndpoint, completion

REFUSAL = "I'm sorry, I can't help with that."
FLAGGED = "capital-france"
RIGHT = "capital-japan"
# what an attacker puts in scan.json: markup that would close the page's script, a javascript: URL as a file,
# and steps that are no line of the trajectory (huge, negative, not whole numbers)
HOSTILE_QUOTE = '</script><script>window.injected=1</script><img src=x onerror="window.injected=2">'
HOSTILE_TOOL = "<b id=\"injected\">bash</b>"
HOSTILE_FILE = "javascript:window.injected=3"
BAD_STEPS = [10**30, -1, "0", 1.5, True, 2**53 + 1]


def refusal_or_right(body) -> tuple[int, dict]:
    question = next(m["content"] for m in body["messages"] if m["role"] == "user")
    return 200, completion(REFUSAL if "France" in question else "Tokyo")


def build_flagged_run(workdir: Path) -> Path:
    """The run folder of a real two-task run scanned by gave_up, in ``workdir``: one attempt flagged."""
    with ScriptedEndpoint(refusal_or_right) as endpoint:
        done = agentcompass(workdir, "run", "example_exact_match", "chat", "scripted", "--base-url",
                            endpoint.base_url, "-b", "limit=2", "--scanner", "gave_up")
    assert done.returncode == 0, done.stderr[-3000:]
    assert len(endpoint.requests) == 2
    return next(workdir.glob("results/*/*/report")).parent


def make_hostile(run_dir: Path, dest: Path) -> Path:
    """``run_dir`` copied to ``dest``, its flagged attempt's scan.json holding what an attacker would write, and
    its report built again; the copy's folder."""
    shutil.copytree(run_dir, dest, symlinks=True)
    scan_file = dest / "attempts" / FLAGGED / "1" / "scan.json"
    scan = json.loads(scan_file.read_text())
    finding = scan["scanners"][0]
    finding["evidence"] = [{"step": 0, "tool": HOSTILE_TOOL, "file": HOSTILE_FILE, "quote": HOSTILE_QUOTE}]
    finding["evidence"] += [{"step": step, "tool": "answer", "quote": f"bad step {i}"} for i, step in enumerate(BAD_STEPS)]
    finding["category"] = "<i>gave_up</i>"
    finding["confidence"] = "<u>sure</u>"
    # a second scanner that failed on this attempt: unflagged, with its error
    scan["scanners"].append({"id": "network", "version": "1", "flagged": False, "category": "network",
                             "confidence": 0.0, "evidence": [], "params": {}, "error": "<b>could not read</b>"})
    scan_file.write_text(json.dumps(scan))
    report.build(dest)
    return dest


@pytest.fixture(scope="module")
def flagged_run(tmp_path_factory) -> Path:
    return build_flagged_run(tmp_path_factory.mktemp("flagged-run"))


def section(page: str, name: str) -> str:
    found = re.search(rf'<section id="{name}">.*?</section>', page, re.S)
    assert found is not None, f"no section {name}"
    return found.group(0)


def attempts_table(run_dir: Path) -> dict:
    text = (run_dir / "report" / "data" / "attempts.js").read_text()
    return json.loads(text.removeprefix("window.AC_ATTEMPTS = ").rstrip().removesuffix(";"))


class Tags(HTMLParser):
    """Every start tag of a page, with its attributes."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict]] = []

    def handle_starttag(self, tag, attrs) -> None:
        self.tags.append((tag, dict(attrs)))


def tags(page: str) -> list[tuple[str, dict]]:
    parser = Tags()
    parser.feed(page)
    return parser.tags


def test_the_report_lists_the_flagged_attempt_with_its_evidence_linked_to_its_step(flagged_run: Path):
    page = (flagged_run / "report" / "index.html").read_text()
    flags = section(page, "flags")
    assert "<strong>1</strong> of 2 attempts scanned were flagged" in flags
    # by scanner and category: gave_up flagged one, could not scan none
    assert re.search(r'data-flag="gave_up">gave_up</a></td><td>gave_up</td><td class="num">1</td>'
                     r'<td class="num">0</td>', flags), flags
    rows = re.findall(r'<tr class="flagged-attempt">.*?</tr>', flags, re.S)
    assert len(rows) == 1, rows
    entry = rows[0]
    # the task, its attempt, its status and its score beside the flag, unchanged
    assert f'<a href="attempt.html#{FLAGGED}/1">{FLAGGED}</a>' in entry and RIGHT not in flags
    assert '<span class="status completed">completed</span>' in entry and '<td class="num" rowspan="1">0</td>' in entry
    assert "<td>gave_up</td><td>gave_up</td>" in entry and ">0.90<" in entry
    # the evidence: the tool, the quote, a link to the step of the trajectory it was seen at (its only line)
    trajectory = (flagged_run / "attempts" / FLAGGED / "1" / results.TRAJECTORY).read_text().splitlines()
    scan = json.loads((flagged_run / "attempts" / FLAGGED / "1" / "scan.json").read_text())
    step = scan["scanners"][0]["evidence"][0]["step"]
    assert step == len(trajectory) - 1 == 0
    assert f'<a href="attempt.html#{FLAGGED}/1/step/{step}">step {step}</a>' in entry
    assert "<code>answer</code>" in entry and "I&#x27;m sorry, I can&#x27;t help with that." in entry
    # the score stands as the run scored it: the flag changed nothing of result.json or metrics.json
    result = json.loads((flagged_run / "attempts" / FLAGGED / "1" / "result.json").read_text())
    assert result["score"] == 0.0 and "flag" not in json.dumps(result)
    assert json.loads((flagged_run / "metrics.json").read_text())["metrics"]["accuracy"] == 0.5

    # the attempts table: a flagged column, the scanners that flagged each attempt ("" for none)
    table = attempts_table(flagged_run)
    assert "flagged" in table["columns"]
    flagged = {row[0]: row[table["columns"].index("flagged")] for row in table["rows"]}
    assert flagged == {FLAGGED: "gave_up", RIGHT: ""}
    # the attempt's data holds its findings, for its page
    data = (flagged_run / "report" / "data" / "attempts" / f"{FLAGGED}.1.js").read_text()
    record = json.loads(data.removeprefix("AC_ATTEMPT(").rstrip().removesuffix(");"))
    assert record["scan"] == scan and "steps" not in record  # a line per event: each event's step is its index


def test_what_scan_json_says_is_text_and_a_bad_step_gets_no_link(flagged_run: Path, tmp_path: Path):
    hostile = make_hostile(flagged_run, tmp_path / "hostile")
    page = (hostile / "report" / "index.html").read_text()
    flags = section(page, "flags")
    # nothing of scan.json is markup: no tag of it in the page, each shown escaped
    assert "window.injected" not in "".join(str(attrs) for _, attrs in tags(page))
    assert [tag for tag, _ in tags(flags) if tag in ("script", "img", "b", "i", "u")] == []
    assert "&lt;/script&gt;&lt;script&gt;window.injected=1&lt;/script&gt;" in flags
    assert "&lt;b id=&quot;injected&quot;&gt;bash&lt;/b&gt;" in flags
    assert "&lt;i&gt;gave_up&lt;/i&gt;" in flags and "&lt;u&gt;sure&lt;/u&gt;" in flags
    # the page's own scripts are what they were: the attempts table's and no other
    clean = (flagged_run / "report" / "index.html").read_text()
    assert [t for t in tags(page) if t[0] == "script"] == [t for t in tags(clean) if t[0] == "script"] == [
        ("script", {"src": "data/attempts.js"}), ("script", {})]
    # a javascript: URL as a file is text, never a link; only the whole step of the trajectory is linked
    links = [attrs.get("href", "") for tag, attrs in tags(flags) if tag == "a"]
    assert not [link for link in links if "javascript" in link.lower()], links
    assert f"file <code>{HOSTILE_FILE}</code>" in flags
    steps = [link for link in links if "/step/" in link]
    assert steps == [f"attempt.html#{FLAGGED}/1/step/0"], steps
    for i, step in enumerate(BAD_STEPS):
        shown = html.escape(json.dumps(step) if isinstance(step, str) else str(step))  # a string: in quotes
        assert re.search(rf'<span class="muted">step {re.escape(shown)}</span> \u00b7 <code>answer</code>: '
                         rf"<q>bad step {i}</q>", flags), (step, flags)
    # the table's flagged column and the attempt's data are JSON in .js files, read by the scripts as text
    table = attempts_table(hostile)
    assert table["rows"][0][table["columns"].index("flagged")] == "gave_up"
    # the scanner that could not scan: counted beside the one that flagged, under its own category
    assert re.search(r'data-flag="network">network</a></td><td>network</td><td class="num">0</td>'
                     r'<td class="num">1</td>', flags), flags


def test_a_run_not_scanned_shows_no_flags(flagged_run: Path, tmp_path: Path):
    plain = tmp_path / "plain"
    shutil.copytree(flagged_run, plain, symlinks=True)
    for scan in plain.glob("attempts/*/*/scan.json"):
        scan.unlink()
    report.build(plain)
    page = (plain / "report" / "index.html").read_text()
    assert '<section id="flags">' not in page and "<h2>Flagged attempts</h2>" not in page
    table = attempts_table(plain)
    assert [row[table["columns"].index("flagged")] for row in table["rows"]] == [None, None]


def test_each_event_is_anchored_by_the_line_a_scanner_counts_it_by(tmp_path: Path):
    """A blank line is no event, and a line that holds a Unicode line break is read as two by results.attempt:
    each event's step is still its line of trajectory.jsonl, the number a scanner's evidence names."""
    from agentcompass.runtime import transcript

    lines = [json.dumps({"type": "model_call", "turn": 1}), "",
             json.dumps({"type": "note", "text": "one\u2028two"}, ensure_ascii=False),
             json.dumps({"type": "model_call", "turn": 2}), "   "]
    (tmp_path / results.TRAJECTORY).write_text("\n".join(lines) + "\n", encoding="utf-8")
    events = results.attempt(tmp_path)["trajectory"]
    assert len(events) == 4  # the \u2028 line is two unparsed pieces to results.attempt
    assert report.event_steps(str(tmp_path), len(events)) == [0, 2, 2, 3]
    # the scanners count the same lines (transcript._lines: a line is what ends with "\n")
    assert [step for step, record, _ in transcript._lines(tmp_path / results.TRAJECTORY) if record] == [0, 2, 3]
    # a trajectory of one line per event: no steps written, each event's index is its step
    (tmp_path / results.TRAJECTORY).write_text(lines[0] + "\n" + lines[3] + "\n")
    assert report.event_steps(str(tmp_path), 2) is None


def test_the_list_of_flagged_attempts_is_capped_and_says_how_many_more(flagged_run: Path, tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch):
    capped = tmp_path / "capped"
    shutil.copytree(flagged_run, capped, symlinks=True)
    monkeypatch.setattr(report, "FLAGS_SHOWN", 0)
    report.build(capped)
    flags = section((capped / "report" / "index.html").read_text(), "flags")
    # the counts are of every attempt; the list holds none, and names where the rest are
    assert "<strong>1</strong> of 2 attempts scanned were flagged" in flags
    assert '<tr class="flagged-attempt">' not in flags
    assert f"and 1 more: see <code>agentcompass export {capped}</code>" in flags
