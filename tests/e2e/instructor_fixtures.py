"""Fixtures for the instructor's browser tests (the server, Chromium settings and attendee helpers
come from ``tests/e2e/conftest.py``)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, expect

from tests.e2e.conftest import INSTRUCTOR_TOKEN

INSTRUCTOR_VIEWPORT = {"width": 1440, "height": 900}


@dataclass
class Attendee:
    page: Page
    context: BrowserContext
    id: int
    event_id: int
    name: str


def login_instructor(page: Page, name: str = "Zoe") -> None:
    page.goto("/instructor/login")
    page.fill("#login-form input[name=name]", name)
    page.fill("#login-form input[name=token]", INSTRUCTOR_TOKEN)
    page.click("#login-form button[type=submit]")
    expect(page.locator(".i-topbar .who")).to_have_text(name)


@pytest.fixture(name="instructor")
def instructor_page(browser: Browser, base_url: str) -> Iterator[Page]:
    """A logged-in instructor in a browser context of its own (its own cookies, its own connections)."""
    context = browser.new_context(base_url=base_url, viewport=INSTRUCTOR_VIEWPORT, locale="en-US")
    page = context.new_page()
    login_instructor(page)
    try:
        yield page
    finally:
        context.close()


def open_dashboard(page: Page, event_id: int) -> None:
    page.goto(f"/instructor/events/{event_id}")
    expect(page.locator("body")).to_have_attribute("data-live", "ready", timeout=15_000)
    expect(page.locator("#grid")).to_have_attribute("data-ready", "1", timeout=15_000)


def me(page: Page) -> tuple[int, int]:
    data = page.context.request.get("/api/v1/me").json()
    return int(data["attendee"]["id"]), int(data["event"]["id"])
