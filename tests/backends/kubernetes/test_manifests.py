"""The pure builders as data: every manifest validates against the Kubernetes OpenAPI schema
(``kubernetes-validate``, offline, strict: an unknown field fails), card accounting, hardening."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
from typing import Any

import kubernetes_validate
import pytest

from labserver.backends.base import EnvSpec
from labserver.backends.kubernetes import grader, problems
from labserver.backends.kubernetes import manifests as km
from labserver.config import KubernetesSettings
from tests.conftest import REPO

SCHEMA = "1.32.0"
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


def valid(obj: dict[str, Any]) -> None:
    kubernetes_validate.validate(obj, SCHEMA, strict=True)


def spec(device: str = "npu", env_id: str = "ev1-at1", **kw: Any) -> EnvSpec:
    return EnvSpec(
        env_id=env_id,
        event_id=1,
        attendee_id=1,
        device=device,
        image="reg/lab:1",
        cpus=2,
        memory_mb=4096,
        **kw,
    )


def test_every_manifest_is_valid_against_the_schema() -> None:
    cfg = KubernetesSettings(
        scheduler_name="volcano",
        node_selector={"pool": "labs"},
        npu_node_selector={"accelerator": "ascend-910b"},
        tolerations=[{"key": "huawei.com/Ascend910", "operator": "Exists", "effect": "NoSchedule"}],
        storage_class="csi-disk",
    )
    for card in (True, False):
        valid(km.make_pod(spec(), cfg, card=card))
    valid(km.make_pvc(spec(), cfg))
    valid(km.make_service_account())
    for policy in km.make_network_policies(cfg):
        valid(policy)
    digest, maps = grader.bundle_configmaps(grader.bundle([("checks/x.py", b"x")], "lab/checks/c.py", b"c"))
    for cm in maps:
        valid(cm)
    valid(grader.make_secret("labserver-grader-x", job={"nonce": "n"}, key=b"k"))
    valid(
        grader.make_grader_pod(
            name="labserver-grader-1-ev1",
            env_id="ev1-at1",
            image="reg/lab:1",
            pvc="labserver-ws-ev1",
            node="node-a",
            lab_id="demo",
            env={"LAB_ID": "demo"},
            cpus=1,
            memory_mb=1024,
            bundle_sha=digest,
            bundle_maps=[m["metadata"]["name"] for m in maps],
            secret="labserver-grader-x",
            cfg=cfg,
        )
    )


def test_the_schema_check_can_fail() -> None:
    pod = km.make_pod(spec(), KubernetesSettings(), card=False)
    pod["spec"]["containers"][0]["resourcez"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        valid(pod)


def test_card_accounting_npu_vnpu_and_cpu_emulation() -> None:
    """A pod that holds a card asks exactly one of the device plugin's resource, requests ==
    limits (extended resources are never overcommitted: no two pods share the card); a vNPU
    template is its own resource; CPU emulation asks none."""
    npu = km.make_pod(spec("npu"), KubernetesSettings(npu_resource="huawei.com/Ascend910"), card=True)
    res = npu["spec"]["containers"][0]["resources"]
    assert res == {
        "requests": {
            "cpu": "2000m",
            "memory": "4096Mi",
            "ephemeral-storage": "4096Mi",
            "huawei.com/Ascend910": "1",
        },
        "limits": {
            "cpu": "2000m",
            "memory": "4096Mi",
            "ephemeral-storage": "4096Mi",
            "huawei.com/Ascend910": "1",
        },
    }
    vnpu_cfg = KubernetesSettings(npu_resource="huawei.com/Ascend910-4c")
    vnpu = km.make_pod(spec("npu"), vnpu_cfg, card=True)["spec"]["containers"][0]["resources"]
    assert vnpu["requests"]["huawei.com/Ascend910-4c"] == vnpu["limits"]["huawei.com/Ascend910-4c"] == "1"
    assert "huawei.com/Ascend910" not in vnpu["limits"]
    cpu = km.make_pod(spec("cpu"), KubernetesSettings(), card=False)
    limits = cpu["spec"]["containers"][0]["resources"]["limits"]
    assert not [k for k in limits if k.startswith("huawei.com/")]
    env = {e["name"]: e["value"] for e in cpu["spec"]["containers"][0]["env"]}
    assert env["LAB_DEVICE"] == "cpu-emu" and cpu["metadata"]["labels"]["labserver.device"] == "cpu-emu"
    # which labs hold a card
    cfg = KubernetesSettings()
    assert km.wants_card(spec("npu"), cfg) and km.wants_card(spec("any"), cfg)
    assert not km.wants_card(spec("cpu"), cfg) and not km.wants_card(
        spec("npu"), KubernetesSettings(npu_resource="")
    )


def test_hardening_as_on_docker() -> None:
    pod = km.make_pod(spec(), KubernetesSettings(), card=False)
    sec = pod["spec"]["containers"][0]["securityContext"]
    assert sec["runAsUser"] == 1000 and sec["runAsNonRoot"] and sec["readOnlyRootFilesystem"]
    assert sec["capabilities"] == {"drop": ["ALL"]} and sec["allowPrivilegeEscalation"] is False
    assert sec["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["spec"]["automountServiceAccountToken"] is False
    assert km.make_service_account()["automountServiceAccountToken"] is False
    assert pod["metadata"]["annotations"]["labserver.pids"] == "256"  # enforced by the kubelet's podPidsLimit
    mounts = {m["mountPath"] for m in pod["spec"]["containers"][0]["volumeMounts"]}
    assert mounts == {"/workspace", "/tmp", "/home/lab"}
    assert not any(k in pod["spec"] for k in ("hostNetwork", "hostPID", "hostIPC"))


def test_network_policies_deny_egress_and_foreign_ingress() -> None:
    closed, open_ = km.make_network_policies(KubernetesSettings())
    assert closed["spec"]["podSelector"]["matchLabels"]["labserver.network"] == "0"
    assert closed["spec"]["egress"] == [] and set(closed["spec"]["policyTypes"]) == {"Ingress", "Egress"}
    server = {"podSelector": {"matchLabels": {"app.kubernetes.io/name": "labserver"}}}
    assert closed["spec"]["ingress"] == open_["spec"]["ingress"] == [{"from": [server]}]
    assert (
        km.make_pod(spec(network=True), KubernetesSettings(), card=False)["metadata"]["labels"][
            "labserver.network"
        ]
        == "1"
    )


def test_volcano_node_selectors_and_tolerations() -> None:
    cfg = KubernetesSettings(
        scheduler_name="volcano",
        node_selector={"a": "1"},
        npu_node_selector={"b": "2"},
        tolerations=[{"key": "k", "operator": "Exists"}],
    )
    npu, cpu = km.make_pod(spec(), cfg, card=True)["spec"], km.make_pod(spec(), cfg, card=False)["spec"]
    assert npu["schedulerName"] == "volcano" and npu["nodeSelector"] == {"a": "1", "b": "2"}
    assert cpu["nodeSelector"] == {"a": "1"} and cpu["tolerations"] == [{"key": "k", "operator": "Exists"}]
    assert "schedulerName" not in km.make_pod(spec(), KubernetesSettings(), card=False)["spec"]


@pytest.mark.parametrize("env_id", ["ev1-at1", "EV1_at1", "ev1.at1", "评估-1", "x" * 200, "a-2db"])
def test_names_are_deterministic_escaped_and_valid(env_id: str) -> None:
    name = km.pod_name(env_id)
    assert name == km.pod_name(env_id) and len(name) <= 63 and DNS_LABEL.fullmatch(name)
    assert DNS_LABEL.fullmatch(km.pvc_name(env_id)) and len(km.label_value(env_id)) <= 63
    if len(env_id) < 20:
        assert km.unescape(km.escape(env_id)) == env_id
    valid(km.make_pod(spec(env_id=env_id), KubernetesSettings(), card=False))


def test_escaping_is_injective() -> None:
    ids = ["ev1-at1", "ev1-2dat1", "ev1_at1", "ev1.at1", "ev1at1"]
    assert len({km.escape(i) for i in ids}) == len(ids)
    assert km.pod_name("x" * 100) != km.pod_name("x" * 101)


def test_every_problem_has_english_and_chinese() -> None:
    for reason, (en, zh) in problems.MESSAGES.items():
        assert en.isascii() and re.search(r"[\u4e00-\u9fff]", zh), reason
        assert problems.message(reason) == f"{en}\n{zh}"


@pytest.mark.parametrize(
    ("status", "reason"),
    [
        (
            {
                "phase": "Pending",
                "conditions": [
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": "Unschedulable",
                        "message": "0/2 nodes are available: 2 Insufficient huawei.com/Ascend910.",
                    }
                ],
            },
            "no-card",
        ),
        (
            {
                "phase": "Pending",
                "conditions": [
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": "Unschedulable",
                        "message": "0/2 nodes are available: 2 Insufficient cpu.",
                    }
                ],
            },
            "no-room",
        ),
        (
            {"phase": "Pending", "containerStatuses": [{"state": {"waiting": {"reason": "ErrImagePull"}}}]},
            "image-pull",
        ),
        (
            {
                "phase": "Pending",
                "containerStatuses": [{"state": {"waiting": {"reason": "CrashLoopBackOff"}}}],
            },
            "crash",
        ),
        ({"phase": "Failed", "reason": "Evicted"}, "evicted"),
        (
            {
                "phase": "Running",
                "conditions": [
                    {"type": "DisruptionTarget", "status": "True", "reason": "DeletionByTaintManager"}
                ],
            },
            "evicted",
        ),
        ({"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}, None),
        (
            {
                "phase": "Pending",
                "containerStatuses": [{"state": {"waiting": {"reason": "ContainerCreating"}}}],
            },
            None,
        ),
    ],
)
def test_diagnose(status: dict[str, Any], reason: str | None) -> None:
    found = problems.diagnose({"status": status}, "huawei.com/Ascend910")
    assert (found.reason if found else None) == reason


def test_grader_record_must_carry_the_key_and_the_nonce() -> None:
    from labserver.backends.kubernetes.grader_boot import MARK

    key, nonce = b"k" * 32, "n1"
    body = json.dumps({"nonce": nonce, "exit_code": 0})
    good = MARK + json.dumps({"body": body, "mac": hmac.new(key, body.encode(), hashlib.sha256).hexdigest()})
    assert grader.verify(f"noise\n{good}\n".encode(), key, nonce)["valid"]
    assert grader.verify(good.encode(), b"x" * 32, nonce)["why"] == "forged record"
    assert grader.verify(good.encode(), key, "other")["why"] == "forged record"
    assert grader.verify(b"checker printed a pass\n", key, nonce)["why"] == "no record"


def test_grader_bundle_of_the_largest_lab_fits_configmaps() -> None:
    from labserver.backends.docker.grader import grader_lab_files

    checker = sorted((REPO / "labs" / "dsv4-offload" / "checks").glob("*.py"))[0]
    files, name = grader_lab_files(checker)
    blob = grader.bundle(files, name, checker.read_bytes())
    assert blob == grader.bundle(files, name, checker.read_bytes())  # deterministic: cached by hash
    digest, maps = grader.bundle_configmaps(blob)
    assert len(maps) > 1 and digest == hashlib.sha256(blob).hexdigest()
    joined = b"".join(base64.b64decode(next(iter(m["binaryData"].values()))) for m in maps)
    assert joined == blob and all(len(json.dumps(m)) < 1024 * 1024 for m in maps)
