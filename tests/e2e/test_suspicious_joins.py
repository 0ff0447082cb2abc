"""Issue 13 item 6 in Chromium: names joined by a script show up on the instructor's dashboard under
"Suspicious joins", and Remove takes one out of the grid for good (its token stops working)."""

from __future__ import annotations

import uuid

import httpx
import pytest
from playwright.sync_api import Page, expect

from tests.e2e.conftest import EVENT_CODE
from tests.e2e.instructor_fixtures import instructor_page, open_dashboard  # noqa: F401

pytestmark = pytest.mark.browser


def test_scripted_joins_are_listed_and_removed(instructor: Page, base_url: str) -> None:
    tag = uuid.uuid4().hex[:6]
    tokens = {}
    for i in range(3):
        resp = httpx.post(
            f"{base_url}/api/v1/join",
            json={"event_code": EVENT_CODE, "name": f"bot{i}-{tag}"},
            headers={"User-Agent": "python-httpx/0.27.0"},
        )
        assert resp.status_code == 200, resp.text
        tokens[f"bot{i}-{tag}"] = (
            resp.json()["attendee"]["id"],
            resp.json()["token"],
            resp.json()["event"]["id"],
        )
    aid, token, event_id = tokens[f"bot0-{tag}"]
    open_dashboard(instructor, event_id)
    row = instructor.locator(f"#joins-list li[data-a='{aid}']")
    expect(row).to_contain_text("not a browser", timeout=15_000)
    expect(instructor.locator(f"#grid tr[data-a='{aid}']")).to_have_count(1, timeout=15_000)
    instructor.once("dialog", lambda d: d.accept())
    row.locator("button[data-act=remove]").click()
    expect(row).to_have_count(0, timeout=15_000)
    gone = httpx.get(f"{base_url}/api/v1/me", headers={"Authorization": f"Bearer {token}"})
    assert gone.status_code == 401
    expect(instructor.locator(f"#grid tr[data-a='{aid}']")).to_have_count(0, timeout=15_000)
