"""The admission limit is the instructor's to read and change at run time; /metrics is theirs too;
joining begins the environment's start (the attendee never waits for it at join)."""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.testclient import TestClient

from labserver.models import Event
from tests.conftest import instructor_headers, join, settle


def test_the_instructor_reads_and_changes_the_admission_limit(client: TestClient, event: Event) -> None:
    got = client.get("/api/v1/admission", headers=instructor_headers())
    assert got.status_code == 200 and got.json()["limit"] >= 1
    put = client.put("/api/v1/admission", json={"limit": 3}, headers=instructor_headers())
    assert put.status_code == 200 and put.json() == {"limit": 3, "starting": 0, "queued": 0}
    assert client.get("/api/v1/admission", headers=instructor_headers()).json()["limit"] == 3
    assert client.put("/api/v1/admission", json={"limit": 0}, headers=instructor_headers()).status_code == 422


def test_attendees_cannot_see_or_change_admission_or_metrics(client: TestClient, event: Event) -> None:
    ada = join(client, "Ada")
    assert client.get("/api/v1/admission", headers=ada).status_code == 403
    assert client.put("/api/v1/admission", json={"limit": 50}, headers=ada).status_code == 403
    assert client.get("/metrics", headers=ada).status_code == 403


def test_metrics_publish_the_pool_waits(client: TestClient, event: Event) -> None:
    join(client, "Ada")
    text = client.get("/metrics", headers=instructor_headers()).text
    assert "labserver_db_pool_wait_seconds_count" in text
    assert "labserver_env_queue_length" in text


def test_joining_begins_the_environment_start(app: FastAPI, client: TestClient, event: Event) -> None:
    ada = join(client, "Ada")
    settle(app)
    env = client.get("/api/v1/environment", headers=ada).json()
    assert env["state"] == "ready"  # nobody asked for it: the join did
