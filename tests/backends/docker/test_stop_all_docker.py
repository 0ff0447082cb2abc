""" "Stop all environments" on real containers (a name prefix of its own): every container of the
event exits, and an attendee's next action starts theirs again."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import docker
import pytest
from sqlmodel import Session

from labserver.app import create_app
from labserver.backends.base import EnvState
from labserver.config import DockerSettings
from labserver.services.dashboard.env_admin import stop_all
from labserver.services.provisioning.environments import ensure_environment
from tests.services.test_stop_all import settings_for, start_room, states


@pytest.mark.docker
def test_stop_all_stops_real_containers_and_the_next_action_restarts_them(
    tmp_path: Path, cpu_emu_image: str, docker_client: docker.DockerClient
) -> None:
    prefix = f"bds{uuid.uuid4().hex[:8]}"
    app = create_app(
        settings_for(
            tmp_path, backend="docker", docker=DockerSettings(image=cpu_emu_image, name_prefix=prefix)
        )
    )
    ctx = app.state.ctx
    try:
        event, people = start_room(ctx, 3, f"DS{prefix[-6:].upper()}")
        stopped, failed = asyncio.run(stop_all(ctx, event_id=event.id))
        assert len(stopped) == 3 and failed == {}
        label = {"label": f"labserver.instance={prefix}"}
        assert {c.status for c in docker_client.containers.list(all=True, filters=label)} == {"exited"}
        with Session(ctx.engine, expire_on_commit=False) as s:
            ref = asyncio.run(ensure_environment(ctx, s, event=event, attendee=people[1]))
        assert docker_client.containers.get(ref.infra_id).status == "running"
        assert states(ctx, event.id)[ref.env_id][0] == EnvState.ready
    finally:
        for c in docker_client.containers.list(all=True, filters={"label": f"labserver.instance={prefix}"}):
            c.remove(force=True)
        for v in docker_client.volumes.list(filters={"label": f"labserver.instance={prefix}"}):
            v.remove(force=True)
        asyncio.run(ctx.backend.aclose())
