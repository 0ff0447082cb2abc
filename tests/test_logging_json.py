"""Structured logs follow one attendee: every line a request logs carries its request id, and the
attendee's and environment's ids once they are known, from the join to the check (and through the
worker threads and the background start the request began)."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from labserver.models import Event
from labserver.observability import logging_json
from tests.conftest import EVENT_CODE, join, settle


@pytest.fixture
def json_lines() -> Iterator[io.StringIO]:
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(logging_json.JsonFormatter())
    root = logging.getLogger()
    old = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    try:
        yield out
    finally:
        root.removeHandler(handler)
        root.setLevel(old)


def lines(out: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in out.getvalue().splitlines() if line.strip()]


def test_one_attendee_is_followed_from_join_to_check(
    app: FastAPI, client: TestClient, event: Event, json_lines: io.StringIO
) -> None:
    resp = client.post(
        "/api/v1/join", json={"event_code": EVENT_CODE, "name": "Ada"}, headers={"X-Request-ID": "join-1"}
    )
    ada = {"Authorization": f"Bearer {resp.json()['token']}"}
    attendee_id = resp.json()["attendee"]["id"] if "attendee" in resp.json() else None
    client.cookies.clear()
    settle(app)
    client.post(
        "/api/v1/labs/getting-started/steps/write-file/check", headers={**ada, "X-Request-ID": "check-1"}
    )
    got = lines(json_lines)
    joined = [x for x in got if str(x["msg"]).startswith("attendee ") and "joined" in str(x["msg"])]
    assert len(joined) == 1 and joined[0]["request_id"] == "join-1"
    attendee_id = attendee_id or joined[0]["attendee_id"]
    assert joined[0]["attendee_id"] == attendee_id and joined[0]["event_id"] == event.id
    env_id = f"ev{event.id}-at{attendee_id}"
    # the environment start begun at join (a background task) logs under the join's request id
    ready = [x for x in got if x.get("state") == "ready" and x.get("env_id") == env_id]
    assert ready and ready[0]["request_id"] == "join-1" and ready[0]["attendee_id"] == attendee_id
    finished = [x for x in got if str(x["msg"]).startswith("check finished")]
    assert len(finished) == 1
    line = finished[0]
    assert (line["request_id"], line["attendee_id"], line["env_id"]) == ("check-1", attendee_id, env_id)
    assert (line["lab"], line["step"], line["status"]) == ("getting-started", "write-file", "failed")
    assert all(x["level"] and x["ts"] and x["logger"] for x in got)


def test_another_request_does_not_inherit_the_ids(
    app: FastAPI, client: TestClient, event: Event, json_lines: io.StringIO
) -> None:
    join(client, "Ada")
    settle(app)
    logging_json.bind(attendee_id=99)  # outside a request: nothing to add to, nothing kept
    logging.getLogger("labserver.test").info("outside any request")
    outside = [x for x in lines(json_lines) if x["msg"] == "outside any request"]
    assert outside and "attendee_id" not in outside[0] and "request_id" not in outside[0]


def test_the_text_format_appends_the_ids_and_json_keeps_extras() -> None:
    record = logging.LogRecord("labserver.x", logging.INFO, __file__, 1, "hello %s", ("you",), None)
    record.lab = "getting-started"
    token = logging_json.begin("r-1")
    try:
        logging_json.bind(attendee_id=7)
        text = logging_json.TextFormatter("%(message)s").format(record)
        data = json.loads(logging_json.JsonFormatter().format(record))
    finally:
        logging_json.end(token)
    assert text == "hello you [request_id=r-1 attendee_id=7]"
    assert data["msg"] == "hello you" and data["lab"] == "getting-started" and data["attendee_id"] == 7


def test_ids_bound_in_a_worker_thread_or_a_child_task_reach_the_request() -> None:
    import asyncio

    async def child() -> None:  # a task the request started (a context copy of its own)
        logging_json.bind(env_id="ev1-at5")

    async def request() -> dict[str, object]:
        token = logging_json.begin("r-2")
        try:
            await asyncio.to_thread(logging_json.bind, attendee_id=5)  # a sync dependency's thread
            await asyncio.ensure_future(child())
            return logging_json.current()
        finally:
            logging_json.end(token)

    assert asyncio.run(request()) == {"request_id": "r-2", "attendee_id": 5, "env_id": "ev1-at5"}


def test_thirty_joins_at_once_each_log_their_own_ids(
    app: FastAPI, client: TestClient, event: Event, json_lines: io.StringIO
) -> None:
    import threading

    ids: dict[str, int] = {}

    def one(n: int) -> None:
        resp = client.post(
            "/api/v1/join",
            json={"event_code": EVENT_CODE, "name": f"p{n}"},
            headers={"X-Request-ID": f"join-{n}"},
        )
        ids[f"join-{n}"] = resp.json()["attendee"]["id"]

    threads = [threading.Thread(target=one, args=(n,)) for n in range(30)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    settle(app)
    assert len(ids) == 30
    got = lines(json_lines)
    joined = {x["request_id"]: x["attendee_id"] for x in got if "joined event" in str(x["msg"])}
    assert joined == ids  # no request's line carries another's attendee
    for x in got:
        if x.get("state") in ("provisioning", "ready") and "request_id" in x:
            assert x["env_id"] == f"ev{event.id}-at{ids[str(x['request_id'])]}", x
