"""Issue 13 item 9: the instructor's "Restart" really restarts an attendee's environment. The attendee
leaves a detached process and a shell variable behind (from the terminal, the way an attendee
would); after Restart the process is gone (looked up in the host's /proc, since a new shell may
not see an old namespace) and the shell is new. The Docker variant is
tests/backends/docker/test_restart_env.py, with the same steps (:func:`restart_really_restarts`)."""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

from fastapi.testclient import TestClient

from labserver.models import Event
from tests.conftest import instructor_headers, join

LAB = "/api/v1/labs/getting-started"


def _read_until(ws, needle: str) -> str:  # type: ignore[no-untyped-def]
    buf = b""
    while needle.encode() not in buf:
        msg = ws.receive()
        assert msg["type"] != "websocket.close", f"closed before {needle!r}: {buf!r}"
        buf += msg.get("bytes") or b""
    return buf.decode(errors="replace")


def host_processes(needle: str) -> list[int]:
    """Pids on this machine whose command line is ``needle`` (``/proc``, every namespace)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        if cmd == needle:
            found.append(int(proc.name))
    return found


def restart_really_restarts(client: TestClient, backend: str) -> None:
    ada = join(client, "Ada")
    token = ada["Authorization"].split()[1]
    seconds = str(random.randint(400000, 499999))
    with client.websocket_connect(f"{LAB}/terminal?token={token}") as ws:
        ws.send_bytes(
            f"export LS_MARK=old-$((40+2)); (setsid nohup sleep {seconds} >/dev/null 2>&1 &); echo bg-$((1+1))\r".encode()
        )
        _read_until(ws, "bg-2")
    deadline = time.monotonic() + 30  # a hang guard
    while not host_processes(f"sleep {seconds}"):
        assert time.monotonic() < deadline, "the detached process never started"
        time.sleep(0.1)
    env = client.get("/api/v1/environment", headers=ada).json()
    assert env["backend"] == backend, env
    env_id = env["id"]
    resp = client.post(f"/api/v1/environments/{env_id}/restart", headers=instructor_headers())
    assert resp.status_code == 200, resp.text
    assert host_processes(f"sleep {seconds}") == [], "the attendee's process survived the Restart"
    with client.websocket_connect(f"{LAB}/terminal?token={token}") as ws:
        ws.send_text(json.dumps({"resize": [120, 40]}))
        ws.send_bytes(b"echo mark=[$LS_MARK]-$((1+1))\r")
        out = _read_until(ws, "]-2")
    assert "mark=[]-2" in out, out


def test_restart_really_restarts_local(client: TestClient, event: Event) -> None:
    restart_really_restarts(client, "local")
