"""The CLI as a person uses it: `labserver serve` in a real process prints the join code and the
instructor token, answers /healthz, and the printed code lets an attendee join."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
from typer.testing import CliRunner

from labserver.cli.main import app as cli
from tests.conftest import REPO


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_serve_prints_code_and_token_and_answers(tmp_path: Path) -> None:
    port = free_port()
    env = {
        **os.environ,
        "LABSERVER_DATA_DIR": str(tmp_path / "data"),
        "LABSERVER_LABS_DIR": str(REPO / "labs"),
        "LABSERVER_INSTRUCTOR_TOKEN": "",
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "labserver.cli", "serve", "--port", str(port)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        out = ""
        deadline = time.monotonic() + 60
        assert proc.stdout is not None
        while "instructor:" not in out and time.monotonic() < deadline:
            out += proc.stdout.readline()
        code = re.search(r"join code : (\w+)", out)
        token = re.search(r"token: (\S+)", out)
        assert code and token, out
        assert (tmp_path / "data" / "instructor_token").read_text().strip() == token.group(1)
        base = f"http://127.0.0.1:{port}"
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{base}/healthz").status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.1)
        resp = httpx.post(f"{base}/api/v1/join", json={"event_code": code.group(1), "name": "Ada"})
        assert resp.status_code == 200, resp.text
        labs = httpx.get(
            f"{base}/api/v1/labs", headers={"Authorization": f"Bearer {resp.json()['token']}"}
        ).json()
        assert "getting-started" in [lab["id"] for lab in labs]
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_check_command_runs_a_step_in_a_plain_terminal(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    folder = tmp_path / "ws" / "getting-started"
    folder.mkdir(parents=True)
    (folder / "notes").mkdir()
    monkeypatch.setenv("LABSERVER_LABS_DIR", str(REPO / "labs"))
    monkeypatch.chdir(folder)
    runner = CliRunner()
    result = runner.invoke(cli, ["check", "getting-started", "write-file"])
    assert result.exit_code == 1 and "[failed]" in result.output and "notes/hello.txt" in result.output
    (folder / "notes" / "hello.txt").write_text("Hello, Ascend!\n你好，昇腾！\n")
    result = runner.invoke(cli, ["check", "getting-started", "write-file"])
    assert result.exit_code == 0 and "[passed]" in result.output, result.output
    assert not (tmp_path / "ws" / ".labserver-env.json").exists()  # left as it was


def test_a_check_that_runs_out_of_time_names_the_budget_it_had(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    # a step with a recorded cost gets a wall budget far below its timeout_s
    # (labserver.checks.timeouts.wall_budget): the timeout message must name that budget
    import shutil

    from labserver.checks.timeouts import BUDGET_FLOOR_S

    labs = tmp_path / "labs"
    shutil.copytree(REPO / "labs" / "getting-started", labs / "getting-started")
    (labs / "getting-started" / "checks" / "03_write_file.py").write_text("import time\n\ntime.sleep(600)\n")
    folder = tmp_path / "ws" / "getting-started"
    folder.mkdir(parents=True)
    monkeypatch.setenv("LABSERVER_LABS_DIR", str(labs))
    monkeypatch.chdir(folder)
    result = CliRunner().invoke(cli, ["check", "getting-started", "write-file"])
    assert "[timeout]" in result.output, result.output
    assert f"within {BUDGET_FLOOR_S:g} s" in result.output, result.output
