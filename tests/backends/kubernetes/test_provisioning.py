"""``provisioning/kubernetes/``: rendered by ``kubectl kustomize`` (Debian's ``kubernetes-client``,
kustomize v2, renders it as well as newer ones) and every object validated against the schema."""

from __future__ import annotations

import shutil
import subprocess
from typing import Any

import kubernetes_validate
import pytest
import yaml

from labserver.backends.kubernetes.api import KINDS
from tests.conftest import REPO

ROOT = REPO / "provisioning" / "kubernetes"


def render(overlay: str) -> list[dict[str, Any]]:
    kubectl = shutil.which("kubectl")
    assert kubectl, "kubectl is needed to render provisioning/kubernetes: apt-get install kubernetes-client"
    out = subprocess.run(
        [kubectl, "kustomize", str(ROOT / overlay)], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


@pytest.mark.parametrize("overlay", ["base", "with-postgres"])
def test_kustomize_renders_valid_objects(overlay: str) -> None:
    docs = render(overlay)
    for doc in docs:
        kubernetes_validate.validate(doc, "1.32.0", strict=True)
    kinds = sorted(d["kind"] for d in docs)
    assert {
        "Namespace",
        "ServiceAccount",
        "Role",
        "RoleBinding",
        "ConfigMap",
        "Secret",
        "Deployment",
        "Service",
    } <= set(kinds)
    assert ("StatefulSet" in kinds) == (overlay == "with-postgres")


def test_one_replica_with_probes_since_live_events_are_in_process() -> None:
    (deploy,) = [d for d in render("base") if d["kind"] == "Deployment"]
    assert deploy["spec"]["replicas"] == 1 and deploy["spec"]["strategy"]["type"] == "Recreate"
    container = deploy["spec"]["template"]["spec"]["containers"][0]
    assert (
        container["readinessProbe"]["httpGet"]["path"]
        == container["livenessProbe"]["httpGet"]["path"]
        == "/healthz"
    )
    settings = next(d for d in render("base") if d["kind"] == "ConfigMap")["data"]
    assert settings["LABSERVER_BACKEND"] == "kubernetes"


def test_rbac_is_what_the_backend_calls_and_no_more() -> None:
    (role,) = [d for d in render("base") if d["kind"] == "Role"]
    assert role["metadata"]["namespace"] == "labserver-envs"
    granted = {
        (g, r): set(rule["verbs"])
        for rule in role["rules"]
        for g in rule["apiGroups"]
        for r in rule["resources"]
    }
    plural = {
        "pod": "pods",
        "pvc": "persistentvolumeclaims",
        "secret": "secrets",
        "configmap": "configmaps",
        "serviceaccount": "serviceaccounts",
        "networkpolicy": "networkpolicies",
    }
    assert {r for _, r in granted} == {plural[k] for k in KINDS} | {"pods/exec", "pods/log", "events"}
    assert granted[("", "pods")] == {"get", "list", "create", "delete", "patch"}
    assert granted[("", "pods/exec")] == {"get", "create"}
    assert granted[("", "persistentvolumeclaims")] == {"get", "list", "create", "delete", "patch"}
    assert granted[("", "secrets")] == granted[("", "configmaps")] == {"get", "create", "delete"}
    assert granted[("networking.k8s.io", "networkpolicies")] == {"create"}
    assert all("*" not in verbs for verbs in granted.values())
    assert not [d for d in render("base") if d["kind"] in ("ClusterRole", "ClusterRoleBinding")]
