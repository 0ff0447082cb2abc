"""Shared fixtures: settings in a temp folder, the app, an in-process client, an open event.

Set ``LABSERVER_TEST_DATABASE_URL=postgresql://user@host/postgres`` to run every database test on
PostgreSQL instead of SQLite (each test gets a database of its own); ``.ci/run`` runs the suite both
ways."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlmodel import Session

from labserver.app import create_app
from labserver.config import Settings
from labserver.models import Event
from labserver.services.joining.events import create_event

REPO = Path(__file__).resolve().parent.parent
INSTRUCTOR_TOKEN = "test-instructor-token"
EVENT_CODE = "TESTCODE"


@pytest.fixture
def database_url() -> Iterator[str]:
    admin_url = os.environ.get("LABSERVER_TEST_DATABASE_URL", "")
    if not admin_url:
        yield ""
        return
    import sqlalchemy as sa

    from labserver.db import make_engine

    name = f"lstest_{uuid.uuid4().hex[:12]}"
    admin = make_engine(admin_url).execution_options(isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    base = admin_url.rsplit("/", 1)[0]
    try:
        yield f"{base}/{name}"
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.fixture
def settings(tmp_path: Path, database_url: str) -> Settings:
    return Settings(
        data_dir=tmp_path / "data",
        labs_dir=REPO / "labs",
        web_dir=REPO / "web",
        instructor_token=INSTRUCTOR_TOKEN,
        database_url=database_url,
    )


@pytest.fixture
def app(settings: Settings) -> FastAPI:
    return create_app(settings)


@pytest.fixture
def event(app: FastAPI) -> Event:
    with Session(app.state.ctx.engine, expire_on_commit=False) as session:
        return create_event(session, title="Test event", labs=["getting-started"], code=EVENT_CODE)


@pytest.fixture
def client(app: FastAPI) -> Iterator[TestClient]:
    with TestClient(app) as c:
        yield c


def join(client: TestClient, name: str = "Ada", code: str = EVENT_CODE) -> dict[str, str]:
    """Join as ``name``; returns the Authorization header of that attendee (the client also keeps
    the cookie, so prefer passing headers when several attendees share one client)."""
    resp = client.post("/api/v1/join", json={"event_code": code, "name": name})
    assert resp.status_code == 200, resp.text
    client.cookies.clear()
    return {"Authorization": f"Bearer {resp.json()['token']}"}


def instructor_headers() -> dict[str, str]:
    return {"Authorization": f"Bearer {INSTRUCTOR_TOKEN}"}


def iter_routes(app: FastAPI):  # type: ignore[no-untyped-def]
    """Every route of the app (FastAPI keeps included routers nested), as (full_path, route)."""

    def walk(routes, prefix: str = ""):  # type: ignore[no-untyped-def]
        for route in routes:
            original = getattr(route, "original_router", None)
            if original is not None:
                yield from walk(original.routes, prefix + getattr(route.include_context, "prefix", ""))
            else:
                yield prefix + getattr(route, "path", ""), route

    return list(walk(app.routes))


def settle(app: FastAPI, timeout_s: float = 60.0) -> None:
    """Wait until the environment starts begun in the background (at join) are over, so a test that
    writes an environment row itself does not race them."""
    import time

    deadline = time.monotonic() + timeout_s
    while app.state.ctx.background and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not app.state.ctx.background, "environment starts begun at join did not finish"


@pytest.fixture
def as_root() -> None:
    """Nothing is skipped: a run that is not root fails here, saying why (CI runs as root)."""
    assert os.geteuid() == 0, "this test needs root (the root-server case; CI runs as root)"


#: wall seconds of the slowest tests of `make labs` (its --durations, CI of 2026-12-01). They are
#: started first, longest first: the two workers take them in turn and end together, instead of one
#: worker starting a four-minute selftest when the other is nearly done. A scheduling hint only: a
#: stale figure costs time, never a result.
SLOW_FIRST = {
    "test_selftest[dspark-spec]": 245,
    "test_selftest[agent-deploy]": 174,
    "test_selftest[dsv4-offload]": 152,
    "test_selftest[kv-offload]": 106,
    "test_selftest[pypto-kda]": 83,
    "test_selftest_on_docker[getting-started]": 76,
    "test_selftest[sanavideo]": 65,
    "test_selftest[longcat-parallel]": 59,
    "test_selftest_on_docker[dsv4-offload]": 39,
    "test_selftest_on_docker[pypto-kda]": 37,
    "test_selftest[getting-started]": 37,
    "test_selftest_on_docker[kv-offload]": 33,
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: -SLOW_FIRST.get(item.name, 0))  # stable: the rest keep their order
