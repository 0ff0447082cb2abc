"""A check that cannot start says why (issue 30): a root server without bubblewrap
(``LABSERVER_SANDBOX=none``) runs checks as each environment's own uid, which cannot start a Python
living under a 0700 folder (``/root/.pyenv``). ``labserver doctor`` and ``serve`` say so with what to
do (EN and ZH), and such a check is ``not_gradable`` with a plain message, not "fault in the
checker". Real root runs, a real 0700 folder holding a python, the real setpriv."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from labserver.app import create_app
from labserver.backends import sandbox
from labserver.backends.sandbox import unreachable
from labserver.cli.doctor import warn_at_start
from labserver.config import Settings
from labserver.services.operations.doctor import Status, diagnose
from tests.conftest import EVENT_CODE, join, settle

UID = 1_900_054_321  # an environment's kind of uid: no account, no group


@pytest.fixture
def private(as_root: None) -> Iterator[Path]:
    """``/tmp/…/private`` (0700, root's) holding ``python``: a link to this test's interpreter, as a
    venv's python links into ``/root/.pyenv``; its parent is reachable by anyone."""
    top = Path(tempfile.mkdtemp(prefix="labserver-runtime-", dir="/tmp"))
    top.chmod(0o755)
    folder = top / "private"
    folder.mkdir(mode=0o700)
    (folder / "python").symlink_to(sys.executable)
    try:
        yield folder
    finally:
        shutil.rmtree(top)


def run_as(uid: int, argv: list[str]) -> subprocess.CompletedProcess[bytes]:
    setpriv = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--"]
    return subprocess.run(setpriv + argv, capture_output=True, timeout=30)


def test_unreachable_says_what_the_kernel_does(private: Path) -> None:
    probe = private / "labserver-probe"
    probe.write_text("#!/bin/sh\necho reached\n")
    probe.chmod(0o755)
    # the real consequence: the uid never runs it (EACCES; some kernels run another file of that
    # name from PATH instead, which is how a python under /root becomes a python without labkit)
    assert b"reached" not in run_as(UID, [str(probe)]).stdout
    assert unreachable(probe, UID, UID) == f"uid {UID} cannot enter {private} (mode 0700, owner uid 0)"
    link = private.parent / "python"
    link.symlink_to(probe)  # reached through a symlink, as a venv's python
    assert str(private) in unreachable(link, UID, UID)
    assert unreachable(probe, 0, 0) == ""  # root's own: the folder is root's
    private.chmod(0o755)
    assert run_as(UID, [str(link)]).stdout == b"reached\n"
    assert unreachable(link, UID, UID) == ""
    probe.chmod(0o700)
    assert b"reached" not in run_as(UID, [str(probe)]).stdout
    assert unreachable(probe, UID, UID) == f"uid {UID} cannot execute {probe} (mode 0700, owner uid 0)"


@pytest.fixture
def unsandboxed(
    private: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, settings: Settings
) -> Iterator[Settings]:
    monkeypatch.setattr(sys, "executable", str(private / "python"))  # what LocalBackend runs checks with
    sandbox.runtime_paths.cache_clear()  # computed once per process, from sys.executable
    settings.sandbox = "none"
    settings.allow_unsandboxed = True
    yield settings
    monkeypatch.undo()
    sandbox.runtime_paths.cache_clear()  # not this test's folder for the tests after it


def test_doctor_and_serve_say_why_and_what_to_do(unsandboxed: Settings, private: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    report = diagnose(unsandboxed, port=None)
    [runtime] = report.of("runtime")
    assert runtime.status == Status.fail and not report.ok
    assert f"cannot enter {private}" in runtime.detail and "every check would fail" in runtime.detail
    assert "install bubblewrap" in runtime.fix_text("en") and str(private) in runtime.fix_text("en")
    assert "安装 bubblewrap" in runtime.fix_text("zh") and str(private) in runtime.fix_text("zh")
    # the probe's raw failure is not shown again under ``sandbox`` with bubblewrap's fix
    assert all("cannot run here" not in f.detail for f in report.of("sandbox"))
    warn_at_start(unsandboxed, "127.0.0.1", 0)
    err = capsys.readouterr().err
    assert "FAIL  runtime" in err and "fix: Checks run" in err and "修复: 检查以" in err


def test_a_reachable_python_is_ok(as_root: None, settings: Settings) -> None:
    settings.sandbox = "none"
    report = diagnose(settings, port=None)
    expected = Status.ok if not unreachable(Path(sys.executable), UID, UID) else Status.fail
    assert [f.status for f in report.of("runtime")] == [expected]


@pytest.mark.parametrize("lang, phrase", [("en", "cannot start checkers"), ("zh", "无法启动检查程序")])
def test_a_check_that_cannot_start_says_why(unsandboxed: Settings, lang: str, phrase: str) -> None:
    app = create_app(unsandboxed)
    from sqlmodel import Session

    from labserver.services.joining.events import create_event

    with Session(app.state.ctx.engine) as s:
        create_event(s, title="Root", labs=["getting-started"], code=EVENT_CODE)
    with TestClient(app) as client:
        head = join(client)
        settle(app)
        head["Accept-Language"] = lang
        pressed = client.post("/api/v1/labs/getting-started/steps/find-device/check", headers=head)
        assert pressed.status_code == 200, pressed.text
        run = pressed.json()
        assert run["status"] == "not_gradable" and phrase in run["message"], run
        assert "fault in the checker" not in run["message"]
        runs = client.get("/api/v1/labs/getting-started/steps/find-device/runs", headers=head).json()
        assert [r["status"] for r in runs] == ["not_gradable", "not_gradable"]  # retried once, same answer
        assert "checker-start" in runs[1]["log"]
