"""An attendee can never read or touch another attendee's environment, files, terminal or results.

Attendee routes carry no attendee id: everything is "mine". This test walks every /api/v1 route of
the attendee API and checks that (1) without a token it is refused, and (2) with Bob's token it only
ever shows Bob's data while Ada's marker file and check runs exist."""

from __future__ import annotations

import pytest
from fastapi.routing import APIRoute, APIWebSocketRoute
from fastapi.testclient import TestClient
from starlette.websockets import WebSocketDisconnect

from labserver.models import Event
from tests.conftest import iter_routes, join

PUBLIC = {"/api/v1/join"}
SAMPLE = {"lab_id": "getting-started", "step_id": "write-file", "path": "notes/hello.txt"}


def attendee_routes(app) -> list[APIRoute]:  # type: ignore[no-untyped-def]
    return [
        r
        for path, r in iter_routes(app)
        if isinstance(r, APIRoute)
        and path.startswith("/api/v1")
        and "instructor" not in (r.tags or [])
        and not path.startswith(("/api/v1/events", "/api/v1/environments", "/api/v1/instructor"))
    ]


def fill(path: str) -> str:
    for key, value in SAMPLE.items():
        path = path.replace("{" + key + "}", value).replace("{" + key + ":path}", value)
    return path


def test_every_attendee_route_refuses_anonymous(client: TestClient, event: Event) -> None:
    checked = 0
    for route in attendee_routes(client.app):
        if route.path in PUBLIC:
            continue
        for method in route.methods - {"HEAD", "OPTIONS"}:
            resp = client.request(method, fill(route.path), json={})
            assert resp.status_code == 401, (
                f"{method} {route.path} answered {resp.status_code} without a token"
            )
            checked += 1
    assert checked >= 12


def test_bob_never_sees_adas_files_runs_or_help(client: TestClient, event: Event) -> None:
    ada = join(client, "Ada")
    bob = join(client, "Bob")
    secret = "ada-secret-7f3a"
    assert (
        client.put(
            "/api/v1/labs/getting-started/files/notes/hello.txt", content=secret, headers=ada
        ).status_code
        == 200
    )
    assert (
        client.post("/api/v1/labs/getting-started/steps/write-file/check", headers=ada).json()["status"]
        == "failed"
    )
    client.post("/api/v1/help", json={"lab": "getting-started", "note": "ada needs help"}, headers=ada)

    assert client.get("/api/v1/labs/getting-started/files/notes/hello.txt", headers=bob).status_code == 404
    assert client.get("/api/v1/labs/getting-started/steps/write-file/runs", headers=bob).json() == []
    assert client.get("/api/v1/help", headers=bob).json() is None
    names = [f["path"] for f in client.get("/api/v1/labs/getting-started/files", headers=bob).json()]
    assert "notes/hello.txt" not in names
    assert (
        client.get("/api/v1/environment", headers=bob).json()["id"]
        != client.get("/api/v1/environment", headers=ada).json()["id"]
    )
    for route in attendee_routes(client.app):
        if "GET" not in route.methods or route.path.endswith(("/stream", "/download")):
            continue
        resp = client.get(fill(route.path), headers=bob)
        assert secret not in resp.text and "ada needs help" not in resp.text, route.path
    # Bob's zip holds Bob's folder only
    zipped = client.get("/api/v1/labs/getting-started/download", headers=bob).content
    assert secret.encode() not in zipped


@pytest.mark.parametrize(
    "path", ["../../../etc/passwd", "..%2F..%2Fsecret_key", "notes/../../other/x", "%2Fetc%2Fpasswd"]
)
def test_path_traversal_in_the_file_api_is_refused(client: TestClient, event: Event, path: str) -> None:
    ada = join(client, "Ada")
    client.get("/api/v1/labs/getting-started/files", headers=ada)
    resp = client.get(f"/api/v1/labs/getting-started/files/{path}", headers=ada)
    assert resp.status_code in (400, 404), resp.text
    assert "root:" not in resp.text
    resp = client.put(f"/api/v1/labs/getting-started/files/{path}", content=b"x", headers=ada)
    assert resp.status_code in (400, 404, 405)


def test_another_labs_folder_is_not_reachable_through_a_lab(client: TestClient, event: Event) -> None:
    ada = join(client, "Ada")
    assert client.get("/api/v1/labs/no-such-lab/files", headers=ada).status_code == 404


def test_terminal_websocket_needs_a_token(client: TestClient, event: Event) -> None:
    routes = [r for _p, r in iter_routes(client.app) if isinstance(r, APIWebSocketRoute)]
    assert routes
    with (
        pytest.raises(WebSocketDisconnect) as exc,
        client.websocket_connect("/api/v1/labs/getting-started/terminal") as ws,
    ):
        ws.receive_bytes()
    assert exc.value.code == 4401


def test_instructor_terminal_refuses_attendees(client: TestClient, event: Event) -> None:
    ada = join(client, "Ada")
    env_id = client.post("/api/v1/environment", headers=ada).json()["id"]
    token = ada["Authorization"].split()[1]
    with (
        pytest.raises(WebSocketDisconnect) as exc,
        client.websocket_connect(
            f"/api/v1/environments/{env_id}/terminal?readonly=1", headers={"Authorization": f"Bearer {token}"}
        ) as ws,
    ):
        ws.receive_bytes()
    assert exc.value.code == 4403
