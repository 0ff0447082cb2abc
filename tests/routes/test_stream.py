"""The attendee SSE stream must not hold a database connection while it is open (a real server:
in-process transports buffer whole responses)."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import httpx
import uvicorn
from sqlmodel import Session

from labserver.app import create_app
from labserver.config import Settings
from labserver.services.joining.events import create_event, join


def test_many_open_streams_leave_the_database_pool_free(tmp_path: Path) -> None:
    app = create_app(Settings(data_dir=tmp_path / "data", instructor_token="t"))
    engine = app.state.ctx.engine
    with Session(engine) as s:
        event = create_event(s, title="t", labs=[], code="STREAMS")
        tokens = [join(s, event_code=event.code, name=f"a{i}")[1] for i in range(20)]
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
    base = f"http://127.0.0.1:{port}"
    clients = []
    try:
        for token in tokens:  # more open pages than the pool has connections (5 + 10)
            client = httpx.Client(base_url=base, timeout=10)
            cm = client.stream("GET", "/api/v1/stream", headers={"Authorization": f"Bearer {token}"})
            resp = cm.__enter__()
            lines = resp.iter_lines()  # keep the iterator: dropping it closes the stream
            assert next(lines).startswith("event: ready")
            clients.append((client, cm, lines))
        assert app.state.ctx.live.subscribers == 20
        assert engine.pool.checkedout() == 0
        me = httpx.get(f"{base}/api/v1/me", headers={"Authorization": f"Bearer {tokens[0]}"}, timeout=10)
        assert me.status_code == 200
    finally:
        for client, cm, _lines in clients:
            cm.__exit__(None, None, None)
            client.close()
        server.should_exit = True
        thread.join(timeout=10)
