"""``docker-compose up`` brings up a working server (Debian's docker-compose, real engine)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import docker
import httpx
import pytest

from labserver.backends.docker import images

pytestmark = [pytest.mark.docker, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[3]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def compose_cli() -> list[str]:
    found = shutil.which("docker-compose")
    if not found:
        pytest.fail("docker-compose is not installed: apt-get install -y docker-compose", pytrace=False)
    return [found]


def test_compose_up_serves_and_provisions_over_the_socket(
    make_spec: Any, cpu_emu_image: str, docker_client: docker.DockerClient
) -> None:
    try:
        images.build_postgres()
        images.build_server()
    except images.ImageBuildError as exc:
        pytest.fail(f"could not build the service images: {exc}\n{exc.log}", pytrace=False)
    project = f"lstest{make_spec.run}"
    port = free_port()
    env = dict(
        os.environ,
        LABSERVER_PORT=str(port),
        POSTGRES_PASSWORD="pw-compose",
        LABSERVER_INSTRUCTOR_TOKEN="compose-token",
        LABSERVER_DEFAULT_EVENT_CODE="COMPOSE1",
        LABSERVER_DOCKER__IMAGE=cpu_emu_image,
        LABSERVER_DOCKER__NAME_PREFIX=project,
    )
    compose = [*compose_cli(), "-p", project, "-f", str(REPO / "docker-compose.yml")]

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*compose, *args], env=env, capture_output=True, text=True, cwd=REPO, timeout=300
        )

    try:
        up = run("up", "-d")
        assert up.returncode == 0, up.stderr
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 180
        while True:
            try:
                if httpx.get(f"{base}/healthz", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"no /healthz after 180 s:\n{run('logs', '--tail', '80').stdout}")
            time.sleep(1)
        joined = httpx.post(f"{base}/api/v1/join", json={"event_code": "COMPOSE1", "name": "Ada"}, timeout=30)
        assert joined.status_code == 200, joined.text
        headers = {"Authorization": f"Bearer {joined.json()['token']}"}
        started = httpx.post(f"{base}/api/v1/environment", headers=headers, timeout=180)
        assert started.status_code == 200, started.text
        assert started.json()["state"] == "ready" and started.json()["backend"] == "docker", started.json()
        mine = docker_client.containers.list(filters={"label": f"labserver.instance={project}"})
        assert len(mine) == 1 and mine[0].labels["labserver.role"] == "env"
        count = run(
            "exec",
            "-T",
            "db",
            "psql",
            "postgresql://labserver:pw-compose@127.0.0.1:5432/labserver",
            "-tAc",
            "select count(*) from attendees",
        )
        assert count.stdout.strip() == "1", (count.stdout, count.stderr)
    finally:
        run("down", "-v", "--remove-orphans")
        for c in docker_client.containers.list(all=True, filters={"label": f"labserver.instance={project}"}):
            c.remove(force=True)
        for v in docker_client.volumes.list(filters={"label": f"labserver.instance={project}"}):
            v.remove(force=True)
