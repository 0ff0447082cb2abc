"""Who may open the live gallery: the page and its stream refuse anonymous callers, attendees (by
bearer token or cookie) and forged instructor cookies; the instructor gets the page. (The stream's
content, event by event, is tested in tests/services/test_gallery.py: an event's stream never
carries another event's terminal.)"""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from labserver.models import Event
from labserver.routes.deps import ATTENDEE_COOKIE, INSTRUCTOR_COOKIE
from tests.conftest import instructor_headers, join


@pytest.mark.parametrize("who", ["anonymous", "attendee-bearer", "attendee-cookie", "forged-cookie"])
def test_the_gallery_and_its_stream_refuse_everyone_but_the_instructor(
    who: str, client: TestClient, event: Event
) -> None:
    token = join(client, "Mallory")["Authorization"].split()[1]
    headers: dict[str, str] = {}
    if who == "attendee-bearer":
        headers = {"Authorization": f"Bearer {token}"}
    elif who == "attendee-cookie":
        client.cookies.set(ATTENDEE_COOKIE, token)
    elif who == "forged-cookie":
        client.cookies.set(INSTRUCTOR_COOKIE, '{"name": "me", "t": "x"}.forged.sig')
    resp = client.get(f"/api/v1/events/{event.id}/gallery/stream", headers=headers)
    assert resp.status_code == 403, resp.text
    assert "text/event-stream" not in resp.headers.get("content-type", "")
    page = client.get(f"/instructor/events/{event.id}/gallery", headers=headers, follow_redirects=False)
    assert page.status_code == 303
    assert page.headers["location"].startswith("/instructor/login")


def test_the_instructor_gets_the_gallery_page_and_a_missing_event_is_a_404(
    client: TestClient, event: Event
) -> None:
    page = client.get(f"/instructor/events/{event.id}/gallery", headers=instructor_headers())
    assert page.status_code == 200
    assert 'id="gallery"' in page.text and "/static/gallery.js" in page.text
    assert (
        f"/instructor/events/{event.id}/gallery"
        in client.get(f"/instructor/events/{event.id}", headers=instructor_headers()).text
    )  # the dashboard links to it
    missing = client.get("/api/v1/events/999999/gallery/stream", headers=instructor_headers())
    assert missing.status_code == 404
