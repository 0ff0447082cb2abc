"""A second Docker engine on this machine, as a second node for scheduler tests.

Recipe from shared/reference/docker-offline.md: its own bridge (``labbr2``), data and exec roots,
pidfile and socket, out of iptables. NEVER ``--bridge none`` (that deletes the first engine's
docker0). The data root persists between runs so the lab image is loaded once (save | load)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import docker

from labserver.backends.docker import images

ROOT = Path(os.environ.get("LABSERVER_TEST_ENGINE2_DIR", "/var/lib/labserver-test-engine2"))
RUN = Path("/run/labserver-test-engine2")
SOCK = RUN / "docker.sock"
URL = f"unix://{SOCK}"
BRIDGE = "labbr2"


def _sh(*cmd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(cmd), capture_output=True, text=True)


def _bridge() -> None:
    if _sh("ip", "link", "show", BRIDGE).returncode == 0:
        return
    for cmd in (
        ["ip", "link", "add", BRIDGE, "type", "bridge"],
        ["ip", "addr", "add", "10.213.0.1/24", "dev", BRIDGE],
        ["ip", "link", "set", BRIDGE, "up"],
    ):
        out = _sh(*cmd)
        if out.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)}: {out.stderr}")


def _answers() -> bool:
    try:
        docker.DockerClient(base_url=URL, version="auto", timeout=5).ping()
        return True
    except Exception:  # noqa: BLE001
        return False


def stop() -> None:
    pidfile = RUN / "docker.pid"
    if pidfile.exists():
        with contextlib.suppress(ValueError, ProcessLookupError):
            pid = int(pidfile.read_text().strip())
            os.kill(pid, signal.SIGTERM)
            for _ in range(100):
                if not Path(f"/proc/{pid}").exists():
                    break
                time.sleep(0.1)
    # leftover network-namespace mounts under the exec root keep it busy
    for line in Path("/proc/mounts").read_text().splitlines():
        target = line.split()[1]
        if target.startswith(str(RUN)) and "nsfs" in line:
            _sh("umount", "-l", target)


def start() -> bool:
    """Start the second engine unless it answers; returns True when this call started it."""
    if _answers():
        return False
    _bridge()
    ROOT.mkdir(parents=True, exist_ok=True)
    RUN.mkdir(parents=True, exist_ok=True)
    log = open(RUN / "dockerd.log", "ab")  # noqa: SIM115 - handed to the daemon
    subprocess.Popen(
        [
            "dockerd",
            "--data-root",
            str(ROOT / "data"),
            "--exec-root",
            str(RUN / "exec"),
            "--pidfile",
            str(RUN / "docker.pid"),
            "-H",
            URL,
            "--bridge",
            BRIDGE,
            "--iptables=false",
            "--ip-masq=false",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    deadline = time.monotonic() + 60
    while not _answers():
        if time.monotonic() > deadline:
            stop()
            raise RuntimeError(f"the second dockerd did not answer; see {RUN / 'dockerd.log'}")
        time.sleep(0.2)
    return True


@contextlib.contextmanager
def second_engine(image_tags: list[str]) -> Iterator[str]:
    """Start (or reuse) the second engine, load ``image_tags`` into it, yield its URL, stop it."""
    start()
    try:
        for tag in image_tags:
            images.copy_image(tag, URL)
        yield URL
    finally:
        stop()
