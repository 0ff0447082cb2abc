"""Progress files: export/import round trip, bad files change nothing, and an event server accepts an
attendee's progress from home (``POST /api/v1/progress/import``)."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlmodel import Session, select

from labserver.models import CheckRun
from labserver.selfpaced.server import create_selfpaced_app
from labserver.services.reporting import progress_io
from tests.conftest import join
from tests.selfpaced.conftest import HELLO, fail_find_device, make_settings, pass_write_file


def _export(client: TestClient, files: bool = True, headers: dict[str, str] | None = None) -> dict:
    resp = client.get("/api/v1/progress/export", params={"files": int(files)}, headers=headers)
    assert resp.status_code == 200, resp.text
    assert "attachment" in resp.headers["content-disposition"]
    return resp.json()


def _steps(exported: dict, lab: str = "getting-started") -> dict[str, dict]:
    record = next(r for r in exported["labs"] if r["id"] == lab)
    return {s["id"]: s for s in record["steps"]}


def _runs(app) -> list[CheckRun]:  # type: ignore[no-untyped-def]
    with Session(app.state.ctx.engine) as session:
        return list(session.exec(select(CheckRun).order_by(CheckRun.id)).all())  # type: ignore[arg-type]


def test_export_describes_progress_and_files(sp_client: TestClient) -> None:
    fail_find_device(sp_client)
    pass_write_file(sp_client)
    exported = _export(sp_client)
    assert exported["format"] == "labserver-progress"
    assert exported["schema_version"] == progress_io.SCHEMA_VERSION
    assert exported["attendee"]["name"] == "Ada Lovelace"
    assert exported["signature"]["alg"] == "HMAC-SHA256"
    steps = _steps(exported)
    assert steps["write-file"]["status"] == "passed" and steps["write-file"]["attempts"] == 1
    assert steps["write-file"]["passed_at"]
    assert steps["find-device"]["status"] == "failing" and "passed_at" not in steps["find-device"]
    assert steps["run-script"] == {"id": "run-script", "status": "not-started", "attempts": 0, "message": ""}
    lab = next(r for r in exported["labs"] if r["id"] == "getting-started")
    files = {f["path"]: base64.b64decode(f["base64"]) for f in lab["files"]}
    assert files["notes/hello.txt"] == HELLO
    assert "rmsnorm.py" not in files  # unchanged starter files are not carried
    # a lab the learner never touched carries no files
    others = [r for r in exported["labs"] if r["id"] != "getting-started"]
    assert all("files" not in r for r in others)
    # the file validates against its own schema
    progress_io.parse_progress(json.dumps(exported))


def test_round_trip_into_a_fresh_laptop_is_imported_at_most(sp_client: TestClient, tmp_path: Path) -> None:
    """Another laptop has another key: it cannot vouch for the file, so the steps are *imported*."""
    fail_find_device(sp_client)
    pass_write_file(sp_client)
    pass_write_file(sp_client)  # a second pass keeps the first passed_at
    first = _export(sp_client)

    other = create_selfpaced_app(make_settings(tmp_path / "laptop2"), name="Ada Lovelace")
    token = other.state.learner.token
    with TestClient(other, headers={"Authorization": f"Bearer {token}"}) as client2:
        resp = client2.post("/api/v1/progress/import", content=json.dumps(first))
        assert resp.status_code == 200, resp.text
        report = resp.json()
        assert report["imported"] == ["getting-started/write-file"]
        assert report["status"] == "imported" and report["trust"] == "foreign"
        assert report["restored_labs"] == ["getting-started"]
        # the lab folder came along
        got = client2.get("/api/v1/labs/getting-started/files/notes/hello.txt")
        assert got.status_code == 200 and got.content == HELLO
        # the imported run says what it is
        runs = client2.get("/api/v1/labs/getting-started/steps/write-file/runs").json()
        assert len(runs) == 1 and runs[0]["status"] == "imported"
        assert runs[0]["message"].startswith("Imported from a progress file")
        second = _export(client2)
        # importing the same file again adds nothing
        again = client2.post("/api/v1/progress/import", params={"files": 0}, content=json.dumps(first)).json()
        assert again["imported"] == [] and again["already"] == ["getting-started/write-file"]
    a, b = _steps(first)["write-file"], _steps(second)["write-file"]
    assert b["status"] == "imported"
    assert b["attempts"] == a["attempts"] == 2
    assert progress_io._utc(progress_io.StepRecord(**a).passed_at) == progress_io._utc(  # type: ignore[arg-type]
        progress_io.StepRecord(**b).passed_at  # type: ignore[arg-type]
    )
    # only passed steps travel: the failing one starts fresh
    assert _steps(second)["find-device"]["status"] == "not-started"


def _valid(sp_client: TestClient) -> dict:
    pass_write_file(sp_client)
    return _export(sp_client)


BAD_FILES = {
    "not json": lambda d: b"{this is not json",
    "binary": lambda d: b"\xff\xfe\x00garbage",
    "not a progress file": lambda d: json.dumps({"hello": "world"}).encode(),
    "newer version": lambda d: json.dumps({**d, "schema_version": 3}).encode(),
    "older version": lambda d: json.dumps({**d, "schema_version": 0}).encode(),
    "unknown status": lambda d: json.dumps(
        {**d, "labs": [{**d["labs"][0], "steps": [{**d["labs"][0]["steps"][2], "status": "done"}]}]}
    ).encode(),
    "passed without passed_at": lambda d: json.dumps(
        {
            **d,
            "labs": [{**d["labs"][0], "steps": [{"id": "find-device", "status": "passed", "attempts": 1}]}],
        }
    ).encode(),
    "bad base64": lambda d: json.dumps(
        {**d, "labs": [{**d["labs"][0], "files": [{"path": "x.py", "base64": "!!!not base64"}]}]}
    ).encode(),
    "path leaves the folder": lambda d: json.dumps(
        {**d, "labs": [{**d["labs"][0], "files": [{"path": "../../evil.py", "base64": "eA=="}]}]}
    ).encode(),
    "hidden marker path": lambda d: json.dumps(
        {**d, "labs": [{**d["labs"][0], "files": [{"path": ".backups/x", "base64": "eA=="}]}]}
    ).encode(),
    "truncated": lambda d: json.dumps(d).encode()[:200],
}


@pytest.mark.parametrize("kind", list(BAD_FILES))
def test_bad_file_is_refused_and_changes_nothing(kind: str, sp_client: TestClient, tmp_path: Path) -> None:
    good = _valid(sp_client)
    # the second laptop has some progress of its own and an edited file
    other = create_selfpaced_app(make_settings(tmp_path / "laptop2"))
    with TestClient(other, headers={"Authorization": f"Bearer {other.state.learner.token}"}) as client2:
        fail_find_device(client2)
        client2.put("/api/v1/labs/getting-started/files/rmsnorm.py", content=b"# mine\n")
        before_runs = [(r.id, r.status) for r in _runs(other)]
        before_files = client2.get("/api/v1/labs/getting-started/files").json()
        resp = client2.post("/api/v1/progress/import", content=BAD_FILES[kind](good))
        assert resp.status_code == 400, resp.text
        assert resp.json()["code"] == "bad-progress-file"
        assert resp.json()["detail"]
        assert [(r.id, r.status) for r in _runs(other)] == before_runs
        assert client2.get("/api/v1/labs/getting-started/files").json() == before_files
        assert client2.get("/api/v1/labs/getting-started/files/rmsnorm.py").content == b"# mine\n"


def test_version_messages_say_what_to_do() -> None:
    with pytest.raises(progress_io.ProgressFileError, match="newer labserver"):
        progress_io.parse_progress(json.dumps({"format": "labserver-progress", "schema_version": 7}))
    with pytest.raises(progress_io.ProgressFileError, match="not valid JSON"):
        progress_io.parse_progress("nope")
    with pytest.raises(progress_io.ProgressFileError, match="not a labserver progress file"):
        progress_io.parse_progress("[1, 2]")


def _wipe_runs(app) -> None:  # type: ignore[no-untyped-def]
    with Session(app.state.ctx.engine) as session:
        for run in session.exec(select(CheckRun)).all():
            session.delete(run)
        session.commit()


def test_same_laptop_restores_passed(sp_app, sp_client: TestClient) -> None:  # type: ignore[no-untyped-def]
    """The laptop that signed the file vouches for it: after its database lost the runs, an import
    brings back *passed*."""
    pass_write_file(sp_client)
    mine = _export(sp_client, files=False)
    _wipe_runs(sp_app)
    report = sp_client.post("/api/v1/progress/import", content=json.dumps(mine)).json()
    assert report["imported"] == ["getting-started/write-file"]
    assert report["status"] == "passed" and report["trust"] == "own"
    assert _steps(_export(sp_client))["write-file"]["status"] == "passed"


def test_edited_or_version_1_file_is_imported_at_most_on_a_laptop(sp_app, sp_client: TestClient) -> None:  # type: ignore[no-untyped-def]
    pass_write_file(sp_client)
    mine = _export(sp_client, files=False)
    _wipe_runs(sp_app)
    edited = json.loads(json.dumps(mine))
    step = _steps(edited)["find-device"]
    step.update(status="passed", passed_at="2026-11-29T20:01:02+00:00")
    report = sp_client.post("/api/v1/progress/import", content=json.dumps(edited)).json()
    assert report["status"] == "imported" and report["trust"] == "foreign"
    assert sorted(report["imported"]) == ["getting-started/find-device", "getting-started/write-file"]
    _wipe_runs(sp_app)
    v1 = {k: v for k, v in mine.items() if k != "signature"} | {"schema_version": 1}
    v1["attendee"] = {"name": mine["attendee"]["name"]}
    report = sp_client.post("/api/v1/progress/import", content=json.dumps(v1)).json()
    assert report["status"] == "imported" and report["imported"] == ["getting-started/write-file"]
    assert _steps(_export(sp_client))["write-file"]["status"] == "imported"


def test_event_server_refuses_progress_from_home(
    sp_client: TestClient,
    client: TestClient,
    event,
    app,  # type: ignore[no-untyped-def]
) -> None:
    """At home (self-paced) the attendee passes a step; the room did not sign that file, so it
    refuses it (403) and changes nothing: Check runs again in the room."""
    pass_write_file(sp_client)
    home = _export(sp_client)
    headers = join(client, "Grace")
    resp = client.post("/api/v1/progress/import", content=json.dumps(home), headers=headers)
    assert resp.status_code == 403, resp.text
    assert resp.json()["code"] == "unsigned-progress-file"
    assert _runs(app) == []
    assert (
        client.get("/api/v1/labs/getting-started/files/notes/hello.txt", headers=headers).status_code == 404
    )
    # an anonymous upload is refused
    assert client.post("/api/v1/progress/import", content=json.dumps(home)).status_code == 401


def test_import_publishes_to_the_room(client: TestClient, event, app) -> None:  # type: ignore[no-untyped-def]
    headers = join(client, "Grace")
    pass_write_file(client, headers)
    mine = _export(client, files=False, headers=headers)
    _wipe_runs(app)
    sub = app.state.ctx.live.subscribe(event.id)
    resp = client.post("/api/v1/progress/import", content=json.dumps(mine), headers=headers)
    assert resp.status_code == 200
    seen = []
    while not sub.queue.empty():
        seen.append(sub.queue.get_nowait())
    finished = [ev for ev in seen if ev.kind == "check.finished"]
    assert [(ev.data["step"], ev.data["status"], ev.data["imported"]) for ev in finished] == [
        ("write-file", "imported", True)
    ]
