"""No attempt lost to the platform (issue 22): a check the platform could not run is recorded as
``not_gradable`` ("not your fault, retried", EN/ZH), retried once automatically, and counts nowhere:
not in the attendee's progress, the grid, the export or the stuck detector. Also after a server
restart mid-check, and for thirty attendees at once.

The engine going away mid-check cannot be made to happen at will on this machine, so the backend is
the real local backend whose ``run_check`` first fails the way a Docker engine does (hence its name:
``EngineDownFake``); every check that does run is the lab's real checker."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlmodel import Session, col, select

from labserver import clock
from labserver.app import create_app
from labserver.backends.base import BackendError, CheckRaw, CheckRequest, EnvironmentGone, EnvRef
from labserver.backends.local import LocalBackend
from labserver.config import Settings
from labserver.models import Attendee, CheckRun, CheckStatus, Event
from labserver.services.dashboard import room
from labserver.services.grading import checking
from labserver.services.joining.events import create_event
from tests.conftest import EVENT_CODE, instructor_headers, join, settle

LAB = "/api/v1/labs/getting-started"
HELLO = "Hello, Ascend!\n你好，昇腾！\n".encode()


class EngineDownFake(LocalBackend):
    """The real local backend whose first ``fail`` checks per environment meet an engine that does
    not answer (``reason``), as the Docker backend reports it."""

    def __init__(self, settings: Settings, *, fail: int = 1, reason: str = "engine-down") -> None:
        super().__init__(settings)
        self.fail = fail
        self.reason = reason
        self.failed: dict[str, int] = {}

    async def run_check(self, ref: EnvRef, request: CheckRequest) -> CheckRaw:
        done = self.failed.get(ref.env_id, 0)
        if done < self.fail:
            self.failed[ref.env_id] = done + 1
            await asyncio.sleep(0)  # a real await, so thirty checks interleave
            if self.reason == "lab-missing":
                raise EnvironmentGone("The lab folder is missing.", reason=self.reason)
            raise BackendError("The lab machine does not answer.", reason=self.reason)
        return await super().run_check(ref, request)


def _runs(app: FastAPI, attendee_id: int) -> list[CheckRun]:
    with Session(app.state.ctx.engine) as s:
        return list(
            s.exec(
                select(CheckRun).where(CheckRun.attendee_id == attendee_id).order_by(col(CheckRun.id))
            ).all()
        )


def _room(app: FastAPI, event_id: int) -> tuple[dict, list[dict], dict]:
    """(grid cells by (attendee, column), export rows, stuck flags) as the instructor sees them."""
    ctx = app.state.ctx
    with Session(ctx.engine, expire_on_commit=False) as s:
        event = s.get(Event, event_id)
        assert event is not None
        facts = room.load_facts(ctx, s, event)
        cells = {(c[0], c[1]): c for c in room.grid(facts)["cells"]}
        return cells, room.export_rows(facts), room.stuck(ctx, facts)


def test_the_table_of_platform_faults() -> None:
    from labserver.services.grading.not_gradable import PLATFORM_REASONS, is_platform_fault

    for reason in ("engine-down", "gone", "crashed", "grader-start", "restart", "sandbox"):
        assert is_platform_fault(BackendError("x", reason=reason)), reason
    for reason in ("lab-missing", "disk-full", "path", "too-big", "backend"):
        assert not is_platform_fault(BackendError("x", reason=reason)), reason
    assert "lab-missing" not in PLATFORM_REASONS


def test_an_engine_gone_mid_check_is_not_gradable_retried_and_not_counted(app: FastAPI, event: Event) -> None:
    app.state.ctx.backend = EngineDownFake(app.state.ctx.settings, fail=1)
    with TestClient(app) as client:
        ada = join(client, "Ada")
        settle(app)
        assert client.put(f"{LAB}/files/notes/hello.txt", content=HELLO, headers=ada).status_code == 200
        resp = client.post(f"{LAB}/steps/write-file/check", headers=ada)
        assert resp.status_code == 200 and resp.json()["status"] == "passed", resp.text  # the retry's verdict
        me = client.get("/api/v1/me", headers=ada).json()["attendee"]["id"]
        history = client.get(f"{LAB}/steps/write-file/runs", headers=ada).json()
        assert [r["status"] for r in history] == ["passed", "not_gradable"]
        assert "Not your fault" in history[1]["message"] and "retried" in history[1]["message"]
        labs = client.get("/api/v1/labs", headers=ada).json()
        steps = {
            s["id"]: s for s in next(x for x in labs if x["id"] == "getting-started")["progress"]["steps"]
        }
        assert steps["write-file"]["attempts"] == 1
    cells, rows, _ = _room(app, event.id or 0)
    assert cells[(me, 2)][2:4] == ["p", 1]
    assert next(r for r in rows if r["step"] == "write-file")["attempts"] == 1


def test_not_gradable_twice_stays_so_in_chinese_and_costs_nothing(app: FastAPI, event: Event) -> None:
    app.state.ctx.backend = EngineDownFake(app.state.ctx.settings, fail=99)
    app.state.ctx.settings.stuck.failed_in_a_row = 2
    with TestClient(app) as client:
        ada = join(client, "Ada")
        settle(app)
        me = client.get("/api/v1/me", headers=ada).json()["attendee"]["id"]
        for _ in range(3):
            run = client.post(f"{LAB}/steps/write-file/check?lang=zh", headers=ada).json()
            assert run["status"] == "not_gradable" and "不是你的问题" in run["message"], run
        assert len(_runs(app, me)) == 6  # each press: the run and its one retry
        labs = client.get("/api/v1/labs", headers=ada).json()
        steps = {
            s["id"]: s for s in next(x for x in labs if x["id"] == "getting-started")["progress"]["steps"]
        }
        assert steps["write-file"]["attempts"] == 0 and steps["write-file"]["status"] != "failing"
    cells, rows, stuck = _room(app, event.id or 0)
    assert cells[(me, 2)][2:4] == ["w", 0]  # working, no attempt
    assert next(r for r in rows if r["step"] == "write-file")["attempts"] == 0
    assert me not in stuck


def test_an_attendee_fault_is_an_error_and_not_retried(app: FastAPI, event: Event) -> None:
    app.state.ctx.backend = EngineDownFake(app.state.ctx.settings, fail=1, reason="lab-missing")
    with TestClient(app) as client:
        ada = join(client, "Ada")
        settle(app)
        run = client.post(f"{LAB}/steps/write-file/check", headers=ada).json()
        assert run["status"] == "error" and "missing" in run["message"]
        assert [r["status"] for r in client.get(f"{LAB}/steps/write-file/runs", headers=ada).json()] == [
            "error"
        ]


def test_thirty_checks_at_once_meet_the_engine_gone_and_all_pass_on_the_retry(
    app: FastAPI, event: Event
) -> None:
    ctx = app.state.ctx
    ctx.backend = EngineDownFake(ctx.settings, fail=1)
    with TestClient(app) as client:
        heads = [join(client, f"A{i}") for i in range(30)]
        settle(app)
        for h in heads:
            assert client.put(f"{LAB}/files/notes/hello.txt", content=HELLO, headers=h).status_code == 200
    with Session(ctx.engine, expire_on_commit=False) as s:
        people = list(s.exec(select(Attendee).where(Attendee.event_id == event.id)).all())
    lab = ctx.catalog.labs["getting-started"]
    step = lab.step("write-file")
    assert step is not None and len(people) == 30

    async def press(attendee: Attendee) -> CheckRun:
        with Session(ctx.engine, expire_on_commit=False) as s:
            return await checking.run_check(ctx, s, event=event, attendee=attendee, lab=lab, step=step)

    async def room_of_thirty() -> list[CheckRun]:
        return await asyncio.gather(*(press(a) for a in people))

    finals = asyncio.run(room_of_thirty())
    assert [r.status for r in finals] == ["passed"] * 30
    for a in people:
        assert [r.status for r in _runs(app, a.id or 0)] == ["not_gradable", "passed"]
    cells, rows, stuck = _room(app, event.id or 0)
    assert {cells[(a.id, 2)][3] for a in people} == {1}
    assert {r["attempts"] for r in rows if r["step"] == "write-file"} == {1} and not stuck


def _orphan(settings: Settings, names: list[str]) -> tuple[int, list[int]]:
    """What a server killed mid-check leaves: attendees whose write-file check is ``running``."""
    app = create_app(settings)
    with TestClient(app) as client:
        heads = [join(client, n) for n in names]
        settle(app)
        for h in heads:
            assert client.put(f"{LAB}/files/notes/hello.txt", content=HELLO, headers=h).status_code == 200
    ids = []
    with Session(app.state.ctx.engine, expire_on_commit=False) as s:
        event = s.exec(select(Event).where(Event.code == EVENT_CODE)).one()
        for a in s.exec(select(Attendee).where(Attendee.event_id == event.id)).all():
            run = CheckRun(
                event_id=event.id or 0, attendee_id=a.id or 0, lab_id="getting-started", step_id="write-file"
            )
            s.add(run)
            ids.append(a.id or 0)
        s.commit()
    app.state.ctx.engine.dispose()
    return event.id or 0, ids


def test_a_restart_mid_check_is_not_gradable_and_pressed_again_for_thirty(
    settings: Settings, tmp_path: Path
) -> None:
    first = create_app(settings)
    with Session(first.state.ctx.engine, expire_on_commit=False) as s:
        create_event(s, title="Restart", labs=["getting-started"], code=EVENT_CODE)
    first.state.ctx.engine.dispose()
    event_id, people = _orphan(settings, [f"R{i}" for i in range(30)])

    restarted = create_app(settings)  # the lifespan finishes the orphans and presses Check again
    with TestClient(restarted) as client:
        # a bound on liveness, not a speed figure: thirty environments each start their check
        # runner (one torch import each) on a machine CI may share with other work
        deadline = time.monotonic() + 360
        while time.monotonic() < deadline:
            statuses = [[r.status for r in _runs(restarted, a)] for a in people]
            if all(s == ["not_gradable", "passed"] for s in statuses):
                break
            time.sleep(0.1)
        assert all(s == ["not_gradable", "passed"] for s in statuses), statuses
        first_run = _runs(restarted, people[0])[0]
        assert "Not your fault" in first_run.message and first_run.finished_at is not None
        grid = client.get(f"/api/v1/events/{event_id}/progress", headers=instructor_headers()).json()
        assert {c[3] for c in grid["cells"] if c[1] == 2} == {1}  # one attempt each: the retry's


def test_finish_orphaned_runs_skips_what_is_not_running(app: FastAPI, event: Event) -> None:
    from labserver.services.operations.recovery import finish_orphaned_runs, retry_orphaned_runs

    with TestClient(app) as client:
        join(client, "Ada")
        settle(app)  # the environment start begun at join writes its row: not racing ours
    ctx = app.state.ctx
    with Session(ctx.engine, expire_on_commit=False) as s:
        a = s.exec(select(Attendee)).one()
        done = CheckRun(
            event_id=event.id or 0,
            attendee_id=a.id or 0,
            lab_id="getting-started",
            step_id="gone",
            status=CheckStatus.failed,
            finished_at=clock.now(),
        )
        orphan = CheckRun(
            event_id=event.id or 0, attendee_id=a.id or 0, lab_id="getting-started", step_id="gone"
        )
        s.add_all([done, orphan])
        s.commit()
        ids = finish_orphaned_runs(s)
        assert ids == [orphan.id]
    # a step the lab no longer has: not pressed again (nothing to run), the run stays not gradable
    assert asyncio.run(retry_orphaned_runs(ctx, ids)) == 0
    assert [r.status for r in _runs(app, a.id or 0)] == ["failed", "not_gradable"]


@pytest.mark.parametrize("lang, phrase", [("en", "Not your fault"), ("zh", "不是你的问题")])
def test_the_message_in_both_languages(lang: str, phrase: str) -> None:
    from labserver.services.grading.not_gradable import message

    assert phrase in message(lang, "engine-down", retried=False)
    assert phrase in message(lang, "engine-down", retried=True) and "engine-down" in message(
        lang, "engine-down", retried=True
    )


def test_a_timeout_the_machine_caused_says_so_in_both_languages() -> None:
    from labserver.checks.verdict import LOAD
    from labserver.services.grading.not_gradable import is_platform_fault, message

    assert is_platform_fault(BackendError("x", reason=LOAD))
    first, again = message("en", LOAD, retried=False), message("en", LOAD, retried=True)
    assert "too busy" in first and "retried automatically" in first
    assert "too busy" in again and "press Check in a minute" in again
    assert "服务器太忙" in message("zh", LOAD, retried=False)
    assert "自动重试后服务器仍然太忙" in message("zh", LOAD, retried=True)
