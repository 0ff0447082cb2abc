"""Verifiable completion over the API: a passing check keeps the digests of the lab folder, a finished
lab gives a signed record that verifies offline against the key on the event's page, an unfinished
(or only imported) lab gives none, an attendee only ever gets their own record, thirty downloads
and thirty hint opens at once; and the report is the instructor's only."""

from __future__ import annotations

import hashlib
import threading

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlmodel import Session, select

from labserver import clock
from labserver.backends.base import MAX_ARCHIVE_BYTES, EnvRef, TooBig
from labserver.backends.local import LocalBackend
from labserver.models import CheckFiles, CheckRun, Event, HintOpen
from labserver.services.reporting import completion
from tests.conftest import instructor_headers, join

LAB = "getting-started"
STEPS = ["find-device", "run-script", "write-file", "implement-rmsnorm", "read-metric"]


def _me(client: TestClient, headers: dict[str, str]) -> int:
    return int(client.get("/api/v1/me", headers=headers).json()["attendee"]["id"])


def _pass(app: FastAPI, event: Event, attendee_id: int, steps: list[str], status: str = "passed") -> None:
    with Session(app.state.ctx.engine) as s:
        for step in steps:
            now = clock.now()
            run = CheckRun(
                event_id=event.id or 0,
                attendee_id=attendee_id,
                lab_id=LAB,
                step_id=step,
                status=status,
                created_at=now,
                finished_at=now,
            )
            s.add(run)
            s.commit()
            s.refresh(run)
            if status == "passed":
                files = [{"path": f"{step}.py", "size": 3, "sha256": hashlib.sha256(b"abc").hexdigest()}]
                s.add(CheckFiles(run_id=run.id or 0, files=files))
                s.commit()


def _key(client: TestClient, headers: dict[str, str]) -> bytes:
    return completion.parse_key(client.get("/api/v1/completion-key", headers=headers).json()["public_key"])


class ArchiveTooBigLocal(LocalBackend):
    """The local backend, with every lab folder too big for one archive (as a huge output would make
    it): the digests are then read file by file."""

    async def archive(self, ref: EnvRef, path: str) -> bytes:
        raise TooBig(f"The folder {path}", MAX_ARCHIVE_BYTES + 1, MAX_ARCHIVE_BYTES)


@pytest.mark.parametrize("folder_too_big_for_an_archive", [False, True])
def test_a_passing_check_keeps_the_digests_of_the_lab_folder(
    app: FastAPI, event: Event, folder_too_big_for_an_archive: bool
) -> None:
    if folder_too_big_for_an_archive:
        app.state.ctx.backend = ArchiveTooBigLocal(app.state.ctx.settings)
    with TestClient(app) as client:
        ada = join(client, "Ada")
        kind = b"cpu-emu\n"  # what device_info.py prints without a card (the step's solve writes it)
        put = client.put(f"/api/v1/labs/{LAB}/files/device.txt", headers=ada, content=kind)
        assert put.status_code == 200, put.text
        run = client.post(f"/api/v1/labs/{LAB}/steps/find-device/check", headers=ada, timeout=120).json()
        assert run["status"] == "passed", run
        with Session(app.state.ctx.engine) as s:
            row = s.get(CheckFiles, run["id"])
        assert row is not None
        files = {f["path"]: f for f in row.files}
        assert files["device.txt"]["sha256"] == hashlib.sha256(kind).hexdigest()
        assert "device_info.py" in files  # the whole lab folder, not only the file the step asks for
        assert all(f["sha256"] and f["size"] >= 0 for f in row.files) and len(files) == len(row.files)


def test_a_finished_lab_gives_a_record_that_verifies_offline(app: FastAPI, event: Event) -> None:
    with TestClient(app) as client:
        ada = join(client, "Ada")
        _pass(app, event, _me(client, ada), STEPS)
        resp = client.get(f"/api/v1/labs/{LAB}/completion", headers=ada)
        assert resp.status_code == 200, resp.text
        assert "attachment" in resp.headers["content-disposition"]
        doc = resp.json()
        key = _key(client, ada)
        page = client.get("/labs", headers=ada).text
    assert doc["attendee"]["name"] == "Ada" and doc["lab"] == {
        "id": LAB,
        "title": doc["lab"]["title"],
        "steps": 5,
    }
    assert [s["id"] for s in doc["steps"]] == STEPS
    assert doc["steps"][0]["files"][0]["sha256"] == hashlib.sha256(b"abc").hexdigest()
    verdict = completion.verify(doc, [key])
    assert verdict.ok, verdict.problems
    assert doc["signature"]["public_key"] in page  # the key is on the event's page


def test_no_record_for_an_unfinished_or_imported_lab(app: FastAPI, event: Event) -> None:
    with TestClient(app) as client:
        ada, bo = join(client, "Ada"), join(client, "Bo")
        _pass(app, event, _me(client, ada), STEPS[:4])
        _pass(app, event, _me(client, ada), ["read-metric"], status="failed")
        _pass(app, event, _me(client, bo), STEPS[:4])
        _pass(app, event, _me(client, bo), ["read-metric"], status="imported")
        for who in (ada, bo):
            resp = client.get(f"/api/v1/labs/{LAB}/completion", headers=who)
            assert resp.status_code == 409, resp.text
            assert resp.json()["code"] == "lab-not-finished"
            assert "step 5" in resp.json()["detail"]
        assert "imported" in client.get(f"/api/v1/labs/{LAB}/completion", headers=bo).json()["detail"]
        assert client.get(f"/api/v1/labs/{LAB}/completion").status_code == 401


def test_an_attendee_only_ever_gets_their_own_record(app: FastAPI, event: Event) -> None:
    with TestClient(app) as client:
        ada, bo = join(client, "Ada"), join(client, "Bo")
        ada_id = _me(client, ada)
        _pass(app, event, ada_id, STEPS)
        # Bo asks every way he can think of: always his own (unfinished) lab
        for url in (
            f"/api/v1/labs/{LAB}/completion",
            f"/api/v1/labs/{LAB}/completion?attendee_id={ada_id}",
            f"/api/v1/labs/{LAB}/completion?attendee={ada_id}",
        ):
            assert client.get(url, headers=bo).status_code == 409
        assert client.get(f"/api/v1/labs/{LAB}/completion", headers=ada).json()["attendee"]["id"] == ada_id


def test_thirty_downloads_at_once_all_verify(app: FastAPI, event: Event) -> None:
    barrier = threading.Barrier(30)
    results: list[tuple[int, bool]] = []
    lock = threading.Lock()
    with TestClient(app) as client:
        ada = join(client, "Ada")
        _pass(app, event, _me(client, ada), STEPS)
        key = _key(client, ada)

        def one() -> None:
            barrier.wait(timeout=60)
            resp = client.get(f"/api/v1/labs/{LAB}/completion", headers=ada)
            ok = resp.status_code == 200 and completion.verify(resp.json(), [key]).ok
            with lock:
                results.append((resp.status_code, ok))

        threads = [threading.Thread(target=one) for _ in range(30)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
    assert results == [(200, True)] * 30


def test_thirty_hint_opens_at_once_count_once(app: FastAPI, event: Event) -> None:
    barrier = threading.Barrier(30)
    firsts: list[bool] = []
    lock = threading.Lock()
    with TestClient(app) as client:
        ada = join(client, "Ada")

        def one() -> None:
            barrier.wait(timeout=60)
            resp = client.post(f"/api/v1/labs/{LAB}/steps/run-script/hints", headers=ada)
            assert resp.status_code == 200, resp.text
            with lock:
                firsts.append(resp.json()["first"])

        threads = [threading.Thread(target=one) for _ in range(30)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert client.post(f"/api/v1/labs/{LAB}/steps/nope/hints", headers=ada).status_code == 404
    assert sorted(firsts) == [False] * 29 + [True]
    with Session(app.state.ctx.engine) as s:
        assert len(s.exec(select(HintOpen)).all()) == 1


def test_the_report_is_the_instructors_only(app: FastAPI, event: Event) -> None:
    api = [
        f"/api/v1/events/{event.id}/report.json",
        f"/api/v1/events/{event.id}/report.html",
        f"/api/v1/events/{event.id}/completion-key",
    ]
    with TestClient(app) as client:
        ada = join(client, "Ada")
        for url in api:
            assert client.get(url, headers=ada).status_code == 403, url
            assert client.get(url).status_code == 403, url
            assert client.get(url, headers=instructor_headers()).status_code == 200, url
        page = f"/instructor/events/{event.id}/report"
        resp = client.get(page, headers=ada, follow_redirects=False)
        assert resp.status_code == 303 and resp.headers["location"].startswith("/instructor/login")
        assert client.get(page, headers=instructor_headers()).status_code == 200
        # the instructor's key is the attendees' one
        key = client.get(api[2], headers=instructor_headers()).json()
        assert client.get("/api/v1/completion-key", headers=ada).json() == key


def test_removing_an_attendee_removes_their_digests_and_hint_opens(app: FastAPI, event: Event) -> None:
    with TestClient(app) as client:
        ada = join(client, "Ada")
        aid = _me(client, ada)
        _pass(app, event, aid, STEPS[:2])
        assert client.post(f"/api/v1/labs/{LAB}/steps/run-script/hints", headers=ada).status_code == 200
        resp = client.delete(f"/api/v1/events/{event.id}/attendees/{aid}", headers=instructor_headers())
        assert resp.status_code == 200, resp.text
    with Session(app.state.ctx.engine) as s:
        assert s.exec(select(CheckFiles)).all() == [] and s.exec(select(HintOpen)).all() == []
        assert s.exec(select(CheckRun)).all() == []
