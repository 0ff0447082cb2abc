"""The post-event report for lab authors and instructors: per lab and step, how far people got, how
long a step took, what the checkers told them, where they needed hints and where they stopped; and
every attendee's timeline. One query per kind of row (check runs without their logs, step starts,
hints opened) is loaded into :class:`ReportFacts`; :func:`build_report` is pure (tested with
constructed facts and known answers). The page, the downloads and ``labserver report EVENT`` all
show this one :class:`~labserver.schemas.ReportPublic` (rendered by
:mod:`labserver.services.report_html`).

Definitions (a reviewer checks them line by line against the code below):

==========================  ==========================================================================
``reached``                 attendees with any activity on the step (opened it, a check, hints
                            opened), or a pass of a later step of the same lab
``attempted``               attendees with at least one *finished* check (:data:`ATTEMPT`)
``passed``                  attendees with a ``passed`` run (``imported`` is never a pass here)
``time_to_pass_s``          per passer: first pass minus their first activity on the step
``attempts_before_pass``    per passer: finished checks before the first pass (0 = passed at once)
``failed_runs``             runs ``failed``; ``top_failures`` groups them by :func:`message_template`
``error_runs``              runs ``error`` or ``timeout``: the checker's fault, not the attendee's
``not_gradable_runs``       runs ``not_gradable`` (a status another part of the server may write)
``hints_opened``            attendees who opened the step's hints; ``hints_before_pass``: of the
                            passers, those who opened them before their first pass
``stopped_here``            attendees with activity in the lab who did not finish it, for whom this
                            is the first step of the lab not passed
lab ``time_to_finish_s``    per finisher: last first-pass of the lab minus first activity in the lab
==========================  ==========================================================================

``median`` is the middle value (mean of the two middle ones), ``p90`` the nearest rank
(``sorted[ceil(0.9 n) - 1]``). Runs ``running`` and ``interrupted`` are no attempt (as in
:mod:`labserver.services.reporting.progress`).
"""

from __future__ import annotations

import datetime as dt
import math
import re
import statistics
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select as sa_select
from sqlmodel import Session, col

from labserver import clock
from labserver.content import Lab
from labserver.models import Attendee, CheckRun, Event, HintOpen, StepStart
from labserver.schemas import (
    AttendeeTimeline,
    EventRef,
    LabReport,
    MessageGroup,
    ReportPublic,
    Stat,
    StepReport,
    TimelineEntry,
)
from labserver.services.context import AppContext
from labserver.services.provisioning.environments import event_labs

NOT_GRADABLE = "not_gradable"
FAILED = ("failed",)
ERRORS = ("error", "timeout")
#: finished checks: an attempt (``imported`` came from a progress file, not from a check here)
ATTEMPT = ("passed", "failed", "error", "timeout", NOT_GRADABLE)
TOP_MESSAGES = 5
MAX_TIMELINE = 400  # entries per attendee
MESSAGE_CHARS = 200

Key = tuple[int, str, str]  # attendee, lab, step


@dataclass
class Run:
    id: int
    attendee_id: int
    lab: str
    step: str
    status: str
    message: str
    at: dt.datetime  # finished (or created, when it never finished)


@dataclass
class ReportFacts:
    event: Event
    labs: list[Lab]
    attendees: list[tuple[int, str]]
    runs: list[Run]  # in id order
    starts: dict[Key, dt.datetime] = field(default_factory=dict)
    hints: dict[Key, dt.datetime] = field(default_factory=dict)
    now: dt.datetime = field(default_factory=clock.now)


def _aware(t: dt.datetime) -> dt.datetime:
    return t if t.tzinfo else t.replace(tzinfo=dt.UTC)


def load_report_facts(ctx: AppContext, session: Session, event: Event) -> ReportFacts:
    """Everything the report needs, in four queries (no check log leaves the database)."""
    labs = [ctx.catalog.labs[lab_id] for lab_id in event_labs(ctx, event)]
    attendees = session.execute(
        sa_select(col(Attendee.id), col(Attendee.name))
        .where(col(Attendee.event_id) == event.id)
        .order_by(col(Attendee.id))
    ).all()
    q_runs = (
        sa_select(
            col(CheckRun.id),
            col(CheckRun.attendee_id),
            col(CheckRun.lab_id),
            col(CheckRun.step_id),
            col(CheckRun.status),
            col(CheckRun.message),
            col(CheckRun.created_at),
            col(CheckRun.finished_at),
        )
        .where(col(CheckRun.event_id) == event.id)
        .order_by(col(CheckRun.id))
    )
    runs = [
        Run(rid, a, lab, step, str(status), message or "", _aware(finished or created))
        for rid, a, lab, step, status, message, created, finished in session.execute(q_runs).all()
    ]
    q_starts = (
        sa_select(
            col(StepStart.attendee_id),
            col(StepStart.lab_id),
            col(StepStart.step_id),
            col(StepStart.started_at),
        )
        .join(Attendee, col(Attendee.id) == StepStart.attendee_id)
        .where(col(Attendee.event_id) == event.id)
    )
    q_hints = sa_select(
        col(HintOpen.attendee_id), col(HintOpen.lab_id), col(HintOpen.step_id), col(HintOpen.opened_at)
    ).where(col(HintOpen.event_id) == event.id)
    return ReportFacts(
        event=event,
        labs=labs,
        attendees=[(a, n) for a, n in attendees],
        runs=runs,
        starts={(a, lab, step): _aware(t) for a, lab, step, t in session.execute(q_starts).all()},
        hints={(a, lab, step): _aware(t) for a, lab, step, t in session.execute(q_hints).all()},
    )


# -- message templates ------------------------------------------------------------------------------
_QUOTED = re.compile(r"'[^'\n]{0,200}'|\"[^\"\n]{0,200}\"|`[^`\n]{0,200}`|“[^”\n]{0,200}”|‘[^’\n]{0,200}’")
_NUMBER = re.compile(
    r"(?<![A-Za-z_0-9.])[-+]?(?:0x[0-9a-fA-F]+|(?=[0-9a-f]*[0-9])[0-9a-f]{8,}(?![0-9A-Za-z_])"
    r"|[0-9]+(?:[.][0-9]+)?(?:[eE][-+]?[0-9]+)?|[.][0-9]+)"
)


def message_template(message: str) -> str:
    """The checker's message with what varies between attendees taken out, so one mistake is one
    group: the first line only, quoted names (``'x'``, ``"x"``, ```x```, “x”) become ``'…'``,
    numbers (integers, decimals, exponents, hex, digests; not the digits inside a name such as
    ``float32``) become ``#``, and runs of spaces one space."""
    line = message.strip().split("\n", 1)[0][:MESSAGE_CHARS]
    line = _QUOTED.sub(lambda m: m.group(0)[0] + "…" + m.group(0)[-1], line)
    line = _NUMBER.sub("#", line)
    return " ".join(line.split())


def groups(runs: Iterable[Run], top: int = TOP_MESSAGES) -> list[MessageGroup]:
    """The ``top`` most frequent templates of ``runs`` (ties: the template seen first wins)."""
    count: Counter[str] = Counter()
    people: dict[str, set[int]] = defaultdict(set)
    example: dict[str, str] = {}
    for run in runs:
        tpl = message_template(run.message) or "(no message)"
        count[tpl] += 1
        people[tpl].add(run.attendee_id)
        example.setdefault(tpl, run.message.strip()[:MESSAGE_CHARS])
    order = {tpl: i for i, tpl in enumerate(example)}
    ranked = sorted(count, key=lambda tpl: (-count[tpl], order[tpl]))[:top]
    return [
        MessageGroup(template=t, count=count[t], attendees=len(people[t]), example=example[t]) for t in ranked
    ]


# -- numbers ----------------------------------------------------------------------------------------
def stat(values: list[float]) -> Stat:
    """Median, p90 (nearest rank) and max of ``values`` (see the module docstring)."""
    if not values:
        return Stat(n=0)
    ordered = sorted(values)
    p90 = ordered[max(0, math.ceil(0.9 * len(ordered)) - 1)]
    return Stat(
        n=len(ordered), median=float(statistics.median(ordered)), p90=float(p90), max=float(ordered[-1])
    )


# -- the report -------------------------------------------------------------------------------------
@dataclass
class _Cell:
    first: dt.datetime | None = None  # first activity
    first_pass: dt.datetime | None = None
    attempts_before: int = 0
    attempted: bool = False
    runs: list[Run] = field(default_factory=list)

    def touch(self, t: dt.datetime) -> None:
        if self.first is None or t < self.first:
            self.first = t


def _cells(facts: ReportFacts) -> dict[Key, _Cell]:
    cells: dict[Key, _Cell] = defaultdict(_Cell)
    for key, t in facts.starts.items():
        cells[key].touch(t)
    for key, t in facts.hints.items():
        cells[key].touch(t)
    for run in facts.runs:
        cell = cells[(run.attendee_id, run.lab, run.step)]
        cell.runs.append(run)
        cell.touch(run.at)
        if run.status not in ATTEMPT:
            continue
        cell.attempted = True
        if cell.first_pass is not None:
            continue
        if run.status == "passed":
            cell.first_pass = run.at
        else:
            cell.attempts_before += 1
    return cells


def _step_report(
    facts: ReportFacts, lab: Lab, index: int, cells: dict[Key, _Cell], stopped: Counter[str], lang: str
) -> StepReport:
    step = lab.steps[index]
    later = {s.id for s in lab.steps[index + 1 :]}
    mine = {a: cells[(a, lab.id, step.id)] for a, _ in facts.attendees if (a, lab.id, step.id) in cells}
    reached = set(mine)
    for (a, lab_id, step_id), cell in cells.items():
        if lab_id == lab.id and step_id in later and cell.first_pass is not None:
            reached.add(a)
    passers = {a: c for a, c in mine.items() if c.first_pass is not None}
    runs = sorted((r for c in mine.values() for r in c.runs), key=lambda r: r.id)  # in time order
    hinted = {a for a in mine if (a, lab.id, step.id) in facts.hints}
    return StepReport(
        id=step.id,
        title=step.spec.title.get(lang),
        index=index + 1,
        reached=len(reached),
        attempted=sum(1 for c in mine.values() if c.attempted),
        passed=len(passers),
        time_to_pass_s=stat(
            [(c.first_pass - c.first).total_seconds() for c in passers.values() if c.first and c.first_pass]
        ),
        attempts_before_pass=stat([float(c.attempts_before) for c in passers.values()]),
        failed_runs=sum(1 for r in runs if r.status in FAILED),
        top_failures=groups(r for r in runs if r.status in FAILED),
        error_runs=sum(1 for r in runs if r.status in ERRORS),
        errors=groups(r for r in runs if r.status in ERRORS),
        not_gradable_runs=sum(1 for r in runs if r.status == NOT_GRADABLE),
        not_gradable=groups(r for r in runs if r.status == NOT_GRADABLE),
        hints_opened=len(hinted),
        hints_before_pass=sum(
            1
            for a in hinted & set(passers)
            if facts.hints[(a, lab.id, step.id)] <= (passers[a].first_pass or facts.now)
        ),
        stopped_here=stopped[step.id],
    )


def _lab_report(
    facts: ReportFacts, lab: Lab, cells: dict[Key, _Cell], lang: str
) -> tuple[LabReport, dict[str, Any]]:
    step_ids = [s.id for s in lab.steps]
    started: dict[int, dt.datetime] = {}
    stopped: Counter[str] = Counter()
    finished: dict[int, float] = {}
    stopped_at: dict[int, str] = {}
    for a, _name in facts.attendees:
        mine = [cells[(a, lab.id, s)] for s in step_ids if (a, lab.id, s) in cells]
        firsts = [c.first for c in mine if c.first is not None]
        if not firsts:
            continue
        started[a] = min(firsts)
        passes = {s: cells[(a, lab.id, s)].first_pass for s in step_ids if (a, lab.id, s) in cells}
        if all(passes.get(s) is not None for s in step_ids):
            last = max(t for t in passes.values() if t is not None)
            finished[a] = (last - started[a]).total_seconds()
        else:
            first_open = next(s for s in step_ids if passes.get(s) is None)
            stopped[first_open] += 1
            stopped_at[a] = first_open
    report = LabReport(
        id=lab.id,
        title=lab.spec.title.get(lang),
        started=len(started),
        finished=len(finished),
        time_to_finish_s=stat(list(finished.values())),
        steps=[_step_report(facts, lab, i, cells, stopped, lang) for i in range(len(lab.steps))],
    )
    return report, {"finished": set(finished), "stopped_at": stopped_at}


def _timelines(
    facts: ReportFacts, cells: dict[Key, _Cell], per_lab: dict[str, dict[str, Any]], t0: dt.datetime | None
) -> list[AttendeeTimeline]:
    known = {(lab.id, s.id) for lab in facts.labs for s in lab.steps}
    entries: dict[int, list[tuple[dt.datetime, int, TimelineEntry]]] = defaultdict(list)

    def add(a: int, at: dt.datetime, order: int, **kw: str) -> None:
        t = (at - t0).total_seconds() if t0 else 0.0
        entries[a].append((at, order, TimelineEntry(at=at.isoformat(), t=round(t, 1), **kw)))  # type: ignore[arg-type]

    for (a, lab, step), at in facts.starts.items():
        if (lab, step) in known:
            add(a, at, 0, lab=lab, step=step, kind="opened")
    for (a, lab, step), at in facts.hints.items():
        if (lab, step) in known:
            add(a, at, 1, lab=lab, step=step, kind="hints")
    for run in facts.runs:
        if (run.lab, run.step) in known and run.status in (*ATTEMPT, "imported"):
            message = "" if run.status == "passed" else run.message.strip()[:MESSAGE_CHARS]
            add(
                run.attendee_id,
                run.at,
                2,
                lab=run.lab,
                step=run.step,
                kind="check",
                status=run.status,
                message=message,
            )
    out = []
    for a, name in facts.attendees:
        mine = sorted(entries.get(a, []), key=lambda e: (e[0], e[1]))
        out.append(
            AttendeeTimeline(
                id=a,
                name=name,
                steps_passed=sum(
                    1
                    for (who, lab, step), c in cells.items()
                    if who == a and c.first_pass and (lab, step) in known
                ),
                labs_finished=[lab.id for lab in facts.labs if a in per_lab[lab.id]["finished"]],
                stopped_at=[
                    f"{lab.id}/{per_lab[lab.id]['stopped_at'][a]}"
                    for lab in facts.labs
                    if a in per_lab[lab.id]["stopped_at"]
                ],
                entries=[e[2] for e in mine[:MAX_TIMELINE]],
                entries_truncated=len(mine) > MAX_TIMELINE,
            )
        )
    return out


def build_report(facts: ReportFacts, *, lang: str = "en") -> ReportPublic:
    """The report of ``facts`` (pure; definitions in the module docstring)."""
    cells = _cells(facts)
    firsts = [c.first for c in cells.values() if c.first is not None]
    t0 = min(firsts) if firsts else None
    labs: list[LabReport] = []
    per_lab: dict[str, dict[str, Any]] = {}
    for lab in facts.labs:
        report, extra = _lab_report(facts, lab, cells, lang)
        labs.append(report)
        per_lab[lab.id] = extra
    ev = facts.event
    return ReportPublic(
        event=EventRef(id=ev.id, title=ev.title, code=ev.code),
        generated_at=facts.now.isoformat(),
        t0=t0.isoformat() if t0 else None,
        attendees=len(facts.attendees),
        labs=labs,
        timelines=_timelines(facts, cells, per_lab, t0),
    )


def event_report(ctx: AppContext, session: Session, event: Event, *, lang: str = "en") -> ReportPublic:
    """Load and build the report of ``event``."""
    return build_report(load_report_facts(ctx, session, event), lang=lang)
