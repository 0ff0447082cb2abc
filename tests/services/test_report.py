"""The post-event report's numbers on a constructed event with known answers (rows written with a
TestClock: the clock moves instead of sleeping), and its pure parts: message templates, statistics."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi import FastAPI
from sqlmodel import Session

from labserver import clock
from labserver.clock import TestClock
from labserver.models import Attendee, CheckRun, Event, HintOpen, StepStart
from labserver.services.reporting import report
from labserver.services.reporting.report import message_template, stat

LAB = "getting-started"
STEPS = ["find-device", "run-script", "write-file", "implement-rmsnorm", "read-metric"]


@pytest.fixture
def tc() -> Iterator[TestClock]:
    test_clock = TestClock()
    previous = clock.use(test_clock)
    yield test_clock
    clock.use(previous)


class Room:
    """Writes an event's rows at chosen seconds since t = 0."""

    def __init__(self, s: Session, event: Event, tc: TestClock) -> None:
        self.s, self.event, self.tc, self.t = s, event, tc, 0.0

    def at(self, t: float) -> Room:
        assert t >= self.t, "rows are written in time order"
        self.tc.advance(t - self.t)
        self.t = t
        return self

    def attendee(self, name: str) -> int:
        a = Attendee(event_id=self.event.id or 0, name=name, token_hash=name)
        self.s.add(a)
        self.s.commit()
        assert a.id is not None
        return a.id

    def open(self, a: int, step: str) -> None:
        self.s.add(StepStart(attendee_id=a, lab_id=LAB, step_id=step, started_at=clock.now()))
        self.s.commit()

    def hints(self, a: int, step: str) -> None:
        self.s.add(HintOpen(event_id=self.event.id or 0, attendee_id=a, lab_id=LAB, step_id=step))
        self.s.commit()

    def check(self, a: int, step: str, status: str, message: str = "") -> None:
        now = clock.now()
        self.s.add(
            CheckRun(
                event_id=self.event.id or 0,
                attendee_id=a,
                lab_id=LAB,
                step_id=step,
                status=status,
                message=message,
                created_at=now,
                finished_at=now,
            )
        )
        self.s.commit()


def _constructed(app: FastAPI, event: Event, tc: TestClock) -> report.ReportPublic:
    """Seven attendees; the expected figures are worked out in the test below."""
    with Session(app.state.ctx.engine, expire_on_commit=False) as s:
        r = Room(s, event, tc)
        ada, bo, _cy, di, ed, fay, gus = (
            r.attendee(n) for n in ("Ada", "Bo", "Cy", "Di", "Ed", "Fay", "Gus")
        )
        r.at(0).open(ada, "find-device")
        r.open(bo, "find-device")
        r.open(di, "find-device")
        r.open(fay, "run-script")
        r.at(30).check(di, "find-device", "failed", "max abs error 0.9 > 0.001 at token 1")
        r.at(50).check(fay, "run-script", "passed")
        r.at(60).check(ada, "find-device", "failed", "max abs error 0.5 > 0.001 at token 3")
        r.at(90).hints(ada, "find-device")
        r.at(120).check(ada, "find-device", "failed", "max abs error 0.25 > 0.001 at token 9")
        r.at(200).check(gus, "find-device", "imported", "[imported] passed elsewhere")
        r.at(300).check(ada, "find-device", "passed")
        r.open(ada, "run-script")
        r.at(400).check(ada, "run-script", "passed")
        r.open(ada, "write-file")
        r.at(500).check(ada, "write-file", "error", "The checker crashed: exit status 139")
        r.at(550).check(ada, "write-file", "not_gradable", "The environment did not answer (node n1)")
        r.at(600).check(bo, "find-device", "passed")
        r.open(bo, "run-script")
        r.at(700).check(bo, "run-script", "failed", "function 'main' returned 3, expected 4")
        t = 1000.0
        r.at(t).open(ed, STEPS[0])
        for i, step in enumerate(STEPS):
            t += 100
            r.at(t).check(ed, step, "passed")
            if i + 1 < len(STEPS):
                r.open(ed, STEPS[i + 1])
        return report.event_report(app.state.ctx, s, event)


def test_report_numbers_on_a_constructed_event(app: FastAPI, event: Event, tc: TestClock) -> None:
    data = _constructed(app, event, tc)
    assert data.attendees == 7
    (lab,) = data.labs
    assert (lab.id, lab.started, lab.finished) == (LAB, 6, 1)  # Cy did nothing; only Ed finished
    assert (lab.time_to_finish_s.n, lab.time_to_finish_s.median) == (1, 500.0)
    steps = {s.id: s for s in lab.steps}

    fd = steps["find-device"]
    # Ada, Bo, Di, Gus were active on it; Fay passed a later step; Ed too; Cy nothing
    assert (fd.reached, fd.attempted, fd.passed) == (6, 4, 3)  # Gus's imported run is no attempt, no pass
    assert fd.time_to_pass_s.model_dump() == {
        "n": 3,
        "median": 300.0,
        "p90": 600.0,
        "max": 600.0,
    }  # 300, 600, 100
    assert fd.attempts_before_pass.model_dump() == {"n": 3, "median": 0.0, "p90": 2.0, "max": 2.0}  # 2, 0, 0
    assert fd.failed_runs == 3
    assert [(g.template, g.count, g.attendees) for g in fd.top_failures] == [
        ("max abs error # > # at token #", 3, 2)
    ]
    assert fd.top_failures[0].example == "max abs error 0.9 > 0.001 at token 1"  # the first one seen
    assert (fd.hints_opened, fd.hints_before_pass) == (1, 1)
    assert fd.stopped_here == 3  # Di, Fay (never passed it), Gus (imported only)

    rs = steps["run-script"]
    assert (rs.reached, rs.attempted, rs.passed) == (4, 4, 3)  # Ada, Bo, Ed, Fay
    assert rs.time_to_pass_s.model_dump() == {"n": 3, "median": 100.0, "p90": 100.0, "max": 100.0}
    assert [(g.template, g.count) for g in rs.top_failures] == [("function '…' returned #, expected #", 1)]
    assert rs.stopped_here == 1  # Bo

    wf = steps["write-file"]
    assert (wf.reached, wf.attempted, wf.passed) == (2, 2, 1)  # Ada (error, not gradable), Ed
    assert (wf.error_runs, wf.not_gradable_runs, wf.failed_runs) == (1, 1, 0)
    assert wf.errors[0].template == "The checker crashed: exit status #"
    assert wf.not_gradable[0].template == "The environment did not answer (node n1)"  # a name stays
    assert wf.stopped_here == 1  # Ada
    assert (steps["read-metric"].reached, steps["read-metric"].passed) == (1, 1)
    assert sum(s.stopped_here for s in lab.steps) == lab.started - lab.finished

    people = {t.name: t for t in data.timelines}
    ada = people["Ada"]
    assert [(e.kind, e.step, e.status) for e in ada.entries] == [
        ("opened", "find-device", ""),
        ("check", "find-device", "failed"),
        ("hints", "find-device", ""),
        ("check", "find-device", "failed"),
        ("opened", "run-script", ""),
        ("check", "find-device", "passed"),
        ("opened", "write-file", ""),
        ("check", "run-script", "passed"),
        ("check", "write-file", "error"),
        ("check", "write-file", "not_gradable"),
    ]
    assert [e.t for e in ada.entries][:3] == [0.0, 60.0, 90.0]
    assert (ada.steps_passed, ada.labs_finished, ada.stopped_at) == (2, [], [f"{LAB}/write-file"])
    assert (people["Ed"].steps_passed, people["Ed"].labs_finished, people["Ed"].stopped_at) == (5, [LAB], [])
    assert people["Cy"].entries == [] and people["Cy"].stopped_at == []


def test_an_empty_event_has_a_report(app: FastAPI, event: Event) -> None:
    with Session(app.state.ctx.engine) as s:
        data = report.event_report(app.state.ctx, s, event)
    assert data.t0 is None and data.attendees == 0
    assert [s.reached for s in data.labs[0].steps] == [0] * len(STEPS)
    assert data.labs[0].steps[0].time_to_pass_s.median is None


@pytest.mark.parametrize(
    ("message", "template"),
    [
        ("max abs error 0.0312 > 1e-3 at token 17", "max abs error # > # at token #"),
        ("function 'rms_norm' returned shape (4, 8)", "function '…' returned shape (#, #)"),
        ('file "out/result.json" is missing', 'file "…" is missing'),
        ("float32 expected, got bfloat16 (3 of 5 wrong)", "float32 expected, got bfloat16 (# of # wrong)"),
        ("digest 3fa9c2d1e4b5 differs; 0x1F bytes", "digest # differs; # bytes"),
        ("hit ratio 58.85% < 60%\nTraceback: line 12", "hit ratio #% < #%"),
        ("第3步：误差 0.5 超过 0.01", "第#步：误差 # 超过 #"),
        ("  many    spaces   here  ", "many spaces here"),
    ],
)
def test_message_template(message: str, template: str) -> None:
    assert message_template(message) == template


def test_two_attendees_with_different_numbers_share_one_group() -> None:
    runs = [
        report.Run(1, 1, LAB, "s", "failed", "speedup 1.2x < 2x (seed 991)", clock.now()),
        report.Run(2, 2, LAB, "s", "failed", "speedup 1.7x < 2x (seed 12)", clock.now()),
        report.Run(3, 2, LAB, "s", "failed", "output differs from the reference", clock.now()),
    ]
    groups = report.groups(runs)
    assert [(g.template, g.count, g.attendees) for g in groups] == [
        ("speedup #x < #x (seed #)", 2, 2),
        ("output differs from the reference", 1, 1),
    ]


def test_stat_median_and_nearest_rank_p90() -> None:
    assert stat([]).model_dump() == {"n": 0, "median": None, "p90": None, "max": None}
    assert stat([5.0]).model_dump() == {"n": 1, "median": 5.0, "p90": 5.0, "max": 5.0}
    assert stat([4.0, 1.0, 3.0, 2.0]).median == 2.5
    assert stat([float(i) for i in range(1, 11)]).p90 == 9.0
    assert stat([float(i) for i in range(1, 12)]).p90 == 10.0
