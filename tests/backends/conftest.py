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
from tests.backends.kubernetes.factory import KUBECONFIG, kubernetes_factory, kubernetes_fake_api_factory


def local_factory(settings: Settings, tmp_path: Path) -> Backend:
    return LocalBackend(settings)


class UnsandboxedAsServerUser(LocalBackend):
    """The contract without bubblewrap. A root server then runs each environment as a uid of its
    own straight on the host's file system, which needs the interpreter and the data folder
    reachable by that uid (docs/security.md); pytest's folders (0700 root) and a Python under a
    0700 /root are not. So this variant keeps the server's user and holds the unsandboxed code paths
    to the contract; the privilege drop without a sandbox has its own test
    (test_local_attacks.py::test_unsandboxed_root_server_*)."""

    def _own_uids(self) -> bool:
        return False


def local_unsandboxed_factory(settings: Settings, tmp_path: Path) -> Backend:
    return UnsandboxedAsServerUser(settings.model_copy(update={"sandbox": "none"}))


BACKEND_FACTORIES: dict[str, Callable[[Settings, Path], Backend]] = {
    "local": local_factory,
    "local-nosandbox": local_unsandboxed_factory,
    "docker": docker_factory,
    "kubernetes-fake_api": kubernetes_fake_api_factory,  # the in-process fake API server (no cluster here)
}
if KUBECONFIG:  # a real cluster: `make test-kubernetes` (fails when LABSERVER_TEST_KUBECONFIG is unset)
    BACKEND_FACTORIES["kubernetes"] = kubernetes_factory


@pytest.fixture(params=sorted(BACKEND_FACTORIES))
def backend_name(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def backend(backend_name: str, settings: Settings, tmp_path: Path) -> Iterator[Backend]:
    yield BACKEND_FACTORIES[backend_name](settings, tmp_path)
