"""The self-paced flow in real Chromium, with every request to a host other than this machine refused
and recorded: `labserver selfpaced getting-started` opens the browser on the lab (no join page), the
learner works in the browser terminal and presses Check, a check run from a plain terminal shows up
live in the page, and the progress is exported. The list of refused requests must stay empty."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, expect

from tests.e2e.conftest import REPO, SCREENSHOTS, run_in_terminal, wait_terminal, wait_terminal_line

pytestmark = pytest.mark.browser

LOCAL_HOSTS = {"127.0.0.1", "localhost", "[::1]", "::1"}
CHECK_TIMEOUT = 90_000
# the two lines of step 3, typed as ASCII (bash's printf turns \u escapes into UTF-8)
HELLO_CMD = (
    r"mkdir -p notes && printf 'Hello, Ascend!\n\u4f60\u597d\uff0c\u6607\u817e\uff01\n' > notes/hello.txt"
)


def guard(context: BrowserContext) -> list[str]:
    """Refuse (abort) every request that leaves this machine; returns the list they are recorded in."""
    refused: list[str] = []

    def handle(route) -> None:  # type: ignore[no-untyped-def]
        url = route.request.url
        parts = urlsplit(url)
        if parts.scheme in ("data", "blob", "about") or parts.hostname in LOCAL_HOSTS:
            route.continue_()
        else:
            refused.append(url)
            route.abort()

    context.route("**/*", handle)

    def on_page(page: Page) -> None:
        page.on(
            "websocket",
            lambda ws: None if urlsplit(ws.url).hostname in LOCAL_HOSTS else refused.append(ws.url),
        )

    context.on("page", on_page)
    return refused


class SelfPaced:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.data = root / "data"
        self.opened = root / "opened.txt"
        opener = root / "open-browser"
        opener.write_text(f'#!/bin/sh\necho "$1" >> "{self.opened}"\n')
        opener.chmod(0o755)
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("LABSERVER_")},
            "LABSERVER_DATA_DIR": str(self.data),
            "LABSERVER_LABS_DIR": str(REPO / "labs"),
            "LABSERVER_WEB_DIR": str(REPO / "web"),
            "BROWSER": str(opener),  # webbrowser.open runs it with the URL
            "PYTHONUNBUFFERED": "1",
        }
        self.log = (root / "selfpaced.log").open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "labserver.cli", "selfpaced", "getting-started", "--port", "0"],
            cwd=root,
            env=self.env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )

    def opened_url(self) -> str:
        deadline = time.monotonic() + 60
        while not self.opened.exists() or not self.opened.read_text().strip():
            if self.proc.poll() is not None:
                raise AssertionError((self.root / "selfpaced.log").read_text())
            assert time.monotonic() < deadline, "labserver selfpaced opened no browser"
            time.sleep(0.1)
        return self.opened.read_text().split()[0]

    def cli(self, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "labserver.cli", *args],
            cwd=cwd or self.root,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=300,
        )

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


@pytest.fixture
def selfpaced(tmp_path: Path) -> Iterator[SelfPaced]:
    app = SelfPaced(tmp_path)
    try:
        yield app
    finally:
        app.stop()


def test_the_guard_records_what_leaves_the_machine(browser: Browser, selfpaced: SelfPaced) -> None:
    """The recorder the flow relies on does catch a page asking another host."""
    url = selfpaced.opened_url()
    context = browser.new_context()
    refused = guard(context)
    try:
        page = context.new_page()
        page.goto(url)
        page.evaluate("() => fetch('http://cdn.example.invalid/lib.js').catch(() => null)")
        page.evaluate("() => { const i = new Image(); i.src = 'https://fonts.example.invalid/f.woff2'; }")
        page.wait_for_function("() => true")
        expect(page.locator("body")).to_be_visible()
        deadline = time.monotonic() + 10
        while len(refused) < 2 and time.monotonic() < deadline:
            page.wait_for_timeout(50)
        assert sorted(refused) == [
            "http://cdn.example.invalid/lib.js",
            "https://fonts.example.invalid/f.woff2",
        ]
    finally:
        context.close()


def test_selfpaced_flow_offline(browser: Browser, selfpaced: SelfPaced) -> None:
    url = selfpaced.opened_url()
    base = f"{urlsplit(url).scheme}://{urlsplit(url).netloc}"
    assert urlsplit(url).hostname == "127.0.0.1"
    assert urlsplit(url).path == "/labs/getting-started"

    context = browser.new_context(base_url=base, viewport={"width": 1366, "height": 768}, locale="en-US")
    refused = guard(context)
    try:
        page = context.new_page()
        page.goto(url)  # no join page: the learner is signed in by the loopback auto-login
        expect(page).to_have_url(url)
        wait_terminal(page)
        expect(page.locator("body")).to_have_attribute("data-live", "ready", timeout=30_000)

        # step 3 in the browser: the terminal writes the file, the Check button passes it
        page.click('.step-chip[data-step="write-file"]')
        expect(page.locator("#step-write-file")).to_be_visible()
        run_in_terminal(page, HELLO_CMD + " && echo written-$((6*7))")
        wait_terminal_line(page, "written-42")
        page.click("#check-button")
        expect(page.locator("#step-write-file .check-result")).to_have_attribute(
            "data-status", "passed", timeout=CHECK_TIMEOUT
        )
        expect(page.locator("#step-write-file")).to_have_attribute("data-status", "passed")

        # step 1 from a plain terminal: `labserver check` runs it through the server, the page updates live
        learner = json.loads((selfpaced.data / "selfpaced.json").read_text())
        folder = (
            selfpaced.data
            / "workspaces"
            / f"ev{learner['event_id']}-at{learner['attendee_id']}"
            / "getting-started"
        )
        info = subprocess.run(
            [sys.executable, "device_info.py"], cwd=folder, capture_output=True, text=True, timeout=120
        ).stdout
        kind = next(line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("kind:"))
        (folder / "device.txt").write_text(f"{kind}\n")
        res = selfpaced.cli("check", "getting-started", "find-device", cwd=folder)
        assert res.returncode == 0, res.stdout + res.stderr
        expect(page.locator("#step-find-device")).to_have_attribute("data-status", "passed", timeout=30_000)
        expect(page.locator('.step-chip[data-step="find-device"]')).to_have_class(
            re.compile(r"status-passed")
        )

        # a reload (and a restart would too) keeps the progress: it lives in the data folder
        page.reload()
        wait_terminal(page)
        expect(page.locator("#lab-progress")).to_contain_text("2/5")
        page.screenshot(path=str(SCREENSHOTS / "selfpaced-lab.png"))
        page.goto("/")
        expect(page).to_have_url(f"{base}/labs")
    finally:
        context.close()
    assert refused == [], f"requests left the machine: {refused}"

    out = selfpaced.root / "progress.json"
    res = selfpaced.cli("progress", "export", str(out))
    assert res.returncode == 0, res.stderr
    steps = {s["id"]: s["status"] for s in json.loads(out.read_text())["labs"][0]["steps"]}
    assert steps["write-file"] == steps["find-device"] == "passed"
