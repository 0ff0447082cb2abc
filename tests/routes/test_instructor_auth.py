"""Every instructor route refuses anonymous users and attendees (walked route by route from
``app.routes``), and accepts the instructor (token or signed cookie)."""

from __future__ import annotations

import re

import pytest
from fastapi import FastAPI
from fastapi.routing import APIRoute, APIWebSocketRoute
from fastapi.testclient import TestClient
from starlette.websockets import WebSocketDisconnect

from labserver.models import Event
from labserver.routes.deps import ATTENDEE_COOKIE, INSTRUCTOR_COOKIE, make_instructor_cookie
from tests.conftest import INSTRUCTOR_TOKEN, instructor_headers, iter_routes, join

OPEN_PAGES = {
    ("GET", "/instructor/login"),
    ("POST", "/instructor/login"),
    ("POST", "/instructor/logout"),
    ("GET", "/instructor/signin/{secret}"),  # signing in (routes/instructor/signin.py)
    ("POST", "/instructor/signin/{secret}"),
    ("GET", "/instructor/oidc/login"),
    ("GET", "/instructor/oidc/callback"),
}


def instructor_routes(app: FastAPI) -> list[tuple[str, str]]:
    out = []
    for path, route in iter_routes(app):
        if not isinstance(route, APIRoute):
            continue
        if "instructor" in (route.tags or []) or path.startswith("/instructor"):
            for method in sorted(route.methods):
                if (method, path) not in OPEN_PAGES:
                    out.append((method, path))
    return out


def fill(path: str, event_id: int) -> str:
    values = {"event_id": str(event_id), "attendee_id": "1", "help_id": "1", "env_id": f"ev{event_id}-at1"}
    return re.sub(r"\{(\w+)(:\w+)?\}", lambda m: values.get(m.group(1), "x"), path)


def test_the_walk_covers_every_area(app: FastAPI) -> None:
    paths = {p for _m, p in instructor_routes(app)}
    for expected in (
        "/api/v1/events",
        "/api/v1/events/{event_id}/progress",
        "/api/v1/events/{event_id}/stream",
        "/api/v1/events/{event_id}/export.csv",
        "/api/v1/events/{event_id}/export.json",
        "/api/v1/events/{event_id}/help/{help_id}/claim",
        "/api/v1/events/{event_id}/announcements",
        "/api/v1/events/{event_id}/pace",
        "/api/v1/environments/{env_id}/recreate",
        "/api/v1/events/{event_id}/attendees/{attendee_id}/reveal",
        "/instructor",
        "/instructor/events/{event_id}",
        "/instructor/events/{event_id}/attendees/{attendee_id}",
    ):
        assert expected in paths
    assert len(instructor_routes(app)) >= 30


@pytest.mark.parametrize("who", ["anonymous", "attendee-bearer", "attendee-cookie", "forged-cookie"])
def test_every_instructor_route_refuses(who: str, app: FastAPI, client: TestClient, event: Event) -> None:
    token = join(client, "Mallory")["Authorization"].split()[1]
    headers: dict[str, str] = {}
    client.cookies.clear()
    if who == "attendee-bearer":
        headers = {"Authorization": f"Bearer {token}"}
    elif who == "attendee-cookie":
        client.cookies.set(ATTENDEE_COOKIE, token)
    elif who == "forged-cookie":
        client.cookies.set(INSTRUCTOR_COOKIE, '{"name": "me", "t": "x"}.forged.sig')
    checked = 0
    for method, path in instructor_routes(app):
        url = fill(path, event.id or 0)
        resp = client.request(method, url, headers=headers, json={}, follow_redirects=False)
        if path.startswith("/instructor"):
            assert resp.status_code == 303, (method, path, resp.status_code)
            assert resp.headers["location"].startswith("/instructor/login"), (method, path)
        else:
            assert resp.status_code == 403, (method, path, resp.status_code, resp.text[:200])
        checked += 1
    assert checked >= 30


def test_the_terminal_view_socket_refuses_attendees_and_anonymous(client: TestClient, event: Event) -> None:
    token = join(client, "Mallory")["Authorization"].split()[1]
    app = client.app
    assert any(
        isinstance(r, APIWebSocketRoute) and path == "/api/v1/environments/{env_id}/terminal"
        for path, r in iter_routes(app)  # type: ignore[arg-type]
    )
    for headers in ({}, {"Authorization": f"Bearer {token}"}):
        client.cookies.clear()
        with (
            pytest.raises(WebSocketDisconnect) as exc,
            client.websocket_connect(
                f"/api/v1/environments/ev{event.id}-at1/terminal?readonly=1", headers=headers
            ) as ws,
        ):
            ws.receive_bytes()
        assert exc.value.code == 4403


def test_instructor_gets_through_with_token_or_cookie(app: FastAPI, client: TestClient, event: Event) -> None:
    """The positive control: the same GET routes answer the instructor (so the walk above can fail)."""
    join(client, "Ada")
    cookie = make_instructor_cookie(app.state.ctx, "Zoe")
    for method, path in instructor_routes(app):
        if method != "GET" or path.endswith("/stream"):
            continue
        url = fill(path, event.id or 0)
        client.cookies.clear()
        by_token = client.get(url, headers=instructor_headers(), follow_redirects=False)
        client.cookies.set(INSTRUCTOR_COOKIE, cookie)
        by_cookie = client.get(url, follow_redirects=False)
        for resp in (by_token, by_cookie):
            assert resp.status_code not in (401, 403, 303), (path, resp.status_code)


def test_a_cookie_stops_working_when_the_token_changes(
    app: FastAPI, client: TestClient, event: Event
) -> None:
    ctx = app.state.ctx
    cookie = make_instructor_cookie(ctx, "Zoe")
    client.cookies.set(INSTRUCTOR_COOKIE, cookie)
    assert client.get("/api/v1/events").status_code == 200
    ctx.settings.instructor_token = INSTRUCTOR_TOKEN + "-rotated"
    assert client.get("/api/v1/events").status_code == 403
