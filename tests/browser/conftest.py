"""A real browser for the pages agentcompass writes: headless Chromium driven by Playwright.

The browser is Debian's ``chromium`` (``/usr/bin/chromium``, or ``AGENTCOMPASS_CHROMIUM``), never
one a test tool downloads. Without it (or without the ``playwright`` package) these tests are
skipped, with the reason; with ``AGENTCOMPASS_BROWSER=1`` (set by ``.ci/run``, which installs
both) they fail instead, so CI always runs them.

    def test_my_page(browser_page):
        page = browser_page.open(path_to_html)          # file://, console errors collected
        browser_page.screenshot("my-page")              # an artifact: <artifacts>/my-page.png
        assert browser_page.problems == []

Screenshots go to ``$AGENTCOMPASS_TEST_ARTIFACTS/browser`` when that is set, else to
``browser-artifacts`` in pytest's own temporary folder (its path is printed at the end of the run).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

CHROMIUM = os.environ.get("AGENTCOMPASS_CHROMIUM") or "/usr/bin/chromium"
REQUIRED = os.environ.get("AGENTCOMPASS_BROWSER") == "1"
# no first-run dialogs, no update or sync traffic, no GPU: a quiet browser on a CI machine
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
VIEWPORT = {"width": 1280, "height": 900}
# where this session's screenshots went, for the line at the end of the run
_WRITTEN: list[Path] = []


def _unavailable(reason: str):
    if REQUIRED:
        pytest.fail(f"{reason}; AGENTCOMPASS_BROWSER=1 says the browser tests must run here. Fix: "
                    f"apt-get install chromium and pip install -e '.[test]' (as .ci/run does)")
    pytest.skip(f"{reason} (apt-get install chromium; pip install -e '.[test]'; AGENTCOMPASS_BROWSER=1 "
                "makes this a failure)")


@pytest.fixture(scope="session")
def artifacts(tmp_path_factory) -> Path:
    """The folder screenshots are written to, kept after the run."""
    where = os.environ.get("AGENTCOMPASS_TEST_ARTIFACTS")
    folder = Path(where) / "browser" if where else tmp_path_factory.getbasetemp() / "browser-artifacts"
    folder.mkdir(parents=True, exist_ok=True)
    _WRITTEN.append(folder)
    return folder


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    """One Chromium per test module, with a fresh profile of its own.

    Not one per session: while Playwright's sync API is open its event loop runs in this
    thread, and every later test calling ``asyncio.run`` would fail.
    """
    if not (os.path.isfile(CHROMIUM) and os.access(CHROMIUM, os.X_OK)):
        _unavailable(f"no Chromium at {CHROMIUM}")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _unavailable("the playwright package is not installed")
    profile = tempfile.mkdtemp(prefix="chromium-profile-", dir=tmp_path_factory.getbasetemp())
    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            profile, executable_path=CHROMIUM, headless=True, args=ARGS, viewport=VIEWPORT)
        try:
            yield context
        finally:
            context.close()
    shutil.rmtree(profile, ignore_errors=True)


class BrowserPage:
    """One tab: what it opened, and every console error, page error and failed load seen in it."""

    def __init__(self, context, artifacts: Path) -> None:
        self.page = context.new_page()
        self.artifacts = artifacts
        self.problems: list[str] = []
        self.requests: list[str] = []
        self.page.on("console", lambda m: self.problems.append(f"console {m.type}: {m.text}")
                     if m.type in ("error", "warning") else None)
        self.page.on("pageerror", lambda e: self.problems.append(f"page error: {e}"))
        self.page.on("requestfailed", lambda r: self.problems.append(f"failed to load {r.url}: {r.failure}"))
        self.page.on("request", lambda r: self.requests.append(r.url))

    def open(self, target: str | Path):
        url = target if isinstance(target, str) and "://" in target else Path(target).resolve().as_uri()
        self.page.goto(url)
        return self.page

    def screenshot(self, name: str) -> Path:
        path = self.artifacts / f"{name}.png"
        self.page.screenshot(path=str(path), full_page=True)
        return path

    def off_machine(self) -> list[str]:
        """Every URL it asked for that is not a file of this machine (a report must need none)."""
        return [url for url in self.requests if not url.startswith(("file://", "data:", "about:"))]


@pytest.fixture
def browser_page(browser, artifacts):
    tab = BrowserPage(browser, artifacts)
    yield tab
    tab.page.close()


def pytest_terminal_summary(terminalreporter):
    for folder in _WRITTEN:
        shots = sorted(folder.glob("*.png"))
        terminalreporter.write_line(f"browser screenshots: {len(shots)} in {folder}")
