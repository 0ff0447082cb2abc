"""Terminal recordings through the app (real shells on the local backend): a session is recorded
with markers at the Check press and its result; an attendee lists, plays and downloads their own
and never another's; instructors reach an attendee of their event only; the size cap holds; the
recordings go with the workspace (recreate, removal); the export zip carries them when asked."""

from __future__ import annotations

import io
import json
import time
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlmodel import Session

from labserver.app import create_app
from labserver.config import RecordingSettings, Settings
from labserver.models import Event
from labserver.services.joining.events import create_event
from labserver.terminals.recorder import CAP_MARK
from tests.conftest import EVENT_CODE, instructor_headers, join

LAB = "/api/v1/labs/getting-started"
INSTR = instructor_headers()


def _read_until(ws, needle: str) -> str:  # type: ignore[no-untyped-def]
    buf = b""
    while needle.encode() not in buf:
        msg = ws.receive()
        assert msg["type"] != "websocket.close", f"closed before {needle!r}: {buf!r}"
        buf += msg.get("bytes") or b""
    return buf.decode(errors="replace")


def _session(client: TestClient, who: dict[str, str], command: str, needle: str) -> None:
    token = who["Authorization"].split()[1]
    with client.websocket_connect(f"{LAB}/terminal?token={token}") as ws:
        ws.send_bytes(command.encode() + b"\r")
        _read_until(ws, needle)


def _cast_when(client: TestClient, url: str, who: dict[str, str], needle: str) -> str:
    """The recording at ``url`` once it holds ``needle`` (batches are written every FLUSH_S)."""
    deadline = time.monotonic() + 30
    while True:
        resp = client.get(url, headers=who)
        assert resp.status_code == 200, resp.text
        assert resp.headers["content-type"].startswith("application/x-asciicast")
        if needle in resp.text or time.monotonic() > deadline:
            return resp.text
        time.sleep(0.05)


def _cast(text: str) -> tuple[dict, list[list]]:
    lines = text.splitlines()
    return json.loads(lines[0]), [json.loads(line) for line in lines[1:]]


def test_a_session_is_recorded_with_check_markers_and_served_to_its_attendee(
    app: FastAPI, client: TestClient, event: Event
) -> None:
    ada = join(client, "Ada")
    token = ada["Authorization"].split()[1]
    with client.websocket_connect(f"{LAB}/terminal?token={token}") as ws:
        ws.send_bytes(b"echo rec-$((6*7))\r")
        _read_until(ws, "rec-42")
        run = client.post(f"{LAB}/steps/find-device/check", headers=ada)
        assert run.status_code == 200, run.text
    rows = client.get("/api/v1/recordings", headers=ada).json()
    assert [r["lab"] for r in rows] == ["getting-started"]
    status = run.json()["status"]
    # the shell is still open (it outlives the socket): its output reaches the file in batches
    text = _cast_when(client, rows[0]["url"], ada, f'"find-device: {status}')
    head, evs = _cast(text)
    assert head["version"] == 2 and head["title"] == "Ada: getting-started"
    assert "rec-42" in "".join(e[2] for e in evs if e[1] == "o")
    marks = [e[2] for e in evs if e[1] == "m"]
    assert marks[0] == "Check find-device" and marks[1].startswith(f"find-device: {status}")
    assert not [e for e in evs if e[1] == "i"], "keystrokes are not recorded unless the event asks"
    saved = client.get(rows[0]["download_url"], headers=ada)
    assert saved.headers["content-disposition"].startswith("attachment;")


def test_an_attendee_never_gets_another_attendees_recording(client: TestClient, event: Event) -> None:
    ada, bob = join(client, "Ada"), join(client, "Bob")
    _session(client, ada, "echo ada-$((1+1))", "ada-2")
    ada_rows = client.get("/api/v1/recordings", headers=ada).json()
    assert len(ada_rows) == 1
    _cast_when(client, ada_rows[0]["url"], ada, "ada-2")
    assert client.get("/api/v1/recordings", headers=bob).json() == []
    assert client.get(ada_rows[0]["url"], headers=bob).status_code == 404
    assert client.get(ada_rows[0]["download_url"], headers=bob).status_code == 404
    for hostile in ("..%2F..%2Fsecret_key", "%2E%2E", "x" * 121):
        assert client.get(f"/api/v1/recordings/{hostile}", headers=ada).status_code in (404, 422)
    assert client.get("/api/v1/recordings").status_code == 401
    # the instructor routes are the instructor's only
    me = client.get("/api/v1/me", headers=ada).json()
    url = f"/api/v1/events/{event.id}/attendees/{me['attendee']['id']}/recordings"
    assert client.get(url, headers=bob).status_code in (401, 403)
    assert client.get(url + "/" + ada_rows[0]["id"], headers=bob).status_code in (401, 403)
    listed = client.get(url, headers=INSTR).json()
    assert [r["id"] for r in listed] == [ada_rows[0]["id"]]
    assert "ada-2" in client.get(listed[0]["url"], headers=INSTR).text


def test_an_instructor_reaches_an_attendee_of_the_event_named_only(app: FastAPI, client: TestClient) -> None:
    with Session(app.state.ctx.engine, expire_on_commit=False) as session:
        first = create_event(session, title="One", labs=["getting-started"], code=EVENT_CODE)
        other = create_event(session, title="Two", labs=["getting-started"], code="OTHER")
    ada = join(client, "Ada")
    _session(client, ada, "echo one-$((2+2))", "one-4")
    ada_id = client.get("/api/v1/me", headers=ada).json()["attendee"]["id"]
    rec_id = client.get("/api/v1/recordings", headers=ada).json()[0]["id"]
    assert client.get(f"/api/v1/recordings/{rec_id}", headers=ada).status_code == 200
    wrong = f"/api/v1/events/{other.id}/attendees/{ada_id}/recordings"
    assert client.get(wrong, headers=INSTR).status_code == 404
    assert client.get(f"{wrong}/{rec_id}", headers=INSTR).status_code == 404
    right = f"/api/v1/events/{first.id}/attendees/{ada_id}/recordings/{rec_id}"
    assert client.get(right, headers=INSTR).status_code == 200


@pytest.fixture
def small_cap_app(tmp_path: Path, database_url: str) -> FastAPI:
    from tests.conftest import INSTRUCTOR_TOKEN, REPO

    settings = Settings(
        data_dir=tmp_path / "data",
        labs_dir=REPO / "labs",
        web_dir=REPO / "web",
        instructor_token=INSTRUCTOR_TOKEN,
        database_url=database_url,
        recording=RecordingSettings(max_mb=8 / 1024),  # 8 KiB per attendee
    )
    app = create_app(settings)
    with Session(app.state.ctx.engine, expire_on_commit=False) as session:
        create_event(session, title="Test event", labs=["getting-started"], code=EVENT_CODE)
    return app


def test_the_size_cap_per_attendee_holds(small_cap_app: FastAPI) -> None:
    with TestClient(small_cap_app) as client:
        ada = join(client, "Ada")
        _session(client, ada, "for i in $(seq 1 2000); do echo line-$i; done; echo done-$((1+1))", "done-2")
        _session(client, ada, "seq 1 3000; echo again-$((2+2))", "again-4")
        rows = client.get("/api/v1/recordings", headers=ada).json()
        _cast_when(client, rows[-1]["url"], ada, CAP_MARK)
        rows = client.get("/api/v1/recordings", headers=ada).json()
        assert sum(r["bytes"] for r in rows) <= 8 * 1024
        first = _cast(client.get(rows[-1]["url"], headers=ada).text)[1]
        assert first[-1][1:] == ["m", CAP_MARK]


def test_recordings_go_with_the_workspace(app: FastAPI, client: TestClient, event: Event) -> None:
    ada, bob = join(client, "Ada"), join(client, "Bob")
    _session(client, ada, "echo a-$((3+3))", "a-6")
    _session(client, bob, "echo b-$((3+4))", "b-7")
    root = app.state.ctx.settings.recordings_dir
    env_ada = client.get("/api/v1/environment", headers=ada).json()["id"]
    env_bob = client.get("/api/v1/environment", headers=bob).json()["id"]
    assert list((root / env_ada).iterdir()) and list((root / env_bob).iterdir())
    # recreating Ada's environment (a fresh workspace) deletes her recordings
    assert client.post(f"/api/v1/environments/{env_ada}/recreate", headers=INSTR).status_code == 200
    assert client.get("/api/v1/recordings", headers=ada).json() == []
    # removing Bob from the event deletes his
    bob_id = client.get("/api/v1/me", headers=bob).json()["attendee"]["id"]
    assert client.delete(f"/api/v1/events/{event.id}/attendees/{bob_id}", headers=INSTR).status_code == 200
    assert not (root / env_bob).exists()


def test_the_export_zip_carries_recordings_when_asked(client: TestClient, event: Event) -> None:
    ada = join(client, "Ada")
    _session(client, ada, "echo z-$((5+5))", "z-10")
    ada_id = client.get("/api/v1/me", headers=ada).json()["attendee"]["id"]
    plain = zipfile.ZipFile(
        io.BytesIO(client.get(f"/api/v1/events/{event.id}/export.zip", headers=INSTR).content)
    )
    assert sorted(plain.namelist()) == ["audit.csv", "results.csv", "results.json"]
    resp = client.get(f"/api/v1/events/{event.id}/export.zip?include_recordings=1", headers=INSTR)
    full = zipfile.ZipFile(io.BytesIO(resp.content))
    casts = [n for n in full.namelist() if n.startswith(f"recordings/{ada_id}/")]
    assert len(casts) == 1 and casts[0].endswith(".cast")
    assert client.get(f"/api/v1/events/{event.id}/export.zip", headers=ada).status_code in (401, 403)


def test_thirty_attendees_list_their_recordings_at_once(client: TestClient, event: Event) -> None:
    people = [join(client, f"p{i}") for i in range(30)]
    _session(client, people[0], "echo first-$((9+9))", "first-18")

    def mine(who: dict[str, str]) -> int:
        resp = client.get("/api/v1/recordings", headers=who)
        assert resp.status_code == 200
        return len(resp.json())

    with ThreadPoolExecutor(30) as pool:
        counts = list(pool.map(mine, people))
    assert counts == [1] + [0] * 29


def test_keystrokes_are_recorded_only_where_the_event_enables_it(client: TestClient, event: Event) -> None:
    patched = client.patch(f"/api/v1/events/{event.id}", headers=INSTR, json={"record_input": True})
    assert patched.status_code == 200 and patched.json()["record_input"] is True
    ada = join(client, "Ada")
    _session(client, ada, "echo keys-$((7*6))", "keys-42")
    rows = client.get("/api/v1/recordings", headers=ada).json()
    text = _cast_when(client, rows[0]["url"], ada, '"i"')
    typed = "".join(e[2] for e in _cast(text)[1] if e[1] == "i")
    assert "echo keys-$((7*6))" in typed
