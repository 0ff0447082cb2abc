"""The dashboard's Environments card in real Chromium: the warm pool size is saved to the event,
and "Stop all environments" asks first and then calls the API (the e2e server runs the local
backend, which cannot stop: the card shows the server's clear refusal; stopping itself is tested
in tests/services/test_stop_all.py and on Docker)."""

from __future__ import annotations

import pytest
from playwright.sync_api import Dialog, Page, expect

from tests.e2e.conftest import join
from tests.e2e.instructor_fixtures import (
    instructor_page,  # noqa: F401 (the `instructor` fixture)
    me,
    open_dashboard,
)

pytestmark = pytest.mark.browser


def test_warm_pool_size_is_saved_and_stop_all_asks_first(page: Page, instructor: Page) -> None:
    join(page)
    _aid, event_id = me(page)
    open_dashboard(instructor, event_id)
    instructor.fill("#warm-size", "12")
    instructor.click("#warm-form button[type=submit]")
    expect(instructor.locator("#environments-status")).to_have_text("Saved.")
    assert instructor.context.request.get(f"/api/v1/events/{event_id}").json()["warm_pool"] == 12

    asked: list[str] = []

    def decline(dialog: Dialog) -> None:
        asked.append(dialog.message)
        dialog.dismiss()

    instructor.once("dialog", decline)
    instructor.click("#stop-all")
    expect(instructor.locator("#environments-status")).to_have_text("Saved.")  # declined: nothing sent
    assert asked and asked[0].startswith("Stop every environment of this event?")

    instructor.once("dialog", lambda dialog: dialog.accept())
    instructor.click("#stop-all")
    expect(instructor.locator("#environments-status")).to_contain_text("cannot stop environments")
    instructor.fill("#warm-size", "")
    instructor.click("#warm-form button[type=submit]")
    expect(instructor.locator("#environments-status")).to_have_text("Saved.")
    assert instructor.context.request.get(f"/api/v1/events/{event_id}").json()["warm_pool"] is None
