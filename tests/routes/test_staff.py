"""Staff accounts end to end through the app (issue 33): the one-time link, passwords, signing out,
expiry; an assistant of event A in A's audit log for what they did and refused what they may not;
removing a person ends their sessions, streams, terminal views and shares within seconds; the
audit log is shown, exported and kept with the event. SQLite, and PostgreSQL with
``LABSERVER_TEST_DATABASE_URL``."""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlmodel import Session, select

from labserver import clock
from labserver.models import AuditEntry, Event, StaffSession
from labserver.routes.deps import INSTRUCTOR_COOKIE
from labserver.services.joining.events import create_event
from labserver.services.staff import accounts
from tests.conftest import join


def add(
    app: FastAPI, name: str, role: str, event_id: int | None, *, password: bool = False
) -> accounts.Added:
    with Session(app.state.ctx.engine, expire_on_commit=False) as session:
        return accounts.add(session, name=name, role=role, event_id=event_id, password=password)


def use_link(client: TestClient, secret: str) -> int:
    client.cookies.clear()
    page = client.get(f"/instructor/signin/{secret}")
    assert page.status_code == 200 and "signin-form" in page.text  # a GET uses nothing
    return client.post(f"/instructor/signin/{secret}", follow_redirects=False).status_code


def sign_in_as(app: FastAPI, client: TestClient, name: str, role: str, event_id: int | None) -> int:
    added = add(app, name, role, event_id)
    assert use_link(client, added.link) == 303
    assert added.staff.id is not None
    return added.staff.id


def lines(app: FastAPI, event_id: int) -> list[AuditEntry]:
    with Session(app.state.ctx.engine) as session:
        return list(
            session.exec(
                select(AuditEntry).where(AuditEntry.event_id == event_id).order_by(AuditEntry.id)
            ).all()
        )


# -- signing in --------------------------------------------------------------------------------------
def test_a_one_time_link_signs_in_once(app: FastAPI, client: TestClient, event: Event) -> None:
    added = add(app, "Sam", "assistant", event.id)
    assert use_link(client, added.link) == 303
    assert client.get("/api/v1/staff/me").json()["name"] == "Sam"
    assert use_link(client, added.link) == 403  # used
    assert client.get("/api/v1/staff/me").status_code == 403


def test_eight_browsers_racing_with_one_link_get_one_session(app: FastAPI, event: Event) -> None:
    added = add(app, "Sam", "assistant", event.id)

    def attempt(_: int) -> int:
        with TestClient(app) as c:
            return c.post(f"/instructor/signin/{added.link}", follow_redirects=False).status_code

    with ThreadPoolExecutor(8) as pool:
        codes = list(pool.map(attempt, range(8)))
    assert sorted(codes) == [303] + [403] * 7, codes
    with Session(app.state.ctx.engine) as session:
        assert len(session.exec(select(StaffSession)).all()) == 1


def test_a_password_signs_in_and_a_wrong_one_says_the_same_as_a_wrong_name(
    app: FastAPI, client: TestClient, event: Event
) -> None:
    added = add(app, "Pat", "instructor", event.id, password=True)
    assert added.password and not added.link
    wrong = client.post("/instructor/login", data={"name": "Pat", "password": "nope"}, follow_redirects=False)
    nobody = client.post(
        "/instructor/login", data={"name": "Nobody", "password": "nope"}, follow_redirects=False
    )
    assert wrong.status_code == nobody.status_code == 403
    assert (
        "That name and password do not match a staff account." in wrong.text
        and nobody.text.count("do not match") == 1
    )
    ok = client.post(
        "/instructor/login", data={"name": "Pat", "password": added.password}, follow_redirects=False
    )
    assert ok.status_code == 303
    assert client.get(f"/api/v1/events/{event.id}/progress").status_code == 200


def test_signing_out_and_expiry_end_a_session(app: FastAPI, client: TestClient, event: Event) -> None:
    sign_in_as(app, client, "Sam", "assistant", event.id)
    cookie = client.cookies.get(INSTRUCTOR_COOKIE)
    assert client.post("/instructor/logout", follow_redirects=False).status_code == 303
    client.cookies.set(INSTRUCTOR_COOKIE, cookie or "")  # the old cookie, kept by a thief
    assert client.get(f"/api/v1/events/{event.id}/progress").status_code == 403

    sign_in_as(app, client, "Kim", "assistant", event.id)
    previous = clock.use(
        clock.TestClock(
            clock.now() + dt.timedelta(hours=app.state.ctx.settings.staff.session_hours, minutes=1)
        )
    )
    try:
        assert client.get(f"/api/v1/events/{event.id}/progress").status_code == 403
    finally:
        clock.use(previous)
    assert client.get(f"/api/v1/events/{event.id}/progress").status_code == 200


def test_the_events_list_shows_only_my_events(app: FastAPI, client: TestClient, event: Event) -> None:
    with Session(app.state.ctx.engine, expire_on_commit=False) as session:
        other = create_event(session, title="Other", labs=["getting-started"], code="OTHERCODE")
    sign_in_as(app, client, "Sam", "assistant", event.id)
    assert [e["id"] for e in client.get("/api/v1/events").json()] == [event.id]
    page = client.get("/instructor")
    assert page.status_code == 200 and "Test event" in page.text and "Other" not in page.text
    assert client.get(f"/instructor/events/{other.id}", follow_redirects=False).status_code == 403


# -- what an assistant does, and the audit log -------------------------------------------------------
def test_an_assistant_answers_a_hand_is_logged_and_cannot_stop_all_or_export(
    app: FastAPI, client: TestClient, event: Event
) -> None:
    ada = join(client, "Ada")
    client.post("/api/v1/environment", headers=ada)
    hand = client.post("/api/v1/help", json={"lab": "getting-started", "note": "stuck"}, headers=ada).json()
    aid = client.get("/api/v1/me", headers=ada).json()["attendee"]["id"]
    sign_in_as(app, client, "Sam", "assistant", event.id)
    base = f"/api/v1/events/{event.id}"
    assert client.post(f"{base}/help/{hand['id']}/claim").status_code == 200
    share = client.post(f"{base}/help/{hand['id']}/share")
    assert share.status_code == 200, share.text
    for method, path in (
        ("POST", f"{base}/stop-all"),
        ("GET", f"{base}/export.csv"),
        ("GET", f"{base}/export.json"),
        ("GET", f"{base}/export.zip"),
        ("GET", f"{base}/audit.csv"),
        ("GET", f"{base}/report.json"),
        ("POST", f"{base}/attendees/1/reveal"),
    ):
        resp = client.request(method, path, json={"lab": "getting-started", "step": "write-file"})
        assert resp.status_code == 403, (path, resp.status_code)
        assert "assistant" in resp.json()["detail"]
    got = [(r.actor, r.role, r.action, r.target) for r in lines(app, event.id or 0)]
    assert got == [
        ("Sam", "assistant", "help", f"Ada (#{aid})"),
        ("Sam", "assistant", "share", f"Ada (#{aid})"),
    ]
    shown = client.get(f"{base}/audit").json()
    assert [r["action"] for r in shown] == ["share", "help"]  # newest first
    assert "Sam" in client.get(f"/instructor/events/{event.id}").text  # the event page shows the log card


def test_the_audit_log_is_exported_and_kept_when_the_attendee_is_removed(
    app: FastAPI, client: TestClient, event: Event
) -> None:
    ada = join(client, "=Ada")
    env_id = client.post("/api/v1/environment", headers=ada).json()["id"]
    sign_in_as(app, client, "Ines", "instructor", event.id)
    assert (
        client.post(f"/api/v1/environments/{env_id}/reset", json={"lab": "getting-started"}).status_code
        == 200
    )
    assert (
        client.put(
            f"/api/v1/events/{event.id}/pace", json={"lab": "getting-started", "unlocked": 2}
        ).status_code
        == 200
    )
    aid = lines(app, event.id or 0)[0].attendee_id
    assert client.delete(f"/api/v1/events/{event.id}/attendees/{aid}").status_code == 200
    got = [(r.action, r.attendee_id, r.detail) for r in lines(app, event.id or 0)]
    assert got[0] == ("reset", aid, {"lab": "getting-started"})
    assert got[1][0] == "pace" and got[1][2] == {"lab": "getting-started", "unlocked": 2}
    assert got[2][:2] == ("remove-attendee", aid)
    csv_text = client.get(f"/api/v1/events/{event.id}/audit.csv").text
    assert "'=Ada" in csv_text and "reset" in csv_text  # a formula-looking name is text
    import io
    import zipfile

    zipped = zipfile.ZipFile(io.BytesIO(client.get(f"/api/v1/events/{event.id}/export.zip").content))
    assert "audit.csv" in zipped.namelist() and "remove-attendee" in zipped.read("audit.csv").decode()


def test_eight_staff_actions_at_once_write_eight_lines(app: FastAPI, event: Event) -> None:
    with TestClient(app) as client:
        sign_in_as(app, client, "Ines", "instructor", event.id)
        cookie = client.cookies.get(INSTRUCTOR_COOKIE) or ""

    def announce(i: int) -> int:
        with TestClient(app) as c:
            c.cookies.set(INSTRUCTOR_COOKIE, cookie)
            return c.post(
                f"/api/v1/events/{event.id}/announcements", json={"message": f"note {i}"}
            ).status_code

    with ThreadPoolExecutor(8) as pool:
        assert list(pool.map(announce, range(8))) == [201] * 8
    assert sorted(r.detail["message"] for r in lines(app, event.id or 0)) == sorted(
        f"note {i}" for i in range(8)
    )


# -- removing a person ends everything of theirs -----------------------------------------------------
@pytest.fixture
def quick_watch(app: FastAPI) -> Iterator[None]:
    app.state.ctx.settings.staff.revoke_poll_s = 0.2
    yield


def close_code(ws: Any) -> int:
    """Read a socket to its close; the close code."""
    while True:
        msg = ws.receive()
        if msg["type"] == "websocket.close":
            return int(msg["code"])


def _stream_until_closed(client: TestClient, url: str, opened: threading.Event, closed: list[str]) -> None:
    with client.stream("GET", url) as resp:
        assert resp.status_code == 200
        for line in resp.iter_lines():
            if line.startswith("event: ready"):
                opened.set()
    closed.append("closed")


def test_removing_a_person_ends_their_stream_terminal_view_and_share(
    app: FastAPI, client: TestClient, event: Event, quick_watch: None
) -> None:
    ada = join(client, "Ada")
    env_id = client.post("/api/v1/environment", headers=ada).json()["id"]
    hand = client.post("/api/v1/help", json={"lab": "getting-started", "note": "x"}, headers=ada).json()
    # Ada's shell is open (the share types into it)
    with client.websocket_connect("/api/v1/labs/getting-started/terminal", headers=ada) as mine:
        mine.receive_bytes()
        staff_id = sign_in_as(app, client, "Sam", "assistant", event.id)
        share = client.post(f"/api/v1/events/{event.id}/help/{hand['id']}/share").json()
        cookie = client.cookies.get(INSTRUCTOR_COOKIE) or ""
        client.cookies.clear()
        assert client.post(f"/api/v1/share/{share['id']}/accept", headers=ada).status_code == 200
        client.cookies.set(INSTRUCTOR_COOKIE, cookie)

        opened, closed = threading.Event(), []
        streamer = threading.Thread(
            target=_stream_until_closed,
            args=(client, f"/api/v1/events/{event.id}/stream", opened, closed),
            daemon=True,
        )
        streamer.start()
        assert opened.wait(30)
        with (
            client.websocket_connect(
                f"/api/v1/environments/{env_id}/terminal?readonly=1&lab=getting-started"
            ) as view,
            client.websocket_connect(
                f"/api/v1/environments/{env_id}/terminal?readonly=0&lab=getting-started"
            ) as typing,
        ):
            view.receive()
            typing.receive()
            # the operator removes Sam from another process (the CLI): only the database changes
            with Session(app.state.ctx.engine) as session:
                accounts.remove(session, staff_id=staff_id)
            for ws in (view, typing):
                assert close_code(ws) == 4403
        streamer.join(30)
        assert closed == ["closed"]
        client.cookies.clear()
        assert client.get("/api/v1/share", headers=ada).json() is None  # the share ended
        client.cookies.set(INSTRUCTOR_COOKIE, cookie)
        assert client.get(f"/api/v1/events/{event.id}/progress").status_code == 403


def test_an_organiser_removes_an_assistant_from_the_event_page(
    app: FastAPI, client: TestClient, event: Event
) -> None:
    sign_in_as(app, client, "Olga", "organiser", event.id)
    made = client.post(f"/api/v1/events/{event.id}/staff", json={"name": "Sam", "role": "assistant"})
    assert made.status_code == 201 and "/instructor/signin/" in made.json()["link"]
    sam = made.json()["staff"]["id"]
    assert {p["name"] for p in client.get(f"/api/v1/events/{event.id}/staff").json()} == {"Olga", "Sam"}
    assert client.delete(f"/api/v1/events/{event.id}/staff/{sam}").status_code == 200
    assert [(r.action, r.target, r.detail.get("change")) for r in lines(app, event.id or 0)] == [
        ("staff", "staff Sam", "added"),
        ("staff", "staff Sam", "removed from the event"),
    ]
    bad = client.post(f"/api/v1/events/{event.id}/staff", json={"name": "Y", "role": "boss"})
    assert bad.status_code == 400 and bad.json()["detail"]["field"] == "role"


def test_an_instructor_stops_all_and_an_organiser_of_every_event_removes_a_person(
    app: FastAPI, client: TestClient, event: Event
) -> None:
    ada = join(client, "Ada")
    env_id = client.post("/api/v1/environment", headers=ada).json()["id"]
    aid = client.get("/api/v1/me", headers=ada).json()["attendee"]["id"]
    sam = add(app, "Sam", "assistant", event.id).staff.id
    sign_in_as(app, client, "Ines", "instructor", event.id)
    assert client.delete(f"/api/v1/staff/{sam}").status_code == 403  # not an organiser of every event
    # allowed (the backend answers, not the authorization): the local backend cannot stop, so 409,
    # and a failed action writes no audit line
    stopped = client.post(f"/api/v1/events/{event.id}/stop-all")
    assert stopped.status_code == 409 and "cannot stop" in stopped.text
    assert client.post(f"/api/v1/environments/{env_id}/restart").status_code == 200
    sign_in_as(app, client, "Olga", "organiser", None)
    assert client.delete(f"/api/v1/staff/{sam}").status_code == 200
    got = [(r.actor, r.action, r.target, r.detail) for r in lines(app, event.id or 0)]
    assert got == [
        ("Ines", "reset", f"Ada (#{aid})", {"kind": "restart"}),
        ("Olga", "staff", "staff Sam", {"change": "removed"}),
    ]
