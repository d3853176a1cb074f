"""A scanned run's report in a real browser: a piece of evidence's link opens the attempt at its step,
highlighted; the flagged column filters the table; what scan.json says (a hostile quote, a javascript: URL,
steps that are no line of the trajectory) is shown as text, with no console error.

One real run (tests/test_report_flags.py: two tasks, one refused and flagged by gave_up) and a copy of it
with a hostile scan.json.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from test_report_flags import BAD_STEPS, FLAGGED, HOSTILE_FILE, HOSTILE_QUOTE, RIGHT, build_flagged_run, make_hostile


@pytest.fixture(scope="module")
def flagged_run(tmp_path_factory) -> tuple[Path, Path]:
    """The run's folder and its hostile copy's."""
    run_dir = build_flagged_run(tmp_path_factory.mktemp("flagged-run"))
    return run_dir, make_hostile(run_dir, tmp_path_factory.mktemp("hostile") / "run")


def column(page, key: str) -> list[str]:
    index = page.eval_on_selector_all("#attempts thead th", f"ths => ths.findIndex(th => th.dataset.key === '{key}')")
    assert index >= 0, key
    return page.eval_on_selector_all("#attempts tbody tr", f"trs => trs.map(tr => tr.cells[{index}].textContent)")


def test_a_step_link_opens_the_attempt_at_that_step_highlighted(browser_page, flagged_run):
    run_dir, _ = flagged_run
    page = browser_page.open(run_dir / "report" / "index.html")
    page.wait_for_selector("#attempts tbody tr")
    assert "1 of 2 attempts scanned were flagged" in page.inner_text("#flags-count")
    # the attempts table: its flagged column, and the filter to the attempts a scanner flagged
    assert column(page, "flagged") == ["gave_up", ""]
    page.get_by_role("link", name="gave_up", exact=True).click()
    assert column(page, "task_id") == [FLAGGED] and page.inner_text("#attempts-info") == "1 of 2 attempts"
    page.get_by_label("flags").select_option("-")
    assert column(page, "task_id") == [RIGHT]
    page.get_by_label("flags").select_option("")
    browser_page.screenshot("report-flags-index")

    page.locator("#flagged").get_by_role("link", name="step 0").click()
    page.wait_for_selector("#trajectory .event.highlight")
    assert page.url.endswith(f"attempt.html#{FLAGGED}/1/step/0")
    assert page.eval_on_selector_all(".event.highlight", "els => els.map(e => e.id)") == ["step-0"]
    assert "I'm sorry, I can't help with that." in page.inner_text("#step-0")
    # each event of a scanned attempt shows its step, a link to it
    assert page.eval_on_selector_all("#trajectory .event .head a.step", "as => as.map(a => a.getAttribute('href'))") \
        == [f"#{FLAGGED}/1/step/0"]
    # the findings at the top, each piece of evidence linking to its step
    findings = page.inner_text("#findings")
    assert "gave_up: flagged" in findings and "confidence 0.90" in findings and "I'm sorry" in findings
    assert page.eval_on_selector_all("#findings a.step", "as => as.map(a => a.getAttribute('href'))") == [
        f"#{FLAGGED}/1/step/0"]
    # the page scrolled to the step: its event is in view
    top = page.eval_on_selector("#step-0", "e => e.getBoundingClientRect().top")
    assert 0 <= top < page.viewport_size["height"], top
    browser_page.screenshot("report-flags-attempt-step")

    # a step the trajectory does not show: a note, nothing highlighted; the attempt's page as it is without one
    page.goto(page.url.replace("/step/0", "/step/7"))
    page.wait_for_selector("#step-note")
    assert page.eval_on_selector_all(".event.highlight", "els => els.length") == 0
    page.goto(page.url.replace("/step/7", ""))
    page.wait_for_selector("#trajectory .event")
    assert page.eval_on_selector_all(".event.highlight, #step-note", "els => els.length") == 0
    # an attempt no scanner flagged says so
    page.goto(page.url.replace(FLAGGED, RIGHT))
    page.get_by_text("No transcript scanner flagged this attempt.").wait_for()
    assert "gave_up: not flagged" in page.inner_text("#findings")
    assert browser_page.problems == []
    assert browser_page.off_machine() == []


def test_a_hostile_scan_is_shown_as_text_with_no_console_error(browser_page, flagged_run):
    _, hostile = flagged_run
    page = browser_page.open(hostile / "report" / "index.html")
    page.wait_for_selector("#attempts tbody tr")
    flags = page.inner_text("#flagged")
    assert HOSTILE_QUOTE in flags and HOSTILE_FILE in flags
    assert page.evaluate("window.injected === undefined && document.getElementById('injected') === null")
    assert page.eval_on_selector_all("#flagged a", "as => as.map(a => a.getAttribute('href'))") == [
        f"attempt.html#{FLAGGED}/1", f"attempt.html#{FLAGGED}/1/step/0"]
    browser_page.screenshot("report-flags-hostile-index")

    page.locator("#flagged").get_by_role("link", name="step 0").click()
    page.wait_for_selector("#trajectory .event.highlight")
    findings = page.inner_text("#findings")
    assert HOSTILE_QUOTE in findings and HOSTILE_FILE in findings and "<i>gave_up</i>" in findings
    assert "network: could not scan" in findings and "<b>could not read</b>" in findings
    # only the whole step of the trajectory is a link; every other step is text
    assert page.eval_on_selector_all("#findings a", "as => as.map(a => a.getAttribute('href'))") == [
        f"#{FLAGGED}/1/step/0"]
    for i in range(len(BAD_STEPS)):
        assert f"bad step {i}" in findings
    assert page.evaluate("window.injected === undefined && document.getElementById('injected') === null")
    # a step in the URL that is no whole number: a note, no error
    page.goto(page.url.replace("/step/0", "/step/%3Cb%3E-1"))
    page.wait_for_selector("#step-note")
    assert "is not an event of this trajectory" in page.inner_text("#step-note")
    browser_page.screenshot("report-flags-hostile-attempt")
    assert browser_page.problems == []
    assert browser_page.off_machine() == []
