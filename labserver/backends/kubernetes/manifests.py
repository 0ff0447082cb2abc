"""Pure builders for the Kubernetes backend: names, labels and manifests (no cluster needed).

Every function here returns plain JSON-able dicts (the objects the API takes), so tests validate
them against the Kubernetes OpenAPI schema offline and assert on them as data; ``api.py`` only sends
them.

Why a bare Pod per attendee and not a StatefulSet of one: labserver is the controller. It keeps each
environment's state on its database row, re-adopts pods by label after a restart, and decides what
happens when a pod is lost (the attendee is told, the instructor recreates, possibly on another node
or on CPU emulation). A StatefulSet would bring back a lost pod by itself, on the same card request,
behind the server's back, and would need a second object per attendee for nothing; "stop" is then
simply deleting the pod, keeping the PVC.

Card accounting (:func:`resources_for`): a pod that holds an Ascend card asks the device plugin's
extended resource (``huawei.com/Ascend910: 1``, or a vNPU template such as
``huawei.com/Ascend910-4c``) with requests == limits. Extended resources are whole numbers that
Kubernetes never overcommits, so a card (or a vNPU slice) requested by one pod is never given to
another; the device plugin sets the visible device inside the container. A CPU-emulation pod asks
for no card at all.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

import labserver
from labserver.backends.base import EnvSpec
from labserver.config import KubernetesSettings

LABEL_ENV = "labserver.env_id"
LABEL_ENV_NAME = "labserver.env-name"  # the escaped env id (label values are short and plain)
LABEL_INSTANCE = "labserver.instance"
LABEL_ROLE = "labserver.role"  # env | warm | grader
LABEL_EVENT = "labserver.event"
LABEL_NETWORK = "labserver.network"
ANNOTATION_ENV = "labserver.env_id"  # the env id as it is (annotations take any string)
ANNOTATION_NOTICE = "labserver.notice"
WORKSPACE = "/workspace"
HOME = "/home/lab"
UID = 1000
DEFAULT_PREFIX = "labserver"
CONTAINER = "lab"
MAX_NAME = 63  # a pod's name is its hostname label: at most 63 characters

_KEEP = re.compile(r"[a-z0-9]")


def escape(value: str) -> str:
    """Injective escaping to the DNS-label alphabet: ``[a-z0-9]`` kept, anything else (``-``
    included, so the map is reversible) becomes ``-xx``, hex per UTF-8 byte."""
    out = []
    for ch in value:
        if _KEEP.fullmatch(ch):
            out.append(ch)
        else:
            out.extend(f"-{b:02x}" for b in ch.encode())
    return "".join(out)


def unescape(value: str) -> str:
    raw = bytearray()
    i = 0
    while i < len(value):
        if value[i] == "-":
            raw.append(int(value[i + 1 : i + 3], 16))
            i += 3
        else:
            raw.extend(value[i].encode())
            i += 1
    return raw.decode()


def _bounded(name: str) -> str:
    """A name of at most :data:`MAX_NAME` characters: a longer one keeps its start and a hash of the
    whole, so it stays deterministic and distinct (the env id itself is in an annotation)."""
    if len(name) <= MAX_NAME:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:10]
    return f"{name[: MAX_NAME - 11].rstrip('-')}-{digest}"


def pod_name(env_id: str, prefix: str = DEFAULT_PREFIX) -> str:
    """``<prefix>-e-<escaped env id>``: deterministic, so ``create`` finds it again."""
    return _bounded(f"{prefix}-e-{escape(env_id)}")


def pvc_name(env_id: str, prefix: str = DEFAULT_PREFIX) -> str:
    return _bounded(f"{prefix}-ws-{escape(env_id)}")


def warm_name(event_id: int, serial: str, prefix: str = DEFAULT_PREFIX) -> str:
    return _bounded(f"{prefix}-warm-ev{event_id}-{escape(serial)}")


def grader_name(env_id: str, token: str, prefix: str = DEFAULT_PREFIX) -> str:
    return _bounded(f"{prefix}-grader-{token}-{escape(env_id)}")


def service_account_name(prefix: str = DEFAULT_PREFIX) -> str:
    return f"{prefix}-env"


def label_value(value: str) -> str:
    """A label value (at most 63 of ``[A-Za-z0-9._-]``, alphanumeric at both ends) for any
    string: the escaped form, bounded."""
    return _bounded(escape(value)) or "none"


def selector(prefix: str = DEFAULT_PREFIX, **labels: str) -> str:
    """A label selector string for this server's objects (``labserver.instance=<prefix>,...``)."""
    pairs = {LABEL_INSTANCE: prefix, **labels}
    return ",".join(f"{k}={v}" for k, v in pairs.items())


def wants_card(spec: EnvSpec, cfg: KubernetesSettings) -> bool:
    """True when the environment should hold a card: the lab needs or allows an NPU and the
    cluster has a card resource configured (``device: cpu`` labs never get one)."""
    return bool(cfg.npu_resource) and spec.device in ("npu", "any")


def resources_for(spec: EnvSpec, cfg: KubernetesSettings, *, card: bool) -> dict[str, Any]:
    """Requests and limits of the attendee's container. CPU and memory: requests == limits (the
    pod is Guaranteed: an attendee's share is not taken by a neighbour); an ephemeral-storage
    limit for /tmp, home and logs; with ``card``, exactly one of ``cfg.npu_resource``, in both
    requests and limits (the device plugin's unit is never shared, see the module docstring)."""
    cpu = f"{int(spec.cpus * 1000)}m"
    memory = f"{spec.memory_mb}Mi"
    storage = f"{cfg.ephemeral_storage_mb}Mi"
    requests = {"cpu": cpu, "memory": memory, "ephemeral-storage": storage}
    limits = {"cpu": cpu, "memory": memory, "ephemeral-storage": storage}
    if card:
        requests[cfg.npu_resource] = "1"
        limits[cfg.npu_resource] = "1"
    return {"requests": requests, "limits": limits}


def labels(
    spec: EnvSpec, *, role: str = "env", prefix: str = DEFAULT_PREFIX, device: str = ""
) -> dict[str, str]:
    out = {
        LABEL_INSTANCE: prefix,
        LABEL_ENV_NAME: label_value(spec.env_id),
        LABEL_ROLE: role,
        LABEL_EVENT: str(spec.event_id),
        "labserver.attendee": str(spec.attendee_id),
        "labserver.version": label_value(labserver.__version__),
        LABEL_NETWORK: "1" if spec.network else "0",
    }
    if device:
        out["labserver.device"] = device
    return out


def annotations_for(spec: EnvSpec, *, notice: str = "") -> dict[str, str]:
    out = {
        ANNOTATION_ENV: spec.env_id,
        "labserver.image": spec.image,
        "labserver.cpus": f"{spec.cpus:g}",
        "labserver.memory_mb": str(spec.memory_mb),
        "labserver.pids": str(spec.pids),
    }
    if notice:
        out[ANNOTATION_NOTICE] = notice
    return out


def container_security() -> dict[str, Any]:
    """The hardening of every container we run (as on Docker): uid 1000, no privilege escalation,
    every capability dropped, read-only root file system, the runtime's default seccomp profile."""
    return {
        "runAsUser": UID,
        "runAsGroup": UID,
        "runAsNonRoot": True,
        "allowPrivilegeEscalation": False,
        "privileged": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def pod_security() -> dict[str, Any]:
    return {
        "runAsUser": UID,
        "runAsGroup": UID,
        "runAsNonRoot": True,
        "fsGroup": UID,  # the workspace PVC is writable by the attendee's uid
        "fsGroupChangePolicy": "OnRootMismatch",
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def _scratch_volumes(memory_mb: int) -> list[dict[str, Any]]:
    # disk-backed emptyDirs count against the ephemeral-storage limit; sized like Docker's tmpfs
    return [
        {"name": "tmp", "emptyDir": {"sizeLimit": f"{max(64, memory_mb // 4)}Mi"}},
        {"name": "home", "emptyDir": {"sizeLimit": f"{max(32, memory_mb // 16)}Mi"}},
    ]


def _scheduling(cfg: KubernetesSettings, *, card: bool) -> dict[str, Any]:
    out: dict[str, Any] = {}
    node_selector = {**cfg.node_selector, **(cfg.npu_node_selector if card else {})}
    if node_selector:
        out["nodeSelector"] = node_selector
    if cfg.tolerations:
        out["tolerations"] = [dict(t) for t in cfg.tolerations]
    if cfg.scheduler_name:
        out["schedulerName"] = cfg.scheduler_name
    return out


def make_pod(
    spec: EnvSpec,
    cfg: KubernetesSettings,
    *,
    card: bool,
    name: str | None = None,
    pvc: str | None = None,
    role: str = "env",
    prefix: str = DEFAULT_PREFIX,
    notice: str = "",
) -> dict[str, Any]:
    """The attendee's long-lived pod: one container from the lab image, hardened
    (:func:`container_security`), requests == limits (:func:`resources_for`), workspace PVC at
    ``/workspace``, emptyDirs for ``/tmp`` and home, no service account token, no host anything."""
    device = "npu" if card else "cpu-emu"
    env = {
        "HOME": HOME,
        "LANG": "C.UTF-8",
        "TERM": "xterm-256color",
        "LAB_WORKSPACE": WORKSPACE,
        "LAB_DEVICE": device,
        **dict(spec.env),
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name or pod_name(spec.env_id, prefix),
            "labels": labels(spec, role=role, prefix=prefix, device=device),
            "annotations": annotations_for(spec, notice=notice),
        },
        "spec": {
            "serviceAccountName": service_account_name(prefix),
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "hostname": "lab",
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 5,
            "securityContext": pod_security(),
            **_scheduling(cfg, card=card),
            "containers": [
                {
                    "name": CONTAINER,
                    "image": spec.image,
                    "imagePullPolicy": cfg.image_pull_policy,
                    "command": ["sleep", "infinity"],
                    "workingDir": WORKSPACE,
                    "env": [{"name": k, "value": v} for k, v in env.items()],
                    "resources": resources_for(spec, cfg, card=card),
                    "securityContext": container_security(),
                    "readinessProbe": {
                        "exec": {"command": ["test", "-w", WORKSPACE]},
                        "periodSeconds": 2,
                        "failureThreshold": 3,
                    },
                    "volumeMounts": [
                        {"name": "workspace", "mountPath": WORKSPACE},
                        {"name": "tmp", "mountPath": "/tmp"},
                        {"name": "home", "mountPath": HOME},
                    ],
                }
            ],
            "volumes": [
                {
                    "name": "workspace",
                    "persistentVolumeClaim": {"claimName": pvc or pvc_name(spec.env_id, prefix)},
                },
                *_scratch_volumes(spec.memory_mb),
            ],
        },
    }


def make_pvc(
    spec: EnvSpec, cfg: KubernetesSettings, *, name: str | None = None, prefix: str = DEFAULT_PREFIX
) -> dict[str, Any]:
    """The attendee's workspace: ``ReadWriteOnce``, ``LABSERVER_KUBERNETES__WORKSPACE_GI`` big; it
    outlives the pod (stop, eviction, recreate on another node) until ``destroy``."""
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": name or pvc_name(spec.env_id, prefix),
            "labels": {
                LABEL_INSTANCE: prefix,
                LABEL_ENV_NAME: label_value(spec.env_id),
                LABEL_EVENT: str(spec.event_id),
            },
            "annotations": {ANNOTATION_ENV: spec.env_id},
        },
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": f"{cfg.workspace_gi}Gi"}},
        },
    }
    if cfg.storage_class:
        body["spec"]["storageClassName"] = cfg.storage_class
    return body


def make_service_account(prefix: str = DEFAULT_PREFIX) -> dict[str, Any]:
    """The attendee pods' service account: no token is mounted, no role is bound."""
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {"name": service_account_name(prefix), "labels": {LABEL_INSTANCE: prefix}},
        "automountServiceAccountToken": False,
    }


def make_network_policies(cfg: KubernetesSettings, prefix: str = DEFAULT_PREFIX) -> list[dict[str, Any]]:
    """Two policies over this server's pods: those of labs without network (and every grader) get
    no egress at all and ingress only from the labserver pods; those of labs that ask for network
    keep egress but the same ingress rule. (Exec, terminals and files go through the API server and
    the kubelet, not the pod network.)"""
    ingress = [{"from": [{"podSelector": {"matchLabels": dict(cfg.server_labels)}}]}]

    def policy(name: str, network: str, types: list[str], **rules: Any) -> dict[str, Any]:
        return {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": {"name": f"{prefix}-{name}", "labels": {LABEL_INSTANCE: prefix}},
            "spec": {
                "podSelector": {"matchLabels": {LABEL_INSTANCE: prefix, LABEL_NETWORK: network}},
                "policyTypes": types,
                **rules,
            },
        }

    return [
        policy("no-network", "0", ["Ingress", "Egress"], ingress=ingress, egress=[]),
        policy("network", "1", ["Ingress"], ingress=ingress),
    ]
