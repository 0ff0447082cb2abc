"""Issue 13 item 6: the instructor sees the cheap identities (join time, user agent, how many joined
from one address, never the address) and removes one for good: its environment is destroyed, its
records are gone and its token stops working. Attendees cannot see the list."""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.testclient import TestClient

from labserver.models import Event
from tests.conftest import EVENT_CODE, instructor_headers

BROWSER = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 Chrome/131.0 Safari/537.36"


def _join(client: TestClient, name: str, ua: str) -> dict[str, str]:
    resp = client.post(
        "/api/v1/join", json={"event_code": EVENT_CODE, "name": name}, headers={"User-Agent": ua}
    )
    assert resp.status_code == 200, resp.text
    client.cookies.clear()
    return {"Authorization": f"Bearer {resp.json()['token']}"}


def test_instructor_sees_and_removes_cheap_identities(client: TestClient, app: FastAPI, event: Event) -> None:
    ada = _join(client, "Ada", BROWSER)
    bots = [_join(client, f"bot{i}", "python-httpx/0.27.0") for i in range(3)]
    run = client.post("/api/v1/labs/getting-started/steps/find-device/check", headers=bots[0])
    assert run.status_code == 200
    # attendees cannot see who joined
    assert client.get(f"/api/v1/events/{event.id}/joins", headers=ada).status_code in (401, 403)
    joins = client.get(f"/api/v1/events/{event.id}/joins", headers=instructor_headers())
    assert joins.status_code == 200, joins.text
    rows = {r["name"]: r for r in joins.json()}
    assert rows["Ada"]["user_agent"] == BROWSER and "scripted" not in rows["Ada"]["reasons"]
    assert rows["bot0"]["reasons"] == ["same-address", "scripted", "idle"]
    assert rows["bot1"]["same_address"] == 4 and "scripted" in rows["bot1"]["reasons"]
    assert "testclient" not in joins.text  # the address itself is never shown
    # remove bot0: environment, records and token gone
    env_id = client.get("/api/v1/environment", headers=bots[0]).json()["id"]
    workspace = app.state.ctx.settings.data_dir / "workspaces" / env_id
    assert workspace.is_dir()
    gone = client.delete(
        f"/api/v1/events/{event.id}/attendees/{rows['bot0']['id']}", headers=instructor_headers()
    )
    assert gone.status_code == 200, gone.text
    assert client.get("/api/v1/me", headers=bots[0]).status_code == 401
    assert not workspace.exists()
    names = [
        r["name"] for r in client.get(f"/api/v1/events/{event.id}/joins", headers=instructor_headers()).json()
    ]
    assert names == ["Ada", "bot1", "bot2"]
    grid = client.get(f"/api/v1/events/{event.id}/progress", headers=instructor_headers()).json()
    assert all(c[0] != rows["bot0"]["id"] for c in grid["cells"])
    assert (
        client.delete(
            f"/api/v1/events/{event.id}/attendees/{rows['bot0']['id']}", headers=instructor_headers()
        ).status_code
        == 404
    )
