"""A room joins at once: 100 joins + lab pages + live streams + terminal opens through the real app (uvicorn on a port, the
public HTTP and WebSocket routes) with a database pool of 2 connections and an engine whose create
and terminal take half a second each. Before the fix, requests held their connection across those
calls and the 3rd concurrent one timed out on the pool; now every attendee gets a working shell, and
those that waited for admission were told their place. Nothing here is timed (figures: bench/room.py).

The engine is the real local backend, slowed down (the slowness a container engine has and this
test cannot otherwise have): hence its name."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
import uuid

import httpx
import pytest
import uvicorn
import websockets
from sqlmodel import Session

from labserver.app import create_app
from labserver.backends.base import EnvRef, EnvSpec, ProgressCallback
from labserver.backends.local import LocalBackend
from labserver.backends.local_terminal import PtyTerminal
from labserver.config import AdmissionSettings, DatabaseSettings, Settings
from labserver.services.joining.events import create_event

CROWD = 100
CODE = "BURST"
SLOW_S = 0.5


class SlowLocalFakeEngine(LocalBackend):
    """The real local backend whose create and terminal each first wait ``SLOW_S`` (an engine)."""

    async def create(self, spec: EnvSpec, progress: ProgressCallback | None = None) -> EnvRef:
        await asyncio.sleep(SLOW_S)
        return await super().create(spec, progress)

    async def terminal(self, ref: EnvRef, cols: int, rows: int, *, cwd: str = "") -> PtyTerminal:
        await asyncio.sleep(SLOW_S)
        return await super().terminal(ref, cols, rows, cwd=cwd)


def serve(app) -> tuple[uvicorn.Server, threading.Thread, str]:  # type: ignore[no-untyped-def]
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(
            app,
            host="127.0.0.1",
            port=port,
            log_level="warning",
            timeout_graceful_shutdown=1,
            ws_ping_interval=None,
        )
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    return server, thread, f"127.0.0.1:{port}"


async def attendee(host: str, n: int) -> tuple[str, bytes]:
    """What a browser does: join, the lab page with its live stream kept open, the terminal, an
    echo. ("ok", terminal output) or (failure kind, output so far)."""
    async with httpx.AsyncClient(base_url=f"http://{host}", timeout=120) as client:
        resp = await client.post("/api/v1/join", json={"event_code": CODE, "name": f"burst {n}"})
        if resp.status_code != 200:
            return f"join HTTP {resp.status_code}", b""
        token = resp.json()["token"]
        client.headers["Authorization"] = f"Bearer {token}"
        async with client.stream("GET", "/api/v1/stream") as stream:
            if stream.status_code != 200:
                return f"stream HTTP {stream.status_code}", b""
            page = await client.get("/labs/getting-started")  # the bearer token, as the cookie would
            if page.status_code != 200:
                return f"lab page HTTP {page.status_code}", b""
            return await terminal(host, token)


async def terminal(host: str, token: str) -> tuple[str, bytes]:
    marker = uuid.uuid4().hex[:6]
    seen = b""
    try:
        async with websockets.connect(
            f"ws://{host}/api/v1/labs/getting-started/terminal",
            additional_headers={"Authorization": f"Bearer {token}"},
            open_timeout=120,
            max_size=None,
        ) as ws:
            await ws.send(f"echo {marker}-$((6*7))\r".encode())
            while f"{marker}-42".encode() not in seen:
                msg = await asyncio.wait_for(ws.recv(), 120)
                if isinstance(msg, bytes):
                    seen += msg
    except websockets.exceptions.InvalidStatus as exc:
        return f"terminal HTTP {exc.response.status_code}", seen
    except websockets.exceptions.ConnectionClosed as exc:
        return f"terminal closed ({exc.rcvd.code if exc.rcvd else 'no code'})", seen
    except TimeoutError:
        return "timeout", seen
    return "ok", seen


@pytest.fixture
def burst_settings(settings: Settings) -> Settings:
    # 2 connections, none extra, and a wait that only a connection held across slow work exceeds:
    # held across the engine's 0.5 s create and terminal, 100 attendees would queue 50 s on 2
    # connections; brief holds queue well under 10 s even on a loaded machine (3 s was exceeded by
    # brief holds alone under load 8-11, with the labs' selftests beside it)
    settings.db = DatabaseSettings(pool_size=2, max_overflow=0, pool_timeout_s=10)
    settings.admission = AdmissionSettings(concurrent_starts=8)
    return settings


def test_a_room_of_100_joins_and_opens_terminals_with_a_pool_of_2(burst_settings: Settings) -> None:
    app = create_app(burst_settings)
    ctx = app.state.ctx
    ctx.backend = SlowLocalFakeEngine(burst_settings)
    with Session(ctx.engine, expire_on_commit=False) as session:
        create_event(session, title="Burst", labs=["getting-started"], code=CODE)
    server, thread, host = serve(app)

    async def room() -> list[tuple[str, bytes]]:
        return await asyncio.gather(*(attendee(host, n) for n in range(CROWD)))

    try:
        results = asyncio.run(room())
    finally:
        server.should_exit = True
        thread.join(timeout=30)
    failures: dict[str, int] = {}
    for kind, _out in results:
        if kind != "ok":
            failures[kind] = failures.get(kind, 0) + 1
    assert failures == {}, f"{sum(failures.values())} of {CROWD} failed: {failures}"
    told = [out for _kind, out in results if b"ahead of you" in out]
    assert told, "no attendee was told their place in the queue"
