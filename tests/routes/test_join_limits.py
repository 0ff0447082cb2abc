"""Issue 13 item 6, as cheap identities attack it: thirty names join an event of capacity 5 at once;
exactly 5 get in, the others get a clear "full" (400 ``full``), and the limit holds whatever the
interleaving (each joiner counts the attendees admitted before it, after its own insert)."""

from __future__ import annotations

import threading

from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlmodel import Session, select

from labserver.models import Attendee
from labserver.services.joining.events import create_event


def test_thirty_joins_at_once_respect_the_capacity(app: FastAPI) -> None:
    with Session(app.state.ctx.engine) as session:
        event = create_event(session, title="Small room", labs=["getting-started"], code="SMALL5", capacity=5)
        event_id = event.id
    results: list[tuple[int, str]] = []
    lock = threading.Lock()
    barrier = threading.Barrier(30)
    with TestClient(app) as client:

        def one(i: int) -> None:
            barrier.wait()
            resp = client.post("/api/v1/join", json={"event_code": "SMALL5", "name": f"bot{i}"})
            with lock:
                results.append((resp.status_code, resp.json().get("code", "")))

        threads = [threading.Thread(target=one, args=(i,)) for i in range(30)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
    assert sorted(results).count((200, "")) == 5, results
    assert all(r == (400, "full") for r in results if r[0] != 200), results
    with Session(app.state.ctx.engine) as session:
        assert len(session.exec(select(Attendee).where(Attendee.event_id == event_id)).all()) == 5
