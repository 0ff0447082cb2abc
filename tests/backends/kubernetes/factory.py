"""The Kubernetes entries of the contract suite's ``BACKEND_FACTORIES`` (tests/backends/conftest.py).

``kubernetes-fake_api`` (:func:`kubernetes_fake_api_factory`, always listed): the backend against
the in-process fake API server (``fake_api.py``), whose exec WebSocket runs commands as local
processes in each pod's sandboxed file system and whose grader pods run to completion: the whole
client path, exec, terminals, files and checks, on every CI run. One fake cluster per test
(per ``tmp_path``), so a "restarted server" made by a second call finds the first one's pods.

``kubernetes`` (:func:`kubernetes_factory`), present only when ``LABSERVER_TEST_KUBECONFIG`` names
a cluster (``make test-kubernetes``, which fails when it is unset; no cluster can run on the CI
machines, so ``make test`` does not list it):

- ``LABSERVER_TEST_KUBECONFIG``: the kubeconfig (kind, k3s, or a real cluster)
- ``LABSERVER_TEST_KUBE_NAMESPACE`` (default ``labserver-test``): must exist
- ``LABSERVER_TEST_KUBE_IMAGE`` (default ``labserver/cpu-emu:latest``): pre-loaded on the nodes
  (``kind load docker-image``, ``k3s ctr images import``), pulled ``IfNotPresent``

Each test gets its own name prefix, so fixed environment ids never collide between tests, and a
"restarted server" built with the same settings and tmp_path finds the first one's pods."""

from __future__ import annotations

import atexit
import hashlib
import os
from pathlib import Path

from labserver.backends.base import Backend
from labserver.backends.kubernetes.backend import KubernetesBackend
from labserver.config import Settings
from tests.backends.kubernetes.fake_api import FakeCluster

KUBECONFIG = os.environ.get("LABSERVER_TEST_KUBECONFIG", "")
_FAKES: dict[Path, FakeCluster] = {}


def _close_all() -> None:
    for cluster in _FAKES.values():
        cluster.close()


def fake_cluster_for(tmp_path: Path) -> FakeCluster:
    """The fake cluster of this test (made on first use, closed when the test process ends)."""
    if tmp_path not in _FAKES:
        if not _FAKES:
            atexit.register(_close_all)
        root = tmp_path / "fake-cluster"
        root.mkdir(exist_ok=True)
        _FAKES[tmp_path] = FakeCluster(root)
    return _FAKES[tmp_path]


def kubernetes_fake_api_factory(settings: Settings, tmp_path: Path) -> Backend:
    cluster = fake_cluster_for(tmp_path)
    cfg = settings.kubernetes.model_copy(update={"namespace": "t", "api_attempts": 3, "workspace_gi": 1})
    backend = KubernetesBackend(
        settings.model_copy(update={"kubernetes": cfg}), configuration=cluster.configuration()
    )
    backend.poll_s = 0.02
    return backend


def kubernetes_factory(settings: Settings, tmp_path: Path) -> Backend:
    prefix = f"lstest{os.getpid()}x{hashlib.sha256(str(tmp_path).encode()).hexdigest()[:6]}"
    cfg = settings.kubernetes.model_copy(
        update={
            "kubeconfig": Path(KUBECONFIG),
            "namespace": os.environ.get("LABSERVER_TEST_KUBE_NAMESPACE", "labserver-test"),
            "npu_resource": os.environ.get("LABSERVER_TEST_KUBE_NPU_RESOURCE", ""),
            "workspace_gi": 1,
            "ready_timeout_s": 180.0,
        }
    )
    docker = settings.docker.model_copy(
        update={"image": os.environ.get("LABSERVER_TEST_KUBE_IMAGE", "labserver/cpu-emu:latest")}
    )
    return KubernetesBackend(settings.model_copy(update={"kubernetes": cfg, "docker": docker}), prefix=prefix)
