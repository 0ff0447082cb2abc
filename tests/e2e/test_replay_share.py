"""Terminal replay and help with consent in real Chromium, the attendee and the instructor in two
browser contexts: the lab page says that sessions are recorded (EN and ZH) and the attendee
replays and downloads their own; the drill-down's player has a button per Check press and result;
from a raised hand the instructor asks to share, types only once the attendee accepted, the
attendee sees who is typing, and stopping ends the instructor's typing."""

from __future__ import annotations

import re
import time

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.e2e.conftest import (
    CHECK_TIMEOUT,
    SCREENSHOTS,
    join,
    open_lab,
    run_in_terminal,
    terminal_text,
    wait_terminal_line,
)
from tests.e2e.instructor_fixtures import (
    instructor_page,  # noqa: F401 (the `instructor` fixture)
    me,
)

pytestmark = pytest.mark.browser

VIEW_HAS = """(want) => { const b = term.buffer.active;
  for (let i = 0; i < b.length; i++) if (b.getLine(i).translateToString(true).includes(want)) return true;
  return false; }"""


def _wait_for_recorded(page: Page, needle: str) -> None:
    """Until the attendee's one recording holds ``needle`` (the shell outlives the check, and its
    recording reaches the file in batches of FLUSH_S)."""
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        rows = page.request.get("/api/v1/recordings").json()
        if len(rows) == 1 and needle in page.request.get(rows[0]["url"]).text():
            return
        page.wait_for_timeout(200)
    raise AssertionError(f"the recording never held {needle!r}")


def test_recorded_sessions_replay_with_check_markers_for_attendee_and_instructor(
    page: Page, instructor: Page, browser: Browser, base_url: str
) -> None:
    join(page)
    open_lab(page, step="find-device")
    expect(page.locator("#recording-notice")).to_contain_text("recorded")
    run_in_terminal(page, "echo replay-me-$((6*7))")
    wait_terminal_line(page, "replay-me-42")
    page.click("#check-button")
    result = page.locator("#step-find-device .check-result")
    expect(result).to_have_attribute("data-status", re.compile(r"passed|failed"), timeout=CHECK_TIMEOUT)

    # the shell outlives the check: its recording reaches the file in batches (FLUSH_S)
    _wait_for_recorded(page, '"find-device: ')
    # the attendee's own recordings: listed, played, downloadable
    page.click("#my-recordings")
    panel = page.locator("#my-recordings-panel")
    expect(panel.locator(".recording")).to_have_count(1)
    panel.locator(".rec-play").click()
    expect(panel).to_have_attribute("data-state", "playing")
    expect(panel.locator(".marker")).to_have_count(2)
    with page.expect_download() as dl:
        panel.locator(".rec-download").click()
    assert dl.value.suggested_filename.startswith(
        "getting-started-"
    ) and dl.value.suggested_filename.endswith(".cast")
    page.screenshot(path=str(SCREENSHOTS / "replay-attendee.png"))

    # the instructor's drill-down: one click on the result marker shows what came before it
    aid, event_id = me(page)
    instructor.goto(f"/instructor/events/{event_id}/attendees/{aid}")
    card = instructor.locator("#recordings-card")
    expect(card.locator(".recording")).to_have_count(1, timeout=10_000)
    card.locator(".rec-play").click()
    markers = card.locator(".marker")
    expect(markers).to_have_count(2)
    expect(markers.nth(0)).to_contain_text("Check find-device")
    expect(markers.nth(1)).to_contain_text(re.compile(r"find-device: (passed|failed)"))
    markers.nth(1).click()
    expect(card.locator(".recording-player")).to_contain_text("replay-me-42", timeout=10_000)
    card.screenshot(path=str(SCREENSHOTS / "replay-instructor.png"))
    # another attendee (a third browser context) is never given them
    rec_url = page.request.get("/api/v1/recordings").json()[0]["url"]
    other = browser.new_context(base_url=base_url)
    try:
        p2 = other.new_page()
        join(p2)
        assert p2.request.get("/api/v1/recordings").json() == []
        assert p2.request.get(rec_url).status == 404
    finally:
        other.close()


def test_the_recording_notice_speaks_chinese(browser: Browser, base_url: str) -> None:
    context = browser.new_context(base_url=base_url, locale="zh-CN")
    try:
        page = context.new_page()
        join(page)
        open_lab(page)  # the browser asks for Chinese: the page speaks it
        expect(page.locator("html")).to_have_attribute("lang", "zh-CN")
        expect(page.locator("#recording-notice")).to_contain_text("录制")
        expect(page.locator("#my-recordings")).to_have_text("我的录像")
    finally:
        context.close()


def test_help_with_consent_two_people_one_terminal(page: Page, instructor: Page) -> None:
    join(page)
    open_lab(page, step="run-script")
    aid, event_id = me(page)
    page.click("#help-button")
    expect(page.locator("#help-status")).to_contain_text("Hand raised")

    instructor.goto(f"/instructor/events/{event_id}")
    item = instructor.locator(f'#help-queue li[data-a="{aid}"]')
    expect(item).to_be_visible(timeout=10_000)
    item.locator('button[data-act="share"]').click()
    expect(instructor).to_have_url(re.compile(rf"/attendees/{aid}\?lab=getting-started"))
    expect(instructor.locator(".term-card")).to_have_attribute("data-share-state", "asked", timeout=10_000)
    expect(instructor.locator("#term")).to_have_attribute("data-writable", "false")

    # nothing typed by the instructor reaches the shell before consent
    instructor.locator("#term").click()
    instructor.keyboard.type("echo too-early\n")
    banner = page.locator("#share-banner")
    expect(banner).to_have_attribute("data-state", "asked", timeout=10_000)
    expect(banner).to_contain_text("Zoe asks to type in your terminal")
    page.screenshot(path=str(SCREENSHOTS / "share-asked.png"))
    banner.locator(".share-accept").click()
    expect(banner).to_have_attribute("data-state", "active")

    expect(instructor.locator(".term-card")).to_have_attribute("data-share-state", "active", timeout=10_000)
    expect(instructor.locator("#term")).to_have_attribute("data-writable", "true")
    expect(instructor.locator("#term")).to_have_attribute("data-ws", "open", timeout=10_000)
    instructor.locator("#term").click()
    instructor.keyboard.type("echo from-zoe-$((6*7))")
    instructor.keyboard.press("Enter")
    wait_terminal_line(page, "from-zoe-42")  # the attendee's own terminal shows it
    expect(banner.locator(".share-typing")).to_have_text("Zoe is typing…")
    run_in_terminal(page, "echo from-ada-$((5*5))")
    instructor.wait_for_function(VIEW_HAS, arg="from-ada-25", timeout=10_000)
    assert "too-early" not in terminal_text(page)
    page.screenshot(path=str(SCREENSHOTS / "share-active.png"))

    # the attendee ends it: the instructor's view is read-only again
    banner.locator(".share-stop").click()
    expect(banner).to_be_hidden()
    expect(instructor.locator(".term-card")).to_have_attribute("data-share-state", "none", timeout=10_000)
    expect(instructor.locator("#term")).to_have_attribute("data-writable", "false", timeout=10_000)
    expect(instructor.locator("#term")).to_have_attribute("data-ws", "open", timeout=10_000)
    instructor.locator("#term").click()
    instructor.keyboard.type("echo after-stop\n")
    run_in_terminal(page, "echo done-$((1+2))")
    wait_terminal_line(page, "done-3")
    assert "after-stop" not in terminal_text(page)
