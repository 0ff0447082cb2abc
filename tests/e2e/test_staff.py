"""Staffing an event in real Chromium (issue 33): the organiser (made with ``labserver staff add``)
signs in with their one-time link and adds an assistant on the event page; the assistant signs in
with the link shown there, sees only what an assistant may, answers a raised hand with a share
the attendee accepts, types in the attendee's shell; the event's audit log shows it."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.e2e.conftest import REPO, SCREENSHOTS, LiveServer, join, open_lab, wait_terminal_line
from tests.e2e.instructor_fixtures import INSTRUCTOR_VIEWPORT, me

pytestmark = pytest.mark.browser


def staff_add(server: LiveServer, *args: str) -> str:
    """``labserver staff add ...`` against the running server's data folder; the printed link."""
    out = subprocess.run(
        [sys.executable, "-m", "labserver.cli", "staff", "add", *args, "--url", server.url],
        env=server.env(),
        cwd=server.root,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    found = re.search(r"(http://\S+/instructor/signin/\S+)", out)
    assert found, out
    return found.group(1)


def sign_in_with_link(page: Page, link: str) -> None:
    page.goto(link)
    page.click("#signin-form button[type=submit]")
    expect(page).to_have_url(re.compile(r"/instructor$"))


def test_organiser_adds_an_assistant_who_answers_a_hand_with_consent_and_the_audit_log_shows_it(
    page: Page, browser: Browser, base_url: str, server: LiveServer
) -> None:
    # an attendee raises a hand from the lab page
    join(page)
    open_lab(page, step="run-script")
    aid, event_id = me(page)
    tag = os.getpid()
    code = page.context.request.get("/api/v1/me").json()["event"]["code"]
    organiser_link = staff_add(server, f"Olga {tag}", "--role", "organiser", "--event", code)

    organiser_ctx = browser.new_context(base_url=base_url, viewport=INSTRUCTOR_VIEWPORT, locale="en-US")
    assistant_ctx = browser.new_context(base_url=base_url, viewport=INSTRUCTOR_VIEWPORT, locale="en-US")
    try:
        organiser = organiser_ctx.new_page()
        sign_in_with_link(organiser, organiser_link)
        expect(organiser.locator(".i-topbar .who")).to_have_text(f"Olga {tag}")
        organiser.goto(f"/instructor/events/{event_id}")
        organiser.fill("#staff-name", f"Sam {tag}")
        organiser.select_option("#staff-role", "assistant")
        organiser.click("#staff-form button[type=submit]")
        link = organiser.locator("#staff-link-url")
        expect(link).to_contain_text("/instructor/signin/", timeout=10_000)
        expect(organiser.locator("#staff-list")).to_contain_text(f"Sam {tag}")
        assistant_link = link.inner_text().strip()
        organiser.screenshot(path=str(SCREENSHOTS / "staff-added.png"))

        assistant = assistant_ctx.new_page()
        sign_in_with_link(assistant, assistant_link)
        expect(assistant.locator(".i-topbar .who")).to_have_text(f"Sam {tag}")
        assistant.goto(f"/instructor/events/{event_id}")
        expect(assistant.locator("body")).to_have_attribute("data-live", "ready", timeout=15_000)
        # what an assistant may not do is not offered
        for absent in ("#export-csv", "#export-json", "#open-report", "#stop-all", "#staff-form"):
            expect(assistant.locator(absent)).to_have_count(0)

        page.click("#help-button")
        expect(page.locator("#help-status")).to_contain_text("Hand raised")
        item = assistant.locator(f'#help-queue li[data-a="{aid}"]')
        expect(item).to_be_visible(timeout=10_000)
        item.locator('button[data-act="share"]').click()
        expect(assistant).to_have_url(re.compile(rf"/attendees/{aid}\?lab=getting-started"))
        banner = page.locator("#share-banner")
        expect(banner).to_contain_text(f"Sam {tag} asks to type in your terminal", timeout=10_000)
        banner.locator(".share-accept").click()
        expect(assistant.locator("#term")).to_have_attribute("data-writable", "true", timeout=10_000)
        expect(assistant.locator("#term")).to_have_attribute("data-ws", "open", timeout=10_000)
        assistant.locator("#term").click()
        assistant.keyboard.type("echo from-sam-$((6*7))")
        assistant.keyboard.press("Enter")
        wait_terminal_line(page, "from-sam-42")

        organiser.goto(f"/instructor/events/{event_id}")
        rows = organiser.locator("#audit-rows tr[data-action=share]")
        expect(rows.first).to_contain_text(f"Sam {tag}", timeout=20_000)
        expect(rows.first).to_contain_text("assistant")
        organiser.locator("#audit-card").screenshot(path=str(SCREENSHOTS / "staff-audit.png"))
    finally:
        organiser_ctx.close()
        assistant_ctx.close()
    assert REPO.is_dir()
