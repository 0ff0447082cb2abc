"""Files through the API (ETag conflicts, nothing lost) and the terminal WebSocket (real PTY,
re-attach keeps the shell)."""

from __future__ import annotations

import io
import json
import zipfile

from fastapi.testclient import TestClient

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
    buf = b""
    while needle.encode() not in buf:
        buf += ws.receive_bytes()
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
