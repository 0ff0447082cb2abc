"""``labserver env ...``: list, stop and reap environments of the configured backend.

``list`` joins what the backend finds (``discover``) with the database rows; ``reap-orphans``
removes environments that have no row (never without a database to compare with), plus grader
containers left behind by a server that died mid-check."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated, Any

import typer

from labserver.backends import make_backend
from labserver.backends.base import Backend, Closable, EnvRef, Stoppable
from labserver.config import Settings

app = typer.Typer(help="Attendee environments of the configured backend.", no_args_is_help=True)


def _backend(settings: Settings) -> Backend:
    return make_backend(settings)


def _db_rows(settings: Settings) -> dict[str, Any] | None:
    """Environment rows by id, or None when there is no database yet."""
    url = settings.sqlalchemy_url
    if url.startswith("sqlite:///") and not Path(url.removeprefix("sqlite:///")).exists():
        return None
    from sqlmodel import select

    from labserver.db import make_engine, session_scope
    from labserver.models import Environment

    engine = make_engine(url)
    try:
        with session_scope(engine) as session:
            return {row.id: row for row in session.exec(select(Environment)).all()}
    except Exception as exc:  # noqa: BLE001 - no tables yet, server down, ...
        typer.echo(f"warning: could not read the database: {exc}", err=True)
        return None
    finally:
        engine.dispose()


async def _close(backend: Backend) -> None:
    if isinstance(backend, Closable):
        await backend.aclose()


@app.command("list")
def list_envs(
    all_nodes: Annotated[
        bool, typer.Option("--status/--no-status", help="Ask each environment's state.")
    ] = True,
) -> None:
    """Every environment the backend finds, with its node, device, state and database row."""
    settings = Settings()
    rows = _db_rows(settings)

    async def go() -> list[tuple[EnvRef, str]]:
        backend = _backend(settings)
        try:
            out = []
            for ref in await backend.discover():
                state = (await backend.status(ref)).state.value if all_nodes else "-"
                out.append((ref, state))
            return out
        finally:
            await _close(backend)

    found = asyncio.run(go())
    typer.echo(f"{'ENV':<28} {'NODE':<14} {'DEVICE':<9} {'STATE':<12} {'DB':<12} CONTAINER")
    for ref, state in found:
        row = rows.get(ref.env_id) if rows is not None else None
        db = row.state if row is not None else ("ORPHAN" if rows is not None else "?")
        name = str(ref.data.get("container", ref.infra_id))[:40]
        typer.echo(f"{ref.env_id:<28} {ref.node:<14} {ref.device:<9} {state:<12} {db:<12} {name}")
    if rows is not None:
        missing = sorted(set(rows) - {r.env_id for r, _ in found})
        for env_id in missing:
            if rows[env_id].backend == settings.backend:
                typer.echo(f"{env_id:<28} {'-':<14} {'-':<9} {'missing':<12} {rows[env_id].state:<12} -")
    typer.echo(f"{len(found)} environment(s)")


def _find(found: list[EnvRef], env_id: str) -> EnvRef:
    for ref in found:
        if ref.env_id == env_id:
            return ref
    typer.echo(f"error: no environment {env_id!r} found by the {Settings().backend} backend", err=True)
    raise typer.Exit(1)


@app.command("stop")
def stop(
    env_ids: Annotated[list[str], typer.Argument(help="Environment ids (see `labserver env list`).")],
    destroy: Annotated[bool, typer.Option(help="Also remove the container and its workspace.")] = False,
) -> None:
    """Stop environments (the workspace stays; the attendee's next start resumes it)."""
    settings = Settings()

    async def go() -> None:
        backend = _backend(settings)
        try:
            found = await backend.discover()
            for env_id in env_ids:
                ref = _find(found, env_id)
                if destroy:
                    await backend.destroy(ref)
                    typer.echo(f"{env_id}: destroyed")
                elif isinstance(backend, Stoppable):
                    await backend.stop(ref)
                    typer.echo(f"{env_id}: stopped")
                else:
                    typer.echo(f"{env_id}: the {backend.name} backend has nothing to stop (use --destroy)")
        finally:
            await _close(backend)

    asyncio.run(go())


@app.command("reap-orphans")
def reap_orphans(
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Only report.")] = False,
    force: Annotated[
        bool, typer.Option(help="Reap even without a database (removes everything found).")
    ] = False,
) -> None:
    """Remove environments with no database row, and grader containers left by a crashed check."""
    settings = Settings()
    rows = _db_rows(settings)
    if rows is None and not force:
        typer.echo(
            "error: no database to compare with; refusing (use --force to remove everything found)", err=True
        )
        raise typer.Exit(1)

    async def go() -> int:
        backend = _backend(settings)
        reaped = 0
        try:
            for ref in await backend.discover():
                if rows is not None and ref.env_id in rows:
                    continue
                typer.echo(f"{'would reap' if dry_run else 'reaping'} {ref.env_id} on {ref.node}")
                if not dry_run:
                    await backend.destroy(ref)
                reaped += 1
            reaped += await _reap_graders(backend, dry_run)
        finally:
            await _close(backend)
        return reaped

    count = asyncio.run(go())
    typer.echo(f"{count} orphan(s) {'found' if dry_run else 'reaped'}")


async def _reap_graders(backend: Backend, dry_run: bool, older_than_s: float = 600.0) -> int:
    """Grader containers older than ``older_than_s`` (a live check never lasts that long)."""
    from labserver.backends.docker.backend import DockerBackend

    if not isinstance(backend, DockerBackend):
        return 0
    stale = await backend.stale_graders(older_than_s)
    for container in stale:
        typer.echo(f"{'would remove' if dry_run else 'removing'} stale grader {container.name}")
        if not dry_run:
            await backend.remove_container(container)
    return len(stale)
