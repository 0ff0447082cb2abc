"""One attendee must not be able to grow the server's memory without bound (issue 13 item 5). Each
test attacks a real ``labserver serve`` subprocess (local backend) over HTTP and the terminal
WebSocket, and asserts a bound on the growth of the server's peak RSS (``VmHWM`` in
/proc/<pid>/status), never a time:

- GET (and download as zip) of a sparse file far bigger than the editor needs: refused after a stat;
- a terminal viewer that stops reading while the shell prints hundreds of MB: its backlog is
  bounded and dropped (it gets a "skipped" notice and the scrollback when it reads again);
- request bodies of 100 MB, with and without Content-Length: refused before they are read."""

from __future__ import annotations

import base64
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from websockets.sync.client import connect

from tests.conftest import EVENT_CODE, INSTRUCTOR_TOKEN, REPO

MB = 1024 * 1024
SPARSE = 512 * MB  # before the fix the server read it whole (+512 MB); 2 GiB in the report
BOUND = 120 * MB  # growth of the server's peak RSS allowed for any one attack


def peak_rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


def reset_peak(pid: int) -> None:
    """Linux 4.0+: writing 5 to clear_refs resets VmHWM to the current RSS (root or the owner)."""
    with contextlib.suppress(OSError):
        Path(f"/proc/{pid}/clear_refs").write_text("5")


class Server:
    def __init__(self, root: Path) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = int(s.getsockname()[1])
        self.url = f"http://127.0.0.1:{self.port}"
        self.root = root
        env = {
            **os.environ,
            "LABSERVER_DATA_DIR": str(root / "data"),
            "LABSERVER_LABS_DIR": str(REPO / "labs"),
            "LABSERVER_WEB_DIR": str(REPO / "web"),
            "LABSERVER_DEFAULT_EVENT_CODE": EVENT_CODE,
            "LABSERVER_INSTRUCTOR_TOKEN": INSTRUCTOR_TOKEN,
            "LABSERVER_BACKEND": "local",
            "PYTHONUNBUFFERED": "1",
        }
        self.log = (root / "server.log").open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "labserver.cli", "serve", "--host", "127.0.0.1", "--port", str(self.port)],
            cwd=root,
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + 90
        while True:
            assert self.proc.poll() is None, (root / "server.log").read_text()[-3000:]
            try:
                with urllib.request.urlopen(f"{self.url}/healthz", timeout=1):
                    break
            except OSError:
                assert time.monotonic() < deadline, (root / "server.log").read_text()[-3000:]
                time.sleep(0.2)

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=5)
        self.log.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = Server(tmp_path_factory.mktemp("memory"))
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def attendee(server: Server) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=120) as client:
        name = f"Mallory-{time.monotonic_ns()}"
        resp = client.post("/api/v1/join", json={"event_code": EVENT_CODE, "name": name})
        assert resp.status_code == 200, resp.text
        client.cookies.clear()
        client.headers["Authorization"] = f"Bearer {resp.json()['token']}"
        yield client


LAB = "/api/v1/labs/getting-started"


def terminal(server: Server, client: httpx.Client):  # type: ignore[no-untyped-def]
    token = client.headers["Authorization"].split()[1]
    ws_url = server.url.replace("http", "ws") + f"/api/v1/labs/getting-started/terminal?token={token}"
    return connect(ws_url, max_size=None, open_timeout=60)


class StalledSocket:
    """A terminal WebSocket spoken by hand over a raw socket with a small receive buffer: after the
    handshake it sends what it is told and reads nothing (an attacker's stalled viewer; a library
    client would keep reading into its own memory in a background thread)."""

    def __init__(self, server: Server, client: httpx.Client) -> None:
        token = client.headers["Authorization"].split()[1]
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        self.sock.connect(("127.0.0.1", server.port))
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall(
            (
                f"GET /api/v1/labs/getting-started/terminal?token={token} HTTP/1.1\r\n"
                f"Host: 127.0.0.1:{server.port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
            ).encode()
        )
        head = b""
        while b"\r\n\r\n" not in head:
            head += self.sock.recv(1)
        assert head.startswith(b"HTTP/1.1 101"), head

    def send(self, data: bytes) -> None:
        mask = os.urandom(4)
        assert len(data) < 126
        frame = bytes([0x82, 0x80 | len(data)]) + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data))
        self.sock.sendall(frame)

    def read_until(self, needle: bytes, limit: int = 1024 * MB) -> int:
        """Read again until ``needle``; returns the bytes read (frames' headers included)."""
        seen, total = b"", 0
        self.sock.settimeout(60)
        while needle not in seen:
            chunk = self.sock.recv(256 * 1024)
            assert chunk and total < limit, f"no {needle!r} in {total} bytes"
            total += len(chunk)
            seen = seen[-len(needle) :] + chunk
        return total

    def close(self) -> None:
        self.sock.close()


def run_in_shell(server: Server, client: httpx.Client, command: str, done: str) -> None:
    """Type ``command`` (which ends by creating the file ``done``) and wait for that file."""
    with terminal(server, client) as ws:
        ws.send(f"{command}\r".encode())
        wait_for_file(client, done)


def wait_for_file(client: httpx.Client, name: str, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(f["path"] == name for f in client.get(f"{LAB}/files").json()):
            return
        time.sleep(0.5)
    raise AssertionError(f"{name} never appeared")


def test_reading_a_huge_sparse_file_is_refused_after_a_stat(server: Server, attendee: httpx.Client) -> None:
    run_in_shell(server, attendee, f"truncate -s {SPARSE} big.bin && touch big.done", "big.done")
    pid = server.proc.pid
    reset_peak(pid)
    before = peak_rss(pid)
    read = attendee.get(f"{LAB}/files/big.bin")
    zipped = attendee.get(f"{LAB}/download")
    grown = peak_rss(pid) - before
    print(f"sparse {SPARSE // MB} MB read + zip: server peak RSS +{grown // MB} MB")
    assert read.status_code == 413, (read.status_code, len(read.content))
    assert "terminal" in read.json()["detail"] and "MB" in read.json()["detail"]
    assert zipped.status_code == 413, (zipped.status_code, len(zipped.content))
    assert grown < BOUND, f"server grew by {grown // MB} MB"
    assert attendee.get(f"{LAB}/files/measure.py").status_code == 200  # small files still read


def test_a_terminal_viewer_that_stops_reading_costs_a_bounded_amount(
    server: Server, attendee: httpx.Client
) -> None:
    pid = server.proc.pid
    ws = StalledSocket(server, attendee)
    try:
        reset_peak(pid)
        before = peak_rss(pid)
        # 400 MB of output; this socket reads nothing until the shell is done
        ws.send(b"head -c 400000000 /dev/zero | tr '\\0' a; touch flood.done\r")
        wait_for_file(attendee, "flood.done", timeout=900)
        grown = peak_rss(pid) - before
        print(f"stalled viewer, 400 MB of output: server peak RSS +{grown // MB} MB")
        assert grown < BOUND, f"server grew by {grown // MB} MB for one stalled viewer"
        read = ws.read_until(b"output skipped")  # reading again: told what was dropped, then resynced
        assert read < 50 * MB, read
    finally:
        ws.close()


def test_request_bodies_are_refused_before_they_are_read(server: Server, attendee: httpx.Client) -> None:
    pid = server.proc.pid
    chunk = b"x" * MB

    def chunks() -> Iterator[bytes]:
        for _ in range(100):
            yield chunk

    reset_peak(pid)
    before = peak_rss(pid)
    answers = []
    for url, method in (
        (f"{LAB}/files/big.txt", "PUT"),
        ("/api/v1/progress/import", "POST"),
        ("/api/v1/help", "POST"),
    ):
        for body in (chunks(), chunk * 100):  # chunked (no Content-Length), then with one
            try:
                resp = attendee.request(method, url, content=body)
                answers.append((url, resp.status_code, resp.json().get("detail", "")))
            except httpx.HTTPError as exc:  # the server may close while we still send
                answers.append((url, 0, repr(exc)))
    grown = peak_rss(pid) - before
    print(f"6 bodies of 100 MB: server peak RSS +{grown // MB} MB")
    for url, status, detail in answers:
        assert status == 413, (url, status, detail)
        assert "too big" in detail, detail
    assert grown < BOUND, f"server grew by {grown // MB} MB"
