"""Fixtures for tests against a real Docker engine. No engine = a clear FAILURE, never a skip."""

from __future__ import annotations

import docker
import pytest

from labserver.backends.docker import images


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


@pytest.fixture
def docker_settings(tmp_path, cpu_emu_image: str):  # type: ignore[no-untyped-def]
    from labserver.config import DockerSettings, Settings

    return Settings(data_dir=tmp_path / "data", docker=DockerSettings(image=cpu_emu_image))


@pytest.fixture
def make_spec(tmp_path, cpu_emu_image: str, docker_client):  # type: ignore[no-untyped-def]
    """EnvSpec factory with unique env ids and a small starter; every container and volume whose
    name carries this test's run id is removed afterwards."""
    import uuid

    from labserver.backends.base import EnvSpec, LabSeed

    starter = tmp_path / "starter"
    starter.mkdir()
    (starter / "solution.py").write_text("def answer():\n    return 41\n")
    (starter / "data").mkdir()
    (starter / "data" / "notes.txt").write_text("notes\n")
    run = uuid.uuid4().hex[:8]
    counter = iter(range(1000))

    def make(**kw):  # type: ignore[no-untyped-def]
        n = next(counter)
        kw.setdefault("env_id", f"t{run}-{n}")
        kw.setdefault("event_id", 9000)
        kw.setdefault("attendee_id", n)
        kw.setdefault("labs", (LabSeed("lab1", starter),))
        kw.setdefault("image", cpu_emu_image)
        kw.setdefault("cpus", 0.5)
        kw.setdefault("memory_mb", 512)
        kw.setdefault("pids", 128)
        return EnvSpec(**kw)

    make.run = run  # type: ignore[attr-defined]
    yield make
    cleanup(docker_client, run)


@pytest.fixture
def docker_backend(docker_settings, make_spec, docker_client):  # type: ignore[no-untyped-def]
    import asyncio

    from labserver.backends.docker.backend import DockerBackend

    backend = DockerBackend(docker_settings)
    yield backend
    asyncio.run(backend.aclose())


def cleanup(client: docker.DockerClient, run: str) -> None:
    """Remove every container and volume a test run made (their names carry the run id)."""
    for c in client.containers.list(all=True, filters={"label": "labserver.role"}):
        if run in c.name or run in c.labels.get("labserver.env_id", ""):
            c.remove(force=True)
    for v in client.volumes.list(filters={"label": "labserver.env_id"}):
        if run in v.name:
            v.remove(force=True)


@pytest.fixture(scope="session")
def engine2(cpu_emu_image: str):  # type: ignore[no-untyped-def]
    """URL of a second real Docker engine (started for the session) holding the lab image."""
    from tests.backends.docker import engine2 as e2

    try:
        with e2.second_engine([cpu_emu_image, f"{images.CPU_EMU_REPO}:{images.STABLE_TAG}"]) as url:
            yield url
    except RuntimeError as exc:
        pytest.fail(f"could not start a second Docker engine: {exc}", pytrace=False)
