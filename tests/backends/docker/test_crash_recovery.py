"""Issue 13 item 9 and issue 22, as it happens: ``kill -9`` of a real ``labserver serve`` (Docker
backend) while an attendee's Check is running. After the restart the run is finished as
``not_gradable`` ("not your fault", no attempt, not failing), the check is pressed again once for
the attendee (its verdict is the only attempt), and the grader container the dead server left behind
is gone."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import threading
import time
from pathlib import Path
from typing import Any

import docker
import httpx
import pytest

from tests.backends.docker.test_server_restart import free_port, start_server

REPO = Path(__file__).resolve().parents[3]

pytestmark = [pytest.mark.docker, pytest.mark.slow]

SLOW = 'import pathlib, time\nif pathlib.Path("slow").is_file() and pathlib.Path("slow").read_text() == "1":\n    time.sleep(600)\n'


def _labs_with_a_slow_check(root: Path) -> Path:
    labs = root / "labs"
    shutil.copytree(REPO / "labs" / "getting-started", labs / "getting-started")
    checker = labs / "getting-started" / "checks" / "03_write_file.py"
    checker.write_text(SLOW + checker.read_text())
    return labs


def _graders(client: docker.DockerClient, prefix: str) -> list[Any]:
    found = client.containers.list(all=True, filters={"label": f"labserver.instance={prefix}"})
    return [c for c in found if c.labels.get("labserver.role") == "grader"]


def test_kill_9_during_a_check(
    tmp_path: Path, make_spec: Any, cpu_emu_image: str, docker_client: docker.DockerClient
) -> None:
    prefix = f"lscrash{make_spec.run}"
    port = free_port()
    env = dict(
        os.environ,
        LABSERVER_DATA_DIR=str(tmp_path / "data"),
        LABSERVER_LABS_DIR=str(_labs_with_a_slow_check(tmp_path)),
        LABSERVER_BACKEND="docker",
        LABSERVER_INSTRUCTOR_TOKEN="crash-token",
        LABSERVER_DEFAULT_EVENT_CODE="CRASH1",
        LABSERVER_DOCKER__IMAGE=cpu_emu_image,
        LABSERVER_DOCKER__NAME_PREFIX=prefix,
    )
    log = tmp_path / "serve.log"
    base = f"http://127.0.0.1:{port}/api/v1"
    step = f"{base}/labs/getting-started/steps/write-file"
    proc = start_server(env, port, log)
    try:
        joined = httpx.post(f"{base}/join", json={"event_code": "CRASH1", "name": "Ada"}, timeout=30)
        assert joined.status_code == 200, joined.text
        auth = {"Authorization": f"Bearer {joined.json()['token']}"}
        started = httpx.post(f"{base}/environment", headers=auth, timeout=180)
        assert started.status_code == 200 and started.json()["state"] == "ready", started.text
        put = httpx.put(f"{base}/labs/getting-started/files/slow", headers=auth, content=b"1", timeout=60)
        assert put.status_code == 200, put.text

        def press_check() -> None:
            with contextlib.suppress(httpx.HTTPError):  # the server dies under it
                httpx.post(f"{step}/check", headers=auth, timeout=120)

        threading.Thread(target=press_check, daemon=True).start()
        deadline = time.monotonic() + 120
        while not _graders(docker_client, prefix):
            assert time.monotonic() < deadline, "the grader never started:\n" + log.read_text()[-2000:]
            time.sleep(0.3)
        runs = httpx.get(f"{step}/runs", headers=auth, timeout=30).json()
        assert [r["status"] for r in runs] == ["running"]

        os.killpg(proc.pid, signal.SIGKILL)  # mid-check: no shutdown hooks
        proc.wait(timeout=30)
        assert _graders(docker_client, prefix), "the grader should outlive the killed server"
        # the attendee's container outlives the server too: the retry after the restart must not sleep
        envs = docker_client.containers.list(
            filters={"label": [f"labserver.instance={prefix}", "labserver.role=env"]}
        )
        assert len(envs) == 1
        assert envs[0].exec_run(["rm", "-f", "/workspace/getting-started/slow"]).exit_code == 0
        proc = start_server(env, port, log)

        deadline = time.monotonic() + 180
        while True:  # the restart pressed Check again: wait for that retry's verdict
            runs = httpx.get(f"{step}/runs", headers=auth, timeout=30).json()
            if len(runs) == 2 and runs[0]["status"] != "running" or time.monotonic() > deadline:
                break
            time.sleep(0.3)
        assert [r["status"] for r in runs] == ["failed", "not_gradable"], runs
        assert "Not your fault" in runs[1]["message"]
        labs = httpx.get(f"{base}/labs", headers=auth, timeout=30).json()
        gs = next(lab for lab in labs if lab["id"] == "getting-started")
        mine = {s["id"]: s for s in gs["progress"]["steps"]}["write-file"]
        assert mine["attempts"] == 1 and mine["status"] == "failing", mine  # the retry only
        assert _graders(docker_client, prefix) == []
        # and the attendee can simply check again
        again = httpx.post(f"{step}/check", headers=auth, timeout=180)
        assert again.status_code == 200 and again.json()["status"] == "failed", again.text
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        for c in docker_client.containers.list(all=True, filters={"label": f"labserver.instance={prefix}"}):
            c.remove(force=True)
        for v in docker_client.volumes.list(filters={"label": f"labserver.instance={prefix}"}):
            v.remove(force=True)
