"""The report in a real browser, opened from file:// as a person opens it.

One run builds it: ``tool_agent`` on the example benchmark against a scripted model on
127.0.0.1 that calls tools (bash, read_file, submit), answers one task wrong, answers one
with HTML, and fails another with HTTP 500s. Each test looks at the pages as a person does
(clicks, typing) and writes a screenshot.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentcompass.testing.endpoint import ScriptedEndpoint, completion, tool_call_reply
from conftest import snakemake

RUN = Path("results/default/agent")
# an answer that is HTML: the pages must show it as text, and run none of it
HTML_ANSWER = '<img src=x onerror="window.injected=1"><b id="injected">Marlowe</b><script>window.injected=2</script>'


def scripted(body) -> tuple[int, dict]:
    """Per task: the model's replies, one per call (its earlier replies count the step)."""
    messages = body["messages"]
    question = next(m["content"] for m in messages if m["role"] == "user")
    step = sum(1 for m in messages if m["role"] == "assistant")
    if "France" in question:
        return 200, [tool_call_reply("bash", {"command": "echo Paris"}, call_id="look"),
                     tool_call_reply("submit", {"answer": "Paris"}, call_id="done")][min(step, 1)]
    if "planet" in question:
        return 200, [tool_call_reply("read_file", {"path": "notes.txt"}, call_id="read"),
                     tool_call_reply("submit", {"answer": "Jupiter"}, call_id="done")][min(step, 1)]
    if "Japan" in question:
        return 200, tool_call_reply("submit", {"answer": "Osaka"}, call_id="done")
    if "Hamlet" in question:
        return 200, tool_call_reply("submit", {"answer": HTML_ANSWER}, call_id="done")
    if "water" in question:
        return 500, {"error": {"message": "scripted outage"}}
    return 200, completion("?")


@pytest.fixture(scope="module")
def agent_run(tmp_path_factory) -> Path:
    workdir = tmp_path_factory.mktemp("agent-run")
    with ScriptedEndpoint(scripted) as endpoint:
        config = workdir / "agent.yaml"
        config.write_text(json.dumps({
            "requests": {"agent": {
                "benchmark": "example_exact_match", "harness": "tool_agent",
                "model": {"id": "scripted", "base_url": endpoint.base_url},
            }},
            "harnesses": {"tool_agent": {"max_model_retries": 1, "retry_backoff": 0}},
        }))
        done = snakemake(workdir, "--configfile", str(config))
    assert done.returncode == 0, done.stderr[-3000:]
    return workdir / RUN / "report"


def test_the_index_draws_every_chart_with_no_console_error(browser_page, agent_run: Path):
    page = browser_page.open(agent_run / "index.html")
    page.wait_for_selector("#attempts tbody tr")
    charts = page.eval_on_selector_all("svg.chart", """svgs => svgs.map(svg => {
        const box = svg.getBoundingClientRect();
        const drawn = Array.from(svg.querySelectorAll(".bar rect"), rect => rect.getBoundingClientRect())
            .filter(b => b.width > 0 && b.height > 0);
        return {id: svg.id, width: box.width, height: box.height, bars: svg.querySelectorAll(".bar").length,
                drawn: drawn.length};
    })""")
    assert [c["id"] for c in charts] == ["chart-categories", "chart-scores", "chart-errors", "chart-failures",
                                         "chart-tokens"]
    # a bar for each thing it counts (three categories, scores 0, 1 and none, one kind of error, one failure class)
    assert {c["id"]: c["bars"] for c in charts} == {
        "chart-categories": 3, "chart-scores": 3, "chart-errors": 1, "chart-failures": 1, "chart-tokens": 3}
    for chart in charts:
        assert chart["width"] > 0 and chart["height"] > 0 and chart["drawn"] > 0, chart
    summary = page.inner_text("#summary")
    # two right of the five: the failed attempt (not an infrastructure failure) is wrong, as in the benchmark metrics
    assert "5 of 5" in summary and "0.400" in summary and "scored on 5 of 5 tasks" in summary
    assert "run_error: model call failed after N tries" in page.inner_text("#errors")
    assert "endpoint" in page.inner_text("#failures")  # the water task's HTTP 500s, after their retries
    assert page.inner_text("#attempts-info") == "5 of 5 attempts"
    browser_page.screenshot("report-index")
    assert browser_page.problems == []
    assert browser_page.off_machine() == []


def column(page, key: str) -> list[str]:
    index = page.eval_on_selector_all("#attempts thead th", f"ths => ths.findIndex(th => th.dataset.key === '{key}')")
    return page.eval_on_selector_all("#attempts tbody tr", f"trs => trs.map(tr => tr.cells[{index}].textContent)")


def test_the_attempts_table_sorts_and_filters(browser_page, agent_run: Path):
    page = browser_page.open(agent_run / "index.html")
    page.wait_for_selector("#attempts tbody tr")
    page.get_by_role("button", name="task", exact=True).click()
    assert column(page, "task_id") == ["author-hamlet", "capital-france", "capital-japan", "largest-planet", "water-formula"]
    page.get_by_role("button", name="task", exact=True).click()
    assert column(page, "task_id") == ["water-formula", "largest-planet", "capital-japan", "capital-france", "author-hamlet"]
    assert page.get_attribute("#attempts th[data-key=task_id]", "aria-sort") == "descending"
    page.get_by_role("button", name="score").click()
    # ascending; the attempt with no score (the failed one) last
    assert column(page, "score") == ["0", "0", "1", "1", ""]

    page.get_by_placeholder("filter").press_sequentially("japan")
    assert column(page, "task_id") == ["capital-japan"] and page.inner_text("#attempts-info") == "1 of 5 attempts"
    page.get_by_placeholder("filter").fill("")
    page.get_by_label("status").select_option("run_error")
    assert column(page, "task_id") == ["water-formula"]
    assert "HTTP 500" in column(page, "error")[0]
    browser_page.screenshot("report-table-filtered")
    # a kind under "errors by kind" filters the table to it
    page.get_by_label("status").select_option("")
    page.get_by_role("link", name="run_error: model call failed after N tries", exact=False).click()
    assert column(page, "task_id") == ["water-formula"]
    assert browser_page.problems == []


def test_an_attempt_page_shows_its_tool_calls_and_verdict(browser_page, agent_run: Path):
    page = browser_page.open(agent_run / "index.html")
    page.get_by_role("link", name="capital-france").click()
    page.wait_for_selector("#trajectory .event")
    assert page.url.endswith("attempt.html#capital-france/1")
    verdict = page.inner_text("#verdict")
    assert "completed" in verdict and "yes" in verdict and "Paris" in verdict
    # the model's call of bash, what the command printed, the call of submit, its result
    events = page.locator("#trajectory .event").all_inner_texts()
    assert len(events) == 4
    assert events[0].startswith("model call step 1") and "calls bash" in events[0] and "echo Paris" in events[0]
    assert "tokens 10 in, 2 out" in events[0]
    assert events[1].startswith("tool bash step 1") and "exit code 0" in events[1] and "Paris" in events[1]
    assert events[2].startswith("model call step 2") and "calls submit" in events[2]
    assert events[3].startswith("tool submit step 2") and "submitted" in events[3]
    assert page.inner_text("#answer pre") == "Paris"
    assert "What is the capital of France?" in page.inner_text("#input")
    assert "tool_agent" in page.inner_text("#plan")
    assert "run.log" in page.inner_text("#logs")
    browser_page.screenshot("report-attempt")
    assert browser_page.problems == []

    # a failed tool call and a failed attempt read as such
    page.goto(page.url.replace("capital-france", "largest-planet"))
    page.wait_for_selector("#trajectory .event.tool.failed")
    assert "FileNotFoundError" in page.inner_text("#trajectory .event.tool.failed")
    page.goto(page.url.replace("largest-planet", "water-formula"))
    page.wait_for_selector("#verdict .bad")
    assert "HTTP 500" in page.inner_text("#verdict .bad") and "run_error" in page.inner_text("#verdict")
    browser_page.screenshot("report-attempt-failed")
    assert browser_page.problems == []


def test_an_answer_holding_html_is_shown_as_text(browser_page, agent_run: Path):
    page = browser_page.open(f"{(agent_run / 'attempt.html').as_uri()}#author-hamlet/1")
    page.wait_for_selector("#answer pre")
    assert page.inner_text("#answer pre") == HTML_ANSWER
    assert page.evaluate("window.injected") is None
    assert page.locator("#injected").count() == 0 and page.locator("#answer img").count() == 0
    # the submit call's arguments hold it too (as JSON), and so does its raw record, opened: still text
    assert json.dumps(HTML_ANSWER) in page.inner_text("#trajectory .event .call pre")
    page.locator("#trajectory details summary").last.click()  # the tool result's record
    assert json.dumps(HTML_ANSWER) in page.locator("#trajectory details pre").last.inner_text()
    assert page.evaluate("window.injected") is None
    assert browser_page.problems == []
