"""Who may open the live gallery: the page and its stream refuse anonymous callers, attendees (by
bearer token or cookie) and forged instructor cookies; the instructor gets both. Thirty gallery
streams at once hold no database connection. The stream is
asked of a real server (an in-process client would wait for an endless stream to end). (The
stream's content, event by event, is tested in tests/services/test_gallery.py: an event's stream
never carries another event's terminal.)"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator

import httpx
import pytest
import uvicorn
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlmodel import Session

from labserver.models import Event
from labserver.routes.deps import ATTENDEE_COOKIE, INSTRUCTOR_COOKIE
from labserver.services.joining.events import join as join_event
from tests.conftest import INSTRUCTOR_TOKEN, instructor_headers, join


@pytest.fixture
def served(app: FastAPI) -> Iterator[str]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", timeout_graceful_shutdown=1)
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def test_the_gallery_stream_answers_the_instructor_only(app: FastAPI, event: Event, served: str) -> None:
    with Session(app.state.ctx.engine, expire_on_commit=False) as db:
        _, token, _ = join_event(db, event_code=event.code, name="Mallory")
    url = f"{served}/api/v1/events/{event.id}/gallery/stream"
    refused = {
        "anonymous": ({}, {}),
        "attendee-bearer": ({"Authorization": f"Bearer {token}"}, {}),
        "attendee-cookie": ({}, {ATTENDEE_COOKIE: token}),
        "forged-cookie": ({}, {INSTRUCTOR_COOKIE: '{"name": "me", "t": "x"}.forged.sig'}),
    }
    for who, (headers, cookies) in refused.items():
        with (
            httpx.Client(timeout=10, cookies=cookies) as client,
            client.stream("GET", url, headers=headers) as resp,
        ):
            assert resp.status_code == 403, who
            assert "text/event-stream" not in resp.headers.get("content-type", ""), who
    headers = {"Authorization": f"Bearer {INSTRUCTOR_TOKEN}"}
    with httpx.Client(timeout=10) as client, client.stream("GET", url, headers=headers) as resp:
        assert resp.status_code == 200
        assert next(resp.iter_lines()) == "event: ready"


@pytest.mark.parametrize("who", ["anonymous", "attendee-bearer", "attendee-cookie", "forged-cookie"])
def test_the_gallery_page_refuses_everyone_but_the_instructor(
    who: str, client: TestClient, event: Event
) -> None:
    token = join(client, "Mallory")["Authorization"].split()[1]
    headers: dict[str, str] = {}
    if who == "attendee-bearer":
        headers = {"Authorization": f"Bearer {token}"}
    elif who == "attendee-cookie":
        client.cookies.set(ATTENDEE_COOKIE, token)
    elif who == "forged-cookie":
        client.cookies.set(INSTRUCTOR_COOKIE, '{"name": "me", "t": "x"}.forged.sig')
    page = client.get(f"/instructor/events/{event.id}/gallery", headers=headers, follow_redirects=False)
    assert page.status_code == 303
    assert page.headers["location"].startswith("/instructor/login")


def test_the_instructor_gets_the_gallery_page_and_a_missing_event_is_a_404(
    client: TestClient, event: Event
) -> None:
    page = client.get(f"/instructor/events/{event.id}/gallery", headers=instructor_headers())
    assert page.status_code == 200
    assert 'id="gallery"' in page.text and "/static/gallery.js" in page.text
    assert (
        f"/instructor/events/{event.id}/gallery"
        in client.get(f"/instructor/events/{event.id}", headers=instructor_headers()).text
    )  # the dashboard links to it
    missing = client.get("/api/v1/events/999999/gallery/stream", headers=instructor_headers())
    assert missing.status_code == 404


def test_thirty_gallery_streams_at_once_leave_the_database_pool_free(
    app: FastAPI, event: Event, served: str
) -> None:
    """More open galleries than the pool has connections (5 + 10): each is ready, none holds one."""
    engine = app.state.ctx.engine
    headers = {"Authorization": f"Bearer {INSTRUCTOR_TOKEN}"}
    url = f"{served}/api/v1/events/{event.id}/gallery/stream"

    async def go() -> None:
        async with httpx.AsyncClient(timeout=30, limits=httpx.Limits(max_connections=40)) as client:
            ready = asyncio.Event()
            count = 0

            async def one() -> None:
                nonlocal count
                async with client.stream("GET", url, headers=headers) as resp:
                    assert resp.status_code == 200
                    lines = resp.aiter_lines()
                    assert await anext(lines) == "event: ready"
                    count += 1
                    if count == 30:
                        ready.set()
                    await asyncio.sleep(3600)  # held open until cancelled

            tasks = [asyncio.ensure_future(one()) for _ in range(30)]
            try:
                await asyncio.wait_for(ready.wait(), 30)
                assert app.state.ctx.live.subscribers >= 30
                assert engine.pool.checkedout() == 0
                me = await client.get(f"{served}/api/v1/events/{event.id}", headers=headers)
                assert me.status_code == 200
            finally:
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)

    asyncio.run(go())
