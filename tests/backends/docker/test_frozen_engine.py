"""A Docker engine that accepts connections and never answers (a stuck daemon, a hung ssh tunnel).

The "engine" here is a real Unix socket whose server reads requests and never replies: the closest
thing to a frozen dockerd that runs without one (the name says FAKE for that reason). Every engine
call must give up after ``LABSERVER_DOCKER__ENGINE_TIMEOUT_S`` and say that the machine does not
answer; the room must not queue behind one frozen call after another."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from labserver.backends.base import EnvSpec, LabSeed, ProvisionError
from labserver.backends.docker.backend import DockerBackend
from labserver.config import Settings
from tests.conftest import REPO


@pytest.fixture
def frozen_engine_FAKE(tmp_path: Path) -> Iterator[str]:
    path = tmp_path / "frozen.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(64)
    held: list[socket.socket] = []
    stop = threading.Event()

    def serve() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            held.append(conn)  # read nothing back, answer nothing: frozen

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield f"unix://{path}"
    stop.set()
    server.close()
    for conn in held:
        conn.close()
    thread.join(5)


def _spec(i: int) -> EnvSpec:
    return EnvSpec(
        env_id=f"frozen-{i}",
        event_id=1,
        attendee_id=i,
        labs=(LabSeed("getting-started", REPO / "labs" / "getting-started" / "starter"),),
        image="labserver/cpu-emu",
        cpus=0.5,
        memory_mb=512,
    )


def test_a_frozen_engine_is_named_as_not_answering_and_the_room_does_not_queue_behind_it_FAKE(
    frozen_engine_FAKE: str, tmp_path: Path
) -> None:
    settings = Settings(
        data_dir=tmp_path / "data",
        docker={"hosts": [frozen_engine_FAKE], "engine_timeout_s": 1.0, "name_prefix": "lsfrozen"},
    )
    backend = DockerBackend(settings)

    async def go() -> list[BaseException | object]:
        # ten attendees at once; a hang here fails the test instead of hanging the suite
        return await asyncio.wait_for(
            asyncio.gather(*(backend.create(_spec(i)) for i in range(10)), return_exceptions=True), 120
        )

    try:
        results = asyncio.run(go())
    finally:
        backend.engines.close()
    assert all(isinstance(r, ProvisionError) for r in results), results
    errors = [r for r in results if isinstance(r, ProvisionError)]
    assert {e.reason for e in errors} == {"engine-down"}, [(e.reason, e.message) for e in errors]
    first = errors[0].message
    assert "did not answer" in first and "frozen.sock" in first, first
    assert "No Docker node is configured" not in first
    # only the first placement waited on the engine: the others were told at once (the engine was
    # asked once for its capacity, then skipped while it is known to be down)
    assert backend.engines._down_until, "the frozen node was not remembered as down"
