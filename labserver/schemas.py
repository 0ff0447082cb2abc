"""Public response models of the JSON API (``response_model=`` on every route), so the served OpenAPI
(``/api/v1/openapi.json``) describes every answer.

One model per thing the API hands out, built by one function from the row or the service result
(``EnvironmentPublic.of(row)``, ``CheckRunPublic.of(run)``, ...): a handler never builds a response
dict by hand, and one environment row has one serializer for attendees and instructors alike.
Field names are the wire names the pages' JavaScript reads; they may grow, never silently change.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from labserver.content import Lab, Step
from labserver.content.markdown import render
from labserver.i18n import gettext
from labserver.models import (
    Announcement,
    Attendee,
    AuditEntry,
    CheckRun,
    Environment,
    Event,
    HelpRequest,
    Staff,
)
from labserver.terminals.recorder import RecordingFile
from labserver.terminals.sharing import Share


class _Out(BaseModel):
    model_config = ConfigDict(populate_by_name=True)


def _iso(t: dt.datetime | None) -> str | None:
    return t.isoformat() if t is not None else None


def _aware_iso(t: dt.datetime) -> str:
    return (t if t.tzinfo else t.replace(tzinfo=dt.UTC)).isoformat()


# -- generic ----------------------------------------------------------------------------------------
class StatusPublic(_Out):
    """A plain acknowledgement (``{"status": "ok"}``)."""

    status: str


class ErrorPublic(_Out):
    """An error for people; ``code`` / ``reason`` is a short label for scripts."""

    detail: Any
    code: str | None = None


# -- events and attendees ---------------------------------------------------------------------------
class EventRef(_Out):
    id: int | None
    title: str
    code: str


class AttendeeRef(_Out):
    id: int | None
    name: str


class JoinPublic(_Out):
    """The attendee made by joining, the event, and the token (also set as a cookie)."""

    attendee: AttendeeRef
    event: EventRef
    token: str


class MePublic(_Out):
    attendee: AttendeeRef
    event: EventRef

    @classmethod
    def of(cls, attendee: Attendee, event: Event) -> MePublic:
        return cls(
            attendee=AttendeeRef(id=attendee.id, name=attendee.name),
            event=EventRef(id=event.id, title=event.title, code=event.code),
        )


class EventPublic(_Out):
    """An event as the instructor sees it (``attendees``: how many joined)."""

    id: int | None
    code: str
    title: str
    labs: list[str]
    status: str
    capacity: int
    starts_at: str | None
    ends_at: str | None
    backend: str
    image: str
    pace: dict[str, int]
    selfpaced: bool
    attendees: int = 0
    warm_pool: int | None = None  # None: the server's LABSERVER_DOCKER__WARM_POOL
    seats_only: bool = False  # joining needs a personal code (services/joining/seats.py)
    record_input: bool = False  # terminal recordings keep keystrokes too (labserver/terminals/recorder.py)

    @classmethod
    def of(cls, event: Event, attendees: int = 0) -> EventPublic:
        return cls(
            id=event.id,
            code=event.code,
            title=event.title,
            labs=list(event.labs),
            status=event.status,
            capacity=event.capacity,
            starts_at=_iso(event.starts_at),
            ends_at=_iso(event.ends_at),
            backend=event.backend,
            image=event.image,
            warm_pool=event.warm_pool,
            seats_only=event.seats_only,
            record_input=event.record_input,
            pace=dict(event.pace),
            selfpaced=event.selfpaced,
            attendees=attendees,
        )


class SeatsPublic(_Out):
    """Personal join codes of an event: how many were made and used; ``codes`` only in the answer
    that made them (they are stored hashed and never shown again)."""

    total: int
    used: int
    codes: list[str] = []


class AnnouncementPublic(_Out):
    id: int | None
    message: str
    author: str = ""
    created_at: str

    @classmethod
    def of(cls, row: Announcement) -> AnnouncementPublic:
        return cls(id=row.id, message=row.message, author=row.author, created_at=row.created_at.isoformat())


class PacePublic(_Out):
    """Unlocked steps per lab; a lab absent from the map is fully unlocked."""

    pace: dict[str, int]


# -- environments -----------------------------------------------------------------------------------
class AdmissionPublic(_Out):
    """Environment starts: allowed at once (``limit``), running now, waiting in the queue."""

    limit: int
    starting: int
    queued: int


class EnvironmentPublic(_Out):
    """An attendee's environment (``state`` is ``none`` before the first one is made)."""

    state: str
    message: str = ""
    id: str | None = None
    reason: str | None = None
    backend: str | None = None
    node: str | None = None
    device: str | None = None
    emulated: bool | None = None
    updated_at: str | None = None

    @classmethod
    def of(cls, row: Environment | None) -> EnvironmentPublic:
        if row is None:
            return cls(state="none")
        device = row.device or ""
        return cls(
            id=row.id,
            state=row.state,
            message=row.message,
            reason=row.reason,
            backend=row.backend,
            node=row.node,
            device=device,
            emulated=device in ("", "cpu", "cpu-emu"),
            updated_at=row.updated_at.isoformat(),
        )


class ResetPublic(_Out):
    status: str = "reset"
    lab: str
    backup: str  # workspace-relative folder holding the old files


class RestartedPublic(EnvironmentPublic):
    """The environment after an instructor's restart or recreate."""


class RevealPublic(_Out):
    status: str = "revealed"
    files: list[str]


class StopAllPublic(_Out):
    """What "stop all environments" did: the environments stopped (each also published
    ``env.state`` = ``stopped``) and those that could not be stopped, with why."""

    stopped: list[str]
    failed: dict[str, str] = {}


# -- labs, steps, progress --------------------------------------------------------------------------
class TalkPublic(_Out):
    title: str
    speaker: str


class StepProgressPublic(_Out):
    id: str
    status: str  # not-started | working | failing | passed | error
    attempts: int
    passed_at: str | None
    last_message: str
    locked: bool


class LabProgressPublic(_Out):
    lab: str
    passed: int
    total: int
    steps: list[StepProgressPublic]


class LabSummaryPublic(_Out):
    id: str
    title: str
    summary: str
    duration_min: int
    device: str
    talk: TalkPublic | None
    steps: int  # how many

    @classmethod
    def of(cls, lab: Lab, lang: str) -> LabSummaryPublic:
        spec = lab.spec
        return cls(
            id=lab.id,
            title=spec.title.get(lang),
            summary=spec.summary.get(lang),
            duration_min=spec.duration_min,
            device=spec.requires.device,
            talk=TalkPublic(title=spec.talk.title.get(lang), speaker=spec.talk.speaker)
            if spec.talk
            else None,
            steps=len(lab.steps),
        )


class LabListItem(LabSummaryPublic):
    """A lab of the event with the caller's progress."""

    available: bool = True
    progress: LabProgressPublic


class UnavailableLab(_Out):
    """A lab of the event whose files have a problem (shown, not usable)."""

    id: str
    title: str
    available: bool = False
    problem: str


class StepPublic(_Out):
    id: str
    index: int  # 1-based
    title: str
    locked: bool
    hints: list[str]
    html: str  # the instructions, rendered ("" while locked)

    @classmethod
    def of(cls, lab: Lab, step: Step, lang: str, locked: bool) -> StepPublic:
        return cls(
            id=step.id,
            index=step.index + 1,
            title=step.spec.title.get(lang),
            locked=locked,
            hints=[h.get(lang) for h in step.spec.hints],
            html=""
            if locked
            else render(
                step.instructions(lang),
                asset_base=f"/labs/{lab.id}/assets",
                run_label=gettext(lang, "Run in terminal"),
            ),
        )


class LabDetailPublic(_Out):
    id: str
    title: str
    summary: str
    duration_min: int
    device: str
    talk: TalkPublic | None
    steps: list[StepPublic]
    progress: LabProgressPublic


# -- files ------------------------------------------------------------------------------------------
class FilePublic(_Out):
    path: str  # relative to the lab folder
    dir: bool
    size: int
    mtime: float


class SavedPublic(_Out):
    status: str = "saved"
    etag: str
    size: int


class ConflictPublic(_Out):
    detail: str
    code: str = "conflict"
    etag: str  # of the file on disk


# -- checks -----------------------------------------------------------------------------------------
class CheckRunPublic(_Out):
    """One check run: its verdict, the checker's log (capped) and timing."""

    id: int | None
    lab: str
    step: str
    status: str  # running | passed | failed | error | timeout | not_gradable (the platform's fault) | interrupted | imported
    message: str
    hints: list[str]
    metrics: dict[str, Any]
    tables: list[dict[str, Any]]  # [{title, columns, rows}]: plain-text cells, shown as text
    log: str
    log_truncated: bool
    exit_code: int | None
    duration_s: float
    cpu_s: float | None  # what the check cost in CPU seconds (a figure; None: not known)
    created_at: str
    finished_at: str | None

    @classmethod
    def of(cls, run: CheckRun) -> CheckRunPublic:
        return cls(
            id=run.id,
            lab=run.lab_id,
            step=run.step_id,
            status=run.status,
            message=run.message,
            hints=list(run.hints),
            metrics=dict(run.metrics),
            tables=list(run.tables or []),
            log=run.log,
            log_truncated=run.log_truncated,
            exit_code=run.exit_code,
            duration_s=round(run.duration_s, 3),
            cpu_s=None if run.cpu_s is None else round(run.cpu_s, 3),
            created_at=run.created_at.isoformat(),
            finished_at=_iso(run.finished_at),
        )


# -- help -------------------------------------------------------------------------------------------
class HelpPublic(_Out):
    """A raised hand."""

    id: int | None
    state: str  # open | claimed | resolved | cancelled
    lab: str
    step: str
    note: str
    claimed_by: str
    created_at: str

    @classmethod
    def of(cls, h: HelpRequest) -> HelpPublic:
        return cls(
            id=h.id,
            state=h.state,
            lab=h.lab_id,
            step=h.step_id,
            note=h.note,
            claimed_by=h.claimed_by,
            created_at=h.created_at.isoformat(),
        )


class HelpQueueItem(HelpPublic):
    """A raised hand in the instructor's queue, with who and how long they have waited."""

    attendee_id: int
    name: str
    waiting_s: int

    @classmethod
    def queued(cls, h: HelpRequest, name: str, now: dt.datetime) -> HelpQueueItem:
        created = h.created_at if h.created_at.tzinfo else h.created_at.replace(tzinfo=dt.UTC)
        return cls(
            **HelpPublic.of(h).model_dump(exclude={"created_at"}),
            created_at=_aware_iso(h.created_at),
            attendee_id=h.attendee_id,
            name=name,
            waiting_s=round(max(0.0, (now - created).total_seconds())),
        )


# -- the room (instructor) --------------------------------------------------------------------------
class StuckPublic(_Out):
    attendee_id: int
    name: str
    lab: str
    step: str
    reasons: list[str]  # slow and/or failing
    seconds_on_step: int
    typical_s: int | None
    failures_in_a_row: int


class StepCountsPublic(_Out):
    """How many attendees are in each status on one step, and the funnel figure ``reached``."""

    lab: str
    step: str
    not_started: int = Field(alias="not-started")
    working: int
    failing: int
    passed: int
    error: int
    reached: int
    total: int


class SummaryPublic(_Out):
    steps: list[StepCountsPublic]
    stuck: list[StuckPublic]
    attendees: int


class GridLab(_Out):
    id: str
    title: str
    unlocked: int | None
    steps: list[list[str]]  # [step id, title]


class GridPublic(_Out):
    """The progress grid, compact: ``cells`` are ``[attendee_id, column, status, attempts, t0, t1]``
    (see :mod:`labserver.services.dashboard.room`)."""

    event: EventRef
    base: int
    now: int
    labs: list[GridLab]
    columns: list[list[str]]
    attendees: list[list[Any]]  # [id, name, environment state]
    cells: list[list[Any]]


class ExportRow(_Out):
    attendee: str
    attendee_id: int | None
    lab: str
    step: str
    status: str
    passed_at: str | None
    attempts: int
    time_spent_s: int


class ExportPublic(_Out):
    event: EventPublic
    results: list[ExportRow]


class AttendeeInfo(_Out):
    id: int | None
    name: str
    joined_at: str


class AttendeeDetailPublic(_Out):
    """One attendee, drilled down: environment, every check run, help requests, stuck flags."""

    attendee: AttendeeInfo
    environment: EnvironmentPublic
    runs: list[CheckRunPublic]
    help: list[HelpPublic]
    stuck: list[StuckPublic]
    cells: list[list[Any]]


# -- progress files ---------------------------------------------------------------------------------
class ImportReportPublic(_Out):
    imported: list[str]  # lab/step newly recorded (as ``status``)
    status: str  # passed (own file on a self-paced server) | imported
    trust: str  # own (signed here for me) | foreign
    locked: list[str]  # lab/step pacing has locked: not imported
    already: list[str]
    skipped: list[str]
    restored_labs: list[str]
    backups: dict[str, str]


# -- non-JSON answers, for OpenAPI ------------------------------------------------------------------
# -- the post-event report (services/reporting/report.py) and completion records (services/reporting/completion.py) -----
class Stat(_Out):
    """Seconds (or counts): ``median`` (the middle value, mean of the two middle ones), ``p90``
    (nearest rank), ``max``, over ``n`` values; null when ``n`` is 0."""

    n: int
    median: float | None = None
    p90: float | None = None
    max: float | None = None


class MessageGroup(_Out):
    """Check messages that share one template (numbers and quoted names replaced, see
    :func:`labserver.services.reporting.report.message_template`)."""

    template: str
    count: int  # runs
    attendees: int
    example: str  # one message as the checker wrote it


class StepReport(_Out):
    id: str
    title: str
    index: int  # 1-based
    reached: int  # attendees with any activity here, or a pass of a later step of the lab
    attempted: int  # attendees with at least one finished check
    passed: int
    time_to_pass_s: Stat  # from the first activity on the step to its first pass
    attempts_before_pass: Stat  # finished checks before the first pass (0: passed at once)
    failed_runs: int
    top_failures: list[MessageGroup]
    error_runs: int  # checker errors and timeouts: a fault, not the attendee's
    errors: list[MessageGroup]
    not_gradable_runs: int  # runs with the status ``not_gradable`` (when the server has it)
    not_gradable: list[MessageGroup]
    hints_opened: int  # attendees who opened the hints
    hints_before_pass: int  # of those who passed: opened the hints first
    stopped_here: int  # started the lab, did not finish it, and this is their first step not passed


class LabReport(_Out):
    id: str
    title: str
    started: int  # attendees with any activity in the lab
    finished: int  # every step passed
    time_to_finish_s: Stat  # from the first activity in the lab to the last first pass
    steps: list[StepReport]


class TimelineEntry(_Out):
    at: str  # ISO time
    t: float  # seconds since the report's ``t0``
    lab: str
    step: str
    kind: str  # opened | hints | check
    status: str = ""  # of a check: passed | failed | error | timeout | not_gradable | imported
    message: str = ""  # of a check that did not pass (first 200 characters)


class AttendeeTimeline(_Out):
    id: int
    name: str
    steps_passed: int
    labs_finished: list[str]
    stopped_at: list[str]  # "lab/step" where they stopped, per lab started and not finished
    entries: list[TimelineEntry]
    entries_truncated: bool = False


class ReportPublic(_Out):
    """The post-event report of one event (docs/report.md)."""

    format: str = "labserver-report"
    schema_version: int = 1
    event: EventRef
    generated_at: str
    t0: str | None  # the first activity of the event
    attendees: int
    labs: list[LabReport]
    timelines: list[AttendeeTimeline]


class CompletionKeyPublic(_Out):
    """The public key that signs the event's completion records (``labserver verify --key``)."""

    alg: str
    key_id: str
    public_key: str  # base64 of the raw 32-byte Ed25519 public key


class CompletionFile(_Out):
    path: str  # relative to the lab folder
    size: int
    sha256: str | None  # null: too big to hash (services/grading/check_files.py)


class CompletionStep(_Out):
    id: str
    title: str
    started_at: str
    passed_at: str  # the first passing check run
    attempts: int  # finished checks up to and including that pass
    hints_opened: bool
    run_id: int
    files: list[CompletionFile]


class CompletionLab(_Out):
    id: str
    title: str
    steps: int


class CompletionSignature(_Out):
    alg: str  # Ed25519
    key_id: str
    public_key: str  # base64, 32 bytes
    value: str  # base64, 64 bytes, over the canonical JSON without "signature"


class CompletionRecordPublic(_Out):
    """A signed completion record (services/reporting/completion.py, docs/report.md)."""

    format: str
    schema_version: int
    issued_at: str
    labserver_version: str
    event: EventRef
    attendee: AttendeeRef
    lab: CompletionLab
    started_at: str
    finished_at: str
    steps: list[CompletionStep]
    signature: CompletionSignature


class HintsOpenedPublic(_Out):
    first: bool  # the first time this attendee opened these hints


# -- help with consent ------------------------------------------------------------------------------
class SharePublic(_Out):
    """A request to share an attendee's terminal (labserver/terminals/sharing.py): ``state`` is ``asked``
    (waiting for the attendee), ``active`` (the instructor may type) or ``ended``."""

    id: int
    attendee_id: int
    help_id: int
    lab: str
    by: str
    state: str
    ended_by: str = ""
    env_id: str

    @classmethod
    def of(cls, share: Share) -> SharePublic:
        return cls(
            id=share.id,
            attendee_id=share.attendee_id,
            help_id=share.help_id,
            lab=share.lab,
            by=share.by,
            state=str(share.state),
            ended_by=share.ended_by,
            env_id=share.env_id,
        )


# -- terminal recordings ----------------------------------------------------------------------------
class RecordingPublic(_Out):
    """One terminal recording (asciicast v2): ``url`` plays it, ``download_url`` saves it."""

    id: str
    lab: str
    started_at: str
    bytes: int
    url: str
    download_url: str

    @classmethod
    def of(cls, rec: RecordingFile, base: str) -> RecordingPublic:
        url = f"{base}/{rec.id}"
        return cls(
            id=rec.id,
            lab=rec.lab,
            started_at=_aware_iso(rec.started_at),
            bytes=rec.bytes,
            url=url,
            download_url=url + "?download=1",
        )


def media(media_type: str, description: str, schema: dict[str, Any] | None = None) -> dict[int | str, Any]:
    """``responses=`` for a route whose 200 answer is not JSON (a file, CSV, SVG, a stream)."""
    return {
        200: {
            "description": description,
            "content": {media_type: {"schema": schema or {"type": "string"}}},
        }
    }


def json_file(model: type[BaseModel], description: str) -> dict[int | str, Any]:
    """``responses=`` for a JSON answer sent as an attachment (a custom ``Response``)."""
    return {200: {"description": description, "model": model}}


SSE = media("text/event-stream", "Server-Sent Events (see docs/architecture.md, live event kinds)")


# -- staff (services/staff/) ------------------------------------------------------------------------
class RolePublic(_Out):
    role: str  # organiser | instructor | assistant
    event_id: int | None  # null: every event


class StaffPublic(_Out):
    """A staff member and their roles (those that reach the event asked about)."""

    id: int
    name: str
    email: str = ""
    roles: list[RolePublic]

    @classmethod
    def of(cls, staff: Staff, grants: list[Any]) -> StaffPublic:
        """``grants``: :class:`labserver.services.staff.roles.Grant` (role, event_id)."""
        roles = [RolePublic(role=str(g.role), event_id=g.event_id) for g in grants]
        return cls(id=staff.id or 0, name=staff.name, email=staff.email, roles=roles)


class StaffAdded(_Out):
    """A person given a role: their one-time sign-in ``link`` (or ``password``), shown this once."""

    staff: StaffPublic
    link: str = ""
    password: str = ""
    expires_in_hours: float | None = None


class StaffMe(_Out):
    """Who is signed in: ``staff_id`` null for the bootstrap instructor token."""

    name: str
    staff_id: int | None
    roles: list[RolePublic]
    #: the actions allowed on ``?event=`` (services/staff/roles.py), when it was given
    allowed: list[str] = Field(default_factory=list)


class AuditPublic(_Out):
    """One line of an event's audit log (services/staff/audit.py)."""

    id: int
    at: str
    actor: str
    actor_id: int | None
    role: str
    action: str
    target: str
    attendee_id: int | None
    detail: dict[str, Any]

    @classmethod
    def of(cls, row: AuditEntry) -> AuditPublic:
        data = row.model_dump(include={"actor", "actor_id", "role", "action", "target", "attendee_id"})
        return cls(id=row.id or 0, at=_aware_iso(row.at), detail=dict(row.detail), **data)
