"""``labserver check LAB STEP`` in a plain terminal: the same checker run and the same verdict text
the web page shows."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import typer

from labserver.backends.base import EnvRef
from labserver.backends.local import MARKER, LocalBackend
from labserver.checks.request import check_request
from labserver.checks.verdict import Verdict, interpret
from labserver.config import Settings
from labserver.content import Lab, load_lab
from labserver.models import CheckStatus
from labserver.selfpaced import learner as selfpaced
from labserver.selfpaced.server import check_through_server

COLORS = {
    CheckStatus.passed: "green",
    CheckStatus.failed: "yellow",
    CheckStatus.error: "red",
    CheckStatus.timeout: "red",
}


def find_lab_dir(lab_id: str, given: Path | None) -> Path:
    if given:
        return given.resolve()
    here = Path.cwd().resolve()
    for candidate in (here, *here.parents):
        if candidate.name == lab_id:
            return candidate
        if (candidate / lab_id).is_dir():
            return candidate / lab_id
    ws = os.environ.get("LAB_WORKSPACE")
    if ws and (Path(ws) / lab_id).is_dir():
        return Path(ws) / lab_id
    if (selfpaced_folder := selfpaced.default_lab_folder(lab_id)) is not None:
        return selfpaced_folder
    raise typer.BadParameter(
        f"cannot find the folder of lab {lab_id!r} from {here}; cd into it or pass --lab-dir"
    )


def print_verdict(verdict: Verdict, log: str) -> None:
    if log.strip():
        typer.echo(typer.style("checker output:", dim=True))
        typer.echo(log.rstrip())
    typer.echo(
        typer.style(f"[{verdict.status}] ", fg=COLORS.get(verdict.status, "white"), bold=True)
        + verdict.message
    )
    for hint in verdict.hints:
        typer.echo(f"  hint: {hint}")
    for key, value in verdict.metrics.items():
        typer.echo(f"  {key} = {value:g}")
    for t in verdict.tables:
        typer.echo(f"\n  {t['title']}\n  " + " | ".join(t["columns"]))
        for row in t["rows"]:
            typer.echo("  " + " | ".join(row))


def exit_code(verdict: Verdict) -> int:
    """0 passed, 1 failed, 2 anything else (error, timeout)."""
    return {CheckStatus.passed: 0, CheckStatus.failed: 1}.get(verdict.status, 2)


def run_cli_check(settings: Settings, lab_id: str, step_id: str, lab_dir: Path | None) -> int:
    lab = load_lab(settings.labs_dir / lab_id)
    if not isinstance(lab, Lab):
        typer.echo(
            f"lab {lab_id!r} is not available: {lab.problems[0] if lab.problems else 'not found'}", err=True
        )
        return 2
    step = lab.step(step_id) or next((s for s in lab.steps if str(s.index + 1) == step_id), None)
    if step is None:
        typer.echo(
            f"lab {lab_id} has no step {step_id!r}; steps: {', '.join(s.id for s in lab.steps)}", err=True
        )
        return 2
    folder = find_lab_dir(lab_id, lab_dir)
    learner = selfpaced.learner_for_folder(folder)  # self-paced: the result goes into its progress
    if learner and (through_server := check_through_server(*learner, lab_id, step.id)) is not None:
        print_verdict(*through_server)
        return exit_code(through_server[0])
    workspace = folder.parent
    # a bare folder (not made by a backend) still runs: mark it as a workspace for this run only
    marker = workspace / MARKER
    created_marker = not marker.exists()
    if created_marker:
        marker.write_text('{"env_id": "cli"}')
    try:
        backend = LocalBackend(
            settings.model_copy(
                update={"sandbox": "none" if os.environ.get("LAB_WORKSPACE") else settings.sandbox}
            )
        )
        ref = EnvRef(
            env_id="cli",
            backend="local",
            infra_id=str(workspace),
            device=os.environ.get("LAB_DEVICE", "cpu-emu"),  # inside an environment: what it was given
        )
        request = check_request(
            lab, step, ref, lang=os.environ.get("LAB_LANG", "en"), log_limit=settings.checks.log_limit_bytes
        )
        raw = asyncio.run(backend.run_check(ref, request))
    finally:
        if created_marker:
            marker.unlink(missing_ok=True)
    # the wall budget the check really had (from its recorded cost), not the step's timeout_s
    verdict = interpret(raw, request.timeout_s, cost_s=lab.costs.get(step.id))
    print_verdict(verdict, raw.log.decode("utf-8", "replace"))
    if learner:
        selfpaced.record_check(*learner, lab_id, step.id, verdict, raw)
    return exit_code(verdict)
