"""A lab's ``image:`` and the server's CPU / memory settings reach a real container (``docker
inspect``): ``spec_for`` (``services/provisioning/env_spec.py`` rules) -> ``DockerBackend.create``."""

from __future__ import annotations

import asyncio
import shutil
import uuid
from pathlib import Path
from typing import Any

import docker
import pytest
from sqlmodel import Session

from labserver.app import create_app
from labserver.backends.docker.backend import DockerBackend
from labserver.config import DockerSettings, Settings
from labserver.models import Attendee
from labserver.services.joining.events import create_event
from labserver.services.provisioning.environments import spec_for

pytestmark = pytest.mark.docker
REPO = Path(__file__).resolve().parents[3]


def test_lab_image_and_server_limits_reach_the_container(
    tmp_path: Path, cpu_emu_image: str, docker_client: docker.DockerClient
) -> None:
    run = uuid.uuid4().hex[:8]
    lab_image = f"bdtest/lab-image:{run}"  # the cpu-emu image under a name only this lab uses
    docker_client.images.get(cpu_emu_image).tag(lab_image)
    labs = tmp_path / "labs"
    shutil.copytree(REPO / "labs" / "getting-started", labs / "getting-started")
    yaml_path = labs / "getting-started" / "lab.yaml"
    yaml_path.write_text(yaml_path.read_text().replace("image: labserver/cpu-emu", f"image: {lab_image}"))
    prefix = f"bdtest{run}"
    settings = Settings(
        data_dir=tmp_path / "data",
        labs_dir=labs,
        instructor_token="t",
        docker=DockerSettings(image=cpu_emu_image, cpus=0.5, memory_mb=1024, name_prefix=prefix),
    )
    ctx = create_app(settings).state.ctx
    backend = DockerBackend(settings)
    try:
        with Session(ctx.engine, expire_on_commit=False) as s:
            event = create_event(s, title="t", labs=["getting-started"], code=f"IMG{run}")
            assert event.id is not None
            spec = spec_for(ctx, event, Attendee(id=1, event_id=event.id, name="a", token_hash=""))

        async def go() -> dict[str, Any]:
            ref = await backend.create(spec)
            return docker_client.api.inspect_container(ref.infra_id)

        info = asyncio.run(go())
        assert info["Config"]["Image"] == lab_image  # the lab's image, not the server default
        assert info["HostConfig"]["NanoCpus"] == 500_000_000  # LABSERVER_DOCKER__CPUS=0.5
        assert info["HostConfig"]["Memory"] == 1024 * 2**20  # LABSERVER_DOCKER__MEMORY_MB=1024
        assert info["HostConfig"]["MemorySwap"] == 1024 * 2**20  # no swap beyond it
        assert info["Config"]["Labels"]["labserver.memory_mb"] == "1024"  # placement counts the same
    finally:
        for c in docker_client.containers.list(all=True, filters={"label": f"labserver.instance={prefix}"}):
            c.remove(force=True)
        for v in docker_client.volumes.list(filters={"label": f"labserver.instance={prefix}"}):
            v.remove(force=True)
        docker_client.images.remove(lab_image)
        asyncio.run(backend.aclose())
