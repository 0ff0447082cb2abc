"""A page on another site cannot use the attendee's or the instructor's cookie (labserver/edge/csrf.py).

Attacks as a forged page makes them: the browser attaches the victim's cookie and an ``Origin``
(or only a ``Referer``) naming the attacker's site."""

from __future__ import annotations

import pytest
from fastapi import FastAPI
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient
from sqlmodel import Session
from starlette.websockets import WebSocketDisconnect

from labserver.edge.csrf import is_cross_site
from labserver.models import Event, EventStatus
from labserver.routes.deps import ATTENDEE_COOKIE, INSTRUCTOR_COOKIE, make_instructor_cookie
from tests.conftest import EVENT_CODE, iter_routes
from tests.routes.test_instructor_auth import fill

EVIL = {"Origin": "http://evil.example"}
OWN = {"Origin": "http://testserver"}


def attendee_cookie(client: TestClient, name: str = "Ada") -> dict[str, str]:
    resp = client.post("/api/v1/join", json={"event_code": EVENT_CODE, "name": name})
    assert resp.status_code == 200, resp.text
    client.cookies.clear()
    return {"Cookie": f"{ATTENDEE_COOKIE}={resp.json()['token']}"}


def instructor_cookie(app: FastAPI) -> dict[str, str]:
    return {"Cookie": f"{INSTRUCTOR_COOKIE}={make_instructor_cookie(app.state.ctx, 'Grace')}"}


def test_forged_close_event_is_refused_and_changes_nothing(
    app: FastAPI, client: TestClient, event: Event
) -> None:
    url = f"/api/v1/events/{event.id}/status"
    resp = client.post(url, json={"status": "closed"}, headers={**instructor_cookie(app), **EVIL})
    assert resp.status_code == 403 and resp.json()["reason"] == "cross-site"
    with Session(app.state.ctx.engine) as s:
        assert s.get(Event, event.id).status == EventStatus.open  # type: ignore[union-attr]
    ok = client.post(url, json={"status": "closed"}, headers={**instructor_cookie(app), **OWN})
    assert ok.status_code == 200, ok.text


def test_forged_restart_and_reset_are_refused(app: FastAPI, client: TestClient, event: Event) -> None:
    me = attendee_cookie(client)
    assert (
        client.put("/api/v1/labs/getting-started/files/mine.txt", content="keep", headers=me).status_code
        == 200
    )
    forged = client.post("/api/v1/labs/getting-started/reset", headers={**me, **EVIL})
    assert forged.status_code == 403
    assert client.get("/api/v1/labs/getting-started/files/mine.txt", headers=me).text == "keep"
    env_id = f"ev{event.id}-at1"  # Ada, the first attendee
    restart = client.post(
        f"/api/v1/environments/{env_id}/restart", headers={**instructor_cookie(app), **EVIL}
    )
    assert restart.status_code == 403
    assert (
        client.post(
            f"/api/v1/environments/{env_id}/restart", headers={**instructor_cookie(app), **OWN}
        ).status_code
        == 200
    )


def test_a_referer_alone_from_another_site_is_refused(client: TestClient, event: Event) -> None:
    me = attendee_cookie(client)
    resp = client.post(
        "/api/v1/labs/getting-started/reset", headers={**me, "Referer": "http://evil.example/page"}
    )
    assert resp.status_code == 403


def test_another_port_of_the_same_host_is_another_origin(client: TestClient, event: Event) -> None:
    me = attendee_cookie(client)
    resp = client.post(
        "/api/v1/help", json={"lab_id": "getting-started"}, headers={**me, "Origin": "http://testserver:8081"}
    )
    assert resp.status_code == 403


@pytest.mark.parametrize("lab", ["getting-started"])
def test_a_forged_page_cannot_open_the_terminal(client: TestClient, event: Event, lab: str) -> None:
    me = attendee_cookie(client)
    with (
        pytest.raises(WebSocketDisconnect) as exc,
        client.websocket_connect(f"/api/v1/labs/{lab}/terminal", headers={**me, **EVIL}) as ws,
    ):
        ws.receive_bytes()
    assert exc.value.code == 4403


def test_every_state_changing_route_refuses_a_forged_cookie(
    app: FastAPI, client: TestClient, event: Event
) -> None:
    cookies = {**attendee_cookie(client), **EVIL}
    cookies["Cookie"] += "; " + instructor_cookie(app)["Cookie"]
    walked = 0
    for path, route in iter_routes(app):
        if not isinstance(route, APIRoute):
            continue
        for method in route.methods - {"GET", "HEAD", "OPTIONS"}:
            resp = client.request(method, fill(path, event.id or 0), headers=cookies, json={})
            assert resp.status_code == 403, (method, path, resp.status_code)
            walked += 1
    assert walked >= 20


def test_same_origin_bearer_and_non_browser_requests_pass() -> None:
    cookie = {"cookie": "labserver_token=x", "host": "lab.example:8000"}
    assert not is_cross_site({**cookie, "origin": "http://lab.example:8000"})
    assert not is_cross_site(
        {**cookie, "origin": "https://lab.example:8000", "referer": "http://evil.example/"}
    )
    assert not is_cross_site(cookie)  # curl: neither Origin nor Referer
    assert not is_cross_site({**cookie, "origin": "http://evil.example", "authorization": "Bearer t"})
    assert not is_cross_site({"host": "lab.example:8000", "origin": "http://evil.example"})  # no cookie
    assert is_cross_site({**cookie, "origin": "null"})  # sandboxed iframe / data: URL
    assert is_cross_site({**cookie, "origin": "http://evil.example"})
    assert not is_cross_site(
        {**cookie, "host": "10.0.0.5:8000", "origin": "https://lab.example"}, ["https://lab.example"]
    )
