"""``Annotated`` dependency aliases: the only way handlers get the context, a DB session, the
current attendee or the instructor."""

from __future__ import annotations

import hmac
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, HTTPException, Path, Query, Request, WebSocket
from itsdangerous import BadSignature, URLSafeTimedSerializer
from sqlmodel import Session

from labserver.db import release
from labserver.models import Attendee, Event
from labserver.observability import logging_json
from labserver.services.context import AppContext
from labserver.services.joining.events import attendee_for_token

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


# -- instructor -----------------------------------------------------------------------------
def instructor_serializer(ctx: AppContext) -> URLSafeTimedSerializer:
    return URLSafeTimedSerializer(ctx.settings.ensure_secret_key(), salt="labserver-instructor")


def instructor_from(ctx: AppContext, headers: object, cookies: dict[str, str]) -> str | None:
    """The instructor's display name when the request carries the instructor token (bearer) or a
    valid signed session cookie; else None."""
    expected = ctx.settings.instructor_token
    auth = getattr(headers, "get", lambda _k, _d=None: None)("authorization") or ""
    if expected and auth.lower().startswith("bearer ") and hmac.compare_digest(auth[7:].strip(), expected):
        return "instructor"
    cookie = cookies.get(INSTRUCTOR_COOKIE)
    if cookie:
        try:
            data = instructor_serializer(ctx).loads(cookie, max_age=7 * 24 * 3600)
        except BadSignature:
            return None
        if isinstance(data, dict) and hmac.compare_digest(str(data.get("t", "")), _token_tag(expected)):
            return str(data.get("name") or "instructor")
    return None


def _token_tag(token: str) -> str:
    import hashlib

    return hashlib.sha256(("tag:" + token).encode()).hexdigest()[:16]


def make_instructor_cookie(ctx: AppContext, name: str) -> str:
    return instructor_serializer(ctx).dumps({"name": name, "t": _token_tag(ctx.settings.instructor_token)})


def current_instructor(request: Request, ctx: Ctx) -> str:
    name = instructor_from(ctx, request.headers, request.cookies)
    if name is None:
        raise HTTPException(403, "Instructor access only: log in with the instructor token.")
    return name


Instructor = Annotated[str, Depends(current_instructor)]
