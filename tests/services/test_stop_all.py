""" "Stop all environments" of an event (``env_admin.stop_all`` and ``POST /api/v1/events/{id}/stop-all``):
every running environment stops, each attendee is told (``env.state`` stopped, reason
``instructor``) and their next action starts it again. Local: a subclass of the real local backend
that can stop (the local backend itself cannot: the route answers 409). Real containers:
``tests/backends/docker/test_stop_all_docker.py``."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient
from sqlmodel import Session

from labserver.app import create_app
from labserver.backends.base import EnvRef, EnvState
from labserver.backends.local import LocalBackend
from labserver.config import Settings
from labserver.live import Kind
from labserver.models import Environment
from labserver.services.dashboard.env_admin import stop_all
from labserver.services.joining.events import create_event, join
from labserver.services.provisioning.environments import ensure_environment
from tests.conftest import INSTRUCTOR_TOKEN, REPO, instructor_headers


class StoppableLocal(LocalBackend):
    """The real local backend plus a ``stop`` (records what was stopped; the workspace stays)."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self.stopped: list[str] = []

    async def stop(self, ref: EnvRef) -> None:
        await asyncio.sleep(0.01)  # an engine call takes time: nothing may wait on the database meanwhile
        self.stopped.append(ref.env_id)


def settings_for(tmp_path: Path, **kw: Any) -> Settings:
    return Settings(
        data_dir=tmp_path / "data",
        labs_dir=REPO / "labs",
        web_dir=REPO / "web",
        instructor_token=INSTRUCTOR_TOKEN,
        **kw,
    )


def start_room(ctx: Any, n: int, code: str) -> tuple[Any, list[Any]]:
    with Session(ctx.engine, expire_on_commit=False) as s:
        event = create_event(s, title="room", labs=["getting-started"], code=code)
        people = [join(s, event_code=code, name=f"p{i}")[0] for i in range(n)]

        async def up() -> None:
            for a in people:
                await ensure_environment(ctx, s, event=event, attendee=a)

        asyncio.run(up())
    return event, people


def states(ctx: Any, event_id: int) -> dict[str, tuple[str, str]]:
    with Session(ctx.engine) as s:
        from sqlmodel import select

        rows = s.exec(select(Environment).where(Environment.event_id == event_id)).all()
        return {r.id: (r.state, r.reason) for r in rows}


def test_stop_all_on_a_stoppable_local_backend_over_the_route(tmp_path: Path) -> None:
    app = create_app(settings_for(tmp_path))
    ctx = app.state.ctx
    ctx.backend = StoppableLocal(ctx.settings)
    event, people = start_room(ctx, 30, "STOPALL")
    sub = ctx.live.subscribe(event.id)
    with TestClient(app) as client:
        resp = client.post(f"/api/v1/events/{event.id}/stop-all", headers=instructor_headers())
        assert resp.status_code == 200, resp.text
        body = resp.json()
    assert len(body["stopped"]) == 30 and body["failed"] == {}
    assert sorted(ctx.backend.stopped) == sorted(body["stopped"])
    assert set(states(ctx, event.id).values()) == {(EnvState.stopped, "instructor")}
    published = []
    while not sub.queue.empty():
        published.append(sub.queue.get_nowait())
    told = {e.attendee_id for e in published if e.kind == Kind.env_state and e.data["state"] == "stopped"}
    assert told == {a.id for a in people}  # each attendee's page hears it
    # the attendee's next action starts theirs again; a second stop-all stops only what runs
    with Session(ctx.engine, expire_on_commit=False) as s:
        asyncio.run(ensure_environment(ctx, s, event=event, attendee=people[0]))
    assert states(ctx, event.id)[f"ev{event.id}-at{people[0].id}"][0] == EnvState.ready
    assert asyncio.run(stop_all(ctx, event_id=event.id)) == ([f"ev{event.id}-at{people[0].id}"], {})


def test_stop_all_refuses_clearly_on_a_backend_that_cannot_stop(tmp_path: Path) -> None:
    app = create_app(settings_for(tmp_path))
    event, _ = start_room(app.state.ctx, 1, "NOSTOP")
    with TestClient(app) as client:
        resp = client.post(f"/api/v1/events/{event.id}/stop-all", headers=instructor_headers())
        assert resp.status_code == 409 and "cannot stop" in resp.json()["detail"]
        assert client.post("/api/v1/events/999/stop-all", headers=instructor_headers()).status_code == 404
    assert set(states(app.state.ctx, event.id).values()) == {(EnvState.ready, "")}


def test_the_dashboard_has_the_button_with_a_confirmation_in_both_languages(tmp_path: Path) -> None:
    app = create_app(settings_for(tmp_path))
    event, _ = start_room(app.state.ctx, 0, "BUTTON")
    with TestClient(app) as client:
        login = client.post(
            "/instructor/login", data={"token": INSTRUCTOR_TOKEN, "name": "Zoe"}, follow_redirects=False
        )
        assert login.status_code == 303
        en = client.get(f"/instructor/events/{event.id}").text
        zh = client.get(f"/instructor/events/{event.id}", headers={"Accept-Language": "zh-CN"}).text
    assert 'id="stop-all"' in en and "Stop all environments" in en and "Stop every environment" in en
    assert "停止全部环境" in zh and 'id="warm-size"' in zh
    strings = json.loads(zh.split('id="i-strings">', 1)[1].split("</script>", 1)[0])
    assert strings["confirm_stop_all"].startswith("要停止本活动的全部环境吗")


class OneFailsLocal(StoppableLocal):
    """The stoppable local backend whose engine refuses to stop one environment."""

    async def stop(self, ref: EnvRef) -> None:
        if ref.env_id.endswith("-at1"):
            raise OSError("engine said no")
        await super().stop(ref)


def test_one_environment_that_will_not_stop_does_not_keep_the_others_running(tmp_path: Path) -> None:
    app = create_app(settings_for(tmp_path))
    ctx = app.state.ctx
    ctx.backend = OneFailsLocal(ctx.settings)
    event, people = start_room(ctx, 3, "ONEFAIL")
    stopped, failed = asyncio.run(stop_all(ctx, event_id=event.id))
    stuck = f"ev{event.id}-at1"
    assert list(failed) == [stuck] and "try again" in failed[stuck] and len(stopped) == 2
    assert states(ctx, event.id)[stuck][0] == EnvState.ready  # not claimed as stopped
