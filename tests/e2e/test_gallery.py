"""The live gallery in real Chromium, with two attendees in browser contexts of their own: their
terminals appear as thumbnails and update live over one stream (no WebSocket, no second stream),
sorting by failing and by progress orders them, and a click opens the read-only live view."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.e2e.conftest import SCREENSHOTS, join, open_lab, run_in_terminal, wait_terminal_line
from tests.e2e.instructor_fixtures import (
    instructor_page,  # noqa: F401 (the `instructor` fixture)
    me,
)

pytestmark = pytest.mark.browser

CHECK_TIMEOUT = 90_000
HELLO = "Hello, Ascend!\n你好，昇腾！\n"
VIEW_BUFFER_JS = """(want) => { const b = term.buffer.active;
  for (let i = 0; i < b.length; i++) if (b.getLine(i).translateToString(true).includes(want)) return true;
  return false; }"""
ORDER_JS = "([a, b]) => { const ids = [...document.querySelectorAll('#gallery .thumb')].map((e) => e.dataset.a); return ids.indexOf(a) < ids.indexOf(b); }"


def check(page: Page, status: str) -> None:
    page.click("#check-button")
    expect(page.locator("#step-write-file .check-result")).to_have_attribute(
        "data-status", status, timeout=CHECK_TIMEOUT
    )


def test_thumbnails_update_live_sort_and_open_the_read_only_view(
    page: Page, browser: Browser, base_url: str, instructor: Page
) -> None:
    join(page)
    open_lab(page, step="write-file")
    ada, event_id = me(page)
    run_in_terminal(page, "echo ada-says-$((6*7))")
    wait_terminal_line(page, "ada-says-42")
    other = browser.new_context(base_url=base_url, locale="en-US")
    try:
        bob_page = other.new_page()
        join(bob_page)
        open_lab(bob_page, step="write-file")
        bob, _ = me(bob_page)
        run_in_terminal(bob_page, "echo bob-says-$((6*7))")
        wait_terminal_line(bob_page, "bob-says-42")
        check(bob_page, "failed")  # Bob: one failing step
        assert page.context.request.put(
            "/api/v1/labs/getting-started/files/notes/hello.txt", data=HELLO.encode()
        ).ok
        check(page, "passed")  # Ada: one step passed

        streams: list[str] = []
        sockets: list[str] = []
        instructor.on("request", lambda r: "/stream" in r.url and streams.append(r.url))
        instructor.on("websocket", lambda ws: sockets.append(ws.url))
        instructor.goto(f"/instructor/events/{event_id}/gallery")
        expect(instructor.locator("#gallery")).to_have_attribute("data-ready", "1", timeout=15_000)
        expect(instructor.locator("body")).to_have_attribute("data-live", "ready", timeout=15_000)
        ada_thumb, bob_thumb = instructor.locator(f"#t{ada}"), instructor.locator(f"#t{bob}")
        expect(ada_thumb.locator(".g-lines")).to_contain_text("ada-says-42", timeout=15_000)
        expect(bob_thumb.locator(".g-lines")).to_contain_text("bob-says-42")
        expect(bob_thumb).to_have_class(re.compile(r"\bfailing\b"))
        expect(ada_thumb.locator(".g-prog")).to_contain_text("1/")

        run_in_terminal(page, "echo ada-again-$((6*7))")  # a live update, no reload
        expect(ada_thumb.locator(".g-lines")).to_contain_text("ada-again-42", timeout=15_000)

        instructor.select_option("#g-sort", "failing")
        instructor.wait_for_function(ORDER_JS, arg=[str(bob), str(ada)])
        instructor.select_option("#g-sort", "progress-desc")
        instructor.wait_for_function(ORDER_JS, arg=[str(ada), str(bob)])
        instructor.select_option("#g-sort", "progress")
        instructor.wait_for_function(ORDER_JS, arg=[str(bob), str(ada)])
        assert [u for u in streams if "/gallery/stream" in u] == streams and len(streams) == 1
        assert sockets == []  # thumbnails open no terminal socket
        instructor.screenshot(path=str(SCREENSHOTS / "instructor-gallery.png"), full_page=True)

        ada_thumb.click()
        expect(instructor).to_have_url(
            re.compile(rf"/attendees/{ada}\?lab=getting-started&term=getting-started$")
        )
        expect(instructor.locator("#term")).to_have_attribute("data-ws", "open", timeout=15_000)
        instructor.wait_for_function(VIEW_BUFFER_JS, arg="ada-again-42", timeout=10_000)
    finally:
        other.close()
