"""Self-paced commands: ``selfpaced``, ``labs``, ``progress export|import``, ``export-site``.

Mounted on the main typer app by :func:`register` (one call in ``labserver/cli/main.py``)."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

DataDir = Annotated[
    Path | None,
    typer.Option(
        "--data-dir",
        help="Self-paced data folder (default: LABSERVER_DATA_DIR, else your user data folder)",
    ),
]

progress_app = typer.Typer(no_args_is_help=True, help="Export or import your progress (a JSON file)")


def _settings(data_dir: Path | None, backend: str = "local") -> Any:
    from labserver.selfpaced.learner import selfpaced_settings

    return selfpaced_settings(data_dir, backend=backend)


def _docker_available() -> str:
    """'' when a Docker engine answers, else why not."""
    import docker  # type: ignore[import-untyped]

    try:
        docker.from_env(timeout=5).ping()
    except Exception as exc:
        return f"no Docker engine answers ({exc.__class__.__name__}: {exc})"
    return ""


def selfpaced(
    lab: Annotated[str | None, typer.Argument(help="Open this lab (default: the lab list)")] = None,
    port: Annotated[int, typer.Option(help="Port on 127.0.0.1 (another free one if taken)")] = 8765,
    no_browser: Annotated[bool, typer.Option("--no-browser", help="Do not open a browser")] = False,
    backend: Annotated[str, typer.Option(help="local, or docker when a Docker engine is here")] = "local",
    name: Annotated[str, typer.Option(help="Your name on exported progress (first start only)")] = "",
    data_dir: DataDir = None,
) -> None:
    """Work through the labs on this computer, alone, with no server and no network."""
    from labserver.selfpaced.server import serve

    if backend not in ("local", "docker"):
        raise typer.BadParameter("choose local or docker", param_hint="--backend")
    if backend == "docker":
        why = _docker_available()
        if why:
            typer.echo(
                f"error: --backend docker: {why}. Run without --backend to use this machine.", err=True
            )
            raise typer.Exit(2)
    try:
        serve(
            _settings(data_dir, backend),
            lab=lab,
            port=port,
            open_browser=not no_browser,
            name=name,
            echo=typer.echo,
        )
    except SystemExit as exc:
        if isinstance(exc.code, str):
            typer.echo(f"error: {exc.code}", err=True)
            raise typer.Exit(2) from None
        raise


def labs(
    lang: Annotated[str, typer.Option(help="en or zh")] = "en",
    data_dir: DataDir = None,
) -> None:
    """List the labs and your self-paced progress in each."""
    from sqlmodel import Session

    from labserver import db
    from labserver.content import LabCatalog
    from labserver.models import Event
    from labserver.selfpaced.learner import read_learner
    from labserver.services.reporting.progress import lab_progress

    settings = _settings(data_dir)
    catalog = LabCatalog(settings.labs_dir)
    learner = read_learner(settings.data_dir)
    marks = {"passed": "✓", "imported": "⇩", "failing": "✗", "error": "!", "working": "…", "not-started": "·"}
    engine = None
    session = None
    if learner is not None and (settings.data_dir / "labserver.db").exists():
        engine = db.make_engine(settings.sqlalchemy_url)
    try:
        session = Session(engine) if engine is not None else None
        event = session.get(Event, learner.event_id) if session is not None and learner else None
        width = max([len(lab_id) for lab_id in catalog.labs] or [10])
        for lab in catalog:
            title = lab.spec.title.get(lang)
            if session is not None and event is not None and learner is not None:
                prog = lab_progress(session, event=event, attendee_id=learner.attendee_id, lab=lab)
                line = "".join(marks.get(s.status, "?") for s in prog.steps)
                done = f"{prog.passed}/{len(prog.steps)}"
            else:
                line, done = "·" * len(lab.steps), f"0/{len(lab.steps)}"
            typer.echo(f"{lab.id:{width}}  {done:>5}  {line:10}  {title}")
        for broken in catalog.broken.values():
            typer.echo(f"{broken.id:{width}}  unavailable: {broken.problems[0] if broken.problems else ''}")
        if not catalog.labs and not catalog.broken:
            typer.echo(f"no labs in {settings.labs_dir}")
        typer.echo("✓ passed  ✗ failing  ! checker error  … opened  · not started")
    finally:
        if session is not None:
            session.close()
        if engine is not None:
            engine.dispose()


def _local_context(data_dir: Path | None) -> Any:
    from labserver.app import build_context
    from labserver.selfpaced.learner import ensure_learner

    settings = _settings(data_dir)
    ctx = build_context(settings)
    learner = ensure_learner(ctx.engine, settings.data_dir)
    return ctx, learner


@progress_app.command("export")
def progress_export(
    file: Annotated[Path, typer.Argument(help="Where to write the progress file (- for stdout)")],
    files: Annotated[bool, typer.Option("--files/--no-files", help="Include your lab folders")] = True,
    data_dir: DataDir = None,
) -> None:
    """Write your self-paced progress (and lab folders) to a JSON file."""
    from sqlmodel import Session

    from labserver.models import Attendee, Event
    from labserver.services.reporting import progress_io

    ctx, learner = _local_context(data_dir)
    skipped: list[str] = []

    async def run() -> str:
        with Session(ctx.engine, expire_on_commit=False) as session:
            event = session.get(Event, learner.event_id)
            attendee = session.get(Attendee, learner.attendee_id)
            assert event is not None and attendee is not None
            progress = await progress_io.export_progress(
                ctx, session, event=event, attendee=attendee, with_files=files, skipped_files=skipped
            )
        return progress_io.dump_progress(progress)

    try:
        text = asyncio.run(run())
    finally:
        ctx.engine.dispose()
    if str(file) == "-":
        sys.stdout.write(text)
        return
    tmp = file.with_name(file.name + ".part")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, file)
    for item in skipped:
        typer.echo(f"  not included: {item}", err=True)
    typer.echo(f"progress of {learner.name} written to {file}")


@progress_app.command("import")
def progress_import(
    file: Annotated[Path, typer.Argument(help="A progress file made by `labserver progress export`")],
    files: Annotated[
        bool, typer.Option("--files/--no-files", help="Also restore the lab folders in the file")
    ] = True,
    data_dir: DataDir = None,
) -> None:
    """Add the passed steps of a progress file to your self-paced progress."""
    from sqlmodel import Session

    from labserver.models import Attendee, Event
    from labserver.services.reporting import progress_io

    try:
        raw = file.read_bytes()
    except OSError as exc:
        typer.echo(f"error: cannot read {file}: {exc.strerror}", err=True)
        raise typer.Exit(2) from None
    try:
        progress = progress_io.parse_progress(raw)
    except progress_io.ProgressFileError as exc:
        typer.echo(f"error: {file}: {exc}\nNothing was changed.", err=True)
        raise typer.Exit(2) from None
    ctx, learner = _local_context(data_dir)

    async def run() -> progress_io.ImportReport:
        with Session(ctx.engine, expire_on_commit=False) as session:
            event = session.get(Event, learner.event_id)
            attendee = session.get(Attendee, learner.attendee_id)
            assert event is not None and attendee is not None
            return await progress_io.import_progress(
                ctx, session, event=event, attendee=attendee, progress=progress, restore_files=files
            )

    try:
        report = asyncio.run(run())
    finally:
        ctx.engine.dispose()
    if report.status == "passed":
        typer.echo(f"imported {len(report.imported)} passed step(s) from {file}")
    else:
        typer.echo(
            f"imported {len(report.imported)} step(s) from {file} as imported, not passed: this labserver "
            "did not sign the file (another computer, an edited or an old file). Run Check to pass them here."
        )
    for key in report.imported:
        typer.echo(f"  {'✓' if report.status == 'passed' else '⇩'} {key}")
    if report.already:
        typer.echo(f"  already passed here: {', '.join(report.already)}")
    if report.skipped:
        typer.echo(f"  not in this labserver (skipped): {', '.join(report.skipped)}")
    for lab_id in report.restored_labs:
        typer.echo(f"  restored the files of {lab_id} (previous folder kept in {report.backups[lab_id]})")


def export_site(
    out: Annotated[Path, typer.Argument(help="Folder to write the static site into")],
) -> None:
    """Write every lab's instructions as static HTML (English and Chinese) for offline reading."""
    from labserver.config import Settings
    from labserver.content import LabCatalog
    from labserver.content.site_export import export_site as run

    settings = Settings()
    pages = run(LabCatalog(settings.labs_dir), out)
    typer.echo(f"wrote {len(pages)} pages to {out}; open {out / 'index.html'}")


def register(app: typer.Typer) -> None:
    """Add the self-paced commands to the ``labserver`` typer app."""
    app.command("selfpaced")(selfpaced)
    app.command("labs")(labs)
    app.command("export-site")(export_site)
    app.add_typer(progress_app, name="progress")
