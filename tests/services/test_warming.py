"""Warm pools follow the events (``services/provisioning/warming.py``): filled at server start for open events,
when an event opens or its pool size changes, emptied when it closes. The backend is a subclass of
the real local backend that records ``prepare_event`` calls (the local backend keeps no pool)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from fastapi.testclient import TestClient
from sqlmodel import Session

from labserver.app import create_app
from labserver.backends.base import EnvSpec
from labserver.backends.local import LocalBackend
from labserver.config import DockerSettings, Settings
from labserver.services.joining.events import create_event
from tests.conftest import INSTRUCTOR_TOKEN, REPO, instructor_headers


class PoolRecordingLocal(LocalBackend):
    """The real local backend, recording what a warm pool would be asked to do."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self.asked: list[tuple[int, int]] = []

    async def prepare_event(self, event_id: int, template: EnvSpec, size: int | None = None) -> int:
        await asyncio.sleep(0)
        self.asked.append((event_id, -1 if size is None else size))
        return size or 0


def wait_for(cond, timeout: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "the background warming never came"
        time.sleep(0.01)


def test_pools_fill_at_start_on_open_and_resize_and_empty_on_close(tmp_path: Path) -> None:
    settings = Settings(
        data_dir=tmp_path / "data",
        labs_dir=REPO / "labs",
        web_dir=REPO / "web",
        instructor_token=INSTRUCTOR_TOKEN,
        docker=DockerSettings(warm_pool=2),
    )
    app = create_app(settings)
    ctx = app.state.ctx
    backend = PoolRecordingLocal(settings)
    ctx.backend = backend
    with Session(ctx.engine, expire_on_commit=False) as s:
        already = create_event(s, title="open before start", labs=["getting-started"], code="EARLY")
    with TestClient(app) as client:
        wait_for(lambda: (already.id, 2) in backend.asked)  # server start: no 60 s tick to wait for
        made = client.post(
            "/api/v1/events",
            json={"title": "room", "labs": ["getting-started"]},
            headers=instructor_headers(),
        ).json()
        wait_for(lambda: (made["id"], 2) in backend.asked)  # a new event is open: its pool fills now
        resp = client.patch(
            f"/api/v1/events/{made['id']}", json={"warm_pool": 30}, headers=instructor_headers()
        )
        assert resp.status_code == 200 and resp.json()["warm_pool"] == 30
        wait_for(lambda: (made["id"], 30) in backend.asked)  # the expected head count
        bad = client.patch(
            f"/api/v1/events/{made['id']}", json={"warm_pool": -1}, headers=instructor_headers()
        )
        assert bad.status_code == 400 and bad.json()["detail"]["field"] == "warm_pool"
        client.post(
            f"/api/v1/events/{made['id']}/status", json={"status": "closed"}, headers=instructor_headers()
        )
        wait_for(lambda: (made["id"], 0) in backend.asked)  # closed: emptied
        client.post(
            f"/api/v1/events/{made['id']}/status", json={"status": "open"}, headers=instructor_headers()
        )
        wait_for(lambda: backend.asked.count((made["id"], 30)) == 2)
        reset = client.patch(
            f"/api/v1/events/{made['id']}", json={"warm_pool": None}, headers=instructor_headers()
        )
        assert reset.json()["warm_pool"] is None
        wait_for(lambda: backend.asked.count((made["id"], 2)) == 2)  # back to the server's setting
