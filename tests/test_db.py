"""Migrations at start, SQLite in WAL mode, and nothing lost across a server restart."""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa
from fastapi.testclient import TestClient
from sqlmodel import Session

from labserver.app import create_app
from labserver.config import Settings
from labserver.services.events import create_event
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
