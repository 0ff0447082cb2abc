"""Issue 13 item 6, as attackers do it: cheap names flood the Check button with long checks. With
two check slots, two flooders (both over their budget) can never hold both: a real attendee's Check
runs while the flooders' checks still hang, and a flooder whose check waits sees its queue position
(live event ``check.queued``)."""

from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from labserver.app import create_app
from labserver.config import CheckSettings, Settings
from labserver.services.joining.events import create_event
from tests.conftest import EVENT_CODE, REPO, join

LAB = "getting-started"
#: the write-file checker of the copied lab hangs while the file "hold" next to it exists
HOLD = (
    "import pathlib, time\n"
    "while (pathlib.Path(__file__).resolve().parent / 'hold').exists():\n"
    "    time.sleep(0.05)\n"
)


@pytest.fixture
def flood_app(tmp_path: Path, settings: Settings) -> tuple[FastAPI, Path]:
    labs = tmp_path / "labs"
    shutil.copytree(REPO / "labs" / LAB, labs / LAB)
    checker = labs / LAB / "checks" / "03_write_file.py"
    checker.write_text(HOLD + checker.read_text())
    hold = checker.parent / "hold"
    hold.write_text("1")
    checks = CheckSettings(max_concurrent=2, fair_budget_s=0.001)
    app = create_app(settings.model_copy(update={"labs_dir": labs, "checks": checks}))
    from sqlmodel import Session

    with Session(app.state.ctx.engine) as session:
        create_event(session, title="Flood", labs=[LAB], code=EVENT_CODE)
    return app, hold


def _check(client: TestClient, headers: dict[str, str], step: str) -> dict:
    resp = client.post(f"/api/v1/labs/{LAB}/steps/{step}/check", headers=headers, timeout=300)
    assert resp.status_code == 200, resp.text
    return resp.json()


def test_flooders_cannot_hold_every_slot(flood_app: tuple[FastAPI, Path]) -> None:
    app, hold = flood_app
    with TestClient(app) as client:
        flooders = [join(client, f"bot{i}") for i in range(2)]
        ada = join(client, "Ada")
        for h in flooders:  # a first, quick check each: now they have used their (tiny) budget
            assert _check(client, h, "find-device")["status"] == "failed"
        sub = app.state.ctx.live.subscribe(1)
        done: list[str] = []

        def flood(h: dict[str, str], name: str) -> None:
            _check(client, h, "write-file")
            done.append(name)

        threads = [
            threading.Thread(target=flood, args=(h, f"bot{i}"), daemon=True) for i, h in enumerate(flooders)
        ]
        for t in threads:
            t.start()
        queued = []
        deadline = time.monotonic() + 120  # a hang guard, not a measurement
        while not queued:
            assert time.monotonic() < deadline, "no flooder was ever told its queue position"
            while not sub.queue.empty():
                ev = sub.queue.get_nowait()
                if ev.kind == "check.queued":
                    queued.append(ev.data)
            time.sleep(0.05)
        assert queued[0]["position"] == 1 and queued[0]["step"] == "write-file"
        releaser = threading.Timer(120, hold.unlink, kwargs={"missing_ok": True})  # hang guard
        releaser.start()
        try:
            run = _check(client, ada, "find-device")  # Ada is within budget: the reserved slot
            done.append("Ada")
            assert run["status"] == "failed"
            assert done == ["Ada"], "Ada's check had to wait for the flooders"
        finally:
            hold.unlink(missing_ok=True)
            releaser.cancel()
            for t in threads:
                t.join(timeout=120)
        assert sorted(done) == ["Ada", "bot0", "bot1"]
