"""The comparison page (agentcompass compare --html) as a person sees it, in headless Chromium from file://."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentcompass.testing.endpoint import ScriptedEndpoint
from conftest import agentcompass
from test_compare import scripted_model


@pytest.fixture(scope="module")
def page_file(tmp_path_factory) -> Path:
    """The page comparing two runs of the guide's example (docs/reports.md), at temperature 0 and 0.7."""
    workdir = tmp_path_factory.mktemp("compare-page")
    with ScriptedEndpoint(scripted_model) as endpoint:
        for run_id, params in (("cold", ["-m", "temperature=0"]),
                               ("hot", ["-m", "temperature=0.7", "-m", "user=<b>markup</b>"])):
            done = agentcompass(workdir, "run", "example_exact_match", "chat", "scripted", "--base-url",
                                endpoint.base_url, "--run-id", run_id, "-H", "max_model_retries=0", *params)
            assert done.returncode in (0, 1), done.stderr[-3000:]
    page = workdir / "compare.html"
    done = agentcompass(workdir, "compare", "results/default/cold", "results/default/hot", "--html", str(page))
    assert done.returncode == 0, done.stderr[-3000:]
    return page


def test_the_comparison_page_draws_its_chart_and_shows_the_flips(browser_page, page_file: Path):
    page = browser_page.open(page_file)
    section = page.locator("section.comparison")
    assert section.count() == 1
    deltas = page.locator("svg.forest circle.delta")
    assert deltas.count() == 2  # accuracy and mean score, each with its interval
    for i in range(deltas.count()):
        box = deltas.nth(i).bounding_box()
        assert box and box["width"] > 0 and box["height"] > 0
    text = section.inner_text()
    assert "capital-japan" in text and "author-hamlet" in text  # the tasks that flipped, one each way
    assert "<b>markup</b>" in page.locator("body").inner_text()  # a config value with markup, shown as text
    assert page.locator("b", has_text="markup").count() == 0
    browser_page.screenshot("compare")
    assert browser_page.problems == [] and browser_page.off_machine() == []
