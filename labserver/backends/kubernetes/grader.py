"""Tamper-proof checks on Kubernetes: a short-lived grader pod per check.

Threat model and mechanism, as for the Docker grader (``backends/docker/grader.py``): nothing the
attendee writes may become a pass. The grader pod

- mounts the attendee's workspace PVC READ-ONLY (on the attendee pod's node: the PVC is
  ReadWriteOnce), has no network (the ``no-network`` NetworkPolicy selects it), no service account
  token, the same hardening and limits as the attendee pod;
- takes the checker, the runner and the lab's trusted files (all but ``solution/`` and
  ``steps/``: ``grader_lab_files``, shared with Docker) from the server, never the workspace: they
  travel as a gzipped tar split over ConfigMaps (cached by content hash, :func:`bundle_configmaps`)
  that an init container checks and unpacks into an emptyDir the grader container mounts
  read-only (``grader_boot.py``);
- gets a per-check key and nonce through a Secret that only the init container mounts; the runner
  (the Docker grader's, unchanged) reads and deletes the key before any checker runs, and signs
  its record with it. The server reads the record from the pod's log and accepts it only when the
  HMAC and the nonce match: attendee code can at worst destroy it (a checker error, never a pass).
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import hmac
import io
import json
import secrets
import tarfile
from pathlib import Path
from typing import Any

import labserver
from labserver.backends.docker.grader import READONLY_CHECKER, RUNNER
from labserver.backends.kubernetes import manifests as km
from labserver.config import KubernetesSettings

BOOT = Path(__file__).with_name("grader_boot.py")
PART_BYTES = 700 * 1024  # a ConfigMap holds at most 1 MiB, and binaryData is base64 (4/3)
GRACE_S = 60.0  # on top of the checker's timeout: scheduling, image, python start


def bundle(lab_files: list[tuple[str, bytes]], checker_name: str, checker_source: bytes) -> bytes:
    """The grader's trusted files as a gzipped tar, deterministic (same files, same bytes):
    ``runner.py``, the lab's files under ``lab/``, the checker at ``checker_name``."""
    entries = [("runner.py", RUNNER.read_bytes())]
    entries += [(f"lab/{rel}", data) for rel, data in lab_files]
    entries.append((checker_name, checker_source))
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        folders = sorted({str(Path(n).parent) for n, _ in entries if str(Path(n).parent) != "."})
        for folder in folders:
            info = tarfile.TarInfo(folder)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
        for name, data in sorted(dict(entries).items()):
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o444
            tar.addfile(info, io.BytesIO(data))
    return gzip.compress(raw.getvalue(), mtime=0)


def bundle_configmaps(blob: bytes, prefix: str = km.DEFAULT_PREFIX) -> tuple[str, list[dict[str, Any]]]:
    """(sha256, ConfigMaps) holding ``blob`` in parts of at most :data:`PART_BYTES`; named after
    the hash, so the same lab files are sent once and reused by every check."""
    digest = hashlib.sha256(blob).hexdigest()
    maps = []
    for i in range(0, max(len(blob), 1), PART_BYTES):
        n = i // PART_BYTES
        maps.append(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {
                    "name": f"{prefix}-lab-{digest[:20]}-{n}",
                    "labels": {km.LABEL_INSTANCE: prefix, km.LABEL_ROLE: "lab-bundle"},
                },
                "immutable": True,
                "binaryData": {f"part-{n:04d}": base64.b64encode(blob[i : i + PART_BYTES]).decode()},
            }
        )
    return digest, maps


def make_secret(
    name: str, *, job: dict[str, Any], key: bytes, prefix: str = km.DEFAULT_PREFIX
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "labels": {km.LABEL_INSTANCE: prefix, km.LABEL_ROLE: "grader"}},
        "type": "Opaque",
        "data": {
            "job.json": base64.b64encode(json.dumps(job).encode()).decode(),
            "key": base64.b64encode(key).decode(),
            "boot.py": base64.b64encode(BOOT.read_bytes()).decode(),
        },
    }


def make_grader_pod(
    *,
    name: str,
    env_id: str,
    image: str,
    pvc: str,
    node: str,
    lab_id: str,
    env: dict[str, str],
    cpus: float,
    memory_mb: int,
    bundle_sha: str,
    bundle_maps: list[str],
    secret: str,
    cfg: KubernetesSettings,
    prefix: str = km.DEFAULT_PREFIX,
) -> dict[str, Any]:
    """The grader pod (see the module docstring). Never restarted; deleted after the check."""
    cpu, memory = f"{int(cpus * 1000)}m", f"{memory_mb}Mi"
    resources = {
        "requests": {"cpu": cpu, "memory": memory, "ephemeral-storage": "256Mi"},
        "limits": {"cpu": cpu, "memory": memory, "ephemeral-storage": f"{cfg.ephemeral_storage_mb}Mi"},
    }
    base_env = {"HOME": km.HOME, "LANG": "C.UTF-8", "PATH": "/opt/venv/bin:/usr/local/bin:/usr/bin:/bin"}
    scratch = [
        {"name": "tmp", "mountPath": "/tmp"},
        {"name": "home", "mountPath": km.HOME},
    ]
    common = {
        "image": image,
        "imagePullPolicy": cfg.image_pull_policy,
        "securityContext": km.container_security(),
        "resources": resources,
    }
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "serviceAccountName": km.service_account_name(prefix),
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": 1,
        "activeDeadlineSeconds": 3600,
        "securityContext": km.pod_security(),
        "nodeSelector": {"kubernetes.io/hostname": node} if node else {},
        "initContainers": [
            {
                **common,
                "name": "unpack",
                "command": ["python3", "-I", "/opt/labserver/secret/boot.py", "unpack"],
                "env": [
                    {"name": k, "value": v}
                    for k, v in {**base_env, "LABSERVER_BUNDLE_SHA256": bundle_sha}.items()
                ],
                "volumeMounts": [
                    {"name": "bundle", "mountPath": "/opt/labserver/bundle", "readOnly": True},
                    {"name": "secret", "mountPath": "/opt/labserver/secret", "readOnly": True},
                    {"name": "grader", "mountPath": "/opt/labserver/grader"},
                    {"name": "key", "mountPath": "/opt/labserver/key"},
                    *scratch,
                ],
            }
        ],
        "containers": [
            {
                **common,
                "name": "grader",
                "command": ["python3", "-I", "/opt/labserver/grader/boot.py", "run"],
                "workingDir": "/",
                "env": [
                    {"name": k, "value": v}
                    for k, v in {**base_env, **env, "LAB_DIR": f"{km.WORKSPACE}/{lab_id}"}.items()
                ],
                "volumeMounts": [
                    {"name": "workspace", "mountPath": km.WORKSPACE, "readOnly": True},
                    {"name": "grader", "mountPath": "/opt/labserver/grader", "readOnly": True},
                    {"name": "key", "mountPath": "/opt/labserver/key"},
                    {"name": "out", "mountPath": "/opt/labserver/out"},
                    *scratch,
                ],
            }
        ],
        "volumes": [
            {"name": "workspace", "persistentVolumeClaim": {"claimName": pvc, "readOnly": True}},
            {
                "name": "bundle",
                "projected": {"sources": [{"configMap": {"name": m}} for m in bundle_maps]},
            },
            {"name": "secret", "secret": {"secretName": secret, "defaultMode": 0o444}},
            {"name": "grader", "emptyDir": {"sizeLimit": "256Mi"}},
            {"name": "key", "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}},
            {"name": "out", "emptyDir": {"sizeLimit": "64Mi"}},
            {"name": "tmp", "emptyDir": {"sizeLimit": f"{max(64, memory_mb // 4)}Mi"}},
            {"name": "home", "emptyDir": {"sizeLimit": f"{max(32, memory_mb // 16)}Mi"}},
        ],
    }
    if not spec["nodeSelector"]:
        del spec["nodeSelector"]
    if cfg.tolerations:
        spec["tolerations"] = [dict(t) for t in cfg.tolerations]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": {
                km.LABEL_INSTANCE: prefix,
                km.LABEL_ROLE: "grader",
                km.LABEL_ENV_NAME: km.label_value(env_id),
                km.LABEL_NETWORK: "0",
                "labserver.version": km.label_value(labserver.__version__),
            },
            "annotations": {km.ANNOTATION_ENV: env_id},
        },
        "spec": spec,
    }


def new_job(checker_name: str, timeout_s: float, log_limit: int) -> tuple[dict[str, Any], bytes]:
    """(job.json, key) of one check: a fresh nonce and a fresh 32-byte key."""
    job = {
        "nonce": secrets.token_hex(16),
        "checker": checker_name,
        "timeout_s": timeout_s,
        "log_limit": log_limit,
    }
    return job, secrets.token_bytes(32)


def ended(pod: dict[str, Any]) -> str:
    """How a finished grader pod's containers ended, for the log (``unpack exit 3, ...``)."""
    status = pod.get("status") or {}
    parts = []
    for c in [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]:
        term = (c.get("state") or {}).get("terminated") or {}
        if term:
            parts.append(f"{c.get('name')} exit {term.get('exitCode')} {term.get('reason') or ''}".strip())
    return ", ".join(parts) or f"phase {status.get('phase')} {status.get('reason') or ''}".strip()


def verify(log: bytes, key: bytes, nonce: str) -> dict[str, Any]:
    """The record in a grader pod's log if its HMAC and nonce match, else an invalid record
    (``valid: False``, ``why``) that ``record_to_raw`` turns into a checker error."""
    from labserver.backends.kubernetes.grader_boot import MARK

    line = next(
        (ln for ln in reversed(log.decode(errors="replace").splitlines()) if ln.startswith(MARK)), None
    )
    if line is None:
        return {"valid": False, "timed_out": False, "why": "no record"}
    try:
        outer = json.loads(line[len(MARK) :])
        body, mac = outer["body"], outer["mac"]
    except (ValueError, KeyError, TypeError):
        return {"valid": False, "timed_out": False, "why": "unreadable record"}
    expected = hmac.new(key, str(body).encode(), hashlib.sha256).hexdigest()
    record = json.loads(body) if hmac.compare_digest(expected, str(mac)) else None
    if record is None or record.get("nonce") != nonce:
        return {"valid": False, "timed_out": False, "why": "forged record"}
    record["valid"] = True
    return record


__all__ = [
    "READONLY_CHECKER",
    "bundle",
    "bundle_configmaps",
    "ended",
    "make_grader_pod",
    "make_secret",
    "new_job",
    "verify",
]
