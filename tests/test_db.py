"""Migrations at start, SQLite in WAL mode, and nothing lost across a server restart."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient
from sqlmodel import Session

from labserver.app import create_app
from labserver.config import Settings
from labserver.services.joining.events import create_event
from tests.conftest import join


def test_sqlite_runs_in_wal_mode(tmp_path: Path) -> None:
    app = create_app(Settings(data_dir=tmp_path, instructor_token="t"))
    with app.state.ctx.engine.connect() as conn:
        assert conn.execute(sa.text("PRAGMA journal_mode")).scalar() == "wal"
        tables = set(sa.inspect(conn).get_table_names())
    assert {
        "events",
        "attendees",
        "environments",
        "check_runs",
        "help_requests",
        "announcements",
        "nodes",
        "alembic_version",
    } <= tables


def test_progress_and_workspace_survive_a_restart(settings: Settings) -> None:
    first = create_app(settings)
    with Session(first.state.ctx.engine) as s:
        create_event(s, title="t", labs=["getting-started"], code="TESTCODE")
    with TestClient(first) as client:
        ada = join(client)
        client.put(
            "/api/v1/labs/getting-started/files/notes/hello.txt",
            content="Hello, Ascend!\n你好，昇腾！\n".encode(),
            headers=ada,
        )
        assert (
            client.post("/api/v1/labs/getting-started/steps/write-file/check", headers=ada).json()["status"]
            == "passed"
        )
    first.state.ctx.engine.dispose()

    second = create_app(settings)  # same data dir / database: a restarted server
    with TestClient(second) as client:
        labs = client.get("/api/v1/labs", headers=ada).json()
        steps = {s["id"]: s["status"] for s in labs[0]["progress"]["steps"]}
        assert steps["write-file"] == "passed"
        assert client.get("/api/v1/labs/getting-started/files/notes/hello.txt", headers=ada).text.startswith(
            "Hello"
        )
        assert client.get("/api/v1/environment", headers=ada).json()["state"] == "ready"


def test_in_thread_waits_for_the_thread_when_cancelled() -> None:
    """A cancelled caller (server shutdown) gets its CancelledError only after the thread is done:
    the session it was committing is not closed under it (the cause of IllegalStateChangeError and
    of a write lock left behind in CI)."""
    import asyncio
    import threading

    from labserver.db import in_thread

    started, release_it = threading.Event(), threading.Event()
    finished: list[str] = []

    def commit() -> str:
        started.set()
        release_it.wait(10)
        finished.append("committed")
        return "ok"

    async def caller() -> None:
        await in_thread(commit)

    async def main() -> list[str]:
        task = asyncio.ensure_future(caller())
        while not started.is_set():
            await asyncio.sleep(0.005)
        task.cancel()
        await asyncio.sleep(0.05)
        assert not task.done(), "the cancellation went through while the thread was still committing"
        release_it.set()
        with pytest.raises(asyncio.CancelledError):
            await task
        return finished

    assert asyncio.run(main()) == ["committed"]


def test_in_thread_returns_and_raises_what_the_function_does() -> None:
    import asyncio

    from labserver.db import in_thread

    def boom() -> None:
        raise ValueError("boom")

    assert asyncio.run(in_thread(lambda x: x + 1, 41)) == 42
    with pytest.raises(ValueError, match="boom"):
        asyncio.run(in_thread(boom))
