"""The Kubernetes entry of the contract suite's ``BACKEND_FACTORIES`` (tests/backends/conftest.py),
present only when ``LABSERVER_TEST_KUBECONFIG`` names a cluster (``make test-kubernetes``, which
fails when it is unset; no cluster can run on the CI machines, so ``make test`` does not list it).

- ``LABSERVER_TEST_KUBECONFIG``: the kubeconfig (kind, k3s, or a real cluster)
- ``LABSERVER_TEST_KUBE_NAMESPACE`` (default ``labserver-test``): must exist
- ``LABSERVER_TEST_KUBE_IMAGE`` (default ``labserver/cpu-emu:latest``): pre-loaded on the nodes
  (``kind load docker-image``, ``k3s ctr images import``), pulled ``IfNotPresent``

Each test gets its own name prefix, so fixed environment ids never collide between tests, and a
"restarted server" built with the same settings and tmp_path finds the first one's pods."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from labserver.backends.base import Backend
from labserver.backends.kubernetes.backend import KubernetesBackend
from labserver.config import Settings

KUBECONFIG = os.environ.get("LABSERVER_TEST_KUBECONFIG", "")


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
