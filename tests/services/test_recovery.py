"""No run left ``running`` by a server that stopped (issue 30): a ``kill -9`` of a real
``labserver serve`` (local backend) while ten attendees' checks run, a check task cancelled before
its commit, and a ``running`` row that appears after the start's sweep (what a dying server's late
commit leaves) all end as ``not_gradable`` and are pressed again; none stays ``running``.
SQLite, and PostgreSQL when ``LABSERVER_TEST_DATABASE_URL`` is set."""

from __future__ import annotations

import os
import shutil
import signal
import threading
import time
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlmodel import Session, col, select

from labserver.app import create_app
from labserver.config import Settings
from labserver.models import Attendee, CheckRun, Event
from labserver.services.context import AppContext
from labserver.services.grading import checking
from labserver.services.operations.recovery import orphans, sweep_orphaned_runs
from tests.backends.docker.test_server_restart import free_port, start_server
from tests.conftest import EVENT_CODE, REPO, join, settle

LAB = "getting-started"
STEP = "write-file"
HELLO = "Hello, Ascend!\n你好，昇腾！\n".encode()
#: the write-file checker waits while the workspace holds ``slow`` = "1": checks in flight at will
SLOW = 'import pathlib, time\nwhile pathlib.Path("slow").is_file() and pathlib.Path("slow").read_text() == "1":\n    time.sleep(0.2)\n'


def labs_with_a_slow_check(root: Path) -> Path:
    labs = root / "labs"
    shutil.copytree(REPO / "labs" / LAB, labs / LAB)
    checker = labs / LAB / "checks" / "03_write_file.py"
    checker.write_text(SLOW + checker.read_text())
    return labs


def wait_for(what: str, done, timeout_s: float = 180.0):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while True:
        value = done()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def runs_of(ctx: AppContext, attendee_id: int) -> list[CheckRun]:
    with Session(ctx.engine, expire_on_commit=False) as s:
        return list(
            s.exec(select(CheckRun).where(CheckRun.attendee_id == attendee_id).order_by(col(CheckRun.id)))
        )


def test_orphans_are_closed_on_the_second_sweep_that_finds_them_unowned() -> None:
    # a row seen between its commit and its task's registration is only a suspect
    assert orphans({1, 2, 3}, {2}, set()) == (set(), {1, 3})
    assert orphans({1, 2, 3}, {2, 3}, {1, 3}) == ({1}, set())  # 3 was registered meanwhile
    assert orphans({2, 4}, {2}, {1}) == (set(), {4})  # 1 finished by its task meanwhile
    assert orphans(set(), set(), {7}) == (set(), set())


@pytest.fixture
def slow_settings(settings: Settings, tmp_path: Path) -> Settings:
    settings.labs_dir = labs_with_a_slow_check(tmp_path)
    return settings


def _ready_attendee(client: TestClient, name: str, *, slow: bool) -> tuple[dict[str, str], int]:
    head = join(client, name)
    ctx: AppContext = client.app.state.ctx  # type: ignore[attr-defined]
    settle(client.app)  # type: ignore[arg-type]
    put = client.put(f"/api/v1/labs/{LAB}/files/notes/hello.txt", content=HELLO, headers=head)
    assert put.status_code == 200, put.text
    if slow:
        assert client.put(f"/api/v1/labs/{LAB}/files/slow", content=b"1", headers=head).status_code == 200
    with Session(ctx.engine) as s:
        attendee = s.exec(select(Attendee).where(Attendee.name == name)).one()
    return head, attendee.id or 0


def test_a_running_row_nothing_runs_is_closed_and_pressed_again(slow_settings: Settings) -> None:
    app = create_app(slow_settings)
    ctx: AppContext = app.state.ctx
    with Session(ctx.engine, expire_on_commit=False) as s:
        from labserver.services.joining.events import create_event

        event = create_event(s, title="Sweep", labs=[LAB], code=EVENT_CODE)
    with TestClient(app) as client:
        _, ada = _ready_attendee(client, "Ada", slow=False)
        # committed after the start's sweep, and no task of this server runs it
        with Session(ctx.engine, expire_on_commit=False) as s:
            late = CheckRun(event_id=event.id or 0, attendee_id=ada, lab_id=LAB, step_id=STEP)
            s.add(late)
            s.commit()
        assert client.portal.call(sweep_orphaned_runs, ctx) == []  # a suspect only
        assert client.portal.call(sweep_orphaned_runs, ctx) == [late.id]
        wait_for(
            "the press again", lambda: [r.status for r in runs_of(ctx, ada)] == ["not_gradable", "passed"]
        )
        first = runs_of(ctx, ada)[0]
        assert "Not your fault" in first.message and first.finished_at is not None
        assert client.portal.call(sweep_orphaned_runs, ctx) == []


def test_a_check_cancelled_before_its_commit_is_closed_and_pressed_again(slow_settings: Settings) -> None:
    app = create_app(slow_settings)
    ctx: AppContext = app.state.ctx
    with Session(ctx.engine, expire_on_commit=False) as s:
        from labserver.services.joining.events import create_event

        create_event(s, title="Cancel", labs=[LAB], code=EVENT_CODE)
    with TestClient(app) as client:
        head, ada = _ready_attendee(client, "Ada", slow=True)
        with Session(ctx.engine, expire_on_commit=False) as s:
            attendee = s.get(Attendee, ada)
            event = s.get(Event, attendee.event_id) if attendee else None
        assert attendee is not None and event is not None
        lab = ctx.catalog.labs[LAB]
        step = lab.step(STEP)
        assert step is not None

        async def press() -> CheckRun:
            with Session(ctx.engine, expire_on_commit=False) as s:
                return await checking.run_check(ctx, s, event=event, attendee=attendee, lab=lab, step=step)

        pressed = client.portal.start_task_soon(press)
        wait_for("the check to run", lambda: ctx.checks_in_flight)
        pressed.cancel()  # what a server stopping mid-check does to it
        wait_for("the cancellation", lambda: pressed.done() and not ctx.checks_in_flight)
        assert [r.status for r in runs_of(ctx, ada)] == ["running"]  # nothing runs it any more
        assert client.put(f"/api/v1/labs/{LAB}/files/slow", content=b"0", headers=head).status_code == 200
        client.portal.call(sweep_orphaned_runs, ctx)
        client.portal.call(sweep_orphaned_runs, ctx)
        wait_for(
            "the press again", lambda: [r.status for r in runs_of(ctx, ada)] == ["not_gradable", "passed"]
        )


@pytest.mark.slow
def test_kill_9_while_ten_attendees_check_leaves_no_run_running(
    slow_settings: Settings, tmp_path: Path, database_url: str
) -> None:
    port = free_port()
    env = dict(
        os.environ,
        LABSERVER_DATA_DIR=str(slow_settings.data_dir),
        LABSERVER_LABS_DIR=str(slow_settings.labs_dir),
        LABSERVER_DATABASE_URL=database_url,
        LABSERVER_INSTRUCTOR_TOKEN="kill-token",
        LABSERVER_DEFAULT_EVENT_CODE="KILL9",
    )
    log = tmp_path / "serve.log"
    base = f"http://127.0.0.1:{port}/api/v1"
    check = f"{base}/labs/{LAB}/steps/{STEP}/check"
    proc = start_server(env, port, log)
    try:
        heads = []
        for i in range(10):
            joined = httpx.post(f"{base}/join", json={"event_code": "KILL9", "name": f"A{i}"}, timeout=60)
            assert joined.status_code == 200, joined.text
            heads.append({"Authorization": f"Bearer {joined.json()['token']}"})
        for h in heads:
            assert httpx.post(f"{base}/environment", headers=h, timeout=180).json()["state"] == "ready"
            for name, body in (("notes/hello.txt", HELLO), ("slow", b"1")):
                put = httpx.put(f"{base}/labs/{LAB}/files/{name}", headers=h, content=body, timeout=60)
                assert put.status_code == 200, put.text

        def press(h: dict[str, str], out: list[str]) -> None:
            try:
                out.append(httpx.post(check, headers=h, timeout=600).json()["status"])
            except httpx.HTTPError as exc:  # the server dies under it
                out.append(type(exc).__name__)

        def running(h: dict[str, str]) -> bool:
            runs = httpx.get(f"{base}/labs/{LAB}/steps/{STEP}/runs", headers=h, timeout=30).json()
            return [r["status"] for r in runs] == ["running"]

        before: list[str] = []
        pressing = [threading.Thread(target=press, args=(h, before)) for h in heads]
        for t in pressing:
            t.start()
        wait_for("ten checks running", lambda: all(running(h) for h in heads))
        os.killpg(proc.pid, signal.SIGKILL)  # mid-check: no shutdown hooks
        proc.wait(timeout=30)
        for t in pressing:
            t.join(timeout=60)
        for slow in (slow_settings.workspaces_dir).glob(f"*/{LAB}/slow"):
            slow.unlink()  # the checks after the restart run through
        proc = start_server(env, port, log)
        after: list[str] = []
        pressing = [threading.Thread(target=press, args=(h, after)) for h in heads]
        for t in pressing:
            t.start()  # while the restart's presses again run
        for t in pressing:
            t.join(timeout=300)
        assert after == ["passed"] * 10, log.read_text()[-3000:]

        def statuses() -> list[list[str]]:
            return [
                [
                    r["status"]
                    for r in httpx.get(f"{base}/labs/{LAB}/steps/{STEP}/runs", headers=h, timeout=30).json()
                ]
                for h in heads
            ]

        settled = wait_for(
            "no run running", lambda: (s := statuses()) and all("running" not in x for x in s) and s
        )
        for mine in settled:  # newest first: the presses after the restart, the killed run last
            assert mine[-1] == "not_gradable" and mine[0] == "passed", settled
            assert set(mine[:-1]) == {"passed"}, settled
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
