"""``labserver report EVENT``: the post-event report written offline (the same HTML and JSON as the
instructor's downloads, from the server's database and labs); ``labserver verify FILE``: check a
completion record offline against the event's public key (services/reporting/completion.py).

``verify`` exits 0 when the record is intact and signed by a key given with ``--key``; 1 when it
was changed, is not a completion record, or is signed by another key; 3 when it is intact but no
``--key`` was given, so who signed it is not known (2: a wrong command line, as for every command)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated

import typer

from labserver.config import Settings


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".part")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def report(
    event: Annotated[str, typer.Argument(help="The event: its join code or its id")],
    out: Annotated[
        Path, typer.Option("--out", "-o", help="Folder to write report.html and report.json to")
    ] = Path("."),
    lang: Annotated[str, typer.Option(help="Language of the report: en or zh")] = "en",
) -> None:
    """Write the post-event report of EVENT (HTML with charts, and JSON) from this server's data."""
    from sqlmodel import Session, select

    from labserver.app import build_context
    from labserver.i18n import LANGS
    from labserver.models import Event
    from labserver.routes.instructor.report import standalone_html
    from labserver.services.reporting import completion
    from labserver.services.reporting import report as report_service

    if lang not in LANGS:
        raise typer.BadParameter(f"use one of: {', '.join(LANGS)}", param_hint="--lang")
    ctx = build_context(Settings())
    try:
        with Session(ctx.engine, expire_on_commit=False) as session:
            row = session.exec(select(Event).where(Event.code == event)).first()
            if row is None and event.isdigit() and int(event) < 2**63:
                row = session.get(Event, int(event))
            if row is None:
                typer.echo(
                    f"There is no event {event!r} in {ctx.settings.data_dir} (give its join code or id; "
                    "set LABSERVER_DATA_DIR or LABSERVER_DATABASE_URL to the server's).",
                    err=True,
                )
                raise typer.Exit(1)
            data = report_service.event_report(ctx, session, row, lang=lang)
            key = completion.public_key(row, ctx.settings.ensure_secret_key())
    finally:
        ctx.engine.dispose()
    out.mkdir(parents=True, exist_ok=True)
    _write(out / "report.json", json.dumps(data.model_dump(mode="json"), ensure_ascii=False, indent=1) + "\n")
    _write(out / "report.html", standalone_html(ctx, data, key, lang))
    steps = sum(len(lab.steps) for lab in data.labs)
    typer.echo(
        f"report of {row.title} ({row.code}): {data.attendees} attendees, {len(data.labs)} labs, "
        f"{steps} steps -> {out / 'report.html'}, {out / 'report.json'}"
    )


def verify(
    file: Annotated[Path, typer.Argument(help="A completion record (JSON) to check")],
    key: Annotated[
        list[str] | None,
        typer.Option("--key", "-k", help="The event's public key, as shown on its page (repeat for several)"),
    ] = None,
) -> None:
    """Check a completion record offline: intact, every step passed, and signed by the event's key."""
    from labserver.services.reporting import completion

    try:
        keys = [completion.parse_key(k) for k in key] if key else None
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--key") from exc
    try:
        doc = json.loads(file.read_bytes())
    except OSError as exc:
        typer.echo(f"Cannot read {file}: {exc.strerror}.", err=True)
        raise typer.Exit(1) from exc
    except ValueError as exc:
        typer.echo(f"NOT VALID: {file} is not JSON ({exc}).", err=True)
        raise typer.Exit(1) from exc
    verdict = completion.verify(doc, keys)
    if not verdict.valid or verdict.trusted is False:
        typer.echo(f"NOT VALID: {file}", err=True)
        for problem in verdict.problems:
            typer.echo(f"  - {problem}", err=True)
        raise typer.Exit(1)
    if verdict.trusted is None:
        typer.echo(f"INTACT, SIGNER UNKNOWN: {verdict.summary}")
        typer.echo(
            f"  signed by key {verdict.key_id}; pass --key with the public key shown on the event's page "
            "to confirm it was this event."
        )
        raise typer.Exit(3)
    typer.echo(f"VALID: {verdict.summary}")
    typer.echo(f"  signed by the event's key {verdict.key_id}")


def register(app: typer.Typer) -> None:
    """Add ``report`` and ``verify`` to the ``labserver`` typer app."""
    app.command("report")(report)
    app.command("verify")(verify)
