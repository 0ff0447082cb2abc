"""Issue 13 item 9 on Docker: the instructor's "Restart" stops the attendee's container and starts it
again, so a process the attendee detached from the terminal is gone and the shell is new (the
same steps as the local test: tests/routes/test_restart_env.py)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest
from fastapi.testclient import TestClient
from sqlmodel import Session

from labserver.app import create_app
from labserver.config import DockerSettings, Settings
from labserver.services.joining.events import create_event
from tests.conftest import EVENT_CODE, INSTRUCTOR_TOKEN, REPO
from tests.routes.test_restart_env import restart_really_restarts

pytestmark = [pytest.mark.docker, pytest.mark.slow]


@pytest.fixture
def docker_client_app(
    tmp_path: Path, cpu_emu_image: str, docker_client: docker.DockerClient
) -> Iterator[TestClient]:
    prefix = f"lsrst{uuid.uuid4().hex[:8]}"
    settings = Settings(
        data_dir=tmp_path / "data",
        labs_dir=REPO / "labs",
        web_dir=REPO / "web",
        instructor_token=INSTRUCTOR_TOKEN,
        backend="docker",
        docker=DockerSettings(image=cpu_emu_image, name_prefix=prefix),
    )
    app = create_app(settings)
    with Session(app.state.ctx.engine) as session:
        create_event(session, title="Restart", labs=["getting-started"], code=EVENT_CODE)
    try:
        with TestClient(app) as client:
            yield client
    finally:
        for c in docker_client.containers.list(all=True, filters={"label": f"labserver.instance={prefix}"}):
            c.remove(force=True)
        for v in docker_client.volumes.list(filters={"label": f"labserver.instance={prefix}"}):
            v.remove(force=True)


def test_restart_really_restarts_docker(docker_client_app: TestClient) -> None:
    restart_really_restarts(docker_client_app, "docker")
