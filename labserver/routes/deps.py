"""``Annotated`` dependency aliases: the only way handlers get the context, a DB session, the
current attendee, or a staff member's right to act (:func:`require`, the one authorization of
every staff route, and :func:`authorize_ws`, its WebSocket twin)."""

from __future__ import annotations

import hmac
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Annotated, Any, NamedTuple
from urllib.parse import quote

from fastapi import Depends, HTTPException, Path, Query, Request, WebSocket
from itsdangerous import BadSignature, URLSafeTimedSerializer
from sqlmodel import Session

from labserver.db import release
from labserver.i18n import gettext, pick_lang
from labserver.models import Attendee, Environment, Event, HelpRequest, Staff
from labserver.observability import logging_json
from labserver.services.context import AppContext
from labserver.services.joining.events import attendee_for_token
from labserver.services.staff import accounts
from labserver.services.staff.audit import Acting, record
from labserver.services.staff.roles import AUDITED, Action, Principal, may, role_on

#: the largest id a database row can have (a signed 64-bit integer): a bigger one in a path is a 422
#: that says the range, never an overflow in the database driver (a 500)
ID_MAX = 2**63 - 1
DbId = Annotated[int, Path(ge=1, le=ID_MAX, description="A database id (1 to 2^63-1)")]
DbIdQuery = Annotated[int | None, Query(ge=1, le=ID_MAX, description="A database id (1 to 2^63-1)")]

ATTENDEE_COOKIE = "labserver_token"
INSTRUCTOR_COOKIE = "labserver_instructor"
LANG_COOKIE = "labserver_lang"


def get_ctx(request: Request) -> AppContext:
    return request.app.state.ctx  # type: ignore[no-any-return]


def get_ctx_ws(websocket: WebSocket) -> AppContext:
    return websocket.app.state.ctx  # type: ignore[no-any-return]


Ctx = Annotated[AppContext, Depends(get_ctx)]


def get_session(ctx: Ctx) -> Iterator[Session]:
    """The request's session, closed as soon as the handler returns (``scope="function"``), not after
    the response is sent. Services release it before slow work (``db.release``)."""
    with Session(ctx.engine, expire_on_commit=False) as session:
        yield session


SessionDep = Annotated[Session, Depends(get_session, scope="function")]


def token_from(headers: dict[str, str] | object, cookies: dict[str, str]) -> str:
    auth = getattr(headers, "get", lambda _k, _d=None: None)("authorization") or ""
    if auth.lower().startswith("bearer "):
        return str(auth[7:].strip())
    return cookies.get(ATTENDEE_COOKIE, "")


@dataclass
class Me:
    attendee: Attendee
    event: Event

    @property
    def id(self) -> int:
        assert self.attendee.id is not None
        return self.attendee.id


def resolve_attendee(session: Session, token: str) -> Me | None:
    """The attendee and event of ``token``; the session's connection is released before returning
    (the handler runs in another step: no connection may wait across it)."""
    attendee = attendee_for_token(session, token)
    event = session.get(Event, attendee.event_id) if attendee is not None else None
    release(session)
    if attendee is None or event is None:
        return None
    logging_json.bind(event_id=event.id, attendee_id=attendee.id)
    return Me(attendee, event)


def resolve_in_own_session(ctx: AppContext, token: str) -> Me | None:
    """:func:`resolve_attendee` in a short session of its own (streams and sockets, which outlive
    any request session). Blocking: call it in a worker thread, never in the event loop."""
    with Session(ctx.engine, expire_on_commit=False) as session:
        return resolve_attendee(session, token)


def current_attendee(request: Request, session: SessionDep) -> Me:
    me = resolve_attendee(session, token_from(request.headers, request.cookies))
    if me is None:
        raise HTTPException(401, "Join an event first: your attendee token is missing or unknown.")
    return me


CurrentAttendee = Annotated[Me, Depends(current_attendee)]


def optional_attendee(request: Request, session: SessionDep) -> Me | None:
    return resolve_attendee(session, token_from(request.headers, request.cookies))


OptionalAttendee = Annotated[Me | None, Depends(optional_attendee)]


# -- staff ------------------------------------------------------------------------------------------
def instructor_serializer(ctx: AppContext) -> URLSafeTimedSerializer:
    return URLSafeTimedSerializer(ctx.settings.ensure_secret_key(), salt="labserver-instructor")


def principal_from(
    ctx: AppContext, session: Session, headers: object, cookies: dict[str, str]
) -> Principal | None:
    """Who a staff request comes from: the bootstrap token as bearer (scripts) or in a signed
    cookie (its first sign-in), or a staff session's signed cookie; None for anyone else."""
    boot = accounts.bootstrap_key(ctx.settings)
    auth = getattr(headers, "get", lambda _k, _d=None: None)("authorization") or ""
    if (
        boot
        and auth.lower().startswith("bearer ")
        and hmac.compare_digest(auth[7:].strip().encode(), ctx.settings.instructor_token.encode())
    ):
        return accounts.bootstrap_principal("instructor", boot)
    cookie = cookies.get(INSTRUCTOR_COOKIE)
    if not cookie:
        return None
    try:
        data = instructor_serializer(ctx).loads(cookie, max_age=int(ctx.settings.staff.session_hours * 3600))
    except BadSignature:
        return None
    if not isinstance(data, dict):
        return None
    if "s" in data:
        return accounts.principal_of(session, str(data["s"]))
    if boot and hmac.compare_digest(str(data.get("t", "")), boot.removeprefix("token:")):
        return accounts.bootstrap_principal(str(data.get("name") or "instructor"), boot)
    return None


def make_instructor_cookie(ctx: AppContext, name: str) -> str:
    """The signed cookie of a sign-in with the bootstrap token (tied to the token: a new token
    ends it)."""
    return instructor_serializer(ctx).dumps(
        {"name": name, "t": accounts.token_tag(ctx.settings.instructor_token)}
    )


def make_staff_cookie(ctx: AppContext, secret: str) -> str:
    """The signed cookie of a staff session (its secret; the server keeps its SHA-256)."""
    return instructor_serializer(ctx).dumps({"s": secret})


def staff_secret(ctx: AppContext, cookies: dict[str, str]) -> str | None:
    cookie = cookies.get(INSTRUCTOR_COOKIE)
    if not cookie:
        return None
    try:
        data = instructor_serializer(ctx).loads(cookie)
    except BadSignature:
        return None
    return str(data["s"]) if isinstance(data, dict) and "s" in data else None


class Scope(NamedTuple):
    event_id: int | None
    target: str
    attendee_id: int | None


def _path_id(value: object) -> int:
    """A path id as the route's ``DbId`` will take it (this runs before the route's validation):
    a 422 that names the range for anything else, never an overflow in the database driver."""
    try:
        number = int(str(value))
    except ValueError:
        number = 0
    if not 1 <= number <= ID_MAX:
        raise HTTPException(422, f"A database id is a whole number from 1 to {ID_MAX} (2^63-1).")
    return number


def scope_of(ctx: AppContext, session: Session, params: dict[str, Any]) -> Scope:
    """The event a staff request acts on, from its path (``event_id``, or an environment's event),
    and whom (an attendee of that event, an environment's, a raised hand's, a share's). 404 for
    an environment that does not exist (nothing to scope it by)."""
    attendee_id: int | None = None
    event_id: int | None = None
    if "env_id" in params:
        row = session.get(Environment, str(params["env_id"])[:80])
        if row is None:
            raise HTTPException(404, f"No environment {params['env_id']}.")
        event_id, attendee_id = row.event_id, row.attendee_id
    elif "event_id" in params:
        event_id = _path_id(params["event_id"])
        if "attendee_id" in params:
            attendee_id = _path_id(params["attendee_id"])
        elif "help_id" in params:
            hand = session.get(HelpRequest, _path_id(params["help_id"]))
            attendee_id = hand.attendee_id if hand is not None and hand.event_id == event_id else None
        elif "share_id" in params:
            share = ctx.shares.get(_path_id(params["share_id"]))
            attendee_id = share.attendee_id if share is not None and share.event_id == event_id else None
    target = ""
    if attendee_id is not None:
        attendee = session.get(Attendee, attendee_id)
        if attendee is not None and attendee.event_id == event_id:
            target = f"{attendee.name} (#{attendee_id})"
        else:
            attendee_id = None
    elif "staff_id" in params:
        staff = session.get(Staff, _path_id(params["staff_id"]))
        target = f"staff {staff.name}" if staff is not None else f"staff #{params['staff_id']}"
    return Scope(event_id, target, attendee_id)


def refusal(lang: str, principal: Principal, action: Action, event_id: int | None) -> str:
    """Why ``principal`` may not take ``action``, in the page's language."""
    role = role_on(principal.grants, event_id)
    if role is None:
        return gettext(lang, "You are not on the staff of this event: ask its organiser to add you.")
    return gettext(lang, "Your role on this event ({role}) does not allow this ({action}).").format(
        role=gettext(lang, role.value), action=action.value
    )


def require(action: Action, *, page: bool = False, audit: bool | None = None) -> Any:
    """THE staff authorization: a dependency that lets a request through only when its principal's
    grants allow ``action`` on the event in its path (:func:`labserver.services.staff.roles.may`),
    and yields an :class:`Acting` for the handler. Anyone not signed in gets 403 (a page: a 303 to
    the sign-in page), a signed-in person without the right 403 saying why. When the action is
    audited (``audit`` None: :data:`AUDITED`) and the handler succeeds, its line is written to the
    event's audit log. ``tests/routes/test_staff_matrix.py`` walks every staff route with every
    role, on their own event and on another."""
    audited = action in AUDITED if audit is None else audit

    def dependency(request: Request, ctx: Ctx) -> Iterator[Acting]:
        with Session(ctx.engine, expire_on_commit=False) as session:
            principal = principal_from(ctx, session, request.headers, request.cookies)
            if principal is None:
                if page:
                    here = request.url.path + (f"?{request.url.query}" if request.url.query else "")
                    raise HTTPException(303, headers={"Location": f"/instructor/login?next={quote(here)}"})
                raise HTTPException(403, gettext(pick_lang(request), "Staff only: sign in first."))
            scope = scope_of(ctx, session, request.path_params)
        if not may(principal.grants, action, scope.event_id):
            raise HTTPException(403, refusal(pick_lang(request), principal, action, scope.event_id))
        logging_json.bind(event_id=scope.event_id)
        acting = Acting(principal, action, scope.event_id, scope.target, scope.attendee_id)
        yield acting
        if audited and not acting.skip:
            record(ctx.engine, acting)

    dependency.action = action  # type: ignore[attr-defined]  # the matrix test reads both
    dependency.audited = audited  # type: ignore[attr-defined]
    return Depends(dependency, scope="function")


def authorize_ws(ctx: AppContext, ws: WebSocket, action: Action, env_id: str) -> tuple[Acting | None, int]:
    """:func:`require` for a WebSocket (blocking: call it in a worker thread): the acting request,
    or None and the close code (4403 refused, 4404 no such environment)."""
    with Session(ctx.engine, expire_on_commit=False) as session:
        principal = principal_from(ctx, session, ws.headers, ws.cookies)
        boot = accounts.bootstrap_key(ctx.settings)
        query_token = ws.query_params.get("instructor_token", "")
        by_query = bool(boot and query_token) and hmac.compare_digest(  # a script's socket: no header
            query_token.encode(), ctx.settings.instructor_token.encode()
        )
        if principal is None and boot and by_query:
            principal = accounts.bootstrap_principal("instructor", boot)
        if principal is None:
            return None, 4403
        try:
            scope = scope_of(ctx, session, {"env_id": env_id})
        except HTTPException:
            return None, 4404
    if not may(principal.grants, action, scope.event_id):
        return None, 4403
    return Acting(principal, action, scope.event_id, scope.target, scope.attendee_id), 0
