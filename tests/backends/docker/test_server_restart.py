"""Kill -9 a real ``labserver serve`` on the Docker backend, start it again: the attendee's container,
files and terminal are still there (re-adopted, not recreated)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import docker
import httpx
import pytest
from websockets.sync.client import connect

pytestmark = [pytest.mark.docker, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[3]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(env: dict[str, str], port: int, log: Path) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "labserver.cli", "serve", "--host", "127.0.0.1", "--port", str(port)],
        env=env,
        cwd=REPO,
        stdout=log.open("ab"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"labserver serve exited {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    proc.kill()
    pytest.fail(f"no /healthz after 90 s:\n{log.read_text()[-3000:]}")


def terminal_echo(port: int, token: str, lab: str, marker: str) -> bytes:
    url = f"ws://127.0.0.1:{port}/api/v1/labs/{lab}/terminal?token={token}"
    with connect(url, open_timeout=60) as ws:
        ws.send(f"echo {marker}-$((40+2))\n".encode())
        buf = b""
        deadline = time.monotonic() + 60
        while f"{marker}-42".encode() not in buf:
            if time.monotonic() > deadline:
                raise AssertionError(f"no echo from the terminal: {buf[-500:]!r}")
            msg = ws.recv(timeout=60)
            buf += msg if isinstance(msg, bytes) else msg.encode()
        return buf


def test_kill_9_and_restart_readopts_the_attendee(
    tmp_path: Path, make_spec: Any, cpu_emu_image: str, docker_client: docker.DockerClient
) -> None:
    prefix = f"lsrestart{make_spec.run}"
    port = free_port()
    env = dict(
        os.environ,
        LABSERVER_DATA_DIR=str(tmp_path / "data"),
        LABSERVER_BACKEND="docker",
        LABSERVER_INSTRUCTOR_TOKEN="restart-token",
        LABSERVER_DEFAULT_EVENT_CODE="RESTART1",
        LABSERVER_DOCKER__IMAGE=cpu_emu_image,
        LABSERVER_DOCKER__NAME_PREFIX=prefix,
    )
    log = tmp_path / "serve.log"
    base = f"http://127.0.0.1:{port}/api/v1"
    proc = start_server(env, port, log)
    try:
        joined = httpx.post(f"{base}/join", json={"event_code": "RESTART1", "name": "Ada"}, timeout=30)
        assert joined.status_code == 200, joined.text
        token = joined.json()["token"]
        auth = {"Authorization": f"Bearer {token}"}
        started = httpx.post(f"{base}/environment", headers=auth, timeout=180)
        assert started.status_code == 200 and started.json()["state"] == "ready", started.text
        labs = httpx.get(f"{base}/labs", headers=auth, timeout=30).json()
        lab = (labs["labs"] if isinstance(labs, dict) else labs)[0]["id"]
        saved = httpx.put(
            f"{base}/labs/{lab}/files/restart-note.txt", headers=auth, content=b"before restart", timeout=60
        )
        assert saved.status_code == 200, saved.text
        terminal_echo(port, token, lab, "first")
        (container,) = docker_client.containers.list(filters={"label": f"labserver.instance={prefix}"})

        os.killpg(proc.pid, signal.SIGKILL)  # no shutdown hooks, no goodbye
        proc.wait(timeout=30)
        proc = start_server(env, port, log)

        state = httpx.get(f"{base}/environment", headers=auth, timeout=60).json()
        assert state["state"] == "ready", state
        got = httpx.get(f"{base}/labs/{lab}/files/restart-note.txt", headers=auth, timeout=60)
        assert got.status_code == 200 and got.content == b"before restart"
        terminal_echo(port, token, lab, "second")
        now = docker_client.containers.list(all=True, filters={"label": f"labserver.instance={prefix}"})
        assert [c.id for c in now if c.labels.get("labserver.role") == "env"] == [container.id]
    finally:
        with_pid = proc.poll() is None
        if with_pid:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        for c in docker_client.containers.list(all=True, filters={"label": f"labserver.instance={prefix}"}):
            c.remove(force=True)
        for v in docker_client.volumes.list(filters={"label": f"labserver.instance={prefix}"}):
            v.remove(force=True)
