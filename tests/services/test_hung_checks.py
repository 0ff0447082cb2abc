"""A few hung checks never stall the room (issue 30): four attendees whose function sleeps hold the
four check slots, and a fifth attendee's trivial check still gets its verdict first: the sleepers'
checks use no CPU, so they lend their slots (services/grading/fair_queue.py), and their step's recorded cost
ends them at its wall budget, long before the step's ``timeout_s`` (checks/timeouts.py).

Real checker processes through the local backend, real SQLite, the server's own ``run_check``;
ordering and counts are asserted, never durations. The control turns lending off and sees the
victim wait for a sleeper."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
from pathlib import Path

from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlmodel import Session, select

from labserver.app import create_app
from labserver.config import Settings
from labserver.models import Attendee, CheckRun, CheckStatus, Event
from labserver.services.grading import checking
from labserver.services.joining.events import create_event
from tests.conftest import INSTRUCTOR_TOKEN, join, settle

SLEEPY = textwrap.dedent("""
    from labkit.check import Failure, main, run_script

    def check():
        res = run_script(["python", "answer.py"], timeout=600)
        if not res.ok:
            raise Failure("answer.py did not finish")
        return "answered"

    main(check)
""")
TRIVIAL = "from labkit.check import main\n\nmain(lambda: 'fine')\n"
#: a correct check that needs 3 CPU-s (its recorded cost), on CPU 0 only
BUSY = textwrap.dedent("""
    import os, time
    os.sched_setaffinity(0, {0})
    from labkit.check import main

    def check():
        end = time.process_time() + 3.0
        while time.process_time() < end:
            pass
        return "computed"

    main(check)
""")


def make_lab(root: Path) -> None:
    lab = root / "hung"
    for folder in ("steps", "checks", "starter"):
        (lab / folder).mkdir(parents=True)
    # the attendee's function sleeps (the red team's four names; an endless wait without malice)
    (lab / "starter" / "answer.py").write_text(
        "import time\n\ndef answer():\n    time.sleep(600)\n\nanswer()\n"
    )
    (lab / "checks" / "01_sleepy.py").write_text(SLEEPY)
    (lab / "checks" / "02_trivial.py").write_text(TRIVIAL)
    (lab / "checks" / "03_busy.py").write_text(BUSY)
    # the reference's cost: a wall budget of max(10, 10 x 1.5) = 15 s instead of the 60 s timeout
    (lab / "checks" / "costs.yaml").write_text("sleepy: 1.5\ntrivial: 0.2\nbusy: 3\n")
    for name in ("sleepy", "trivial", "busy"):
        (lab / "steps" / f"{name}.md").write_text(f"# {name}\n")
    (lab / "lab.yaml").write_text(
        "id: hung\ntitle: Hung\nsummary: s\nduration_min: 5\nsteps:\n"
        "  - {id: sleepy, title: sleepy, file: steps/sleepy.md, check: checks/01_sleepy.py, timeout_s: 60}\n"
        "  - {id: trivial, title: trivial, file: steps/trivial.md, check: checks/02_trivial.py, timeout_s: 60}\n"
        "  - {id: busy, title: busy, file: steps/busy.md, check: checks/03_busy.py, timeout_s: 8}\n"
    )


def open_room(
    tmp_path: Path, database_url: str, names: list[str], *, idle_after_s: float = 5
) -> tuple[FastAPI, Event, dict[str, Attendee]]:
    """The app on the ``hung`` lab with ``names`` joined and their environments started."""
    make_lab(tmp_path / "labs")
    settings = Settings(
        data_dir=tmp_path / "data",
        labs_dir=tmp_path / "labs",
        instructor_token=INSTRUCTOR_TOKEN,
        database_url=database_url,
    )
    settings.checks.max_concurrent = 4
    settings.checks.idle_after_s = idle_after_s
    # not about per-attendee budgets: a warm-up on a busy machine must not put anyone over one
    settings.checks.fair_budget_s = 1e6
    app = create_app(settings)
    with Session(app.state.ctx.engine, expire_on_commit=False) as s:
        event = create_event(s, title="t", labs=["hung"], code="HUNGROOM")
    with TestClient(app) as client:
        for name in names:
            join(client, name, code="HUNGROOM")
        settle(app)
    with Session(app.state.ctx.engine, expire_on_commit=False) as s:
        people = {a.name: a for a in s.exec(select(Attendee).where(Attendee.event_id == event.id)).all()}
    return app, event, people


def room(tmp_path: Path, database_url: str, *, idle_after_s: float) -> list[tuple[str, str]]:
    """Four sleepers press Check, then (once they hold all four slots) the victim does; the
    (who, status) of each verdict in the order they arrived."""
    names = ["S0", "S1", "S2", "S3", "Victim"]
    app, event, people = open_room(tmp_path, database_url, names, idle_after_s=idle_after_s)
    ctx = app.state.ctx
    lab = ctx.catalog.labs["hung"]
    sleepy, trivial = lab.step("sleepy"), lab.step("trivial")
    assert sleepy is not None and trivial is not None and ctx.check_queue is not None

    async def go() -> list[tuple[str, str]]:
        arrived: list[tuple[str, str]] = []

        async def press(name: str, step, ev: Event) -> None:  # type: ignore[no-untyped-def]
            with Session(ctx.engine, expire_on_commit=False) as s:
                run = await checking.run_check(ctx, s, event=ev, attendee=people[name], lab=lab, step=step)
            arrived.append((name, str(run.status)))

        try:
            # everyone's check runner started (a fork server per environment and lab imports torch
            # once): what follows compares checks, not start-ups
            await asyncio.gather(*(press(name, trivial, event) for name in names))
            assert arrived and all(status == CheckStatus.passed for _, status in arrived), arrived
            arrived.clear()
            sleepers = [asyncio.create_task(press(f"S{i}", sleepy, event)) for i in range(4)]

            async def slots_taken() -> None:
                while ctx.check_queue.running_count() < 4:
                    await asyncio.sleep(0.05)

            await asyncio.wait_for(slots_taken(), 120)
            victim = asyncio.create_task(press("Victim", trivial, event))
            await asyncio.gather(*sleepers, victim)
            return arrived
        finally:
            await ctx.backend.aclose()

    try:
        return asyncio.run(go())
    finally:
        ctx.engine.dispose()


def test_four_sleeping_checks_do_not_keep_a_trivial_check_waiting(tmp_path: Path, database_url: str) -> None:
    arrived = room(tmp_path, database_url, idle_after_s=2)
    assert arrived[0] == ("Victim", CheckStatus.passed), arrived
    # the sleepers still end as their own timeouts (asleep, never starved), at the wall budget
    assert sorted(arrived[1:]) == [(f"S{i}", CheckStatus.timeout) for i in range(4)], arrived


def test_control_without_lending_the_victim_waits_for_a_sleeper(tmp_path: Path, database_url: str) -> None:
    arrived = room(tmp_path, database_url, idle_after_s=0)
    assert [who for who, _ in arrived].index("Victim") >= 1, arrived
    assert ("Victim", CheckStatus.passed) in arrived


def test_a_check_starved_by_cpu_hogs_is_not_gradable_retried_and_says_why_in_chinese(
    tmp_path: Path, database_url: str
) -> None:
    app, event, people = open_room(tmp_path, database_url, ["Ada"])
    ctx = app.state.ctx
    lab = ctx.catalog.labs["hung"]
    busy = lab.step("busy")
    assert busy is not None
    hogs = [
        subprocess.Popen(["taskset", "-c", "0", sys.executable, "-c", "while True: pass"]) for _ in range(4)
    ]

    async def press() -> CheckRun:
        with Session(ctx.engine, expire_on_commit=False) as s:
            return await checking.run_check(
                ctx, s, event=event, attendee=people["Ada"], lab=lab, step=busy, lang="zh"
            )

    async def press_and_close() -> CheckRun:
        try:
            return await press()
        finally:
            await ctx.backend.aclose()

    try:
        final = asyncio.run(press_and_close())
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
        ctx.engine.dispose()
    with Session(ctx.engine) as s:
        runs = list(s.exec(select(CheckRun).where(CheckRun.attendee_id == people["Ada"].id)).all())
    assert [r.status for r in runs] == [CheckStatus.not_gradable] * 2, [(r.status, r.message) for r in runs]
    assert "服务器太忙" in runs[0].message and "已自动重试" in runs[0].message
    assert "自动重试后服务器仍然太忙" in final.message
    assert all(r.cpu_s is not None and r.cpu_s < 3.0 for r in runs)  # measured: it never got its 3 CPU-s
