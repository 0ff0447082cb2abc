"""The instructor's room in real Chromium, with the attendee in a second browser context: a check
turns the cell green on the open grid, a raised hand goes through the queue, a broadcast reaches the
attendee page, and the read-only terminal view shows what the attendee typed. Screenshots for
docs/instructor-guide.md go to docs/img/instructor-*.png."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import BrowserContext, Page, expect

from tests.e2e.conftest import SCREENSHOTS, join, open_lab, run_in_terminal, wait_terminal_line
from tests.e2e.instructor_fixtures import (
    instructor_page,  # noqa: F401 (the `instructor` fixture)
    login_instructor,
    me,
    open_dashboard,
)

pytestmark = pytest.mark.browser

CHECK_TIMEOUT = 90_000
HELLO = "Hello, Ascend!\n你好，昇腾！\n"
WRITE_FILE_COLUMN = 2  # getting-started: find-device, run-script, write-file, ...


def test_a_check_turns_the_cell_green_on_the_open_grid(
    page: Page, context: BrowserContext, instructor: Page
) -> None:
    name = join(page)
    open_lab(page, step="write-file")
    aid, event_id = me(page)
    open_dashboard(instructor, event_id)
    instructor.evaluate("() => { window.__noReload = 'still here'; }")
    cell = instructor.locator(f"#c{aid}_{WRITE_FILE_COLUMN}")
    expect(cell).to_have_class(re.compile(r"\bs-w\b"), timeout=15_000)  # opened the step: working

    page.click("#check-button")  # nothing written yet: failing, one attempt
    expect(page.locator("#step-write-file .check-result")).to_have_attribute(
        "data-status", "failed", timeout=CHECK_TIMEOUT
    )
    expect(cell).to_have_class(re.compile(r"\bs-f\b"))
    expect(cell.locator("b")).to_have_text("✗1")

    saved = context.request.put("/api/v1/labs/getting-started/files/notes/hello.txt", data=HELLO.encode())
    assert saved.ok, saved.text()
    page.click("#check-button")
    expect(page.locator("#step-write-file .check-result")).to_have_attribute(
        "data-status", "passed", timeout=CHECK_TIMEOUT
    )
    expect(cell).to_have_class(re.compile(r"\bs-p\b"))
    assert instructor.evaluate("() => window.__noReload") == "still here"  # updated in place, no reload
    row = instructor.locator(f"#r{aid}")
    expect(row.locator(".done")).to_contain_text("1/")
    expect(instructor.locator(f"#s{WRITE_FILE_COLUMN} span")).not_to_have_text("0")

    instructor.fill("#f-name", name)
    expect(instructor.locator("#grid-shown")).to_contain_text("1 /")
    instructor.fill("#f-name", "")
    instructor.select_option("#f-status", "done")
    expect(row).to_be_hidden()
    instructor.select_option("#f-status", "")
    expect(row).to_be_visible()
    instructor.screenshot(path=str(SCREENSHOTS / "instructor-dashboard.png"), full_page=True)
    instructor.locator("#funnel-card").screenshot(path=str(SCREENSHOTS / "instructor-funnel.png"))
    instructor.locator("#chart-card").screenshot(path=str(SCREENSHOTS / "instructor-chart.png"))


def test_a_raised_hand_is_claimed_and_resolved_and_clears_on_the_attendee_page(
    page: Page, instructor: Page
) -> None:
    join(page)
    open_lab(page)
    expect(page.locator("body")).to_have_attribute("data-live", "ready")
    aid, event_id = me(page)
    open_dashboard(instructor, event_id)
    page.click("#help-button")
    expect(page.locator("#help-status")).to_contain_text("Hand raised")

    item = instructor.locator(f'#help-queue li[data-a="{aid}"]')
    expect(item).to_be_visible(timeout=10_000)
    expect(item.locator(".waiting")).to_contain_text("waiting")
    expect(instructor.locator(f"#r{aid}")).to_have_class(re.compile(r"\bhand\b"))
    item.locator('button[data-act="claim"]').click()
    expect(page.locator("#help-status")).to_contain_text("Zoe")
    expect(page.locator("body")).to_have_attribute("data-help", "claimed")
    expect(item).to_contain_text("claimed by Zoe")
    instructor.locator("#help-card").screenshot(path=str(SCREENSHOTS / "instructor-help.png"))

    item.locator('button[data-act="resolve"]').click()
    expect(page.locator("body")).to_have_attribute("data-help", "none")
    expect(page.locator("#help-status")).to_be_hidden()
    expect(item).to_have_count(0)


def test_a_broadcast_appears_on_the_attendee_page(page: Page, instructor: Page) -> None:
    join(page)
    open_lab(page)
    expect(page.locator("body")).to_have_attribute("data-live", "ready")
    _aid, event_id = me(page)
    open_dashboard(instructor, event_id)
    instructor.fill("#broadcast-text", "Coffee break: back at 15:30")
    instructor.click("#broadcast-form button[type=submit]")
    expect(instructor.locator("#broadcast-status")).to_have_text("Sent.")
    expect(page.locator("#announcement")).to_be_visible()
    expect(page.locator("#announcement .announcement-text")).to_have_text("Coffee break: back at 15:30")
    expect(instructor.locator("#announcements")).to_contain_text("Coffee break")
    instructor.locator("#broadcast-card").screenshot(path=str(SCREENSHOTS / "instructor-broadcast.png"))
    page.screenshot(path=str(SCREENSHOTS / "instructor-broadcast-attendee.png"))


VIEW_BUFFER_JS = """(want) => { const b = term.buffer.active;
  for (let i = 0; i < b.length; i++) if (b.getLine(i).translateToString(true).includes(want)) return true;
  return false; }"""


def test_the_terminal_view_shows_what_the_attendee_typed(page: Page, instructor: Page) -> None:
    join(page)
    open_lab(page)
    aid, event_id = me(page)
    instructor.goto(f"/instructor/events/{event_id}/attendees/{aid}")
    expect(instructor.locator("#term")).to_have_attribute("data-ws", "open", timeout=15_000)
    expect(instructor.locator("#env-state")).to_have_text("ready")
    expect(instructor.locator("#env-device")).to_have_text("CPU emulation")

    run_in_terminal(page, "echo typed-by-attendee-$((6*7))")
    wait_terminal_line(page, "typed-by-attendee-42")
    instructor.wait_for_function(VIEW_BUFFER_JS, arg="echo typed-by-attendee-$((6*7))", timeout=10_000)
    instructor.wait_for_function(VIEW_BUFFER_JS, arg="typed-by-attendee-42", timeout=10_000)
    # the view is read-only: the keyboard does nothing there
    instructor.locator("#term").click()
    instructor.keyboard.type("echo from-instructor\n")
    run_in_terminal(page, "echo after-$((1+1))")
    wait_terminal_line(page, "after-2")
    assert "from-instructor" not in page.evaluate(
        "() => { const b = term.buffer.active, out = []; for (let i = 0; i < b.length; i++) "
        "out.push(b.getLine(i).translateToString(true)); return out.join('\\n'); }"
    )
    instructor.screenshot(path=str(SCREENSHOTS / "instructor-attendee.png"), full_page=True)


def test_create_an_event_pace_it_and_export(instructor: Page) -> None:
    instructor.goto("/instructor")
    instructor.screenshot(path=str(SCREENSHOTS / "instructor-events.png"))
    instructor.click("#new-event")
    instructor.fill("input[name=title]", "Browser-made event")
    instructor.click('.lab-picker .chip[data-lab="getting-started"]')
    expect(instructor.locator("#labs-field")).to_have_value("getting-started")
    instructor.fill("input[name=code]", "BROWSR")
    instructor.screenshot(path=str(SCREENSHOTS / "instructor-new-event.png"))
    instructor.click("#event-form button[type=submit]")
    expect(instructor.locator("#event-title")).to_have_text("Browser-made event")
    expect(instructor.locator(".join-code")).to_have_text("BROWSR")
    expect(instructor.locator("body")).to_have_attribute("data-live", "ready")

    form = instructor.locator('.pace-form[data-lab="getting-started"]')
    form.locator("select").select_option("2")
    form.locator("button[type=submit]").click()
    expect(instructor.locator("#pace-status")).to_have_text("Saved.")
    expect(instructor.locator("tr.steps th.locked")).to_have_count(3)
    form.locator("button.advance").click()
    expect(instructor.locator("tr.steps th.locked")).to_have_count(2)
    instructor.locator("#pacing-card").screenshot(path=str(SCREENSHOTS / "instructor-pacing.png"))

    with instructor.expect_download() as dl:
        instructor.click("#export-csv")
    assert dl.value.suggested_filename.startswith(
        "labserver-BROWSR"
    ) and dl.value.suggested_filename.endswith(".csv")
    instructor.click("button[name=status][value=closed]")
    expect(instructor.locator("#event-status")).to_have_text("closed")


def test_the_instructor_pages_speak_chinese(browser, base_url: str) -> None:  # type: ignore[no-untyped-def]
    context = browser.new_context(base_url=base_url, locale="zh-CN")
    try:
        page = context.new_page()
        page.goto("/instructor/login")
        expect(page.locator("h1")).to_have_text("工作人员登录")
        page.fill("#login-form input[name=name]", "李老师")
        page.screenshot(path=str(SCREENSHOTS / "instructor-login-zh.png"))
        login_instructor(page, "李老师")
        expect(page.locator("h1")).to_have_text("活动")
    finally:
        context.close()
