"""Self-paced on the Docker backend (`labserver selfpaced --backend docker`): the learner's
environment is a lab container, checks and files go through it, progress export carries its files."""

from __future__ import annotations

import asyncio
import base64

import pytest
from fastapi.testclient import TestClient

from labserver.backends.docker import images
from labserver.config import DockerSettings
from labserver.selfpaced.server import create_selfpaced_app
from labserver.services.provisioning import environments
from tests.backends.docker.conftest import engine_or_fail
from tests.selfpaced.conftest import HELLO, fail_find_device, make_settings, pass_write_file

pytestmark = pytest.mark.docker


def test_selfpaced_in_a_lab_container(tmp_path) -> None:  # type: ignore[no-untyped-def]
    engine_or_fail()
    try:
        image = images.build_cpu_emu().tag  # cached by content hash
    except images.ImageBuildError as exc:
        pytest.fail(f"could not build the cpu-emu image: {exc}", pytrace=False)
    settings = make_settings(tmp_path / "sp").model_copy(
        update={"backend": "docker", "docker": DockerSettings(image=image)}
    )
    app = create_selfpaced_app(settings)
    ctx = app.state.ctx
    assert ctx.backend.name == "docker"
    try:
        with TestClient(app, headers={"Authorization": f"Bearer {app.state.learner.token}"}) as client:
            env = client.post("/api/v1/environment").json()
            assert (env["state"], env["backend"]) == ("ready", "docker")
            fail_find_device(client)
            pass_write_file(client)
            exported = client.get("/api/v1/progress/export", params={"files": 1}).json()
            lab = next(r for r in exported["labs"] if r["id"] == "getting-started")
            files = {f["path"]: base64.b64decode(f["base64"]) for f in lab["files"]}
            assert files["notes/hello.txt"] == HELLO
            assert {s["id"]: s["status"] for s in lab["steps"]}["write-file"] == "passed"
    finally:
        from sqlmodel import Session

        from labserver.models import Attendee

        with Session(ctx.engine) as session:
            attendee = session.get(Attendee, app.state.learner.attendee_id)
            ref = environments.ref_of(environments.get_row(session, attendee)) if attendee else None
        if ref is not None:
            asyncio.run(ctx.backend.destroy(ref))
