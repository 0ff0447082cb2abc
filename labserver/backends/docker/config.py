"""Pure builders for the Docker backend: names, labels and container configs (no daemon needed).

The dicts returned here are keyword arguments for ``docker.DockerClient.containers.create``; tests
assert on them directly, and ``labserver/backends/docker/engines.py`` only passes them on.
"""

from __future__ import annotations

import re
from typing import Any

import labserver
from labserver.backends.base import EnvSpec
from labserver.backends.docker.scheduler import Placement
from labserver.config import DockerSettings

LABEL_PREFIX = "labserver."
LABEL_ENV = "labserver.env_id"
LABEL_ROLE = "labserver.role"  # env | grader | warm
WORKSPACE = "/workspace"
HOME = "/home/lab"
USER = "1000:1000"
GRADER_DIR = "/opt/labserver/grader"
GRADER_KEY_DIR = "/opt/labserver/key"
GRADER_OUT_DIR = "/opt/labserver/out"

_SAFE = re.compile(r"[a-z0-9.-]")


def escape(value: str) -> str:
    """Injective escaping to Docker's name alphabet: ``[a-z0-9.-]`` kept, anything else (``_``
    included, so the map is reversible) becomes ``_xx`` hex per UTF-8 byte."""
    out = []
    for ch in value:
        if _SAFE.fullmatch(ch):
            out.append(ch)
        else:
            out.extend(f"_{b:02x}" for b in ch.encode())
    return "".join(out)


def unescape(value: str) -> str:
    raw = bytearray()
    i = 0
    while i < len(value):
        if value[i] == "_" and i + 3 <= len(value):
            raw.append(int(value[i + 1 : i + 3], 16))
            i += 3
        else:
            raw.extend(value[i].encode())
            i += 1
    return raw.decode()


LABEL_INSTANCE = "labserver.instance"
DEFAULT_PREFIX = "labserver"


def container_name(env_id: str, prefix: str = DEFAULT_PREFIX) -> str:
    """``<prefix>-<escaped env id>``; the prefix (default ``labserver``) separates labserver
    instances sharing one engine (and test runs)."""
    return f"{prefix}-{escape(env_id)}"


def env_id_from_name(name: str, prefix: str = DEFAULT_PREFIX) -> str | None:
    name = name.lstrip("/")
    if not name.startswith(f"{prefix}-") or name.startswith((f"{prefix}-warm-", f"{prefix}-grader-")):
        return None
    try:
        return unescape(name[len(prefix) + 1 :])
    except (ValueError, UnicodeDecodeError):
        return None


def volume_name(env_id: str, prefix: str = DEFAULT_PREFIX) -> str:
    return f"{prefix}-ws-{escape(env_id)}"


def warm_name(event_id: int, serial: str, prefix: str = DEFAULT_PREFIX) -> str:
    return f"{prefix}-warm-ev{event_id}-{escape(serial)}"


def labels(
    spec: EnvSpec, placement: Placement | None, *, role: str = "env", prefix: str = DEFAULT_PREFIX
) -> dict[str, str]:
    out = {
        LABEL_ENV: spec.env_id,
        LABEL_INSTANCE: prefix,
        "labserver.event": str(spec.event_id),
        "labserver.attendee": str(spec.attendee_id),
        "labserver.version": labserver.__version__,
        LABEL_ROLE: role,
        "labserver.image": spec.image,
        "labserver.cpus": f"{spec.cpus:g}",
        "labserver.memory_mb": str(spec.memory_mb),
        "labserver.network": "1" if spec.network else "0",
    }
    if placement is not None:
        out["labserver.node"] = placement.node.name
        out["labserver.device"] = placement.device
        if placement.card is not None:
            out["labserver.card"] = str(placement.card)
        if placement.notice:
            out["labserver.notice"] = placement.notice
    return out


def volume_labels(spec: EnvSpec, *, prefix: str = DEFAULT_PREFIX) -> dict[str, str]:
    """Labels of a workspace volume (an attendee's or a warm one: the same keys)."""
    return {LABEL_ENV: spec.env_id, LABEL_INSTANCE: prefix, "labserver.event": str(spec.event_id)}


CPU_SHARES = 256


def _limits(cpus: float, memory_mb: int, pids: int) -> dict[str, Any]:
    return {
        "nano_cpus": int(cpus * 1e9),
        "mem_limit": f"{memory_mb}m",
        "memswap_limit": f"{memory_mb}m",  # no swap beyond the memory limit
        "pids_limit": pids,
        # a quarter of the default CPU weight: on a shared host the server (and the engine) stay
        # answered while a room's checks queue (backends/limits.py does the same locally)
        "cpu_shares": CPU_SHARES,
    }


def _hardening() -> dict[str, Any]:
    return {
        "user": USER,
        "cap_drop": ["ALL"],
        "security_opt": ["no-new-privileges"],
        "init": True,
        "ipc_mode": "private",
    }


def _npu(placement: Placement | None) -> tuple[list[str], dict[str, dict[str, str]], dict[str, str]]:
    if placement is None:
        return [], {}, {}
    devices = [f"{d}:{d}:rwm" for d in placement.device_files()]
    binds = {m: {"bind": m, "mode": "ro"} for m in placement.driver_mounts()}
    return devices, binds, placement.environment()


def image_for(spec: EnvSpec, settings: DockerSettings) -> str:
    return spec.image or settings.image


def make_container_config(
    spec: EnvSpec,
    settings: DockerSettings,
    placement: Placement | None = None,
    *,
    name: str | None = None,
    volume: str | None = None,
    role: str = "env",
    prefix: str = DEFAULT_PREFIX,
) -> dict[str, Any]:
    """The attendee's long-lived container: non-root, no capabilities, no new privileges, CPU /
    memory / pids limits from the spec, no network unless the lab asks, read-only root file system
    with tmpfs ``/tmp`` and home, workspace on a named volume."""
    devices, binds, npu_env = _npu(placement)
    env = {
        "HOME": HOME,
        "LANG": "C.UTF-8",
        "TERM": "xterm-256color",
        "LAB_WORKSPACE": WORKSPACE,
        "LAB_DEVICE": placement.device if placement else "cpu-emu",
        **npu_env,
        **dict(spec.env),
    }
    volumes = {volume or volume_name(spec.env_id, prefix): {"bind": WORKSPACE, "mode": "rw"}, **binds}
    config: dict[str, Any] = {
        "image": image_for(spec, settings),
        "command": ["sleep", "infinity"],
        "name": name or container_name(spec.env_id, prefix),
        "hostname": "lab",
        "labels": labels(spec, placement, role=role, prefix=prefix),
        "environment": env,
        "working_dir": WORKSPACE,
        "detach": True,
        "read_only": True,
        # tmpfs pages count against the memory limit: keep them well below it, or a full /tmp
        # would leave no memory to start even a shell in the attendee's own container
        "tmpfs": {
            "/tmp": f"rw,nosuid,nodev,size={max(64, spec.memory_mb // 4)}m,mode=1777",
            HOME: f"rw,nosuid,nodev,size={max(32, spec.memory_mb // 16)}m,uid=1000,gid=1000,mode=0755",
        },
        "volumes": volumes,
        "network_mode": "bridge" if spec.network else "none",
        "restart_policy": {"Name": "unless-stopped"},
        "devices": devices,
        "shm_size": "256m",
        "log_config": {"Type": "json-file", "Config": {"max-size": "1m", "max-file": "1"}},
        **_hardening(),
        **_limits(spec.cpus, spec.memory_mb, spec.pids),
    }
    return config


def make_grader_config(
    *,
    image: str,
    volume: str,
    lab_id: str,
    env: dict[str, str],
    placement: Placement | None,
    cpus: float,
    memory_mb: int,
    pids: int = 256,
    name: str,
    env_id: str,
    prefix: str = DEFAULT_PREFIX,
) -> dict[str, Any]:
    """A short-lived grader: same image, the workspace volume mounted READ-ONLY, no network, the
    trusted runner as command. Its root file system stays writable only so the server can put the
    runner, checker and key in before it starts (they are root-owned; the attendee's code runs as
    uid 1000). Not restarted, removed after the check."""
    devices, binds, npu_env = _npu(placement)
    return {
        "image": image,
        "command": ["python3", "-I", f"{GRADER_DIR}/runner.py"],
        "name": name,
        "hostname": "grader",
        "labels": {
            LABEL_ENV: env_id,
            LABEL_ROLE: "grader",
            LABEL_INSTANCE: prefix,
            "labserver.version": labserver.__version__,
        },
        "environment": {
            "HOME": HOME,
            "LANG": "C.UTF-8",
            "PATH": "/opt/venv/bin:/usr/bin:/bin",
            **npu_env,
            **env,
        },
        "working_dir": f"{WORKSPACE}/{lab_id}",
        "detach": True,
        "read_only": False,
        "tmpfs": {
            "/tmp": f"rw,nosuid,nodev,size={max(64, memory_mb // 4)}m,mode=1777",
            HOME: f"rw,nosuid,nodev,size={max(32, memory_mb // 16)}m,uid=1000,gid=1000,mode=0755",
        },
        "volumes": {volume: {"bind": WORKSPACE, "mode": "ro"}, **binds},
        "network_mode": "none",
        "devices": devices,
        "log_config": {"Type": "json-file", "Config": {"max-size": "1m", "max-file": "1"}},
        **_hardening(),
        **_limits(cpus, memory_mb, pids),
    }
