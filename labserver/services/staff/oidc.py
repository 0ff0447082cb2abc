"""Sign-in through the organisation's OpenID Connect provider (Authlib's Starlette client does the
protocol: discovery, the authorization-code flow with state and nonce, the ID token's signature,
issuer, audience and expiry), and the mapping of the provider's claims to roles here.

A rule (``LABSERVER_STAFF__OIDC__ROLES``, one string each) reads ``claim=pattern:role[@EVENTCODE]``:
when the ID token's (or userinfo's) ``claim`` equals ``pattern``, or one of its values does (a
list claim such as ``groups``), with ``*`` and ``?`` as wildcards (``email=*@example.org``), the
person gets ``role`` on the event of that join code, or on every event without ``@``. Examples:
``groups=workshop-organisers:organiser``, ``groups=ta:assistant@MEETUP``,
``email=*@example.org:instructor@MEETUP``.

The account: the one already signed in with this provider subject, else the account the operator
made with the same e-mail (only when the provider says the e-mail is verified), else a new one
named after the ``name`` claim. The rules' grants are the account's ``oidc`` grants, replaced at
each sign-in (a grant the operator gave stays). A person with no role at all after that is
refused with a message that says to ask the organiser."""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from typing import Any

from sqlmodel import Session, col, select

from labserver.config import OidcSettings, parse_role_rule
from labserver.models import Event, Staff, StaffRole
from labserver.services.staff.accounts import StaffError, grants_of, start_session
from labserver.services.staff.roles import Grant, Role

NO_ROLE = "Your account at {provider} gives you no role here: ask the organiser to add you."


@dataclass(frozen=True)
class RoleRule:
    claim: str
    pattern: str
    role: Role
    event_code: str  # "" = every event


def parse_rule(text: str) -> RoleRule:
    """``claim=pattern:role[@EVENTCODE]`` (module docstring); ValueError saying what is wrong."""
    claim, pattern, role, code = parse_role_rule(text)
    return RoleRule(claim, pattern, Role(role), code)


def rules_of(settings: OidcSettings) -> list[RoleRule]:
    return [parse_rule(text) for text in settings.roles]


def _values(value: Any) -> list[str]:
    if isinstance(value, list | tuple):
        return [str(v) for v in value]
    return [] if value is None else [str(value)]


def grants_for(claims: dict[str, Any], rules: list[RoleRule], event_ids: dict[str, int]) -> list[Grant]:
    """The grants ``rules`` give a person with ``claims`` (pure); a rule naming an unknown event
    code gives nothing, and a rule on ``email`` needs ``email_verified``."""
    out: list[Grant] = []
    for rule in rules:
        if rule.claim == "email" and claims.get("email_verified") is not True:
            continue  # an address the provider did not verify proves nothing
        if not any(fnmatch.fnmatchcase(v, rule.pattern) for v in _values(claims.get(rule.claim))):
            continue
        if rule.event_code and rule.event_code not in event_ids:
            continue
        grant = Grant(rule.role, event_ids[rule.event_code] if rule.event_code else None)
        if grant not in out:
            out.append(grant)
    return out


def _account(session: Session, subject: str, claims: dict[str, Any]) -> Staff | None:
    staff = session.exec(select(Staff).where(Staff.oidc_subject == subject)).first()
    email = str(claims.get("email") or "").strip().lower()
    if staff is None and email and claims.get("email_verified") is True:
        staff = session.exec(
            select(Staff).where(Staff.email == email, col(Staff.removed_at).is_(None))
        ).first()
    return staff


def _free_name(session: Session, claims: dict[str, Any]) -> str:
    base = " ".join(
        str(claims.get("name") or claims.get("preferred_username") or claims.get("email") or "").split()
    )
    base = (base or "staff")[:60]
    name, n = base, 1
    while session.exec(select(Staff).where(Staff.name == name)).first() is not None:
        n += 1
        name = f"{base} ({n})"
    return name


def sign_in(
    session: Session,
    *,
    issuer: str,
    claims: dict[str, Any],
    rules: list[RoleRule],
    hours: float,
    provider: str,
) -> tuple[Staff, str]:
    """The account of a verified ID token's ``claims`` with its ``oidc`` grants refreshed, and a new
    session secret; :class:`StaffError` when the provider gives this person no role here."""
    subject = f"{issuer} {claims.get('sub', '')}"
    codes = {e.code.upper(): e.id for e in session.exec(select(Event)).all() if e.id is not None}
    given = grants_for(claims, rules, codes)
    staff = _account(session, subject, claims)
    if staff is not None and staff.removed_at is not None:
        raise StaffError("Your staff account was removed: ask the organiser.")
    if staff is None:
        if not given:
            raise StaffError(NO_ROLE, provider=provider)
        staff = Staff(name=_free_name(session, claims), email=str(claims.get("email") or "").lower()[:200])
        session.add(staff)
        session.flush()
    assert staff.id is not None
    staff.oidc_subject = subject
    for row in session.exec(
        select(StaffRole).where(StaffRole.staff_id == staff.id, StaffRole.source == "oidc")
    ).all():
        session.delete(row)
    for grant in given:
        session.add(StaffRole(staff_id=staff.id, event_id=grant.event_id, role=grant.role, source="oidc"))
    session.add(staff)
    session.commit()
    if not grants_of(session, staff.id):
        raise StaffError(NO_ROLE, provider=provider)
    return staff, start_session(session, staff, via="oidc", hours=hours)


def make_client(issuer: str, client_id: str, client_secret: str, scope: str) -> Any:
    """Authlib's client of the provider (discovery from ``issuer``), or None when not configured."""
    if not issuer:
        return None
    from authlib.integrations.starlette_client import OAuth

    oauth = OAuth()
    oauth.register(
        "oidc",
        server_metadata_url=issuer.rstrip("/") + "/.well-known/openid-configuration",
        client_id=client_id,
        client_secret=client_secret,
        client_kwargs={"scope": scope},
    )
    return oauth.create_client("oidc")
