"""Fixtures for tests against a real Docker engine. No engine = a clear FAILURE, never a skip."""

from __future__ import annotations

import docker
import pytest

from labserver import images


def engine_or_fail(base_url: str | None = None) -> docker.DockerClient:
    try:
        client = (
            docker.DockerClient(base_url=base_url, version="auto")
            if base_url
            else docker.from_env(version="auto")
        )
        client.ping()
    except Exception as exc:  # noqa: BLE001 - any failure here means "no engine"
        pytest.fail(
            f"No Docker engine answers at {base_url or 'DOCKER_HOST/default socket'} ({exc}). "
            "Start one: `dockerd > /tmp/dockerd.log 2>&1 &` (apt-get install -y docker.io)",
            pytrace=False,
        )
    return client


@pytest.fixture(scope="session")
def docker_client() -> docker.DockerClient:
    return engine_or_fail()


@pytest.fixture(scope="session")
def cpu_emu_image(docker_client: docker.DockerClient) -> str:
    """The cpu-emu image tag for the current sources (built once, then cached by content hash)."""
    try:
        result = images.build_cpu_emu()
    except images.ImageBuildError as exc:
        pytest.fail(f"could not build the cpu-emu image: {exc}\n{exc.log}", pytrace=False)
    return result.tag
