"""``labserver rehearse EVENT``: the pre-flight of an event on the configured backend
(:mod:`labserver.checks.preflight`): K environments, every lab's solution checks, start and check
times per lab, everything removed after. Exits 1 when an environment did not start or a step did
not pass with its solution."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Annotated

import typer
from sqlmodel import Session, col, select

from labserver.backends.base import Backend, Closable, EnvSpec
from labserver.checks.preflight import PreflightReport, preflight_specs, rehearse
from labserver.config import Settings
from labserver.content.loader import Lab
from labserver.models import Attendee, Event


def rehearse_command(
    event: Annotated[str, typer.Argument(help="The event: its id or its join code")],
    environments: Annotated[
        int, typer.Option("--environments", "-k", min=1, max=500, help="Environments to create at once")
    ] = 3,
) -> None:
    """Pre-flight an event: create K environments, run each lab's solution checks in them, report
    start and check times per lab, and clean up."""
    from labserver.app import build_context
    from labserver.services.provisioning.environments import event_labs, spec_for

    settings = Settings()
    ctx = build_context(settings)
    try:
        with Session(ctx.engine, expire_on_commit=False) as session:
            query = select(Event).where(col(Event.code) == event.upper())
            if event.isdigit():
                query = select(Event).where(col(Event.id) == int(event))
            found = session.exec(query).first()
        if found is None or found.id is None:
            typer.echo(
                f"No event {event!r}: give its id or join code (`labserver serve` prints it).", err=True
            )
            raise typer.Exit(2)
        labs = [ctx.catalog.labs[lab_id] for lab_id in event_labs(ctx, found)]
        if not labs:
            typer.echo(
                f"Event {found.title!r} has no lab this server can load: nothing to rehearse.", err=True
            )
            raise typer.Exit(2)
        template = spec_for(ctx, found, Attendee(id=0, event_id=found.id, name="rehearsal", token_hash=""))
        specs = preflight_specs(found.id, environments, template=template)
        typer.echo(
            f"rehearsing {found.title!r} on the {ctx.backend.name} backend: {environments} environments, "
            f"labs {', '.join(lab.id for lab in labs)}"
        )
        report = asyncio.run(_run(ctx.backend, labs, specs, settings))
        for line in report.lines():
            typer.echo(line)
        typer.echo("ready for the room" if report.ok else "NOT READY: see the lines above")
        if not report.ok:
            raise typer.Exit(1)
    finally:
        ctx.engine.dispose()


async def _run(
    backend: Backend, labs: Sequence[Lab], specs: Sequence[EnvSpec], settings: Settings
) -> PreflightReport:
    try:
        return await rehearse(backend, labs, specs, settings=settings, on_line=typer.echo)
    finally:
        if isinstance(backend, Closable):
            await backend.aclose()
