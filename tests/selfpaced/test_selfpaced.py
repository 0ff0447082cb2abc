"""Self-paced mode: the learner made on first start, the loopback-only auto-login, and the real
commands (`labserver selfpaced`, `check`, `labs`, `progress`) as processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import uvicorn
from sqlmodel import Session, select

from labserver.app import create_app
from labserver.models import Attendee, CheckRun, Event
from labserver.selfpaced.learner import STATE_FILE, ensure_learner, learner_for_folder, read_learner
from labserver.selfpaced.server import create_selfpaced_app, request_is_local
from tests.selfpaced.conftest import HELLO, REPO, make_settings

LABSERVER = [sys.executable, "-m", "labserver.cli"]


def test_first_start_makes_one_event_and_one_learner(tmp_path: Path) -> None:
    settings = make_settings(tmp_path / "sp")
    app = create_selfpaced_app(settings, name="Ada")
    learner = app.state.learner
    assert (settings.data_dir / STATE_FILE).stat().st_mode & 0o777 == 0o600
    again = ensure_learner(app.state.ctx.engine, settings.data_dir)
    assert again == learner  # a restart keeps the same learner and token
    (settings.data_dir / STATE_FILE).unlink()  # lost: the same attendee gets a new token
    fresh = ensure_learner(app.state.ctx.engine, settings.data_dir)
    assert (fresh.event_id, fresh.attendee_id, fresh.name) == (learner.event_id, learner.attendee_id, "Ada")
    assert fresh.token != learner.token
    with Session(app.state.ctx.engine) as session:
        events = session.exec(select(Event)).all()
        assert [(e.selfpaced, e.labs) for e in events] == [(True, [])]
        assert len(session.exec(select(Attendee)).all()) == 1


def test_create_selfpaced_app_refuses_normal_settings(settings) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match="selfpaced"):
        create_selfpaced_app(settings)


def _scope(client: str = "127.0.0.1", **headers: str) -> dict:
    base = {"host": "127.0.0.1:8765", **headers}
    return {
        "type": "http",
        "client": (client, 5000),
        "headers": [(k.replace("_", "-").encode(), v.encode()) for k, v in base.items()],
    }


@pytest.mark.parametrize(
    ("scope", "local"),
    [
        (_scope(), True),
        (_scope("::1", host="[::1]:8765"), True),
        (_scope(host="localhost:8765", origin="http://localhost:8765"), True),
        (_scope(sec_fetch_site="same-origin"), True),
        (_scope("10.0.0.5"), False),  # from another machine
        (_scope(host="evil.example:8765"), False),  # DNS rebinding
        (_scope(origin="http://evil.example"), False),  # another site's page (CSRF, WebSocket)
        (_scope(sec_fetch_site="cross-site"), False),
        (_scope(origin="null"), False),
    ],
)
def test_request_is_local(scope: dict, local: bool) -> None:
    assert request_is_local(scope) is local


@pytest.fixture
def live(tmp_path: Path) -> Iterator[tuple[str, object]]:
    """A self-paced app on a real uvicorn on 127.0.0.1 (the auto-login needs a loopback peer)."""
    app = create_selfpaced_app(make_settings(tmp_path / "sp"))
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    yield f"http://127.0.0.1:{port}", app
    server.should_exit = True
    thread.join(timeout=10)


def test_loopback_browser_is_logged_in_automatically(live) -> None:  # type: ignore[no-untyped-def]
    url, app = live
    with httpx.Client(base_url=url, trust_env=False) as browser:
        me = browser.get("/api/v1/me")
        assert me.status_code == 200, me.text
        assert me.json()["attendee"]["id"] == app.state.learner.attendee_id
        assert browser.cookies.get("labserver_token") == app.state.learner.token
        # a stale cookie from an earlier run is replaced
        browser.cookies.set("labserver_token", "stale", domain="127.0.0.1")
        assert browser.get("/api/v1/me").status_code == 200
    refused = {
        "another site's page": {"Origin": "http://evil.example"},
        "DNS rebinding": {"Host": "evil.example"},
        "cross-site fetch": {"Sec-Fetch-Site": "cross-site"},
    }
    for why, headers in refused.items():
        resp = httpx.get(f"{url}/api/v1/me", headers=headers, trust_env=False)
        assert resp.status_code == 401, why
        assert "set-cookie" not in resp.headers, why


def test_normal_server_never_logs_anyone_in(settings) -> None:  # type: ignore[no-untyped-def]
    from fastapi.testclient import TestClient

    with TestClient(create_app(settings)) as client:
        assert client.get("/api/v1/me").status_code == 401


# -- the commands, as a learner runs them -------------------------------------------------------
def _env(data_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LABSERVER_")}
    env.update(
        LABSERVER_DATA_DIR=str(data_dir),
        LABSERVER_LABS_DIR=str(REPO / "labs"),
        LABSERVER_WEB_DIR=str(REPO / "web"),
        BROWSER="false",
    )
    return env


def _run(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*LABSERVER, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=300)


def _wait_for_server(data_dir: Path, proc: subprocess.Popen[str]) -> str:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
        try:
            url = json.loads((data_dir / "selfpaced-server.json").read_text())["url"]
            if httpx.get(f"{url}/healthz", trust_env=False).status_code == 200:
                return str(url)
        except (OSError, ValueError, httpx.HTTPError):
            pass
        time.sleep(0.1)
    raise AssertionError("labserver selfpaced did not start")


def test_selfpaced_command_check_and_labs(tmp_path: Path) -> None:
    data = tmp_path / "data"
    env = _env(data)
    proc = subprocess.Popen(
        [*LABSERVER, "selfpaced", "--no-browser", "--port", "0"],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        url = _wait_for_server(data, proc)
        learner = read_learner(data)
        assert learner is not None
        folder = data / "workspaces" / learner.env_id / "getting-started"
        assert (folder / "rmsnorm.py").is_file()  # lab folders exist before the browser asks
        assert learner_for_folder(folder) == (data, learner)
        # a second `selfpaced` finds the running one instead of starting another
        second = _run(["selfpaced", "--no-browser"], env, tmp_path)
        assert second.returncode == 0 and "already running" in second.stdout, second.stdout + second.stderr
        # `labserver check` in a plain terminal, inside the lab folder, while the server runs
        (folder / "notes").mkdir()
        (folder / "notes" / "hello.txt").write_bytes(HELLO)
        res = _run(["check", "getting-started", "write-file"], env, folder)
        assert res.returncode == 0, res.stdout + res.stderr
        assert "[passed] notes/hello.txt is exactly right." in res.stdout
        runs = httpx.get(
            f"{url}/api/v1/labs/getting-started/steps/write-file/runs", trust_env=False
        ).json()  # the browser's view, through the auto-login
        assert [r["status"] for r in runs] == ["passed"]
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    # with no server running: the check runs here and is recorded in the same database
    res = _run(["check", "getting-started", "find-device"], env, tmp_path)  # found from anywhere
    assert res.returncode == 1, res.stdout + res.stderr
    assert "[failed]" in res.stdout
    with Session(create_selfpaced_app(make_settings(data)).state.ctx.engine) as session:
        rows = session.exec(select(CheckRun).order_by(CheckRun.id)).all()  # type: ignore[arg-type]
        assert [(r.step_id, r.status) for r in rows] == [("write-file", "passed"), ("find-device", "failed")]
    listing = _run(["labs"], env, tmp_path)
    assert listing.returncode == 0, listing.stderr
    line = next(ln for ln in listing.stdout.splitlines() if ln.startswith("getting-started"))
    assert "1/5" in line and "✗·✓··" in line


def test_progress_commands_round_trip_and_refuse_bad_files(tmp_path: Path) -> None:
    home, room = tmp_path / "home", tmp_path / "laptop2"
    app = create_selfpaced_app(make_settings(home))
    learner = app.state.learner
    folder = home / "workspaces" / learner.env_id / "getting-started"
    app.state.ctx.engine.dispose()
    res = _run(["progress", "export", str(tmp_path / "empty.json")], _env(home), tmp_path)
    assert res.returncode == 0, res.stderr
    # make progress with the CLI check (no server running)
    (folder / "notes").mkdir(parents=True)
    (folder / "notes" / "hello.txt").write_bytes(HELLO)
    assert _run(["check", "getting-started", "write-file"], _env(home), folder).returncode == 0
    out = tmp_path / "progress.json"
    res = _run(["progress", "export", str(out)], _env(home), tmp_path)
    assert res.returncode == 0, res.stderr
    exported = json.loads(out.read_text())
    assert exported["schema_version"] == 2

    res = _run(["progress", "import", str(out)], _env(room), tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "⇩ getting-started/write-file" in res.stdout  # another laptop: imported, not passed
    room_learner = read_learner(room)
    assert room_learner is not None
    assert (
        room / "workspaces" / room_learner.env_id / "getting-started/notes/hello.txt"
    ).read_bytes() == HELLO
    listing = _run(["labs"], _env(room), tmp_path).stdout
    line = next(ln for ln in listing.splitlines() if ln.startswith("getting-started"))
    assert "0/5" in line and "⇩" in line, line

    db_before = (room / "labserver.db").read_bytes()
    for bad in ({**exported, "schema_version": 99}, {"format": "something-else"}):
        path = tmp_path / "bad.json"
        path.write_text(json.dumps(bad))
        res = _run(["progress", "import", str(path)], _env(room), tmp_path)
        assert res.returncode == 2
        assert "Nothing was changed." in res.stderr
    (tmp_path / "bad.json").write_text(out.read_text()[:-40])
    res = _run(["progress", "import", str(tmp_path / "bad.json")], _env(room), tmp_path)
    assert res.returncode == 2 and "not valid JSON" in res.stderr
    assert (room / "labserver.db").read_bytes() == db_before


def test_docker_backend_without_an_engine_is_a_clear_error(tmp_path: Path) -> None:
    env = {**_env(tmp_path / "data"), "DOCKER_HOST": f"unix://{tmp_path}/no-such-docker.sock"}
    res = _run(["selfpaced", "--backend", "docker", "--no-browser"], env, tmp_path)
    assert res.returncode == 2
    assert "--backend docker: no Docker engine answers" in res.stderr
    assert not (tmp_path / "data").exists()  # nothing was made


def test_unknown_lab_is_a_clear_error(tmp_path: Path) -> None:
    res = _run(["selfpaced", "no-such-lab", "--no-browser"], _env(tmp_path / "data"), tmp_path)
    assert res.returncode == 2
    assert "There is no lab 'no-such-lab'" in res.stderr and "getting-started" in res.stderr


def test_progress_export_to_stdout(tmp_path: Path) -> None:
    res = _run(["progress", "export", "-", "--no-files"], _env(tmp_path / "data"), tmp_path)
    assert res.returncode == 0, res.stderr
    exported = json.loads(res.stdout)
    assert exported["format"] == "labserver-progress"
    assert all("files" not in lab for lab in exported["labs"])
