"""Who on an event's staff may do what: the one table of role -> permitted actions, and the pure
decision over it. Nothing here reads a request or the database; the one dependency that enforces
it is :func:`labserver.routes.deps.require` (HTTP, SSE) and its WebSocket twin ``authorize``.

A person holds **grants**: a role, on one event or on every event (``event_id`` None). A grant on
every event is also what the server-wide actions (creating an event, the admission limit,
``/metrics``) ask for, so only an organiser of every event (the operator's first account, the
bootstrap token) may take them.

========================  =========  ==========  =========  ==========================================
action                    assistant  instructor  organiser  routes (what it guards)
========================  =========  ==========  =========  ==========================================
``view``                  yes        yes         yes        the event, grid, summary, stuck list, live
                                                            stream, gallery, joins list, drill-down,
                                                            help queue, shares, audit log, staff list
``help``                  yes        yes         yes        claim / resolve a raised hand
``share``                 yes        yes         yes        ask to share, end a share, type on an
                                                            accepted share (the attendee consents)
``terminal.view``         yes        yes         yes        read-only terminal view, recordings
``pace``                  no         yes         yes        pacing locks
``broadcast``             no         yes         yes        announcements
``reset``                 no         yes         yes        reset a lab, restart, recreate
``stop-all``              no         yes         yes        stop every environment of the event
``reveal``                no         yes         yes        copy a step's solution to an attendee
``report``                no         yes         yes        the post-event report and its downloads
``export``                no         yes         yes        CSV / JSON / zip, the audit log's CSV
``remove-attendee``       no         yes         yes        remove an attendee for good
``edit``                  no         no          yes        the event's fields, status, join codes
``staff``                 no         no          yes        add and remove the event's staff
``create-event``          no         no          every      a new event (server scope)
``server``                no         no          every      admission limit, ``/metrics`` (server
                                                            scope)
========================  =========  ==========  =========  ==========================================

"every": only a grant on every event gives it. Actions marked in :data:`AUDITED` write one line to
the event's audit log each time they succeed (:mod:`labserver.services.staff.audit`)."""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass


class Role(enum.StrEnum):
    assistant = "assistant"
    instructor = "instructor"
    organiser = "organiser"


class Action(enum.StrEnum):
    view = "view"
    help = "help"
    share = "share"
    terminal_view = "terminal.view"
    pace = "pace"
    broadcast = "broadcast"
    reset = "reset"
    stop_all = "stop-all"
    reveal = "reveal"
    report = "report"
    export = "export"
    remove_attendee = "remove-attendee"
    edit = "edit"
    staff = "staff"
    create_event = "create-event"
    server = "server"


_ASSISTANT = frozenset({Action.view, Action.help, Action.share, Action.terminal_view})
_INSTRUCTOR = _ASSISTANT | {
    Action.pace,
    Action.broadcast,
    Action.reset,
    Action.stop_all,
    Action.reveal,
    Action.report,
    Action.export,
    Action.remove_attendee,
}
_ORGANISER = _INSTRUCTOR | {Action.edit, Action.staff, Action.create_event, Action.server}

#: THE table (module docstring): what each role may do
PERMITS: dict[Role, frozenset[Action]] = {
    Role.assistant: _ASSISTANT,
    Role.instructor: frozenset(_INSTRUCTOR),
    Role.organiser: frozenset(_ORGANISER),
}

#: actions with no event: only a grant on every event gives them
SERVER_SCOPE = frozenset({Action.create_event, Action.server})

#: actions that change an attendee's environment, work or view, or the staff: each success is a
#: line in the event's audit log
AUDITED = frozenset(
    {
        Action.help,
        Action.share,
        Action.pace,
        Action.broadcast,
        Action.reset,
        Action.stop_all,
        Action.reveal,
        Action.report,
        Action.export,
        Action.remove_attendee,
        Action.edit,
        Action.staff,
    }
)


@dataclass(frozen=True)
class Grant:
    role: Role
    event_id: int | None  # None: every event (and the server-wide actions)


def may(grants: Iterable[Grant], action: Action, event_id: int | None) -> bool:
    """Whether ``grants`` allow ``action`` on ``event_id``. A grant on one event never reaches
    another, nor a server-scope action. ``event_id`` None for an event-scoped action is a list
    over events (``GET /api/v1/events``, the events page): some role that allows it is enough, and
    the list shows only :func:`events_seen`."""
    for grant in grants:
        if action not in PERMITS[grant.role]:
            continue
        if grant.event_id is None:
            return True
        if action in SERVER_SCOPE:
            continue
        if event_id is None or grant.event_id == event_id:
            return True
    return False


def role_on(grants: Iterable[Grant], event_id: int | None) -> Role | None:
    """The strongest role ``grants`` give on ``event_id`` (for the audit log and the pages)."""
    order = list(Role)
    best: Role | None = None
    for grant in grants:
        reaches = grant.event_id is None or grant.event_id == event_id
        if reaches and (best is None or order.index(grant.role) > order.index(best)):
            best = grant.role
    return best


def allowed(grants: Iterable[Grant], event_id: int | None) -> list[str]:
    """Every action ``grants`` allow on ``event_id``, sorted (the pages hide the others' buttons)."""
    grants = list(grants)
    return sorted(a.value for a in Action if may(grants, a, event_id))


def events_seen(grants: Iterable[Grant]) -> set[int] | None:
    """The events ``grants`` reach (None: every event)."""
    out: set[int] = set()
    for grant in grants:
        if grant.event_id is None:
            return None
        out.add(grant.event_id)
    return out


@dataclass(frozen=True)
class Principal:
    """Who a staff request comes from: a signed-in person, or the bootstrap token (``staff_id`` None,
    an organiser of every event)."""

    name: str
    grants: tuple[Grant, ...]
    staff_id: int | None = None
    key: str = ""  # the session's key (its SHA-256), or "token:<tag>" for the bootstrap token
