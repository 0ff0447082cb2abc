"""`make dist` wheels, installed into a fresh venv far from the repository, run the self-paced app and
a lab step end to end: bundled labs, bundled web assets, labkit and torch from the wheels."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import venv
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from labserver.selfpaced.packaging import build

pytestmark = pytest.mark.slow


def _run(argv: list[str], **kw) -> subprocess.CompletedProcess[str]:  # type: ignore[no-untyped-def]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=1200, **kw)
    assert proc.returncode == 0, (
        f"{argv[:3]} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    )
    return proc


@pytest.fixture
def outside_tmp() -> Iterator[Path]:
    """A folder outside /tmp: the local backend's bubblewrap sandbox mounts an empty /tmp, so a venv
    (python, bundled checkers) under /tmp would vanish inside it — as it would on a laptop."""
    path = Path(tempfile.mkdtemp(prefix="labserver-wheel-test-", dir="/var/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def test_wheel_installs_and_runs_a_lab_step(outside_tmp: Path) -> None:
    tmp_path = outside_tmp
    wheels = build(tmp_path / "dist")
    labserver_whl, labkit_whl = wheels
    assert labserver_whl.name.startswith("labserver-") and labkit_whl.name.startswith("labkit-")

    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True, clear=True).create(env_dir)
    py, bin_ = env_dir / "bin" / "python", env_dir / "bin"
    # torch pinned (the machine's local CPU wheel); everything else as pip resolves it
    _run([str(py), "-m", "pip", "install", "-q", str(labserver_whl), str(labkit_whl), "torch==2.13.0"])

    home = tmp_path / "home"  # far from the repository: nothing may come from the checkout
    home.mkdir()
    env = {
        "PATH": f"{bin_}:/usr/local/bin:/usr/bin:/bin",
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "BROWSER": "false",
        "XDG_DATA_HOME": str(home / ".local" / "share"),
    }
    where = _run(
        [
            str(py),
            "-c",
            "import labserver.config as c; s = c.Settings(); print(s.labs_dir); print(s.web_dir)",
        ],
        cwd=home,
        env=env,
    ).stdout.split()
    site = _run(
        [str(py), "-c", "import labserver, os; print(os.path.dirname(labserver.__file__))"], cwd=home, env=env
    ).stdout.strip()
    assert where == [f"{site}/bundled/labs", f"{site}/bundled/web"]
    assert not site.startswith(str(Path(__file__).resolve().parents[2]))

    data = home / ".local" / "share" / "labserver"  # platformdirs' user data folder
    server = subprocess.Popen(
        [str(bin_ / "labserver"), "selfpaced", "--no-browser", "--port", "0"],
        cwd=home,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        url = ""
        while not url:
            assert server.poll() is None, server.stdout.read() if server.stdout else ""
            assert time.monotonic() < deadline, "the installed labserver selfpaced did not start"
            try:
                url = json.loads((data / "selfpaced-server.json").read_text())["url"]
            except (OSError, ValueError, KeyError):
                time.sleep(0.2)
        with httpx.Client(base_url=url, trust_env=False, timeout=30) as browser:
            health = browser.get("/healthz").json()
            assert health["labs"] >= 1 and health["broken_labs"] == 0, health
            for asset in (
                "/vendor/xterm/lib/xterm.js",
                "/vendor/xterm/css/xterm.css",
                "/vendor/xterm-addon-fit/lib/addon-fit.js",
                "/vendor/codemirror/lib/codemirror.js",
                "/vendor/codemirror/mode/python/python.js",
            ):
                assert browser.get(asset).status_code == 200, asset
            labs = browser.get("/api/v1/labs").json()  # logged in automatically
            assert "getting-started" in [lab["id"] for lab in labs]

            learner = json.loads((data / "selfpaced.json").read_text())
            folder = (
                data
                / "workspaces"
                / f"ev{learner['event_id']}-at{learner['attendee_id']}"
                / "getting-started"
            )
            # step 1, as the instructions say: run device_info.py (labkit + torch from the wheels)
            info = _run([str(py), "device_info.py"], cwd=folder, env=env).stdout
            kind = next(
                line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("kind:")
            )
            (folder / "device.txt").write_text(kind + "\n")
            res = subprocess.run(
                [str(bin_ / "labserver"), "check", "getting-started", "find-device"],
                cwd=folder,
                env=env,
                capture_output=True,
                text=True,
                timeout=300,
            )
            assert res.returncode == 0, res.stdout + res.stderr
            assert "[passed]" in res.stdout
            progress = browser.get("/api/v1/labs/getting-started").json()["progress"]
            assert progress["steps"][0] == {**progress["steps"][0], "id": "find-device", "status": "passed"}
    finally:
        server.terminate()
        server.wait(timeout=30)
    # progress stays on the laptop after the server stops
    listing = _run([str(bin_ / "labserver"), "labs"], cwd=home, env=env).stdout
    assert "1/5" in next(line for line in listing.splitlines() if line.startswith("getting-started"))
    assert os.environ.get("VIRTUAL_ENV") != str(env_dir)
    assert sys.executable != str(py)
