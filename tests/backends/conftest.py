"""The ``backend`` fixture: every backend in ``BACKEND_FACTORIES`` runs the whole contract suite.

A factory takes (settings, tmp_path) and returns a backend. Add yours here."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from labserver.backends.base import Backend
from labserver.backends.local import LocalBackend
from labserver.config import Settings
from tests.backends.docker.factory import docker_factory


def local_factory(settings: Settings, tmp_path: Path) -> Backend:
    return LocalBackend(settings)


def local_unsandboxed_factory(settings: Settings, tmp_path: Path) -> Backend:
    return LocalBackend(settings.model_copy(update={"sandbox": "none"}))


BACKEND_FACTORIES: dict[str, Callable[[Settings, Path], Backend]] = {
    "local": local_factory,
    "local-nosandbox": local_unsandboxed_factory,
    "docker": docker_factory,
}


@pytest.fixture(params=sorted(BACKEND_FACTORIES))
def backend_name(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def backend(backend_name: str, settings: Settings, tmp_path: Path) -> Iterator[Backend]:
    yield BACKEND_FACTORIES[backend_name](settings, tmp_path)
