from fastapi.testclient import TestClient

from labserver.models import Event
from tests.conftest import join


def test_join_with_the_right_code_gives_a_token_that_works(client: TestClient, event: Event) -> None:
    headers = join(client, "Ada")
    me = client.get("/api/v1/me", headers=headers).json()
    assert me["attendee"]["name"] == "Ada"
    assert me["event"]["code"] == event.code


def test_wrong_code_is_refused_with_a_clear_message(client: TestClient, event: Event) -> None:
    resp = client.post("/api/v1/join", json={"event_code": "NOPE42", "name": "Ada"})
    assert resp.status_code == 400
    assert resp.json()["code"] == "wrong-code"
    assert "No event has this code" in resp.json()["detail"]


def test_wrong_code_message_speaks_chinese_to_chinese_browsers(client: TestClient, event: Event) -> None:
    resp = client.post(
        "/api/v1/join",
        json={"event_code": "NOPE42", "name": "Ada"},
        headers={"Accept-Language": "zh-CN,zh;q=0.9,en;q=0.5"},
    )
    assert "活动码" in resp.json()["detail"]


def test_code_is_case_and_space_insensitive(client: TestClient, event: Event) -> None:
    resp = client.post("/api/v1/join", json={"event_code": " test-code ", "name": "Bo"})
    assert resp.status_code == 200


def test_same_name_twice_is_refused(client: TestClient, event: Event) -> None:
    join(client, "Ada")
    resp = client.post("/api/v1/join", json={"event_code": event.code, "name": "Ada"})
    assert resp.json()["code"] == "name-taken"


def test_api_without_token_is_401(client: TestClient, event: Event) -> None:
    assert client.get("/api/v1/labs").status_code == 401


def test_openapi_is_served_with_the_attendee_api(client: TestClient) -> None:
    paths = client.get("/api/v1/openapi.json").json()["paths"]
    for path in (
        "/api/v1/join",
        "/api/v1/labs",
        "/api/v1/labs/{lab_id}/steps/{step_id}/check",
        "/api/v1/labs/{lab_id}/files/{path}",
        "/api/v1/environment",
        "/api/v1/help",
        "/api/v1/stream",
    ):
        assert path in paths, path
