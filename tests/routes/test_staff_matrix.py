"""The authorization matrix (issue 33): every staff route (walked from ``app.routes``: JSON API,
pages, SSE streams and the terminal WebSocket) x every role (assistant, instructor, organiser of
event A; an organiser of every event) x its own event and another (B). A refused request gets 403
(a WebSocket: close 4403) and no audit line; an allowed one gets through the one dependency
(``routes/deps.require``) and the table (``services/staff/roles.py``) decides which is which.

Routes without a body that would really act (stop all, restart, recreate, remove an attendee,
remove staff) are checked for refusals here and for their allowed roles in
``tests/routes/test_staff.py``; every other allowed request is really made (a route with a body
gets ``{}``, so it stops at the body's validation: 422, after the dependency let it through)."""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest
from fastapi import FastAPI
from fastapi.routing import APIRoute, APIWebSocketRoute
from fastapi.testclient import TestClient
from sqlmodel import Session, select
from starlette.websockets import WebSocketDisconnect

from labserver.models import AuditEntry, Environment, Event
from labserver.routes.deps import INSTRUCTOR_COOKIE, make_staff_cookie
from labserver.services.joining.events import create_event
from labserver.services.staff import accounts
from labserver.services.staff.roles import SERVER_SCOPE, Action, Grant, Role, may
from tests.conftest import INSTRUCTOR_TOKEN, iter_routes, join

OPEN = {
    "/instructor/login",
    "/instructor/logout",
    "/instructor/signin/{secret}",
    "/instructor/oidc/login",
    "/instructor/oidc/callback",
}
#: allowed requests not made here (they really act with no body to stop them): test_staff.py
ACTS_WITHOUT_BODY = {
    ("POST", "/api/v1/events/{event_id}/stop-all"),
    ("POST", "/api/v1/environments/{env_id}/restart"),
    ("POST", "/api/v1/environments/{env_id}/recreate"),
    ("DELETE", "/api/v1/events/{event_id}/attendees/{attendee_id}"),
    ("DELETE", "/api/v1/events/{event_id}/staff/{staff_id}"),
    ("DELETE", "/api/v1/staff/{staff_id}"),
    ("DELETE", "/api/v1/events/{event_id}/shares/{share_id}"),
    ("POST", "/api/v1/events/{event_id}/help/{help_id}/claim"),
    ("POST", "/api/v1/events/{event_id}/help/{help_id}/resolve"),
    ("POST", "/api/v1/events/{event_id}/help/{help_id}/share"),
    ("POST", "/instructor/logout"),
}


def route_guard(route: APIRoute | APIWebSocketRoute) -> tuple[Action, bool] | None:
    """The action a route's ``require`` dependency checks and whether it writes an audit line
    (None: the route has no such dependency)."""
    stack = list(route.dependant.dependencies)
    while stack:
        dep = stack.pop()
        action = getattr(dep.call, "action", None)
        if action is not None:
            return Action(action), bool(getattr(dep.call, "audited", False))
        stack.extend(dep.dependencies)
    return None


def route_action(route: APIRoute | APIWebSocketRoute) -> Action | None:
    guard = route_guard(route)
    return guard[0] if guard else None


def staff_routes(app: FastAPI) -> list[tuple[str, str, Action]]:
    return [(m, p, a) for m, p, a, _audited in guarded_routes(app)]


def guarded_routes(app: FastAPI) -> list[tuple[str, str, Action, bool]]:
    out = []
    for path, route in iter_routes(app):
        if not isinstance(route, APIRoute) or path in OPEN:
            continue
        guard = route_guard(route)
        if guard is None:
            continue
        for method in sorted(route.methods - {"HEAD"}):
            out.append((method, path, *guard))
    return out


@dataclass
class World:
    a: Event
    b: Event
    ids: dict[int, dict[str, str]]  # event id -> path values


@pytest.fixture
def world(app: FastAPI, client: TestClient, event: Event) -> World:
    ctx = app.state.ctx
    with Session(ctx.engine, expire_on_commit=False) as session:
        other = create_event(session, title="Other event", labs=["getting-started"], code="OTHERCODE")
    ids = {}
    for ev, code in ((event, "TESTCODE"), (other, "OTHERCODE")):
        headers = join(client, f"Ada of {code}", code=code)
        env_id = client.post("/api/v1/environment", headers=headers).json()["id"]
        hand = client.post(
            "/api/v1/help", json={"lab": "getting-started", "note": "x"}, headers=headers
        ).json()
        with Session(ctx.engine) as session:
            row = session.get(Environment, env_id)
            assert row is not None
            ids[ev.id or 0] = {
                "event_id": str(ev.id),
                "attendee_id": str(row.attendee_id),
                "env_id": env_id,
                "help_id": str(hand["id"]),
                "share_id": "999",
                "staff_id": "1",
                "rec_id": "none",
            }
    return World(event, other, ids)


def fill(path: str, values: dict[str, str]) -> str:
    return re.sub(r"\{(\w+)(:\w+)?\}", lambda m: values.get(m.group(1), "x"), path)


PEOPLE = {
    "assistant": (Role.assistant, "A"),
    "instructor": (Role.instructor, "A"),
    "organiser": (Role.organiser, "A"),
    "organiser-everywhere": (Role.organiser, None),
}


def sign_in(app: FastAPI, client: TestClient, who: str, world: World) -> list[Grant]:
    role, scope = PEOPLE[who]
    event_id = world.a.id if scope == "A" else None
    with Session(app.state.ctx.engine, expire_on_commit=False) as session:
        added = accounts.add(session, name=f"{who} person", role=role, event_id=event_id)
        secret = accounts.start_session(session, added.staff, via="link", hours=1)
    client.cookies.clear()
    client.cookies.set(INSTRUCTOR_COOKIE, make_staff_cookie(app.state.ctx, secret))
    return [Grant(role, event_id)]


def new_lines(app: FastAPI, before: int) -> list[str]:
    with Session(app.state.ctx.engine) as session:
        return [row.action for row in session.exec(select(AuditEntry).order_by(AuditEntry.id)).all()[before:]]


def audit_lines(app: FastAPI) -> int:
    with Session(app.state.ctx.engine) as session:
        return len(session.exec(select(AuditEntry)).all())


def test_every_staff_route_is_guarded_by_the_one_dependency(app: FastAPI) -> None:
    """No staff route without ``require`` (a route added without it fails here)."""
    for path, route in iter_routes(app):
        if not isinstance(route, APIRoute | APIWebSocketRoute) or path in OPEN:
            continue
        staffish = "instructor" in (getattr(route, "tags", None) or []) or path.startswith("/instructor")
        if staffish and isinstance(route, APIRoute) and path != "/metrics":
            assert route_action(route) is not None, path
    assert len(staff_routes(app)) >= 45


@pytest.mark.parametrize("who", list(PEOPLE))
def test_every_route_for_every_role_on_its_event_and_another(
    who: str, app: FastAPI, client: TestClient, world: World
) -> None:
    grants = sign_in(app, client, who, world)
    before = audit_lines(app)
    refused = allowed = 0
    audited: list[tuple[str, str, str]] = []
    for method, path, action, logged in guarded_routes(app):
        for ev in (world.a, world.b):
            assert ev.id is not None
            url = fill(path, world.ids[ev.id])
            in_path = "{event_id}" in path or "{env_id}" in path
            target = ev.id if in_path else None
            ok = may(grants, action, target)
            if not in_path and ev is world.b:
                continue  # the same request as for A
            if ok and ((method, path) in ACTS_WITHOUT_BODY or path.endswith("/stream")):
                continue
            resp = client.request(method, url, json={}, follow_redirects=False)
            if ok:
                assert resp.status_code not in (401, 403, 303), (
                    who,
                    method,
                    url,
                    resp.status_code,
                    resp.text[:200],
                )
                allowed += 1
                if logged and resp.status_code < 400:
                    audited.append((action.value, method, path))
            else:
                assert resp.status_code == 403, (who, method, url, resp.status_code, resp.text[:200])
                refused += 1
    # a refused request writes no line; each allowed audited success writes one
    assert sorted(new_lines(app, before)) == sorted(a for a, _m, _p in audited), audited
    if who == "organiser-everywhere":
        assert refused == 0
    else:
        assert refused >= 40 and allowed >= 15, (refused, allowed)


@pytest.mark.parametrize("who", list(PEOPLE))
def test_the_terminal_socket_for_every_role_on_its_event_and_another(
    who: str, app: FastAPI, client: TestClient, world: World
) -> None:
    grants = sign_in(app, client, who, world)
    for ev in (world.a, world.b):
        env_id = world.ids[ev.id or 0]["env_id"]
        for readonly in ("1", "0"):
            url = f"/api/v1/environments/{env_id}/terminal?readonly={readonly}&lab=getting-started"
            action = Action.terminal_view if readonly == "1" else Action.share
            with pytest.raises(WebSocketDisconnect) as exc, client.websocket_connect(url) as ws:
                ws.receive_bytes()
                ws.receive_bytes()
            if may(grants, action, ev.id):
                # allowed: a read-only view finds no shell open yet; typing finds no accepted share
                assert exc.value.code in (1000, 4403) and (readonly == "0" or exc.value.code == 1000), (
                    exc.value
                )
            else:
                assert exc.value.code == 4403, (who, ev.code, readonly)


@pytest.mark.parametrize("who", ["anonymous", "attendee", "forged"])
def test_no_staff_route_answers_without_a_staff_sign_in(
    who: str, app: FastAPI, client: TestClient, world: World
) -> None:
    headers: dict[str, str] = {}
    client.cookies.clear()
    if who == "attendee":
        headers = join(client, "Mallory")
    elif who == "forged":
        client.cookies.set(INSTRUCTOR_COOKIE, '{"s": "guess"}.forged.sig')
    for method, path, _action in staff_routes(app):
        resp = client.request(
            method, fill(path, world.ids[world.a.id or 0]), json={}, headers=headers, follow_redirects=False
        )
        if path.startswith("/instructor"):
            assert resp.status_code == 303 and resp.headers["location"].startswith("/instructor/login"), (
                method,
                path,
            )
        else:
            assert resp.status_code == 403, (method, path, resp.status_code)


def test_the_bootstrap_token_can_be_turned_off(app: FastAPI, client: TestClient, world: World) -> None:
    bearer = {"Authorization": f"Bearer {INSTRUCTOR_TOKEN}"}
    assert client.get("/api/v1/events", headers=bearer).status_code == 200
    app.state.ctx.settings.staff.bootstrap_token = False
    assert client.get("/api/v1/events", headers=bearer).status_code == 403
    resp = client.post("/instructor/login", data={"token": INSTRUCTOR_TOKEN}, follow_redirects=False)
    assert resp.status_code == 403 and "turned off" in resp.text


def test_server_scope_actions_need_a_role_on_every_event() -> None:
    assert {Action.create_event, Action.server} == SERVER_SCOPE
