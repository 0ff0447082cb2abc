"""``labserver doctor``: will this server serve a room (``labserver/services/operations/doctor.py`` has the
checks)? Prints one line per finding and, for each that is not ok, what to fix in English and
Chinese; exits 1 when a check failed (the server would not serve a room), else 0. ``serve`` runs
the same checks at start and prints the problems as warnings (:func:`warn_at_start`)."""

from __future__ import annotations

from typing import Annotated, Literal

import typer

from labserver.config import Settings
from labserver.services.operations.doctor import Finding, Report, Status, diagnose

MARKS = {Status.ok: "ok  ", Status.warn: "WARN", Status.fail: "FAIL", Status.skip: "-   "}
COLOURS = {Status.ok: "green", Status.warn: "yellow", Status.fail: "red", Status.skip: None}
Lang = Literal["both", "en", "zh"]


def lines(finding: Finding, lang: Lang = "both", *, colour: bool = True) -> list[str]:
    mark = MARKS[finding.status]
    fg = COLOURS[finding.status]
    head = typer.style(mark, fg=fg) if colour and fg else mark
    out = [f"  {head}  {finding.check:10} {finding.detail}"]
    if finding.fix and finding.status in (Status.warn, Status.fail):
        if lang in ("both", "en"):
            out.append(f"  {'':4}  {'':10} fix: {finding.fix_text('en')}")
        if lang in ("both", "zh"):
            out.append(f"  {'':4}  {'':10} 修复: {finding.fix_text('zh')}")
    return out


def summary(report: Report) -> str:
    fails, warns = len(report.failures), len(report.warnings)
    if fails:
        return f"{fails} problem(s) would stop this server from serving a room; {warns} warning(s)."
    return f"ready to serve a room; {warns} warning(s)."


def doctor(
    host: Annotated[str, typer.Option(help="Address serve will listen on")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port serve will listen on")] = 8000,
    lang: Annotated[str, typer.Option(help="Language of the fixes: both, en or zh")] = "both",
) -> None:
    """Check what the server needs (engine, images, sandbox, limits, disk, database, clock, port,
    labs); say what to fix in English and Chinese; exit 1 if the server would not serve a room."""
    if lang not in ("both", "en", "zh"):
        typer.echo("error: --lang is both, en or zh", err=True)
        raise typer.Exit(2)
    settings = Settings()
    typer.echo(f"labserver doctor: backend {settings.backend}, data {settings.data_dir}")
    report = diagnose(settings, host=host, port=port)
    for finding in report.findings:
        for line in lines(finding, lang):  # type: ignore[arg-type]
            typer.echo(line)
    typer.echo(summary(report))
    raise typer.Exit(0 if report.ok else 1)


def warn_at_start(settings: Settings, host: str, port: int) -> Report:
    """For ``serve``: the same checks, the findings that are not ok printed as warnings on stderr
    (the server starts anyway)."""
    report = diagnose(settings, host=host, port=port)
    problems = [f for f in report.findings if f.status in (Status.warn, Status.fail)]
    if problems:
        typer.echo("  doctor    : " + summary(report) + " (labserver doctor for all checks)", err=True)
        for finding in problems:
            for line in lines(finding):
                typer.echo("  " + line, err=True)
    return report
