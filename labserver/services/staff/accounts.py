"""Staff accounts: people, not a token. The operator adds them (``labserver staff add``, or an
organiser on the event page), each with a role on one event or on every event
(:mod:`labserver.services.staff.roles`); they sign in as themselves.

Threat model. A staff session can read every terminal of its events and, with an attendee's
consent, type in it; so the secrets that open one are treated like passwords:

- a one-time sign-in link (``/instructor/signin/<secret>``) is 32 random bytes, stored as its
  SHA-256 only, valid :attr:`~labserver.config.StaffSettings.link_hours`, and used once: it is
  taken with one conditional ``UPDATE ... WHERE used_at IS NULL``, so two browsers racing with the
  same link get one session, never two;
- a password is stored as a scrypt hash (``hashlib.scrypt``, n=2^14, r=8, p=1, a 16-byte salt) and
  compared in constant time; a wrong name and a wrong password answer the same;
- a session is a random secret in a signed, HttpOnly cookie; the row keeps its SHA-256 and ends by
  signing out, by expiry (``session_hours``) or when the person is removed. Removing a person
  (:func:`remove`) ends every session at once, and :mod:`labserver.services.staff.watch` ends
  their open streams, terminal views and shares within ``revoke_poll_s`` seconds."""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import hmac
import secrets
from dataclasses import dataclass

from sqlalchemy import update
from sqlmodel import Session, col, or_, select

from labserver import clock
from labserver.config import Settings
from labserver.models import Staff, StaffLink, StaffRole, StaffSession
from labserver.services.staff.roles import Grant, Principal, Role

BOOTSTRAP_GRANTS = (Grant(Role.organiser, None),)

SCRYPT = {"n": 2**14, "r": 8, "p": 1}
NAME_MAX = 80


class StaffError(Exception):
    """A staff change or sign-in that cannot be done; ``message`` says what to do (English; the
    routes translate it)."""

    def __init__(self, message: str, field: str = "", **params: str) -> None:
        super().__init__(message)
        self.message = message  # a msgid of instructor.po, with {named} placeholders from ``params``
        self.field = field
        self.params = params


def digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def hash_password(password: str) -> str:
    salt = secrets.token_bytes(16)
    key = hashlib.scrypt(password.encode(), salt=salt, dklen=32, **SCRYPT)
    return "scrypt$" + base64.b64encode(salt).decode() + "$" + base64.b64encode(key).decode()


def verify_password(stored: str, password: str) -> bool:
    try:
        scheme, salt, key = stored.split("$")
    except ValueError:
        return False
    if scheme != "scrypt":
        return False
    got = hashlib.scrypt(password.encode(), salt=base64.b64decode(salt), dklen=32, **SCRYPT)
    return hmac.compare_digest(got, base64.b64decode(key))


#: compared against when the name is unknown, so a wrong name costs as long as a wrong password
_DUMMY = hash_password(secrets.token_urlsafe(16))


def clean_name(name: str) -> str:
    name = " ".join(name.split())
    if not name:
        raise StaffError("Give the person's name.", "name")
    if len(name) > NAME_MAX:
        raise StaffError("A name has at most 80 characters.", "name")
    return name


def parse_role(role: str) -> Role:
    try:
        return Role(role.strip().lower())
    except ValueError:
        raise StaffError("The role is organiser, instructor or assistant.", "role") from None


@dataclass
class Added:
    staff: Staff
    link: str  # the one-time sign-in secret ("" when a password was asked for)
    password: str  # the generated password ("" when a link was made)


def find(session: Session, name: str) -> Staff | None:
    return session.exec(select(Staff).where(Staff.name == clean_name(name))).first()


def add(
    session: Session,
    *,
    name: str,
    role: str,
    event_id: int | None,
    email: str = "",
    password: bool = False,
    link_hours: float = 24.0,
) -> Added:
    """Give ``name`` the ``role`` on ``event_id`` (None: every event), making the account when it is
    new (a removed one comes back), and a one-time sign-in link or a new password for it."""
    name, grant_role = clean_name(name), parse_role(role)
    staff = find(session, name)
    if staff is None:
        staff = Staff(name=name, email=email.strip().lower()[:200])
        session.add(staff)
        session.flush()
    staff.removed_at = None
    if email:
        staff.email = email.strip().lower()[:200]
    assert staff.id is not None
    if not any(g == Grant(grant_role, event_id) for g in grants_of(session, staff.id)):
        session.add(StaffRole(staff_id=staff.id, event_id=event_id, role=grant_role))
    secret = new_password = ""
    if password:
        new_password = secrets.token_urlsafe(12)
        staff.password_hash = hash_password(new_password)
    else:
        secret = _new_link(session, staff, link_hours)
    session.add(staff)
    session.commit()
    return Added(staff, secret, new_password)


def _new_link(session: Session, staff: Staff, hours: float) -> str:
    assert staff.id is not None
    secret = secrets.token_urlsafe(32)
    expires = clock.now() + dt.timedelta(hours=hours)
    session.add(StaffLink(id=digest(secret), staff_id=staff.id, expires_at=expires))
    return secret


def new_link(session: Session, *, name: str, link_hours: float = 24.0) -> str:
    """A fresh one-time sign-in link for an existing person (a second device, a lost link)."""
    staff = find(session, name)
    if staff is None or staff.removed_at is not None:
        raise StaffError("Nobody of that name is on the staff.", "name")
    secret = _new_link(session, staff, link_hours)
    session.commit()
    return secret


def grants_of(session: Session, staff_id: int) -> list[Grant]:
    rows = session.exec(select(StaffRole).where(StaffRole.staff_id == staff_id)).all()
    return [Grant(Role(r.role), r.event_id) for r in rows]


def on_event(session: Session, event_id: int) -> list[tuple[Staff, list[Grant]]]:
    """The people who reach ``event_id`` (a grant on it or on every event), by name."""
    rows = session.exec(
        select(Staff, StaffRole)
        .join(StaffRole, col(StaffRole.staff_id) == Staff.id)
        .where(
            col(Staff.removed_at).is_(None),
            or_(col(StaffRole.event_id).is_(None), StaffRole.event_id == event_id),
        )
        .order_by(Staff.name)
    ).all()
    out: dict[int, tuple[Staff, list[Grant]]] = {}
    for staff, role in rows:
        assert staff.id is not None
        out.setdefault(staff.id, (staff, []))[1].append(Grant(Role(role.role), role.event_id))
    return list(out.values())


def everyone(session: Session) -> list[tuple[Staff, list[Grant]]]:
    people = session.exec(select(Staff).order_by(Staff.name)).all()
    return [(s, grants_of(session, s.id or 0)) for s in people]


def remove_from_event(session: Session, *, staff_id: int, event_id: int) -> Staff:
    """Take every role of ``staff_id`` on ``event_id`` away (a role on every event stays). Their
    streams of the event end at the watch's next look (services/staff/watch.py)."""
    staff = session.get(Staff, staff_id)
    if staff is None:
        raise LookupError(staff_id)
    rows = session.exec(
        select(StaffRole).where(StaffRole.staff_id == staff_id, StaffRole.event_id == event_id)
    ).all()
    if not rows:
        raise LookupError(staff_id)
    for row in rows:
        session.delete(row)
    session.commit()
    return staff


def remove(session: Session, *, staff_id: int) -> Staff:
    """Remove a person: every role gone, every session ended now (their streams, terminal views and
    shares end within seconds: services/staff/watch.py). The account row stays for the audit log."""
    staff = session.get(Staff, staff_id)
    if staff is None:
        raise LookupError(staff_id)
    now = clock.now()
    staff.removed_at = now
    staff.password_hash = ""
    for row in session.exec(select(StaffRole).where(StaffRole.staff_id == staff_id)).all():
        session.delete(row)
    session.execute(
        update(StaffSession)
        .where(col(StaffSession.staff_id) == staff_id, col(StaffSession.ended_at).is_(None))
        .values(ended_at=now)
    )
    session.execute(
        update(StaffLink)
        .where(col(StaffLink.staff_id) == staff_id, col(StaffLink.used_at).is_(None))
        .values(used_at=now)
    )
    session.add(staff)
    session.commit()
    return staff


# -- sign-in and sessions ---------------------------------------------------------------------------
def start_session(session: Session, staff: Staff, *, via: str, hours: float) -> str:
    """A new session of ``staff``; returns its secret (for the cookie)."""
    assert staff.id is not None
    secret = secrets.token_urlsafe(32)
    row = StaffSession(
        id=digest(secret), staff_id=staff.id, via=via, expires_at=clock.now() + dt.timedelta(hours=hours)
    )
    session.add(row)
    session.commit()
    return secret


def sign_in_with_link(session: Session, secret: str, *, hours: float) -> tuple[Staff, str]:
    """Use a one-time link: (the person, a new session secret). Raises :class:`StaffError` for a
    link that is unknown, used or expired (one message: nothing to learn from it)."""
    now = clock.now()
    link = session.get(StaffLink, digest(secret))
    staff = session.get(Staff, link.staff_id) if link is not None else None
    if link is None or staff is None or staff.removed_at is not None or _aware(link.expires_at) < now:
        raise StaffError("This sign-in link is unknown, used or expired: ask the organiser for a new one.")
    taken = session.execute(
        update(StaffLink)
        .where(col(StaffLink.id) == link.id, col(StaffLink.used_at).is_(None))
        .values(used_at=now)
    )
    session.commit()
    if taken.rowcount != 1:  # type: ignore[attr-defined]
        raise StaffError("This sign-in link is unknown, used or expired: ask the organiser for a new one.")
    return staff, start_session(session, staff, via="link", hours=hours)


def sign_in_with_password(session: Session, name: str, password: str, *, hours: float) -> tuple[Staff, str]:
    staff = session.exec(select(Staff).where(Staff.name == " ".join(name.split()))).first()
    stored = staff.password_hash if staff is not None and staff.removed_at is None else ""
    ok = verify_password(stored or _DUMMY, password) and bool(stored)
    if staff is None or not ok:
        raise StaffError("That name and password do not match a staff account.")
    return staff, start_session(session, staff, via="password", hours=hours)


def end_session(session: Session, secret: str) -> None:
    session.execute(
        update(StaffSession)
        .where(col(StaffSession.id) == digest(secret), col(StaffSession.ended_at).is_(None))
        .values(ended_at=clock.now())
    )
    session.commit()


def _aware(t: dt.datetime) -> dt.datetime:
    return t if t.tzinfo else t.replace(tzinfo=dt.UTC)


def principal_of(session: Session, secret: str) -> Principal | None:
    """The signed-in person of a session secret, or None (unknown, ended, expired, removed)."""
    return principal_by_key(session, digest(secret))


def principal_by_key(session: Session, key: str) -> Principal | None:
    row = session.get(StaffSession, key)
    if row is None or row.ended_at is not None or _aware(row.expires_at) <= clock.now():
        return None
    staff = session.get(Staff, row.staff_id)
    if staff is None or staff.removed_at is not None:
        return None
    assert staff.id is not None
    return Principal(name=staff.name, grants=tuple(grants_of(session, staff.id)), staff_id=staff.id, key=key)


# -- the bootstrap token ------------------------------------------------------------------------------
def token_tag(token: str) -> str:
    return hashlib.sha256(("tag:" + token).encode()).hexdigest()[:16]


def bootstrap_key(settings: Settings) -> str | None:
    """The key of the bootstrap token's principal (a new token is a new key, so its sessions end),
    or None when the token is turned off (``LABSERVER_STAFF__BOOTSTRAP_TOKEN=false``) or unset."""
    if not settings.staff.bootstrap_token or not settings.instructor_token:
        return None
    return "token:" + token_tag(settings.instructor_token)


def bootstrap_principal(name: str, key: str) -> Principal:
    """The bootstrap token's holder: an organiser of every event (first sign-in, scripts)."""
    return Principal(name=name, grants=BOOTSTRAP_GRANTS, staff_id=None, key=key)


def principal_again(settings: Settings, session: Session, principal: Principal) -> Principal | None:
    """``principal`` as it stands now (the watch's look): None when its session or token is gone."""
    if principal.staff_id is None:
        return principal if principal.key == bootstrap_key(settings) else None
    return principal_by_key(session, principal.key)
