"""Issue 13 item 4, as an attendee attacks it: a hand-made progress file must not turn the
instructor's grid green, an event server only takes back files it signed for the same attendee, and
what it takes back is shown as *imported* (grid, CSV export, drill-down, the attendee's own page),
never as *passed*, and never on a step that pacing has locked (where Check answers 423)."""

from __future__ import annotations

import copy
import datetime as dt
import json

from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlmodel import Session, col, delete, select

from labserver.models import CheckRun, Event
from tests.conftest import instructor_headers, join

LAB = "getting-started"
STEPS = ["find-device", "run-script", "write-file", "implement-rmsnorm", "read-metric"]
WHEN = "2026-11-29T20:01:02+00:00"


def _forged(version: int = 1, name: str = "Mallory") -> dict:
    """What the attacker uploaded: every step of the lab 'passed'."""
    doc: dict = {
        "format": "labserver-progress",
        "schema_version": version,
        "exported_at": WHEN,
        "source": "my laptop",
        "attendee": {"name": name},
        "labs": [
            {
                "id": LAB,
                "steps": [{"id": s, "status": "passed", "attempts": 1, "passed_at": WHEN} for s in STEPS],
            }
        ],
    }
    if version == 2:
        doc["attendee"] |= {"event": "TESTCODE", "id": 1}
        doc["signature"] = {"alg": "HMAC-SHA256", "key_id": "0" * 16, "value": "ab" * 32}
    return doc


def _runs(app: FastAPI) -> list[tuple[int, str, str]]:
    with Session(app.state.ctx.engine) as session:
        rows = session.exec(select(CheckRun).order_by(col(CheckRun.id))).all()
        return [(r.attendee_id, r.step_id, str(r.status)) for r in rows]


def _grid_codes(client: TestClient, event: Event) -> list[str]:
    grid = client.get(f"/api/v1/events/{event.id}/progress", headers=instructor_headers()).json()
    return [c[2] for c in grid["cells"]]


def test_forged_progress_files_change_nothing_on_an_event_server(
    client: TestClient, app: FastAPI, event: Event
) -> None:
    me = join(client, "Mallory")
    for doc in (_forged(1), _forged(2)):
        resp = client.post("/api/v1/progress/import", content=json.dumps(doc), headers=me)
        assert resp.status_code == 403, resp.text
        assert resp.json()["code"] == "unsigned-progress-file"
        assert "nothing was imported" in resp.json()["detail"]
    assert _runs(app) == []
    assert _grid_codes(client, event) == []
    labs = client.get("/api/v1/labs", headers=me).json()
    assert next(lab for lab in labs if lab["id"] == LAB)["progress"]["passed"] == 0


def _pass_two_steps(client: TestClient, headers: dict[str, str]) -> None:
    for path, data in (
        ("device.txt", b"cpu-emu\n"),
        ("notes/hello.txt", "Hello, Ascend!\n你好，昇腾！\n".encode()),
    ):
        assert (
            client.put(f"/api/v1/labs/{LAB}/files/{path}", content=data, headers=headers).status_code == 200
        )
    for step in ("find-device", "write-file"):
        run = client.post(f"/api/v1/labs/{LAB}/steps/{step}/check", headers=headers).json()
        assert run["status"] == "passed", run


def test_another_attendees_or_an_edited_export_is_refused(
    client: TestClient, app: FastAPI, event: Event
) -> None:
    grace = join(client, "Grace")
    _pass_two_steps(client, grace)
    signed = client.get("/api/v1/progress/export", headers=grace).json()
    mallory = join(client, "Mallory")
    before = _runs(app)
    # Grace's genuine file, uploaded by Mallory: bound to Grace
    resp = client.post("/api/v1/progress/import", content=json.dumps(signed), headers=mallory)
    assert resp.status_code == 403, resp.text
    # ...and relabelled as Mallory's: the signature no longer matches
    relabelled = copy.deepcopy(signed)
    relabelled["attendee"]["name"] = "Mallory"
    relabelled["attendee"]["id"] += 1
    resp = client.post("/api/v1/progress/import", content=json.dumps(relabelled), headers=mallory)
    assert resp.status_code == 403, resp.text
    # Grace's own file with one more step turned green by hand
    edited = copy.deepcopy(signed)
    step = next(s for s in edited["labs"][0]["steps"] if s["id"] == "read-metric")
    step.update(status="passed", passed_at=WHEN)
    resp = client.post("/api/v1/progress/import", content=json.dumps(edited), headers=grace)
    assert resp.status_code == 403, resp.text
    assert _runs(app) == before


def test_own_export_comes_back_as_imported_and_pacing_holds(
    client: TestClient, app: FastAPI, event: Event
) -> None:
    grace = join(client, "Grace")
    _pass_two_steps(client, grace)
    signed = client.get("/api/v1/progress/export", headers=grace).json()
    assert signed["schema_version"] == 2 and signed["signature"]["alg"] == "HMAC-SHA256"
    with Session(app.state.ctx.engine) as session:  # the room's database lost her runs
        session.exec(delete(CheckRun))  # type: ignore[call-overload]
        session.commit()
    pace = client.put(
        f"/api/v1/events/{event.id}/pace", json={"lab": LAB, "unlocked": 1}, headers=instructor_headers()
    )
    assert pace.status_code == 200, pace.text
    resp = client.post(
        "/api/v1/progress/import", params={"files": 0}, content=json.dumps(signed), headers=grace
    )
    assert resp.status_code == 200, resp.text
    report = resp.json()
    assert report["imported"] == [f"{LAB}/find-device"]
    assert report["locked"] == [f"{LAB}/write-file"]
    assert report["status"] == "imported" and report["trust"] == "own"
    # the instructor sees "imported", never "passed": grid, CSV, drill-down
    assert _grid_codes(client, event) == ["i"]
    csv = client.get(f"/api/v1/events/{event.id}/export.csv", headers=instructor_headers()).text
    assert "find-device,imported," in csv and ",passed," not in csv
    att = client.get("/api/v1/me", headers=grace).json()
    detail = client.get(
        f"/api/v1/events/{event.id}/attendees/{att['attendee']['id']}", headers=instructor_headers()
    ).json()
    assert [r["status"] for r in detail["runs"]] == ["imported"]
    # the attendee's own page: imported, 0 passed
    labs = client.get("/api/v1/labs", headers=grace).json()
    prog = next(lab for lab in labs if lab["id"] == LAB)["progress"]
    assert prog["passed"] == 0
    assert {s["id"]: s["status"] for s in prog["steps"]}["find-device"] == "imported"
    # the locked step stays locked
    assert client.post(f"/api/v1/labs/{LAB}/steps/write-file/check", headers=grace).status_code == 423
    # the export carries "imported" on, never "passed"
    again = client.get("/api/v1/progress/export", headers=grace).json()
    statuses = {s["id"]: s["status"] for s in again["labs"][0]["steps"]}
    assert statuses["find-device"] == "imported"
    assert dt.datetime.fromisoformat(
        next(s for s in again["labs"][0]["steps"] if s["id"] == "find-device")["passed_at"]
    )
