"""A lab author's loop in real Chromium (issue 34): ``labserver new`` makes a lab, ``labserver serve
--dev`` serves it, and the author's edits reach the open page without a restart: new step text in
place (no reload), a broken ``lab.yaml`` shown with its lint errors on the lab's page, the lab back
once fixed, and its check runs."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.e2e.conftest import CHECK_TIMEOUT, LiveServer, join

pytestmark = [pytest.mark.browser]

LIVE_TIMEOUT = 20_000  # a save -> watcher batch -> lint -> SSE -> fetch, on a shared 2-core machine


@pytest.fixture(scope="module")
def dev_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    root = tmp_path_factory.mktemp("author")
    (root / "labs").mkdir()
    made = subprocess.run(
        [sys.executable, "-m", "labserver.cli", "new", str(root / "labs" / "my-lab")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert made.returncode == 0, made.stderr
    srv = LiveServer(root, serve_args=["--dev", str(root / "labs" / "my-lab")])
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def author_page(browser: Browser, dev_server: LiveServer) -> Iterator[Page]:
    context = browser.new_context(
        base_url=dev_server.url, viewport={"width": 1366, "height": 768}, locale="en-US"
    )
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        yield page
    finally:
        context.close()
    assert not errors, errors


def test_an_edit_reaches_the_open_page_and_a_broken_lab_shows_its_lint_errors(
    author_page: Page, dev_server: LiveServer
) -> None:
    page = author_page
    lab = dev_server.root / "labs" / "my-lab"
    join(page)
    expect(page.locator('.lab-card[data-lab="my-lab"]')).to_be_visible()
    page.goto("/labs/my-lab")
    expect(page.locator("body")).to_have_attribute("data-live", "ready", timeout=LIVE_TIMEOUT)
    expect(page.locator("#step-swiglu .markdown")).to_contain_text("Implement SwiGLU")
    page.evaluate("() => { window.notReloaded = true; }")

    step = lab / "steps" / "01-swiglu.md"
    step.write_text(step.read_text() + "\nEdited while the page was open.\n")
    expect(page.locator("#step-swiglu .markdown")).to_contain_text(
        "Edited while the page was open", timeout=LIVE_TIMEOUT
    )
    assert page.evaluate("() => window.notReloaded === true"), "the page reloaded instead of updating"
    expect(page.locator("body")).to_have_attribute("data-lab-reloads", "1")

    spec = (lab / "lab.yaml").read_text()
    (lab / "lab.yaml").write_text(spec.replace("steps:", "stepz:", 1))
    problems = page.locator("#lab-problems")
    expect(problems).to_contain_text("stepz", timeout=LIVE_TIMEOUT)
    expect(problems).to_contain_text("lab.yaml")
    expect(page.locator("h1")).to_have_text("This lab is unavailable")
    log = dev_server.log_tail(200_000)  # the author's terminal shows the lint of the save
    assert "dev mode" in log and "stepz" in log and "unknown field" in log, log[-3000:]

    (lab / "lab.yaml").write_text(spec)
    expect(page.locator("#step-swiglu .markdown")).to_contain_text(
        "Edited while the page was open", timeout=LIVE_TIMEOUT
    )
    page.click("#check-button")
    result = page.locator("#step-swiglu .check-result")
    expect(result).to_have_attribute("data-status", "failed", timeout=CHECK_TIMEOUT)
    expect(result).to_contain_text("NotImplementedError")


def test_serve_dev_refuses_a_folder_that_is_not_a_lab(tmp_path: Path) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "labserver.cli", "serve", "--dev", str(tmp_path)],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "LABSERVER_DATA_DIR": str(tmp_path / "data")},
    )
    assert run.returncode == 2
    assert "not a lab folder" in run.stderr and "labserver new" in run.stderr
