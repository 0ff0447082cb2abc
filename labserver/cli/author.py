"""A lab author's commands: ``labserver new LAB`` (:mod:`labserver.content.scaffold`), ``labserver
import killercoda DIR`` (:mod:`labserver.content.killercoda`) and the loop of ``labserver selftest
LAB --watch`` (:mod:`labserver.checks.selftest_watch`). ``serve --dev`` is in ``cli/main.py``
beside ``serve``. docs/writing-labs.md opens with the tutorial that uses them."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer

from labserver.config import Settings

import_app = typer.Typer(no_args_is_help=True, help="Bring labs written for other platforms in")


def register(app: typer.Typer) -> None:
    app.command("new")(new)
    app.add_typer(import_app, name="import")


def new(
    folder: Annotated[Path, typer.Argument(help="The new lab's folder; its name is the lab id")],
) -> None:
    """Write a new lab that lints and self-tests as it is: one step in English and Chinese, its
    check, starter, solution and three mutants (docs/writing-labs.md, the 15-minute tutorial)."""
    from labserver.content.scaffold import ScaffoldRefused, new_lab

    try:
        written = new_lab(folder)
    except ScaffoldRefused as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    typer.echo(f"wrote {len(written)} files in {folder}/")
    for path in written:
        typer.echo(f"  {path.relative_to(folder)}")
    typer.echo("")
    typer.echo("next:")
    typer.echo(f"  labserver selftest {folder}        # starter fails, solution passes, mutants fail")
    typer.echo(f"  labserver serve --dev {folder}     # see it as an attendee; edits show at once")


@import_app.command("killercoda")
def import_killercoda(
    scenario: Annotated[Path, typer.Argument(help="A Killercoda scenario folder (with index.json)")],
    out: Annotated[
        Path | None, typer.Option(help="The lab folder to write (default: ./<scenario folder name>)")
    ] = None,
    lab_id: Annotated[
        str | None, typer.Option("--id", help="The lab id (default: the out folder's name)")
    ] = None,
) -> None:
    """Write a lab from a Killercoda scenario: index.json steps to steps, verify.sh to checks,
    background.sh/foreground.sh to set-up, assets to the starter (mapping in docs/writing-labs.md).
    Refuses Kubernetes playgrounds and multi-host scenarios, with the reason."""
    from labserver.content.killercoda import NotMappable, import_scenario

    dest = out or Path(scenario.resolve().name)
    try:
        result = import_scenario(scenario, dest, lab_id)
    except (NotMappable, FileExistsError) as exc:  # what cannot run, or a folder already there
        typer.echo(f"error: cannot import {scenario}: {exc}", err=True)
        raise typer.Exit(2) from None
    typer.echo(f"wrote the lab {result.lab.name} in {result.lab}/")
    for warning in result.warnings:
        typer.echo(f"warning: {warning}")
    typer.echo("to translate into Simplified Chinese:")
    for item in result.to_translate:
        typer.echo(f"  {item}")
    typer.echo(f"next: labserver lint {result.lab}; labserver serve --dev {result.lab}")


def watch_selftest(path: Path, settings: Settings, show: Callable, mutants: bool) -> None:  # type: ignore[type-arg]
    """``selftest --watch``: the whole self-test, then the affected steps after every save."""
    from labserver.checks.selftest_watch import watch_selftest as loop

    def report(rep) -> None:  # type: ignore[no-untyped-def]
        typer.echo("\n".join(["", *rep.mutant_table(), ""]))
        verdict = (
            "all behaved"
            if rep.ok
            else "FAILED at " + ", ".join(sorted({f"{r.phase}/{r.step}" for r in rep.failures()}))
        )
        typer.echo(f"selftest {path.name}: {verdict}; watching {path} for changes (Ctrl+C to stop)")

    def problems(found) -> None:  # type: ignore[no-untyped-def]
        for problem in found:
            typer.echo(str(problem), err=True)
        typer.echo(f"{path.name} does not load; waiting for the next save", err=True)

    def run(steps: list[str]) -> None:
        typer.echo(f"--- selftest {path.name}: {', '.join(steps)}")

    try:
        loop(
            path,
            settings,
            on_result=show,
            on_report=report,
            on_problems=problems,
            on_run=run,
            mutants=mutants,
        )
    except KeyboardInterrupt:
        typer.echo("stopped")
