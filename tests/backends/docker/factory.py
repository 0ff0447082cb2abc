"""The Docker entry of the contract suite's ``BACKEND_FACTORIES`` (tests/backends/conftest.py).

Each test gets its own name prefix (``lstest<pid>x<hash of tmp_path>``), so fixed environment ids
such as ``ev1-at1`` never collide between tests, and a "restarted server" built with the same
settings and tmp_path finds the first one's containers. Containers of this test process are removed
at exit; leftovers of dead test processes are removed on first use. No engine = a clear failure."""

from __future__ import annotations

import atexit
import hashlib
import os
import re
from pathlib import Path

import docker
import pytest

from labserver.backends.docker import images
from labserver.backends.docker.backend import DockerBackend
from labserver.config import Settings

_state: dict[str, str] = {}


def _remove_prefixed(client: docker.DockerClient, keep_alive_pids: bool) -> None:
    for c in client.containers.list(all=True, filters={"label": "labserver.instance"}):
        m = re.fullmatch(r"lstest(\d+)x\w+", c.labels.get("labserver.instance", ""))
        if not m:
            continue
        pid = int(m.group(1))
        alive = os.path.exists(f"/proc/{pid}") and pid != os.getpid()
        if keep_alive_pids and alive:
            continue
        if not keep_alive_pids and pid != os.getpid():
            continue
        c.remove(force=True)
    for v in client.volumes.list(filters={"label": "labserver.instance"}):
        m = re.fullmatch(r"lstest(\d+)x\w+", (v.attrs.get("Labels") or {}).get("labserver.instance", ""))
        if m and (int(m.group(1)) == os.getpid() or not os.path.exists(f"/proc/{m.group(1)}")):
            v.remove(force=True)


def _first_use() -> str:
    if "image" in _state:
        return _state["image"]
    try:
        client = docker.from_env(version="auto")
        client.ping()
    except Exception as exc:  # noqa: BLE001
        pytest.fail(
            f"No Docker engine answers ({exc}). Start one: `dockerd > /tmp/dockerd.log 2>&1 &`", pytrace=False
        )
    try:
        result = images.build_cpu_emu()
    except images.ImageBuildError as exc:
        pytest.fail(f"could not build the cpu-emu image: {exc}\n{exc.log}", pytrace=False)
    _remove_prefixed(client, keep_alive_pids=True)  # earlier, dead test runs
    atexit.register(_remove_prefixed, client, False)
    _state["image"] = result.tag
    return result.tag


def docker_factory(settings: Settings, tmp_path: Path) -> DockerBackend:
    tag = _first_use()
    prefix = f"lstest{os.getpid()}x{hashlib.sha256(str(tmp_path).encode()).hexdigest()[:8]}"
    docker_settings = settings.docker.model_copy(update={"image": tag})
    return DockerBackend(settings.model_copy(update={"docker": docker_settings}), prefix=prefix)
