"""The ``labserver`` command (typer): ``serve``, ``lint``, ``selftest``, ``check``, ``db``, and the
commands and groups mounted below from their own modules (``doctor``, ``rehearse``, ``images``,
``env``, ``report`` and ``verify``, ``new`` and ``import``, the self-paced commands). Every sub-command module is imported here by
name: a broken import fails the start loudly."""

from __future__ import annotations

import os
import secrets
import sys
from pathlib import Path
from typing import Annotated

import typer

from labserver.cli import author as author_cli
from labserver.cli import doctor as doctor_cli
from labserver.cli import env as env_cli
from labserver.cli import images as images_cli
from labserver.cli import mutate as mutate_cli
from labserver.cli import rehearse as rehearse_cli
from labserver.cli import report as report_cli
from labserver.cli import selfpaced as selfpaced_cli
from labserver.cli import staff as staff_cli
from labserver.config import Settings

app = typer.Typer(
    no_args_is_help=True, add_completion=False, help="labserver: hands-on NPU inference workshops"
)
db_app = typer.Typer(no_args_is_help=True, help="Database maintenance")
app.add_typer(db_app, name="db")
app.add_typer(images_cli.app, name="images")
app.add_typer(env_cli.app, name="env")
app.add_typer(staff_cli.app, name="staff")
app.command("rehearse")(rehearse_cli.rehearse_command)
app.command("doctor")(doctor_cli.doctor)


def _settings(**overrides: object) -> Settings:
    settings = Settings()
    for key, value in overrides.items():
        if value is not None:
            setattr(settings, key, value)
    return settings


def dev_folders(folders: list[Path]) -> list[Path]:
    """The lab folders of ``serve --dev``, checked: each a folder with a lab.yaml, all in one
    parent folder (it becomes LABS_DIR, whose labs a check may read), no name twice."""
    found = [f.resolve() for f in folders]
    for folder in found:
        if not (folder / "lab.yaml").is_file():
            typer.echo(
                f"error: {folder} is not a lab folder (no lab.yaml); make one with `labserver new`", err=True
            )
            raise typer.Exit(2)
    if len({f.parent for f in found}) > 1:
        typer.echo(
            "error: serve --dev takes lab folders that sit in one folder (it becomes the labs folder); "
            "these are in " + ", ".join(sorted({str(f.parent) for f in found})),
            err=True,
        )
        raise typer.Exit(2)
    if len({f.name for f in found}) < len(found):
        typer.echo("error: a lab folder is named twice", err=True)
        raise typer.Exit(2)
    return found


@app.command()
def serve(
    host: Annotated[str, typer.Option(help="Address to listen on")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port")] = 8000,
    dev: Annotated[
        list[Path] | None,
        typer.Option(
            "--dev",
            help="Serve these lab folders only and reload them as you edit (lint on every save; "
            "open pages refresh). Repeat it or list the folders after it.",
        ),
    ] = None,
    more: Annotated[
        list[Path] | None, typer.Argument(help="More lab folders for --dev", show_default=False)
    ] = None,
) -> None:
    """Start the server. On first start it opens a default event and prints its join code and the
    instructor token. With --dev LAB_DIR...: an author's server for those labs (docs/writing-labs.md)."""
    import logging.config

    import uvicorn
    from sqlmodel import Session

    from labserver.app import create_app
    from labserver.observability import logging_json
    from labserver.services.joining.events import ensure_default_event

    if more and not dev:
        typer.echo("error: lab folders are given with --dev: labserver serve --dev LAB_DIR...", err=True)
        raise typer.Exit(2)
    dev_labs = dev_folders([*(dev or []), *(more or [])]) if dev else []
    settings = Settings()
    if dev_labs:
        settings.labs_dir = dev_labs[0].parent
    token_generated = False
    if settings.staff.bootstrap_token and not settings.instructor_token:
        token_file = settings.data_dir / "instructor_token"
        if token_file.exists():
            settings.instructor_token = token_file.read_text().strip()
        else:
            settings.data_dir.mkdir(parents=True, exist_ok=True)
            settings.instructor_token = secrets.token_urlsafe(18)
            token_file.write_text(settings.instructor_token)
            token_file.chmod(0o600)
            token_generated = True
    logging.config.dictConfig(logging_json.dict_config(settings.log.format, settings.log.level))
    doctor_cli.warn_at_start(settings, host, port)  # warnings only: the server starts anyway
    application = create_app(settings, dev_labs=dev_labs)
    ctx = application.state.ctx
    with Session(ctx.engine) as session:
        # broken labs are listed too: they show as unavailable now and work once fixed
        labs = list(ctx.catalog.labs) + sorted(ctx.catalog.broken)
        event, created = ensure_default_event(
            session, title=settings.default_event_title, labs=labs, code=settings.default_event_code
        )
        if dev_labs and event.labs and (missing := [lab for lab in labs if lab not in event.labs]):
            event.labs = [*event.labs, *missing]  # a data folder used before: its event gets the new labs
            session.add(event)
            session.commit()
    url = f"http://{'127.0.0.1' if host in ('0.0.0.0', '::') else host}:{port}"
    typer.echo("")
    typer.echo(f"  labserver is starting on {url}")
    typer.echo(f"  event     : {event.title} ({'created' if created else 'existing'})")
    typer.echo(f"  join code : {event.code}")
    if settings.staff.bootstrap_token and settings.instructor_token:
        typer.echo(
            f"  instructor: {url}/instructor  token: {settings.instructor_token}"
            + ("  (generated, saved in DATA_DIR/instructor_token)" if token_generated else "")
        )
    else:
        typer.echo(f"  staff     : {url}/instructor  (instructor token off: `labserver staff add NAME`)")
    typer.echo(f"  labs      : {', '.join(ctx.catalog.labs) or '(none)'}")
    if dev_labs:
        typer.echo(f"  dev mode  : {', '.join(str(f) for f in dev_labs)} reload as you save (lint below)")
    for broken in ctx.catalog.broken.values():
        typer.echo(
            f"  UNAVAILABLE lab {broken.id}: {broken.problems[0] if broken.problems else ''}", err=True
        )
    typer.echo("")
    # the asyncio loop, not uvloop: uvloop forks the whole server for every checker process (80 ms
    # of a 300 MB server, the loop stopped meanwhile), asyncio spawns with vfork (well under 1 ms);
    # at 10 checks/s uvloop's forks held every stream of the room (bench/rehearsal.py)
    uvicorn.run(
        application,
        host=host,
        port=port,
        log_config=None,  # configured above (LABSERVER_LOG__FORMAT)
        log_level=settings.log.level.lower(),
        timeout_graceful_shutdown=3,
        loop="asyncio",
    )


@app.command()
def lint(
    labs: Annotated[list[str] | None, typer.Argument(help="Lab ids or folders (default: all)")] = None,
    strict: Annotated[bool, typer.Option(help="Treat warnings as errors")] = False,
) -> None:
    """Check lab folders: every problem with its file and field."""
    from labserver.content.lint import lint_all, lint_lab

    settings = Settings()
    if labs:
        results = {}
        for name in labs:
            path = Path(name) if Path(name).is_dir() else settings.labs_dir / name
            if not (path / "lab.yaml").exists() and not path.is_dir():
                typer.echo(f"error: no lab folder {name!r} (looked in {settings.labs_dir})", err=True)
                raise typer.Exit(2)
            results[path.name] = lint_lab(path)
    else:
        results = lint_all(settings.labs_dir)
    errors = warnings = 0
    for lab_id, problems in results.items():
        if not problems:
            typer.echo(f"ok      {lab_id}")
        for problem in problems:
            typer.echo(str(problem))
            errors += problem.level == "error"
            warnings += problem.level == "warning"
    typer.echo(f"{len(results)} labs, {errors} errors, {warnings} warnings")
    if errors or (strict and warnings):
        raise typer.Exit(1)


@app.command()
def selftest(
    lab: Annotated[str, typer.Argument(help="Lab id or folder")],
    solution: Annotated[Path | None, typer.Option(help="Use this solution folder instead")] = None,
    mutants: Annotated[bool, typer.Option(help="Also run the lab's mutants (wrong solutions)")] = True,
    record_costs: Annotated[
        bool,
        typer.Option(
            "--record-costs",
            help="Write each step's check cost on the solution (CPU-s) to checks/costs.yaml",
        ),
    ] = False,
    watch: Annotated[
        bool, typer.Option("--watch", help="Then run again, for the steps a change touched, at every save")
    ] = False,
) -> None:
    """Starter must fail, solution must pass step by step, and every mutant must fail its step,
    on a throwaway local environment; prints a mutant table per step. With --record-costs, each
    step's check cost on the solution goes to the lab's checks/costs.yaml (docs/writing-labs.md)."""
    from labserver.checks.selftest import selftest as run
    from labserver.content.costs import write_costs

    settings = Settings()
    loaded = mutate_cli.lab_or_exit(lab, settings)

    def show(result):  # type: ignore[no-untyped-def]
        mark = typer.style("ok  ", fg="green") if result.ok else typer.style("FAIL", fg="red")
        first = result.verdict.message.splitlines()[0][:110] if result.verdict.message else ""
        typer.echo(
            f"{mark} {result.phase:8} {result.label:40} {result.lang} expected {result.expected:6} got "
            f"{result.verdict.status:7} {result.seconds:5.1f}s {result.problem or first}"
        )
        if not result.ok and result.log:
            typer.echo("       " + result.log[-1500:].replace("\n", "\n       "))

    if watch:
        author_cli.watch_selftest(loaded.path, settings, show, mutants)
        return
    report = run(loaded, settings=settings, solution=solution, on_result=show, mutants=mutants)
    typer.echo("\n".join(["", *report.mutant_table(), ""]))
    unrecorded = False
    if record_costs:
        unrecorded = True
        solved = [r for r in report.results if r.phase == "solution"]
        costs = report.costs()
        if not solved or not all(r.ok for r in solved):
            typer.echo("costs not recorded: the solution did not pass every step", err=True)
        elif missing := [s.id for s in loaded.steps if s.id not in costs]:
            typer.echo(
                f"costs not recorded: no cpu_s in the verdict of {', '.join(missing)} "
                "(a checker that does not end through labkit.check reports none)",
                err=True,
            )
        else:
            path = write_costs(loaded.path, costs, [s.id for s in loaded.steps])
            for step_id, cost in costs.items():
                typer.echo(f"cost {step_id:28} {cost:7.2f} CPU-s")
            typer.echo(f"recorded in {path}")
            unrecorded = False
    if report.ok:
        typer.echo(f"selftest {loaded.id}: all {len(report.results)} checks behaved")
    else:
        names = ", ".join(sorted({f"{r.phase}/{r.step}" for r in report.failures()}))
        typer.echo(f"selftest {loaded.id}: FAILED at {names}", err=True)
        raise typer.Exit(1)
    if unrecorded:
        raise typer.Exit(1)


@app.command()
def check(
    lab: str,
    step: str,
    lab_dir: Annotated[Path | None, typer.Option(help="The lab folder (default: found from here)")] = None,
) -> None:
    """Run one step's check from a terminal, with the output the web page shows."""
    from labserver.cli.check import run_cli_check

    raise typer.Exit(run_cli_check(Settings(), lab, step, lab_dir))


@db_app.command("upgrade")
def db_upgrade(revision: str = "head") -> None:
    """Apply database migrations (also done at every start)."""
    from labserver import db

    settings = Settings()
    db.upgrade(db.make_engine(settings.sqlalchemy_url), revision)
    typer.echo(f"database at {settings.sqlalchemy_url.split('@')[-1]} is at {revision}")


report_cli.register(app)  # report, verify
author_cli.register(app)  # new, import killercoda
mutate_cli.register(app)  # mutate
selfpaced_cli.register(app)  # selfpaced, labs, progress, export-site (listed after the commands above)


def main() -> None:
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
