"""Files through the API (ETag conflicts, nothing lost, one compare-and-write at a time) and the
terminal WebSocket (real PTY, re-attach keeps the shell, input waits for the first prompt)."""

from __future__ import annotations

import asyncio
import io
import json
import threading
import zipfile
from concurrent.futures import ThreadPoolExecutor

from fastapi.testclient import TestClient

from labserver.backends.base import EnvRef
from labserver.backends.local import LocalBackend
from labserver.models import Event
from tests.conftest import join

LAB = "/api/v1/labs/getting-started"


def test_save_then_read_back_with_etag(client: TestClient, event: Event) -> None:
    ada = join(client)
    resp = client.put(f"{LAB}/files/rmsnorm.py", content="x = 1\n", headers=ada)
    etag = resp.json()["etag"]
    got = client.get(f"{LAB}/files/rmsnorm.py", headers=ada)
    assert got.text == "x = 1\n" and got.headers["etag"].strip('"') == etag


def test_stale_editor_save_is_refused_and_nothing_is_lost(client: TestClient, event: Event) -> None:
    ada = join(client)
    original = client.get(f"{LAB}/files/rmsnorm.py", headers=ada)
    etag = original.headers["etag"].strip('"')
    # meanwhile the file changes on disk (e.g. from the terminal)
    client.put(f"{LAB}/files/rmsnorm.py", content="from terminal\n", headers=ada)
    resp = client.put(
        f"{LAB}/files/rmsnorm.py", content="from editor\n", headers={**ada, "If-Match": f'"{etag}"'}
    )
    assert resp.status_code == 409 and resp.json()["code"] == "conflict"
    assert client.get(f"{LAB}/files/rmsnorm.py", headers=ada).text == "from terminal\n"


class HeldSave(LocalBackend):
    """The first write waits until the test lets it go; ``overlap`` is set once a second save is
    under way meanwhile (reading the file, or waiting for its turn on the environment's lock)."""

    def __init__(self, backend: LocalBackend) -> None:
        super().__init__(backend.settings)
        self.writing = threading.Event()
        self.overlap = threading.Event()
        self.go = threading.Event()

    async def read_file(self, ref: EnvRef, path: str) -> bytes:
        if self.writing.is_set():
            self.overlap.set()
        return await super().read_file(ref, path)

    async def write_file(self, ref: EnvRef, path: str, data: bytes) -> None:
        if not self.writing.is_set():
            self.writing.set()
            await asyncio.to_thread(self.go.wait, 60)
        await super().write_file(ref, path, data)


class OverlapLock(asyncio.Lock):
    def __init__(self, overlap: threading.Event) -> None:
        super().__init__()
        self.overlap = overlap

    async def acquire(self) -> bool:
        if self.locked():
            self.overlap.set()
        return await super().acquire()


def test_two_saves_from_one_version_one_wins_the_other_is_refused(client: TestClient, event: Event) -> None:
    """Compare and write are one step: two saves that both start from the same ETag (two tabs, or a
    double Ctrl+S) cannot both succeed, or the first one's text is lost without a word."""
    ada = join(client)
    etag = client.get(f"{LAB}/files/rmsnorm.py", headers=ada).headers["etag"]
    ctx = client.app.state.ctx  # type: ignore[attr-defined]
    backend = ctx.backend = HeldSave(ctx.backend)
    env_id = client.get("/api/v1/environment", headers=ada).json()["id"]
    ctx.file_locks[env_id] = OverlapLock(backend.overlap)

    def save(text: str) -> int:
        url = f"{LAB}/files/rmsnorm.py"
        return client.put(url, content=text, headers={**ada, "If-Match": etag}).status_code

    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(save, "first\n")
        assert backend.writing.wait(60)  # the first save is writing
        second = pool.submit(save, "second\n")
        assert backend.overlap.wait(60)  # the second one has arrived
        backend.go.set()
        statuses = {"first": first.result(), "second": second.result()}
    assert statuses == {"first": 200, "second": 409}
    assert client.get(f"{LAB}/files/rmsnorm.py", headers=ada).text == "first\n"


def test_reset_keeps_a_dated_backup(client: TestClient, event: Event) -> None:
    ada = join(client)
    client.put(f"{LAB}/files/rmsnorm.py", content="my work\n", headers=ada)
    backup = client.post(f"{LAB}/reset", headers=ada).json()["backup"]
    assert backup.startswith(".backups/") and backup.endswith("/getting-started")
    assert "NotImplementedError" in client.get(f"{LAB}/files/rmsnorm.py", headers=ada).text
    ws = client.app.state.ctx.settings.workspaces_dir
    assert any(p.read_text() == "my work\n" for p in ws.rglob("rmsnorm.py"))


def test_download_is_a_zip_of_my_lab(client: TestClient, event: Event) -> None:
    ada = join(client)
    client.put(f"{LAB}/files/notes/hello.txt", content="hi", headers=ada)
    data = client.get(f"{LAB}/download", headers=ada).content
    names = zipfile.ZipFile(io.BytesIO(data)).namelist()
    assert "getting-started/notes/hello.txt" in names and "getting-started/rmsnorm.py" in names


def _read_until(ws, needle: str) -> str:  # type: ignore[no-untyped-def]
    """The shell's output up to ``needle`` (text frames are control messages: skipped)."""
    buf = b""
    while needle.encode() not in buf:
        msg = ws.receive()
        assert msg["type"] != "websocket.close", f"closed before {needle!r}: {buf!r}"
        buf += msg.get("bytes") or b""
    return buf.decode(errors="replace")


def test_terminal_roundtrip_and_reattach_keeps_the_shell(client: TestClient, event: Event) -> None:
    ada = join(client)
    token = ada["Authorization"].split()[1]
    with client.websocket_connect(f"{LAB}/terminal?token={token}") as ws:
        ws.send_text(json.dumps({"resize": [120, 40]}))
        ws.send_bytes(b"export LS_MARK=kept-$((40+2)); pwd\r")
        assert "getting-started" in _read_until(ws, "getting-started")
    # the socket dropped; a new one re-attaches to the same shell and sees the scrollback
    with client.websocket_connect(f"{LAB}/terminal?token={token}") as ws:
        ws.send_bytes(b"echo $LS_MARK\r")
        assert "kept-42" in _read_until(ws, "kept-42")


def test_input_sent_before_the_first_prompt_waits_for_it(client: TestClient, event: Event) -> None:
    """Typed the moment the socket opens (the shell is not even started): no echo before the
    prompt, the command once, after it."""
    ada = join(client)
    token = ada["Authorization"].split()[1]
    with client.websocket_connect(f"{LAB}/terminal?token={token}") as ws:
        ws.send_bytes(b"echo early-$((6*7))\r")
        out = _read_until(ws, "early-42\r\n")
    assert out.count("echo early-$((6*7))") == 1, out
    assert out.index("getting-started$ ") < out.index("echo early"), out
