"""Checks work when the runtime lives under /tmp, as a fresh clone in a temporary folder has it.

The sandbox gives every checker a private ``/tmp``; whatever the checker's Python imports from
there must be bound back in. This test builds that situation for real, from any checkout: a venv
under /tmp whose ``labkit`` is an editable install (setuptools' own editable finder) of a copy of
labkit in one folder under /tmp, and the labs in another folder under /tmp. A checker then runs
through the local backend with bubblewrap and must import that labkit."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO

RUN_CHECK = textwrap.dedent("""
    import asyncio, json, sys
    from pathlib import Path

    from labserver.backends.base import CheckRequest, EnvSpec, LabSeed
    from labserver.backends.local import LocalBackend
    from labserver.config import Settings

    data, labs = Path(sys.argv[1]), Path(sys.argv[2])
    backend = LocalBackend(Settings(data_dir=data, labs_dir=labs, sandbox="bwrap"))

    async def main():
        seed = LabSeed("where", labs / "where" / "starter")
        ref = await backend.create(EnvSpec(env_id="ev1-at1", event_id=1, attendee_id=1, labs=(seed,)))
        raw = await backend.run_check(ref, CheckRequest(
            lab_id="where", step_id="s", checker=labs / "where" / "checks" / "01_s.py", env={},
            timeout_s=120))
        print(json.dumps({"exit": raw.exit_code, "result": raw.result.decode(), "log": raw.log.decode()}))

    asyncio.run(main())
""")

CHECKER = textwrap.dedent("""
    import labkit
    from labkit.check import result

    result(True, labkit.__file__)
""")


@pytest.fixture
def under_tmp() -> Iterator[Path]:
    # explicitly /tmp (not $TMPDIR): that is the folder the sandbox replaces
    root = Path(tempfile.mkdtemp(prefix="labserver-runtime-", dir="/tmp"))
    yield root
    shutil.rmtree(root, ignore_errors=True)


def _venv_with_editable_labkit(root: Path) -> tuple[Path, Path]:
    """A venv in ``root/venv`` with labkit installed editable from ``root/checkout/labs/labkit``.

    Its third-party packages (torch, numpy, setuptools, pip) come from this test's environment
    through a plain path line; labserver from this checkout. Returns (python, labkit source)."""
    src = root / "checkout" / "labs" / "labkit"
    shutil.copytree(
        REPO / "labs" / "labkit",
        src,
        ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "build", "tests"),
    )
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site_dir = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    ours = sysconfig.get_paths()["purelib"]
    Path(site_dir, "zz_bridge.pth").write_text(f"{ours}\n{REPO}\n")
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-build-isolation"]
        + ["--disable-pip-version-check", "-e", str(src)],
        check=True,
        capture_output=True,
    )
    assert list(Path(site_dir).glob("__editable__*labkit*")), "pip made no editable install of labkit"
    return python, src


def test_a_checker_imports_labkit_when_checkout_and_labs_are_apart_under_tmp(under_tmp: Path) -> None:
    assert shutil.which("bwrap"), "bubblewrap is required for this test (apt-get install bubblewrap)"
    python, labkit_src = _venv_with_editable_labkit(under_tmp)
    labs = under_tmp / "elsewhere" / "labs"
    lab = labs / "where"
    (lab / "checks").mkdir(parents=True)
    (lab / "starter").mkdir()
    (lab / "checks" / "01_s.py").write_text(CHECKER)
    script = under_tmp / "run_check.py"
    script.write_text(RUN_CHECK)
    out = subprocess.run(
        [str(python), "-I", str(script), str(under_tmp / "data"), str(labs)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    raw = json.loads(out.stdout.strip().splitlines()[-1])
    assert raw["exit"] == 0, raw["log"]
    assert str(labkit_src) in raw["result"], raw  # the editable copy under /tmp, not another labkit
