"""SQLModel tables. Families follow ``XBase / X(table=True) / XPublic``; data helpers live in
``labserver/services/`` and take keyword arguments.

Times are aware UTC from :mod:`labserver.clock`. JSON columns hold small lists/dicts only."""

from __future__ import annotations

import datetime as dt
import enum
from typing import Any

from sqlalchemy import JSON, Column, Text, UniqueConstraint
from sqlmodel import Field, SQLModel

from labserver import clock


def _now() -> dt.datetime:
    return clock.now()


class EventStatus(enum.StrEnum):
    open = "open"  # attendees may join
    closed = "closed"  # running, joining closed
    archived = "archived"


class Event(SQLModel, table=True):
    __tablename__ = "events"
    id: int | None = Field(default=None, primary_key=True)
    code: str = Field(index=True, unique=True, max_length=64)
    title: str = Field(max_length=200)
    labs: list[str] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    status: str = Field(default=EventStatus.open, max_length=16)
    capacity: int = 0  # 0 = unlimited
    starts_at: dt.datetime | None = None
    ends_at: dt.datetime | None = None
    backend: str = Field(default="", max_length=32)  # "" = the server's default backend
    image: str = Field(default="", max_length=200)
    # ready environments kept for the event (its expected head count); None = DOCKER__WARM_POOL
    warm_pool: int | None = None
    # pacing: {lab_id: number of unlocked steps}; a lab absent from the map is fully unlocked
    pace: dict[str, int] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    selfpaced: bool = False
    # joining needs a personal code (a Seat) instead of the event code
    seats_only: bool = False
    # terminal recordings keep the attendees' keystrokes too (labserver/terminals/recorder.py; off: output only)
    record_input: bool = False
    created_at: dt.datetime = Field(default_factory=_now)


class Seat(SQLModel, table=True):
    """A personal join code: used once, by one attendee (services/joining/seats.py). Only its hash is kept."""

    __tablename__ = "seats"
    id: int | None = Field(default=None, primary_key=True)
    event_id: int = Field(foreign_key="events.id", index=True)
    code_hash: str = Field(index=True, unique=True, max_length=64)
    attendee_id: int | None = Field(default=None, index=True)
    created_at: dt.datetime = Field(default_factory=_now)


class Attendee(SQLModel, table=True):
    __tablename__ = "attendees"
    __table_args__ = (UniqueConstraint("event_id", "name"),)
    id: int | None = Field(default=None, primary_key=True)
    event_id: int = Field(foreign_key="events.id", index=True)
    name: str = Field(max_length=80)
    token_hash: str = Field(index=True, max_length=64)
    lang: str = Field(default="", max_length=8)
    created_at: dt.datetime = Field(default_factory=_now)
    last_seen_at: dt.datetime = Field(default_factory=_now)


class Environment(SQLModel, table=True):
    __tablename__ = "environments"
    id: str = Field(primary_key=True, max_length=80)  # deterministic env id
    event_id: int = Field(foreign_key="events.id", index=True)
    attendee_id: int = Field(foreign_key="attendees.id", index=True, unique=True)
    backend: str = Field(max_length=32)
    state: str = Field(default="pending", max_length=16)
    ref: str = Field(default="", sa_column=Column(Text, nullable=False, default=""))  # EnvRef JSON
    node: str = Field(default="", max_length=120)
    device: str = Field(default="", max_length=32)
    message: str = Field(default="", max_length=500)
    reason: str = Field(default="", max_length=40)
    created_at: dt.datetime = Field(default_factory=_now)
    updated_at: dt.datetime = Field(default_factory=_now)


class CheckStatus(enum.StrEnum):
    running = "running"
    passed = "passed"
    failed = "failed"
    error = "error"
    timeout = "timeout"
    interrupted = (
        "interrupted"  # the server restarted mid-check: not an attempt (services/operations/recovery.py)
    )
    imported = (
        "imported"  # from a progress file this server cannot vouch for (services/reporting/progress_io.py)
    )
    not_gradable = (
        "not_gradable"  # the platform could not run it: not an attempt (services/grading/not_gradable.py)
    )


#: runs that are no attempt: not counted in the grid, the export or the stuck detector
NOT_ATTEMPTS = (CheckStatus.running, CheckStatus.interrupted, CheckStatus.not_gradable)


class CheckRun(SQLModel, table=True):
    __tablename__ = "check_runs"
    id: int | None = Field(default=None, primary_key=True)
    event_id: int = Field(foreign_key="events.id", index=True)
    attendee_id: int = Field(foreign_key="attendees.id", index=True)
    lab_id: str = Field(max_length=64, index=True)
    step_id: str = Field(max_length=64)
    status: str = Field(default=CheckStatus.running, max_length=16)
    message: str = Field(default="", sa_column=Column(Text, nullable=False, default=""))
    hints: list[str] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    metrics: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    # the verdict's tables (labserver.checks.verdict.Verdict.tables): plain-text cells
    tables: list[dict[str, Any]] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    log: str = Field(default="", sa_column=Column(Text, nullable=False, default=""))
    log_truncated: bool = False
    exit_code: int | None = None
    duration_s: float = 0.0
    # CPU seconds the check cost: what its checker reported (labserver.checks.verdict), else what
    # the backend measured (a timeout reports nothing); a figure for the costs, never a judgement
    cpu_s: float | None = None
    created_at: dt.datetime = Field(default_factory=_now)
    finished_at: dt.datetime | None = None


class StepStart(SQLModel, table=True):
    """When an attendee first opened a step (for time-on-step and stuck detection)."""

    __tablename__ = "step_starts"
    __table_args__ = (UniqueConstraint("attendee_id", "lab_id", "step_id"),)
    id: int | None = Field(default=None, primary_key=True)
    attendee_id: int = Field(foreign_key="attendees.id", index=True)
    lab_id: str = Field(max_length=64)
    step_id: str = Field(max_length=64)
    started_at: dt.datetime = Field(default_factory=_now)


class HelpState(enum.StrEnum):
    open = "open"
    claimed = "claimed"
    resolved = "resolved"
    cancelled = "cancelled"


class HelpRequest(SQLModel, table=True):
    __tablename__ = "help_requests"
    id: int | None = Field(default=None, primary_key=True)
    event_id: int = Field(foreign_key="events.id", index=True)
    attendee_id: int = Field(foreign_key="attendees.id", index=True)
    lab_id: str = Field(default="", max_length=64)
    step_id: str = Field(default="", max_length=64)
    note: str = Field(default="", max_length=1000)
    state: str = Field(default=HelpState.open, max_length=16)
    claimed_by: str = Field(default="", max_length=80)
    created_at: dt.datetime = Field(default_factory=_now)
    claimed_at: dt.datetime | None = None
    resolved_at: dt.datetime | None = None


class Announcement(SQLModel, table=True):
    __tablename__ = "announcements"
    id: int | None = Field(default=None, primary_key=True)
    event_id: int = Field(foreign_key="events.id", index=True)
    message: str = Field(sa_column=Column(Text, nullable=False))
    author: str = Field(default="", max_length=80)
    created_at: dt.datetime = Field(default_factory=_now)


class Node(SQLModel, table=True):
    """A Docker engine (or Kubernetes pool) environments are placed on."""

    __tablename__ = "nodes"
    id: int | None = Field(default=None, primary_key=True)
    name: str = Field(unique=True, max_length=120)
    url: str = Field(max_length=300)
    kind: str = Field(default="cpu", max_length=32)  # cpu | npu | npu-simulated
    cpus: float = 0.0
    memory_mb: int = 0
    cards: list[int] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    healthy: bool = True
    updated_at: dt.datetime = Field(default_factory=_now)


class HintOpen(SQLModel, table=True):
    """The first time an attendee opened a step's hints (services/reporting/hints.py; the post-event report)."""

    __tablename__ = "hint_opens"
    __table_args__ = (UniqueConstraint("attendee_id", "lab_id", "step_id"),)
    id: int | None = Field(default=None, primary_key=True)
    event_id: int = Field(foreign_key="events.id", index=True)
    attendee_id: int = Field(foreign_key="attendees.id", index=True)
    lab_id: str = Field(max_length=64)
    step_id: str = Field(max_length=64)
    opened_at: dt.datetime = Field(default_factory=_now)


class CheckFiles(SQLModel, table=True):
    """Digests of the lab folder a passing check judged (services/grading/check_files.py): ``files`` is a
    list of ``{"path", "size", "sha256"}`` (``sha256`` null for a file too big to hash)."""

    __tablename__ = "check_files"
    # the run's id, no foreign key on purpose: whatever deletes check runs (removing an attendee,
    # a test losing the room's runs) need not know of this table; a row without its run is never read
    run_id: int = Field(primary_key=True)
    files: list[dict[str, Any]] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))


class Staff(SQLModel, table=True):
    """A person on the staff (services/staff/accounts.py): signs in as themselves with a one-time
    link, a password (stored as a scrypt hash) or the organisation's OpenID Connect provider."""

    __tablename__ = "staff"
    id: int | None = Field(default=None, primary_key=True)
    name: str = Field(unique=True, max_length=80)
    email: str = Field(default="", max_length=200, index=True)
    password_hash: str = Field(default="", max_length=200)  # "" = no password sign-in
    oidc_subject: str = Field(default="", max_length=300, index=True)  # "<issuer> <sub>" once seen
    created_at: dt.datetime = Field(default_factory=_now)
    removed_at: dt.datetime | None = None  # removed: every session, stream and share ended


class StaffRole(SQLModel, table=True):
    """A grant: ``role`` on one event, or on every event (``event_id`` null; services/staff/roles.py)."""

    __tablename__ = "staff_roles"
    id: int | None = Field(default=None, primary_key=True)
    staff_id: int = Field(foreign_key="staff.id", index=True)
    event_id: int | None = Field(default=None, foreign_key="events.id", index=True)
    role: str = Field(max_length=16)
    source: str = Field(default="operator", max_length=16)  # operator | oidc (replaced at each sign-in)
    created_at: dt.datetime = Field(default_factory=_now)


class StaffSession(SQLModel, table=True):
    """A signed-in browser (or script) of a staff member; the cookie carries the secret, the row its
    SHA-256 (``id``). Ended by signing out, by expiry, or when the person is removed."""

    __tablename__ = "staff_sessions"
    id: str = Field(primary_key=True, max_length=64)
    staff_id: int = Field(foreign_key="staff.id", index=True)
    via: str = Field(default="", max_length=16)  # link | password | oidc
    created_at: dt.datetime = Field(default_factory=_now)
    expires_at: dt.datetime
    ended_at: dt.datetime | None = None


class StaffLink(SQLModel, table=True):
    """A one-time sign-in link (``labserver staff add`` / ``link``, the staff card): its SHA-256 only."""

    __tablename__ = "staff_links"
    id: str = Field(primary_key=True, max_length=64)
    staff_id: int = Field(foreign_key="staff.id", index=True)
    created_at: dt.datetime = Field(default_factory=_now)
    expires_at: dt.datetime
    used_at: dt.datetime | None = None


class AuditEntry(SQLModel, table=True):
    """One staff action on an event (services/staff/audit.py): who, when, what, on whom. Kept with
    the event: an attendee's removal keeps the lines about them (no foreign key to attendees)."""

    __tablename__ = "audit_log"
    id: int | None = Field(default=None, primary_key=True)
    event_id: int = Field(foreign_key="events.id", index=True)
    at: dt.datetime = Field(default_factory=_now)
    actor: str = Field(max_length=80)
    actor_id: int | None = None  # the staff member; null: the bootstrap token
    role: str = Field(default="", max_length=16)
    action: str = Field(max_length=32)
    target: str = Field(default="", max_length=300)
    attendee_id: int | None = None
    detail: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
