"""Help with consent through the app (real shells): an instructor's socket types in an attendee's
terminal only on a share the attendee accepted, for that lab; the attendee is told who types; the
share ends from either side or with the hand, and the socket closes then; nobody accepts for
someone else."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from starlette.websockets import WebSocketDisconnect

from labserver.live import Kind
from labserver.models import Event
from tests.conftest import instructor_headers, join

LAB = "/api/v1/labs/getting-started"
INSTR = instructor_headers()


def _read_until(ws, needle: str) -> str:  # type: ignore[no-untyped-def]
    buf = b""
    while needle.encode() not in buf:
        msg = ws.receive()
        assert msg["type"] != "websocket.close", f"closed before {needle!r}: {buf!r}"
        buf += msg.get("bytes") or b""
    return buf.decode(errors="replace")


def _hand(client: TestClient, event: Event, who: dict[str, str]) -> tuple[int, str]:
    """Raise ``who``'s hand in the lab and open their shell; (help id, environment id)."""
    token = who["Authorization"].split()[1]
    with client.websocket_connect(f"{LAB}/terminal?token={token}") as ws:
        ws.send_bytes(b"echo up-$((1+1))\r")
        _read_until(ws, "up-2")
    h = client.post("/api/v1/help", headers=who, json={"lab": "getting-started", "step": "run-script"}).json()
    env_id = client.get("/api/v1/environment", headers=who).json()["id"]
    return h["id"], env_id


def _typing_url(env_id: str, lab: str = "getting-started") -> str:
    return f"/api/v1/environments/{env_id}/terminal?readonly=0&lab={lab}&instructor_token={INSTR['Authorization'][7:]}"


def _refused(client: TestClient, url: str) -> int:
    with pytest.raises(WebSocketDisconnect) as err, client.websocket_connect(url) as ws:
        ws.receive()
    return err.value.code


def test_no_typing_without_consent(client: TestClient, event: Event) -> None:
    ada = join(client, "Ada")
    help_id, env_id = _hand(client, event, ada)
    assert _refused(client, _typing_url(env_id)) == 4403  # nothing asked
    share = client.post(f"/api/v1/events/{event.id}/help/{help_id}/share", headers=INSTR)
    assert share.status_code == 200 and share.json()["state"] == "asked"
    assert _refused(client, _typing_url(env_id)) == 4403  # asked, not accepted
    # the read-only view stays open to instructors as before
    ro = f"/api/v1/environments/{env_id}/terminal?lab=getting-started&instructor_token={INSTR['Authorization'][7:]}"
    with client.websocket_connect(ro) as ws:
        ws.send_bytes(b"echo never-$((2*3))\r")
        assert "up-2" in _read_until(ws, "up-2")
    token = ada["Authorization"].split()[1]
    with client.websocket_connect(f"{LAB}/terminal?token={token}") as ws:
        ws.send_bytes(b"echo check-$((3*3))\r")
        assert "never-6" not in _read_until(ws, "check-9")


def test_accepted_share_lets_the_instructor_type_and_tells_the_attendee(
    app: FastAPI, client: TestClient, event: Event
) -> None:
    ada = join(client, "Ada")
    help_id, env_id = _hand(client, event, ada)
    share = client.post(f"/api/v1/events/{event.id}/help/{help_id}/share", headers=INSTR).json()
    assert client.get("/api/v1/share", headers=ada).json()["id"] == share["id"]
    accepted = client.post(f"/api/v1/share/{share['id']}/accept", headers=ada)
    assert accepted.status_code == 200 and accepted.json()["state"] == "active"
    attendee_id = share["attendee_id"]
    sub = app.state.ctx.live.subscribe(event.id, attendee_id)
    token = ada["Authorization"].split()[1]
    with (
        client.websocket_connect(f"{LAB}/terminal?token={token}") as mine,
        client.websocket_connect(_typing_url(env_id)) as theirs,
    ):
        theirs.send_bytes(b"echo helped-$((6*7))\r")
        assert "helped-42" in _read_until(mine, "helped-42")  # the same shell
        mine.send_bytes(b"echo both-$((5*5))\r")
        assert "both-25" in _read_until(theirs, "both-25")
    typing = _wait_for(sub, Kind.share_typing)
    assert typing.data["by"] == "instructor" and typing.data["share_id"] == share["id"]
    sub.close()


def _wait_for(sub, kind: Kind):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        while not sub.queue.empty():
            ev = sub.queue.get_nowait()
            if ev.kind == kind:
                return ev
        time.sleep(0.02)
    raise AssertionError(f"no {kind}")


@pytest.mark.parametrize("who_ends", ["attendee", "instructor", "resolve"])
def test_consent_ends_and_the_socket_closes(client: TestClient, event: Event, who_ends: str) -> None:
    ada = join(client, "Ada")
    help_id, env_id = _hand(client, event, ada)
    share = client.post(f"/api/v1/events/{event.id}/help/{help_id}/share", headers=INSTR).json()
    client.post(f"/api/v1/share/{share['id']}/accept", headers=ada)
    with client.websocket_connect(_typing_url(env_id)) as theirs:
        theirs.send_bytes(b"echo before-$((4*4))\r")
        _read_until(theirs, "before-16")
        if who_ends == "attendee":
            assert client.delete("/api/v1/share", headers=ada).json()["state"] == "ended"
        elif who_ends == "instructor":
            client.delete(f"/api/v1/events/{event.id}/shares/{share['id']}", headers=INSTR)
        else:
            client.post(f"/api/v1/events/{event.id}/help/{help_id}/resolve", headers=INSTR)
        theirs.send_bytes(b"echo late-$((2+2))\r")  # typed as it ends: never written

        def closed_code() -> int:
            try:
                while True:
                    theirs.receive_bytes()
            except WebSocketDisconnect as exc:
                return int(exc.code)

        pool = ThreadPoolExecutor(1)
        try:
            assert pool.submit(closed_code).result(timeout=30) == 4403
        finally:
            pool.shutdown(wait=False)
    assert _refused(client, _typing_url(env_id)) == 4403
    token = ada["Authorization"].split()[1]
    with client.websocket_connect(f"{LAB}/terminal?token={token}") as mine:
        mine.send_bytes(b"echo probe-$((3+3))\r")
        assert "late-4" not in _read_until(mine, "probe-6")
    assert client.get("/api/v1/share", headers=ada).json() is None
    # an ended share is never active again: accepting it now is refused
    assert client.post(f"/api/v1/share/{share['id']}/accept", headers=ada).status_code == 409


def test_nobody_accepts_for_someone_else_and_a_share_is_for_its_lab_only(
    client: TestClient, event: Event
) -> None:
    ada, bob = join(client, "Ada"), join(client, "Bob")
    help_id, env_id = _hand(client, event, ada)
    share = client.post(f"/api/v1/events/{event.id}/help/{help_id}/share", headers=INSTR).json()
    assert client.post(f"/api/v1/share/{share['id']}/accept", headers=bob).status_code == 404
    assert client.get("/api/v1/share", headers=bob).json() is None
    assert client.delete("/api/v1/share", headers=bob).json() is None
    assert client.get("/api/v1/share", headers=ada).json()["state"] == "asked"  # Bob changed nothing
    # attendees cannot ask, list or end shares
    assert client.post(f"/api/v1/events/{event.id}/help/{help_id}/share", headers=bob).status_code in (
        401,
        403,
    )
    assert client.get(f"/api/v1/events/{event.id}/shares", headers=bob).status_code in (401, 403)
    client.post(f"/api/v1/share/{share['id']}/accept", headers=ada)
    assert _refused(client, _typing_url(env_id, lab="other-lab")) == 4403
    bob_env = client.get("/api/v1/environment", headers=bob).json()["id"]
    assert _refused(client, _typing_url(bob_env)) == 4403  # Ada's consent is not Bob's


def test_sharing_needs_an_open_hand_with_a_lab(client: TestClient, event: Event) -> None:
    ada = join(client, "Ada")
    h = client.post("/api/v1/help", headers=ada, json={"lab": "", "step": ""}).json()
    no_lab = client.post(f"/api/v1/events/{event.id}/help/{h['id']}/share", headers=INSTR)
    assert no_lab.status_code == 409 and "lab" in no_lab.json()["detail"]
    client.delete("/api/v1/help", headers=ada)
    closed = client.post(f"/api/v1/events/{event.id}/help/{h['id']}/share", headers=INSTR)
    assert closed.status_code == 409
    assert client.post(f"/api/v1/events/{event.id}/help/999/share", headers=INSTR).status_code == 404


def test_thirty_hands_shared_at_once(client: TestClient, event: Event) -> None:
    people = [join(client, f"p{i}") for i in range(30)]
    hands = [
        client.post("/api/v1/help", headers=p, json={"lab": "getting-started", "step": "run-script"}).json()[
            "id"
        ]
        for p in people
    ]

    def ask_and_accept(i: int) -> str:
        share = client.post(f"/api/v1/events/{event.id}/help/{hands[i]}/share", headers=INSTR).json()
        return str(client.post(f"/api/v1/share/{share['id']}/accept", headers=people[i]).json()["state"])

    with ThreadPoolExecutor(30) as pool:
        states = list(pool.map(ask_and_accept, range(30)))
    assert states == ["active"] * 30
    live = client.get(f"/api/v1/events/{event.id}/shares", headers=INSTR).json()
    assert sorted(s["help_id"] for s in live) == sorted(hands)
    assert len({json.dumps(s["env_id"]) for s in live}) == 30
