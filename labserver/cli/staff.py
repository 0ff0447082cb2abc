"""``labserver staff add|link|list|remove``: the operator's side of staff accounts
(:mod:`labserver.services.staff.accounts`). ``add`` prints a one-time sign-in link (or, with
``--password``, a password), shown once and stored hashed. ``remove`` works on a running server's
database: the server ends the person's streams, terminal views and shares within
``LABSERVER_STAFF__REVOKE_POLL_S`` seconds."""

from __future__ import annotations

from typing import Annotated

import typer
from sqlalchemy.engine import Engine
from sqlmodel import Session

from labserver import db
from labserver.config import Settings
from labserver.services.joining.events import find_event_by_code
from labserver.services.staff import accounts, audit
from labserver.services.staff.accounts import StaffError
from labserver.services.staff.audit import Acting
from labserver.services.staff.roles import Action, Grant, Principal, Role

app = typer.Typer(no_args_is_help=True, help="Staff accounts: organisers, instructors, assistants")


def _engine(settings: Settings) -> Engine:
    engine = db.make_engine(settings.sqlalchemy_url, settings.db)
    db.upgrade(engine)
    return engine


#: who the audit log names for a change made here
OPERATOR = Principal(name="operator (labserver staff)", grants=(Grant(Role.organiser, None),))


def _log(engine: Engine, event_ids: list[int | None], name: str, **detail: str) -> None:
    """An audit line in each event of ``event_ids`` for a staff change made from the command line."""
    for event_id in event_ids:
        if event_id is not None:
            audit.record(
                engine, Acting(OPERATOR, Action.staff, event_id, f"staff {name}", detail=dict(detail))
            )


def _link(url: str, secret: str) -> str:
    return f"{url.rstrip('/')}/instructor/signin/{secret}"


@app.command("add")
def add(
    name: Annotated[str, typer.Argument(help="The person's name (shown in the audit log)")],
    role: Annotated[str, typer.Option(help="organiser, instructor or assistant")] = "assistant",
    event: Annotated[str, typer.Option(help="The event's join code (default: every event)")] = "",
    email: Annotated[str, typer.Option(help="Their e-mail (matches an OpenID Connect sign-in)")] = "",
    password: Annotated[bool, typer.Option(help="Print a password instead of a one-time link")] = False,
    url: Annotated[str, typer.Option(help="The server's address, for the link")] = "http://127.0.0.1:8000",
) -> None:
    """Give NAME a role on an event (or on every event) and print how they sign in."""
    settings = Settings()
    engine = _engine(settings)
    with Session(engine, expire_on_commit=False) as session:
        event_id = None
        if event:
            found = find_event_by_code(session, event)
            if found is None:
                typer.echo(
                    f"error: no event with the join code {event!r} (labserver prints it at start)", err=True
                )
                raise typer.Exit(2)
            event_id = found.id
        try:
            added = accounts.add(
                session,
                name=name,
                role=role,
                event_id=event_id,
                email=email,
                password=password,
                link_hours=settings.staff.link_hours,
            )
        except StaffError as exc:
            typer.echo(f"error: {exc.message}", err=True)
            raise typer.Exit(2) from None
        _log(engine, [event_id], added.staff.name, change="added", role=role)
    where = f"event {event}" if event else "every event"
    typer.echo(f"{added.staff.name}: {role} on {where}")
    if added.password:
        typer.echo(f"password (shown once): {added.password}")
    else:
        typer.echo(f"one-time sign-in link (valid {settings.staff.link_hours:g} h): {_link(url, added.link)}")


@app.command("link")
def link(
    name: Annotated[str, typer.Argument(help="The person's name")],
    url: Annotated[str, typer.Option(help="The server's address, for the link")] = "http://127.0.0.1:8000",
) -> None:
    """Print a new one-time sign-in link for NAME (a second device, a lost link)."""
    settings = Settings()
    engine = _engine(settings)
    with Session(engine, expire_on_commit=False) as session:
        try:
            secret = accounts.new_link(session, name=name, link_hours=settings.staff.link_hours)
        except StaffError as exc:
            typer.echo(f"error: {exc.message}", err=True)
            raise typer.Exit(2) from None
    typer.echo(_link(url, secret))


@app.command("list")
def list_staff() -> None:
    """Every staff account with its roles."""
    settings = Settings()
    engine = _engine(settings)
    with Session(engine, expire_on_commit=False) as session:
        for staff, grants in accounts.everyone(session):
            state = (
                "removed"
                if staff.removed_at
                else ", ".join(
                    f"{g.role.value}@{'every event' if g.event_id is None else g.event_id}" for g in grants
                )
            )
            typer.echo(f"{staff.id:>4}  {staff.name:<30} {state or '(no role)'}")


@app.command("remove")
def remove(name: Annotated[str, typer.Argument(help="The person's name")]) -> None:
    """Remove NAME from the staff: their sessions end now, their streams and shares within seconds."""
    settings = Settings()
    engine = _engine(settings)
    with Session(engine, expire_on_commit=False) as session:
        try:
            staff = accounts.find(session, name)
        except StaffError as exc:
            typer.echo(f"error: {exc.message}", err=True)
            raise typer.Exit(2) from None
        if staff is None or staff.id is None:
            typer.echo(f"error: nobody called {name!r} is on the staff (labserver staff list)", err=True)
            raise typer.Exit(2)
        events = [g.event_id for g in accounts.grants_of(session, staff.id)]
        accounts.remove(session, staff_id=staff.id)
        _log(engine, events, staff.name, change="removed")
    typer.echo(f"{name}: removed")
