"""Attacks on the file routes of the local backend (issue 13, items 2 and 3), made the way an
attendee makes them: symlinks typed in the browser's terminal (the real PTY shell behind the
terminal WebSocket), then requests through the editor's API.

- a symlink to the lab's ``solution/`` file must never pass a check;
- a symlink swapped in and out of a path (``renameat2(RENAME_EXCHANGE)`` in a loop, run from the
  attendee's own terminal) while the editor reads and saves must never read or write outside the
  workspace, over hundreds of requests;
- ``reset`` must refuse a ``.backups`` that is a symlink (it used to move the lab into whatever the
  link named, e.g. another attendee's workspace)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from labserver.models import Event
from tests.conftest import REPO, join

LAB = "getting-started"
API = f"/api/v1/labs/{LAB}"
ROUNDS = 300

SWAP = """
import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
RENAME_EXCHANGE = 2
a, b, stop = sys.argv[1], sys.argv[2], sys.argv[3]
n, deadline = 0, time.time() + 120
while not os.path.exists(stop) and time.time() < deadline:
    libc.renameat2(-100, a.encode(), -100, b.encode(), RENAME_EXCHANGE)
    n += 1
print("SWAPS", n)
"""


@pytest.fixture
def lenient(app: FastAPI) -> Iterator[TestClient]:
    """A client that sees a server error as a 500 answer (a race must be counted, not crash the test)."""
    with TestClient(app, raise_server_exceptions=False) as c:
        yield c


def me(client: TestClient, headers: dict[str, str]) -> int:
    return int(client.get("/api/v1/me", headers=headers).json()["attendee"]["id"])


def workspace(client: TestClient, event: Event, headers: dict[str, str]) -> Path:
    client.post("/api/v1/environment", headers=headers)
    ws = client.app.state.ctx.settings.workspaces_dir / f"ev{event.id}-at{me(client, headers)}"
    assert ws.is_dir(), ws
    return ws


def terminal(client: TestClient, headers: dict[str, str], *commands: str) -> str:
    """Type ``commands`` in the attendee's browser terminal; returns what it printed."""
    token = headers["Authorization"].split()[1]
    out = ""
    with client.websocket_connect(f"{API}/terminal?token={token}") as ws:
        for command in commands:
            ws.send_bytes(command.encode() + b"; echo END-OF-$((6*7))\r")
            buf = b""
            while b"END-OF-42" not in buf:
                msg = ws.receive()  # text frames are control messages (the ready signal): skipped
                assert msg["type"] != "websocket.close", f"closed: {buf!r}"
                buf += msg.get("bytes") or b""
            out += buf.decode("utf-8", "replace")
    return out


def test_a_symlink_to_the_solution_passes_no_check(client: TestClient, event: Event) -> None:
    ada = join(client)
    workspace(client, event, ada)
    solution = REPO / "labs" / LAB / "solution" / "rmsnorm.py"
    terminal(client, ada, f"ln -sf {solution} rmsnorm.py")
    run = client.post(f"{API}/steps/implement-rmsnorm/check", headers=ada).json()
    assert run["status"] != "passed", run


def _bob(client: TestClient, event: Event) -> tuple[dict[str, str], Path]:
    bob = join(client, "Bob")
    bob_ws = workspace(client, event, bob)
    assert client.put(f"{API}/files/secret.txt", content="BOB-SECRET", headers=bob).status_code == 200
    return bob, bob_ws / LAB


def _start_swapper(client: TestClient, ada: dict[str, str], target: Path) -> None:
    """In Ada's terminal: ``d`` a real folder, ``d.alt`` a symlink to ``target``, and a background
    loop that atomically exchanges the two names until the file ``stop`` appears."""
    assert client.put(f"{API}/files/swap.py", content=SWAP, headers=ada).status_code == 200
    assert client.put(f"{API}/files/d/secret.txt", content="ada-own", headers=ada).status_code == 200
    terminal(client, ada, f"ln -s {target} d.alt; (python swap.py d d.alt stop > swap.log 2>&1 &)")
    time.sleep(0.5)


def _stop_swapper(client: TestClient, ada: dict[str, str]) -> str:
    client.put(f"{API}/files/stop", content="", headers=ada)
    for _ in range(100):
        log = client.get(f"{API}/files/swap.log", headers=ada)
        if log.status_code == 200 and "SWAPS" in log.text:
            return log.text
        time.sleep(0.1)
    return ""


def test_reads_racing_a_swapped_symlink_never_leave_the_workspace(lenient: TestClient, event: Event) -> None:
    client = lenient
    ada = join(client)
    workspace(client, event, ada)
    _bob_headers, bob_lab = _bob(client, event)
    _start_swapper(client, ada, bob_lab)
    codes: dict[int, int] = {}
    leaked = 0
    for _ in range(ROUNDS):
        resp = client.get(f"{API}/files/d/secret.txt", headers=ada)
        codes[resp.status_code] = codes.get(resp.status_code, 0) + 1
        leaked += "BOB-SECRET" in resp.text
    swaps = _stop_swapper(client, ada)
    assert "SWAPS" in swaps, swaps  # the race really ran
    assert leaked == 0, f"{leaked}/{ROUNDS} reads returned Bob's file ({codes})"
    assert codes.get(200, 0) > 0, codes  # and the honest reads still worked


def test_saves_racing_a_swapped_symlink_never_leave_the_workspace(lenient: TestClient, event: Event) -> None:
    client = lenient
    ada = join(client)
    workspace(client, event, ada)
    _bob_headers, bob_lab = _bob(client, event)
    _start_swapper(client, ada, bob_lab)
    codes: dict[int, int] = {}
    for i in range(ROUNDS):
        resp = client.put(f"{API}/files/d/planted-{i}.txt", content="from ada", headers=ada)
        codes[resp.status_code] = codes.get(resp.status_code, 0) + 1
    swaps = _stop_swapper(client, ada)
    assert "SWAPS" in swaps, swaps
    planted = sorted(p.name for p in bob_lab.iterdir() if p.name.startswith(("planted-", ".planted-")))
    assert planted == [], f"{len(planted)}/{ROUNDS} saves landed in Bob's lab ({codes})"
    assert codes.get(200, 0) > 0, codes


def test_reset_refuses_a_symlinked_backups_folder(client: TestClient, event: Event) -> None:
    ada = join(client)
    ada_ws = workspace(client, event, ada)
    _bob_headers, bob_lab = _bob(client, event)
    bob_ws = bob_lab.parent
    before = sorted(p.name for p in bob_ws.iterdir())
    client.put(f"{API}/files/mine.txt", content="ada's work", headers=ada)
    terminal(client, ada, f"ln -s {bob_ws} ../.backups")
    resp = client.post(f"{API}/reset", headers=ada)
    assert resp.status_code == 400, resp.text
    assert sorted(p.name for p in bob_ws.iterdir()) == before  # nothing moved into Bob's workspace
    assert (ada_ws / LAB / "mine.txt").read_text() == "ada's work"  # and Ada's lab is still hers


def test_listing_and_download_never_follow_symlinks(client: TestClient, event: Event) -> None:
    ada = join(client)
    workspace(client, event, ada)
    _bob_headers, bob_lab = _bob(client, event)
    terminal(client, ada, f"ln -s {bob_lab} bobs; ln -s {bob_lab}/secret.txt bob.txt; mkdir -p sub")
    names = {e["path"] for e in client.get(f"{API}/files", headers=ada).json()}
    assert not any(n.startswith(("bobs", "bob.txt")) for n in names), names
    data = client.get(f"{API}/download", headers=ada).content
    assert b"BOB-SECRET" not in data
    assert client.get(f"{API}/files/bob.txt", headers=ada).status_code == 400
    assert client.get(f"{API}/files/bobs/secret.txt", headers=ada).status_code == 400
    assert client.put(f"{API}/files/bobs/new.txt", content="x", headers=ada).status_code == 400
    assert not (bob_lab / "new.txt").exists()


def _unsandboxed_app(settings, allow: bool = False) -> FastAPI:  # type: ignore[no-untyped-def]
    from sqlmodel import Session

    from labserver.app import create_app
    from labserver.services.joining.events import create_event
    from tests.conftest import EVENT_CODE

    app = create_app(settings.model_copy(update={"sandbox": "none", "allow_unsandboxed": allow}))
    with Session(app.state.ctx.engine) as s:
        create_event(s, title="t", labs=[LAB], code=EVENT_CODE)
    return app


def test_without_a_sandbox_only_this_machine_may_join(settings) -> None:  # type: ignore[no-untyped-def]
    """No isolation: the server says so (``isolation.problems``) and refuses remote attendees."""
    from tests.conftest import EVENT_CODE

    app = _unsandboxed_app(settings)
    body = {"event_code": EVENT_CODE, "name": "Mallory"}
    with TestClient(app, client=("203.0.113.9", 40000)) as remote:
        resp = remote.post("/api/v1/join", json=body)
        assert resp.status_code == 403 and resp.json()["code"] == "unsandboxed", resp.text
    with TestClient(app, client=("127.0.0.1", 40000)) as local:
        assert local.post("/api/v1/join", json=body).status_code == 200
    assert not app.state.ctx.backend.isolation.complete  # and the server says why


def test_the_operator_can_admit_remote_attendees_without_a_sandbox(settings) -> None:  # type: ignore[no-untyped-def]
    from tests.conftest import EVENT_CODE

    app = _unsandboxed_app(settings, allow=True)
    with TestClient(app, client=("203.0.113.9", 40000)) as remote:
        assert remote.post("/api/v1/join", json={"event_code": EVENT_CODE, "name": "Eve"}).status_code == 200
