"""Personal join codes (issue 13 item 6): with ``seats_only`` the event code on the screen admits
nobody, each personal code admits exactly one attendee, and thirty browsers racing with one slip
give one attendee. Codes are shown once and stored hashed."""

from __future__ import annotations

import threading

from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlmodel import Session, select

from labserver.models import Attendee, Seat
from labserver.services.joining.events import create_event
from tests.conftest import instructor_headers


def _event(app: FastAPI, code: str) -> int:
    with Session(app.state.ctx.engine) as session:
        event = create_event(session, title="Seated room", labs=["getting-started"], code=code)
        assert event.id is not None
        return event.id


def test_personal_codes_admit_one_attendee_each_and_seats_only_refuses_the_event_code(app: FastAPI) -> None:
    event_id = _event(app, "SEATED1")
    with TestClient(app) as client:
        assert client.post(f"/api/v1/events/{event_id}/seats", json={"count": 3}).status_code in (401, 403)
        made = client.post(
            f"/api/v1/events/{event_id}/seats", json={"count": 3}, headers=instructor_headers()
        )
        assert made.status_code == 200, made.text
        body = made.json()
        assert (body["total"], body["used"], len(body["codes"])) == (3, 0, 3)
        codes = body["codes"]
        assert all(len(c) == 11 and c[5] == "-" for c in codes), codes
        # stored hashed: no code appears in the database
        with Session(app.state.ctx.engine) as session:
            stored = {s.code_hash for s in session.exec(select(Seat)).all()}
        assert not any(c.replace("-", "") in h or c in h for c in codes for h in stored)
        # never shown again
        counts = client.get(f"/api/v1/events/{event_id}/seats", headers=instructor_headers()).json()
        assert counts == {"total": 3, "used": 0, "codes": []}

        patched = client.patch(
            f"/api/v1/events/{event_id}", json={"seats_only": True}, headers=instructor_headers()
        )
        assert patched.status_code == 200 and patched.json()["seats_only"] is True
        refused = client.post("/api/v1/join", json={"event_code": "SEATED1", "name": "Photo of the screen"})
        assert refused.status_code == 400 and refused.json()["code"] == "seat-required", refused.text
        assert "personal code" in refused.json()["detail"]

        # typed in lower case with spaces instead of the dash: still the code
        typed = codes[0].lower().replace("-", " ")
        ok = client.post("/api/v1/join", json={"event_code": typed, "name": "Ada"})
        assert ok.status_code == 200, ok.text
        assert ok.json()["event"]["id"] == event_id
        again = client.post("/api/v1/join", json={"event_code": codes[0], "name": "Ada's friend"})
        assert again.status_code == 400 and again.json()["code"] == "seat-used"
        zh = client.post(
            "/api/v1/join",
            json={"event_code": codes[0], "name": "朋友"},
            headers={"Accept-Language": "zh-CN"},
        )
        assert zh.json()["code"] == "seat-used" and "个人" in zh.json()["detail"], zh.text
        counts = client.get(f"/api/v1/events/{event_id}/seats", headers=instructor_headers()).json()
        assert (counts["total"], counts["used"]) == (3, 1)
        too_many = client.post(
            f"/api/v1/events/{event_id}/seats", json={"count": 5000}, headers=instructor_headers()
        )
        assert too_many.status_code == 422


def test_thirty_browsers_racing_with_one_personal_code_give_one_attendee(app: FastAPI) -> None:
    event_id = _event(app, "SEATED2")
    results: list[tuple[int, str]] = []
    lock = threading.Lock()
    barrier = threading.Barrier(30)
    with TestClient(app) as client:
        code = client.post(
            f"/api/v1/events/{event_id}/seats", json={"count": 1}, headers=instructor_headers()
        ).json()["codes"][0]

        def one(i: int) -> None:
            barrier.wait()
            resp = client.post("/api/v1/join", json={"event_code": code, "name": f"tab{i}"})
            with lock:
                results.append((resp.status_code, resp.json().get("code", "")))

        threads = [threading.Thread(target=one, args=(i,)) for i in range(30)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
    assert len(results) == 30
    assert sorted(results).count((200, "")) == 1, results
    assert all(r == (400, "seat-used") for r in results if r[0] != 200), results
    with Session(app.state.ctx.engine) as session:
        assert len(session.exec(select(Attendee).where(Attendee.event_id == event_id)).all()) == 1
