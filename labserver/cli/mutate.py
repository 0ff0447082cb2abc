"""``labserver mutate LAB``: machine-made mutants of the attendee's code against the lab's checks
(:mod:`labserver.checks.mutate`; docs/writing-labs.md, "Machine-made mutants")."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from labserver.config import Settings
from labserver.content import Lab


def lab_or_exit(lab: str, settings: Settings) -> Lab:
    """The lab ``lab`` names (a folder, or an id under the labs folder); its problems and exit 2
    when it does not load."""
    from labserver.content import load_lab

    loaded = load_lab(Path(lab) if Path(lab).is_dir() else settings.labs_dir / lab)
    if not isinstance(loaded, Lab):
        for problem in loaded.problems:
            typer.echo(str(problem), err=True)
        raise typer.Exit(2)
    return loaded


def register(app: typer.Typer) -> None:
    app.command()(mutate)


def mutate(
    lab: Annotated[str, typer.Argument(help="Lab id or folder")],
    step: Annotated[
        list[str] | None, typer.Option(help="Only the mutants this step judges (repeatable)")
    ] = None,
    limit: Annotated[int | None, typer.Option(help="At most N mutants per group of judging steps")] = None,
    operator: Annotated[list[str] | None, typer.Option(help="Only these operators (repeatable)")] = None,
    list_only: Annotated[bool, typer.Option("--list", help="List the mutants, run nothing")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON document instead of the tables")] = False,
) -> None:
    """Mutate the code the attendee writes (the solution's functions that differ from the
    starter) and run the judging step's check on each mutant: killed / timeout / error / survived,
    with the diff of every survivor. Exits 1 when a mutant survives or a check errors."""
    from labserver.checks.mutate import OUTCOMES, plan, survivor_text
    from labserver.checks.mutate import mutate as run
    from labserver.checks.mutation import OPERATORS

    settings = Settings()
    loaded = lab_or_exit(lab, settings)
    unknown = [s for s in step or [] if loaded.step(s) is None] + [
        o for o in operator or [] if o not in OPERATORS
    ]
    if unknown:
        typer.echo(
            f"unknown step or operator: {', '.join(unknown)} (steps: {', '.join(s.id for s in loaded.steps)}; "
            f"operators: {', '.join(OPERATORS)})",
            err=True,
        )
        raise typer.Exit(2)
    if list_only:
        for m, judges in plan(loaded, steps=step, limit=limit, operators=operator):
            typer.echo(f"{m.key} {m.summary}  <- {', '.join(judges)}")
        return

    def show(r):  # type: ignore[no-untyped-def]
        if not as_json:
            color = {"killed": "green", "timeout": "yellow", "equivalent": "blue"}.get(r.outcome, "red")
            typer.echo(
                f"{typer.style(f'{r.outcome:10}', fg=color)} {r.cpu_s:5.2f} CPU-s {r.mutation.summary}"
            )

    report = run(loaded, settings=settings, steps=step, limit=limit, operators=operator, on_result=show)
    if report.baseline:
        typer.echo("the solution must pass before its mutants mean anything:", err=True)
        for line in report.baseline:
            typer.echo("  " + line, err=True)
        raise typer.Exit(2)
    if as_json:
        doc = {
            "lab": report.lab,
            "counts": report.counts(),
            "score": report.score(report.counts()),
            "stale_equivalents": report.stale,
            "results": [
                {
                    "key": r.mutation.key,
                    "summary": r.mutation.summary,
                    "operator": r.mutation.operator,
                    "steps": list(r.steps),
                    "outcome": r.outcome,
                    "step": r.step,
                    "message": r.message,
                    "cpu_s": round(r.cpu_s, 3),
                    "diff": r.mutation.diff(report.originals.get(r.mutation.path, "")),
                }
                for r in report.results
            ],
        }
        typer.echo(json.dumps(doc, ensure_ascii=False, indent=1))
    else:
        typer.echo("\n".join(["", *survivor_text(report), "", *report.table()]))
        if report.stale:
            typer.echo(
                f"\nmutants/equivalent.yaml lists keys no mutant has any more: {', '.join(report.stale)}"
            )
    assert set(report.counts()) == set(OUTCOMES)
    if report.survivors():
        raise typer.Exit(1)
