"""The instructor's room through the API and pages: login, events, grid + live deltas, help queue,
pacing, broadcast, export, drill-down actions. Real SQLite, real local backend, real checkers."""

from __future__ import annotations

import asyncio
import csv
import io
import json
from pathlib import Path
from typing import Any

from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlmodel import Session

from labserver.models import Event
from labserver.routes.instructor.stream import instructor_stream
from tests.conftest import INSTRUCTOR_TOKEN, instructor_headers, join

INSTR = instructor_headers()
LAB = "/api/v1/labs/getting-started"
HELLO = "Hello, Ascend!\n你好，昇腾！\n"


def _login(client: TestClient, name: str) -> None:
    resp = client.post(
        "/instructor/login", data={"token": INSTRUCTOR_TOKEN, "name": name}, follow_redirects=False
    )
    assert resp.status_code == 303


# -- login ------------------------------------------------------------------------------------------
def test_login_with_the_token_gives_a_named_session_and_logout_ends_it(
    client: TestClient, event: Event
) -> None:
    assert (
        client.get("/instructor", follow_redirects=False).headers["location"].startswith("/instructor/login")
    )
    wrong = client.post("/instructor/login", data={"token": "nope", "name": "Zoe"}, follow_redirects=False)
    assert wrong.status_code == 403 and "not the instructor token" in wrong.text
    _login(client, "Zoe")
    page = client.get("/instructor")
    assert page.status_code == 200 and "Zoe" in page.text and event.code in page.text
    client.post("/instructor/logout")
    assert client.get("/instructor", follow_redirects=False).status_code == 303


def test_two_instructors_at_once_each_keep_their_name(app: FastAPI, event: Event) -> None:
    with TestClient(app) as zoe, TestClient(app) as li:
        _login(zoe, "Zoe")
        _login(li, "Li Wei")
        assert "Zoe" in zoe.get("/instructor").text
        assert "Li Wei" in li.get("/instructor").text and "Zoe" not in li.get("/instructor").text


def test_login_page_speaks_chinese(client: TestClient) -> None:
    page = client.get("/instructor/login", headers={"Accept-Language": "zh-CN"})
    assert "工作人员登录" in page.text


# -- events -----------------------------------------------------------------------------------------
def test_create_edit_close_archive_events(client: TestClient) -> None:
    resp = client.post(
        "/api/v1/events",
        headers=INSTR,
        json={
            "title": "Hangzhou",
            "labs": ["getting-started"],
            "code": "hz-2026",
            "capacity": 2,
            "starts_at": "2026-05-20T09:00:00Z",
            "ends_at": "2026-05-20T12:00:00Z",
            "backend": "local",
        },
    )
    assert resp.status_code == 201, resp.text
    ev = resp.json()
    assert ev["code"] == "HZ2026" and ev["capacity"] == 2 and ev["starts_at"].startswith("2026-05-20T09:00")
    second = client.post("/api/v1/events", headers=INSTR, json={"title": "Second", "labs": []}).json()
    assert {e["id"] for e in client.get("/api/v1/events", headers=INSTR).json()} >= {ev["id"], second["id"]}
    bad = client.post("/api/v1/events", headers=INSTR, json={"title": "X", "labs": ["no-such-lab"]})
    assert bad.status_code == 400 and bad.json()["detail"]["field"] == "labs"
    dup = client.patch(f"/api/v1/events/{second['id']}", headers=INSTR, json={"code": "HZ2026"})
    assert dup.status_code == 400 and dup.json()["detail"]["field"] == "code"
    edited = client.patch(
        f"/api/v1/events/{ev['id']}", headers=INSTR, json={"title": "Hangzhou day 1", "image": "x:1"}
    )
    assert edited.json()["title"] == "Hangzhou day 1" and edited.json()["image"] == "x:1"
    join(client, "Ada", code="HZ2026")
    closed = client.post(f"/api/v1/events/{ev['id']}/status", headers=INSTR, json={"status": "closed"}).json()
    assert closed["status"] == "closed"
    refused = client.post("/api/v1/join", json={"event_code": "HZ2026", "name": "Bo"})
    assert refused.json()["code"] == "closed"
    client.post(f"/api/v1/events/{ev['id']}/status", headers=INSTR, json={"status": "open"})
    join(client, "Bo", code="HZ2026")
    full = client.post("/api/v1/join", json={"event_code": "HZ2026", "name": "Cy"})
    assert full.json()["code"] == "full"
    client.post(f"/api/v1/events/{ev['id']}/status", headers=INSTR, json={"status": "archived"})
    assert client.get(f"/api/v1/events/{ev['id']}", headers=INSTR).json()["status"] == "archived"


def test_event_form_pages_create_and_edit(client: TestClient) -> None:
    _login(client, "Zoe")
    resp = client.post(
        "/instructor/events",
        data={
            "title": "Form event",
            "labs": "getting-started",
            "code": "FORM22",
            "capacity": "0",
            "starts_at": "2026-05-20T09:00",
            "ends_at": "",
            "backend": "",
            "image": "",
        },
        follow_redirects=False,
    )
    assert resp.status_code == 303, resp.text
    url = resp.headers["location"]
    event_id = int(url.rsplit("/", 1)[1])
    assert "Form event" in client.get(url).text
    bad = client.post(f"/instructor/events/{event_id}/edit", data={"title": "", "labs": "getting-started"})
    assert bad.status_code == 400
    client.post(
        f"/instructor/events/{event_id}/edit",
        data={"title": "Renamed", "labs": "getting-started", "code": "FORM22", "capacity": "5"},
    )
    assert client.get(f"/api/v1/events/{event_id}", headers=INSTR).json()["capacity"] == 5
    client.post(f"/instructor/events/{event_id}/status", data={"status": "closed"})
    assert client.get(f"/api/v1/events/{event_id}", headers=INSTR).json()["status"] == "closed"


# -- grid and live deltas ---------------------------------------------------------------------------
def test_grid_shows_each_attendee_step_and_a_real_check_turns_the_cell_passed(
    client: TestClient, event: Event
) -> None:
    ada, bo = join(client, "Ada"), join(client, "Bo")
    client.post(f"{LAB}/steps/write-file/open", headers=ada)
    client.post(f"{LAB}/steps/find-device/open", headers=bo)
    grid = client.get(f"/api/v1/events/{event.id}/progress", headers=INSTR).json()
    columns = [tuple(c) for c in grid["columns"]]
    col = columns.index(("getting-started", "write-file"))
    names = {a[0]: a[1] for a in grid["attendees"]}
    assert sorted(names.values()) == ["Ada", "Bo"]
    cells = {(c[0], c[1]): c for c in grid["cells"]}
    ada_id = next(i for i, n in names.items() if n == "Ada")
    assert cells[(ada_id, col)][2] == "w"
    assert client.post(f"{LAB}/steps/write-file/check", headers=ada).json()["status"] == "failed"
    client.put(f"{LAB}/files/notes/hello.txt", content=HELLO.encode(), headers=ada)
    assert client.post(f"{LAB}/steps/write-file/check", headers=ada).json()["status"] == "passed"
    cell = {
        (c[0], c[1]): c
        for c in client.get(f"/api/v1/events/{event.id}/progress", headers=INSTR).json()["cells"]
    }[(ada_id, col)]
    assert cell[2:4] == ["p", 2] and cell[5] is not None and cell[5] >= cell[4]
    one = client.get(f"/api/v1/events/{event.id}/progress?attendee={ada_id}", headers=INSTR).json()
    assert [a[1] for a in one["attendees"]] == ["Ada"]


def test_the_stream_sends_a_cell_delta_for_a_finished_check(
    app: FastAPI, client: TestClient, event: Event
) -> None:
    ada = join(client, "Ada")
    client.put(f"{LAB}/files/notes/hello.txt", content=HELLO.encode(), headers=ada)
    ctx = app.state.ctx
    got: list[dict] = []

    async def scenario() -> None:
        sub = ctx.live.subscribe(event.id)
        gen = instructor_stream(ctx, event, sub)
        got.append(await anext(gen))  # ready
        # what the check route publishes after committing a run (see services/grading/checking.py)
        from labserver import clock
        from labserver.models import Attendee, CheckRun

        with Session(ctx.engine) as s:
            attendee = s.exec(__import__("sqlmodel").select(Attendee)).first()
            run = CheckRun(
                event_id=event.id,
                attendee_id=attendee.id,
                lab_id="getting-started",
                step_id="write-file",
                status="passed",
                finished_at=clock.now(),
            )
            s.add(run)
            s.commit()
            s.refresh(run)
            ctx.live.publish(
                "check.started",
                event.id,
                attendee.id,
                run_id=run.id,
                lab="getting-started",
                step="write-file",
            )
            ctx.live.publish(
                "check.finished",
                event.id,
                attendee.id,
                run_id=run.id,
                lab="getting-started",
                step="write-file",
                status="passed",
            )
        got.append(await anext(gen))
        got.append(await anext(gen))
        await gen.aclose()

    asyncio.run(scenario())
    assert got[0]["event"] == "ready"
    assert got[1]["event"] == "run" and json.loads(got[1]["data"])["c"] == 2
    delta = json.loads(got[2]["data"])
    assert got[2]["event"] == "cell" and delta["cell"][1:4] == [2, "p", 1] and delta["at"] > 0
    assert len(got[2]["data"]) < 200  # a delta, not the grid


def test_five_dashboards_read_a_finished_check_once_and_off_the_loop(
    app: FastAPI, client: TestClient, event: Event
) -> None:
    """Five instructor streams get the same cell delta from one database read, made in a worker
    thread (the load rehearsal's SSE tail: a read per dashboard, on the loop every stream shares)."""
    import threading

    from sqlalchemy import event as sa_event

    from labserver import clock
    from labserver.models import CheckRun

    ada = join(client, "Ada")
    ada_id = client.get("/api/v1/me", headers=ada).json()["attendee"]["id"]
    ctx = app.state.ctx
    with Session(ctx.engine) as s:
        run = CheckRun(
            event_id=event.id or 0,
            attendee_id=ada_id,
            lab_id="getting-started",
            step_id="write-file",
            status="passed",
            finished_at=clock.now(),
        )
        s.add(run)
        s.commit()
        s.refresh(run)
    loop_threads: set[int] = set()
    read_threads: list[int] = []

    def seen(*_args: object) -> None:
        read_threads.append(threading.get_ident())

    async def scenario() -> list[dict[str, str]]:
        loop_threads.add(threading.get_ident())
        gens = [instructor_stream(ctx, event, ctx.live.subscribe(event.id or 0)) for _ in range(5)]
        for gen in gens:
            assert (await anext(gen))["event"] == "ready"
        sa_event.listen(ctx.engine, "before_cursor_execute", seen)
        try:
            ctx.live.publish(
                "check.finished",
                event.id or 0,
                ada_id,
                run_id=run.id,
                lab="getting-started",
                step="write-file",
                status="passed",
            )
            out = await asyncio.gather(*(anext(gen) for gen in gens))
        finally:
            sa_event.remove(ctx.engine, "before_cursor_execute", seen)
        for gen in gens:
            await gen.aclose()
        return out

    deltas = asyncio.run(scenario())
    assert [d["event"] for d in deltas] == ["cell"] * 5
    assert len({d["data"] for d in deltas}) == 1
    one_read = len(read_threads)
    assert one_read and not loop_threads & set(read_threads)  # read in a worker thread, not on the loop
    assert ctx.live.computed == 1  # one read for five dashboards


def test_summary_funnel_and_stuck(client: TestClient, event: Event) -> None:
    ada = join(client, "Ada")
    for _ in range(3):
        client.post(f"{LAB}/steps/write-file/check", headers=ada)
    data = client.get(f"/api/v1/events/{event.id}/summary", headers=INSTR).json()
    step = next(s for s in data["steps"] if s["step"] == "write-file")
    assert step["failing"] == 1 and step["not-started"] == 0 and step["reached"] == 0
    assert data["stuck"][0]["name"] == "Ada" and data["stuck"][0]["reasons"] == ["failing"]
    assert client.get(f"/api/v1/events/{event.id}/stuck", headers=INSTR).json()[0]["failures_in_a_row"] == 3


# -- help -------------------------------------------------------------------------------------------
def test_help_queue_claim_and_resolve_reach_the_attendee(
    app: FastAPI, client: TestClient, event: Event
) -> None:
    ada = join(client, "Ada")
    ctx = app.state.ctx
    client.post(
        "/api/v1/help", headers=ada, json={"lab": "getting-started", "step": "write-file", "note": "stuck!"}
    )
    queue = client.get(f"/api/v1/events/{event.id}/help", headers=INSTR).json()
    assert [(h["name"], h["step"], h["note"], h["state"]) for h in queue] == [
        ("Ada", "write-file", "stuck!", "open")
    ]
    assert queue[0]["waiting_s"] >= 0
    attendee_id = queue[0]["attendee_id"]

    async def scenario() -> list[str]:
        sub = ctx.live.subscribe(event.id, attendee_id)  # the attendee's own stream
        claimed = client.post(f"/api/v1/events/{event.id}/help/{queue[0]['id']}/claim", headers=INSTR)
        assert claimed.json()["claimed_by"] == "instructor"
        client.post(f"/api/v1/events/{event.id}/help/{queue[0]['id']}/resolve", headers=INSTR)
        # joining started Ada's environment in the background: its env.* events may arrive in
        # between (a loaded machine), and are not what this test is about
        kinds: list[str] = []
        while len(kinds) < 2:
            kind = (await asyncio.wait_for(sub.get(), 30)).kind
            if kind.startswith("help."):
                kinds.append(kind)
        sub.close()
        return kinds

    assert asyncio.run(scenario()) == ["help.claimed", "help.resolved"]
    assert client.get(f"/api/v1/events/{event.id}/help", headers=INSTR).json() == []
    assert client.get("/api/v1/help", headers=ada).json() is None
    again = client.post(f"/api/v1/events/{event.id}/help/{queue[0]['id']}/resolve", headers=INSTR)
    assert again.status_code == 409


# -- pacing and broadcast ---------------------------------------------------------------------------
def test_pacing_locks_steps_for_the_room_until_advanced(client: TestClient, event: Event) -> None:
    ada = join(client, "Ada")
    resp = client.put(
        f"/api/v1/events/{event.id}/pace", headers=INSTR, json={"lab": "getting-started", "unlocked": 2}
    )
    assert resp.json()["pace"] == {"getting-started": 2}
    steps = client.get(LAB, headers=ada).json()["steps"]
    assert [s["locked"] for s in steps] == [False, False, True, True, True]
    assert client.post(f"{LAB}/steps/write-file/check", headers=ada).status_code == 423
    client.put(
        f"/api/v1/events/{event.id}/pace", headers=INSTR, json={"lab": "getting-started", "unlocked": 3}
    )
    assert client.post(f"{LAB}/steps/write-file/check", headers=ada).status_code == 200
    client.put(
        f"/api/v1/events/{event.id}/pace", headers=INSTR, json={"lab": "getting-started", "unlocked": None}
    )
    assert not any(s["locked"] for s in client.get(LAB, headers=ada).json()["steps"])


def test_broadcast_is_stored_and_published_to_every_attendee(
    app: FastAPI, client: TestClient, event: Event
) -> None:
    ada = join(client, "Ada")
    ctx = app.state.ctx

    async def scenario() -> dict:
        sub = ctx.live.subscribe(event.id, 12345)  # any attendee's stream sees event-wide news
        client.post(
            f"/api/v1/events/{event.id}/announcements", headers=INSTR, json={"message": "Break: 10 min"}
        )
        ev = await sub.get()
        sub.close()
        return {"kind": ev.kind, **ev.data}

    got = asyncio.run(scenario())
    assert got["kind"] == "announcement" and got["message"] == "Break: 10 min"
    assert client.get("/api/v1/announcements", headers=ada).json()[0]["message"] == "Break: 10 min"
    empty = client.post(f"/api/v1/events/{event.id}/announcements", headers=INSTR, json={"message": "  "})
    assert empty.status_code == 400


# -- export -----------------------------------------------------------------------------------------
def test_export_csv_and_json(client: TestClient, event: Event) -> None:
    ada = join(client, "Ada")
    join(client, "Bo")
    client.put(f"{LAB}/files/notes/hello.txt", content=HELLO.encode(), headers=ada)
    client.post(f"{LAB}/steps/write-file/check", headers=ada)
    text = client.get(f"/api/v1/events/{event.id}/export.csv", headers=INSTR).text
    rows = list(csv.DictReader(io.StringIO(text)))
    assert len(rows) == 2 * 5
    mine = next(r for r in rows if r["attendee"] == "Ada" and r["step"] == "write-file")
    assert mine["status"] == "passed" and mine["attempts"] == "1" and mine["passed_at"]
    data = client.get(f"/api/v1/events/{event.id}/export.json", headers=INSTR).json()
    assert data["event"]["code"] == event.code and len(data["results"]) == 10
    svg = client.get(f"/api/v1/events/{event.id}/completion.svg?lab=getting-started", headers=INSTR).text
    assert svg.startswith("<svg") and svg.count("<polyline") == 5


# -- drill-down -------------------------------------------------------------------------------------
def test_drill_down_history_reveal_reset_recreate(app: FastAPI, client: TestClient, event: Event) -> None:
    ada = join(client, "Ada")
    client.post(f"{LAB}/steps/write-file/check", headers=ada)
    aid = client.get("/api/v1/me", headers=ada).json()["attendee"]["id"]
    detail = client.get(f"/api/v1/events/{event.id}/attendees/{aid}", headers=INSTR).json()
    run = detail["runs"][0]
    assert run["status"] == "failed" and "hello.txt" in run["message"] and "log" in run
    env = detail["environment"]
    assert env["state"] == "ready" and env["emulated"] is True and env["node"] == "local"
    workspace = Path(app.state.ctx.settings.workspaces_dir) / env["id"] / "getting-started"
    assert workspace.is_dir(), workspace

    revealed = client.post(
        f"/api/v1/events/{event.id}/attendees/{aid}/reveal",
        headers=INSTR,
        json={"lab": "getting-started", "step": "write-file"},
    ).json()
    assert revealed["files"] == ["getting-started/.solution/notes/hello.txt"]
    assert (workspace / ".solution/notes/hello.txt").read_text() == HELLO

    (workspace / "rmsnorm.py").write_text("# my broken work\n")
    reset = client.post(
        f"/api/v1/environments/{env['id']}/reset", headers=INSTR, json={"lab": "getting-started"}
    )
    assert reset.status_code == 200, reset.text
    assert "my broken work" not in (workspace / "rmsnorm.py").read_text()

    (workspace / "scratch.txt").write_text("x")
    assert client.post(f"/api/v1/environments/{env['id']}/restart", headers=INSTR).json()["state"] == "ready"
    assert (workspace / "scratch.txt").exists()  # restart keeps the workspace
    assert client.post(f"/api/v1/environments/{env['id']}/recreate", headers=INSTR).json()["state"] == "ready"
    assert not (workspace / "scratch.txt").exists() and (workspace / "rmsnorm.py").exists()


def test_pages_render_dashboard_and_drill_down(client: TestClient, event: Event) -> None:
    join(client, "Ada")
    _login(client, "Zoe")
    dash = client.get(f"/instructor/events/{event.id}")
    assert dash.status_code == 200 and 'id="grid"' in dash.text and "/static/instructor.js" in dash.text
    drill = client.get(f"/instructor/events/{event.id}/attendees/1")
    assert drill.status_code == 200 and "/vendor/xterm/lib/xterm.js" in drill.text and "Ada" in drill.text
    zh = client.get(f"/instructor/events/{event.id}?lang=zh")
    assert "举手" in zh.text and "广播" in zh.text
    assert client.get(f"/instructor/events/{event.id}/attendees/999").status_code == 404


def test_stream_translation_of_other_kinds(app: FastAPI, event: Event) -> None:
    from labserver.live import LiveEvent
    from labserver.routes.instructor import stream as instructor_stream

    def translate(*args: Any) -> Any:
        return instructor_stream.translate(*args)

    ctx = app.state.ctx
    env = translate(ctx, event, LiveEvent("env.state", event.id or 0, 7, {"state": "ready", "env_id": "e"}))
    assert env == ("env", {"a": 7, "state": "ready", "env_id": "e"})
    kind, data = translate(ctx, event, LiveEvent("help.raised", event.id or 0, 7, {"help_id": 3})) or ("", {})
    assert kind == "help" and data["kind"] == "help.raised" and data["help_id"] == 3
    assert translate(ctx, event, LiveEvent("announcement", event.id or 0, None, {"message": "m"})) == (
        "announcement",
        {"a": None, "message": "m"},
    )
    assert translate(ctx, event, LiveEvent("env.progress", event.id or 0, 7, {})) is None
    started = translate(
        ctx, event, LiveEvent("check.started", event.id or 0, 7, {"lab": "nope", "step": "x"})
    )
    assert started is None  # a lab outside the event: no column


def test_dashboard_context_is_what_the_page_shows(app: FastAPI, client: TestClient, event: Event) -> None:
    from starlette.requests import Request

    from labserver.routes.instructor.pages import dashboard_context
    from labserver.services.staff.accounts import bootstrap_principal
    from labserver.services.staff.audit import Acting
    from labserver.services.staff.roles import Action

    join(client, "Ada")
    request = Request({"type": "http", "method": "GET", "path": "/", "headers": [], "query_string": b""})
    with Session(app.state.ctx.engine) as s:
        zoe = Acting(bootstrap_principal("Zoe", "token:x"), Action.view, event.id)
        context = dashboard_context(request, app.state.ctx, s, zoe, event.id or 0)
    assert context["instructor"] == "Zoe" and context["ev"]["attendees"] == 1
    assert [lab["id"] for lab in context["labs"]] == ["getting-started"]
    assert len(context["labs"][0]["steps"]) == 5 and context["config"]["event"] == event.id
