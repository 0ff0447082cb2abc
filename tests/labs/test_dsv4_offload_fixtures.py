"""dsv4-offload checkers against typical wrong solutions (tests/labs/fixtures/dsv4-offload/*.json).

Each fixture is the reference solution with one mistake edited in; the checker must give a *failed*
verdict (exit 1, not a checker error) whose message points at that mistake.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LAB = ROOT / "labs" / "dsv4-offload"
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "dsv4-offload"
VENV_BIN = str(Path(sys.executable).parent)


def make_workspace(tmp_path: Path, edits: list[dict[str, str]]) -> Path:
    ws = tmp_path / "dsv4-offload"
    shutil.copytree(LAB / "starter", ws)
    shutil.copytree(LAB / "solution", ws, dirs_exist_ok=True)
    for edit in edits:
        path = ws / edit["file"]
        text = path.read_text(encoding="utf-8")
        assert text.count(edit["old"]) == 1, f"fixture edit does not apply to {edit['file']}: {edit['old']!r}"
        path.write_text(text.replace(edit["old"], edit["new"]), encoding="utf-8")
    return ws


def run_checker(ws: Path, checker: str) -> tuple[int, dict]:
    """Run a checker like the server: ``python -I``, cwd = the lab folder, verdict on a pipe."""
    read_fd, write_fd = os.pipe()
    env = {
        "PATH": f"{VENV_BIN}:{os.environ.get('PATH', '')}",
        "HOME": str(ws.parent),
        "LAB_ID": "dsv4-offload",
        "LAB_STEP": checker,
        "LAB_DIR": str(ws),
        "LAB_DEVICE": "cpu-emu",
        "LAB_RUN_ID": "test",
        "LAB_LANG": "en",
        "LAB_RESULT_FD": str(write_fd),
    }
    proc = subprocess.Popen(
        [sys.executable, "-I", str(LAB / "checks" / checker)],
        cwd=ws,
        env=env,
        pass_fds=(write_fd,),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    os.close(write_fd)
    with os.fdopen(read_fd, "rb") as fh:
        verdict_raw = fh.read()
    log = proc.communicate(timeout=600)[0].decode("utf-8", "replace")
    assert verdict_raw, f"checker {checker} gave no verdict (exit {proc.returncode}):\n{log}"
    return proc.returncode, json.loads(verdict_raw)


def solve(ws: Path, commands: list[str]) -> None:
    env = {**os.environ, "PATH": f"{VENV_BIN}:{os.environ.get('PATH', '')}"}
    for cmd in commands:
        subprocess.run(["bash", "-c", cmd], cwd=ws, env=env, check=True, capture_output=True, timeout=600)


FIXTURE_FILES = sorted(FIXTURES.glob("*.json"))


def test_every_required_mistake_has_a_fixture() -> None:
    names = {p.stem for p in FIXTURE_FILES}
    assert {
        "wrong-nibble-order",
        "wrong-expert-weights",
        "budget-exceeded",
        "hot-set-wrong-layer",
        "overlap-not-on-side-stream",
        "report-made-up",
    } <= names


@pytest.mark.slow
@pytest.mark.parametrize("fixture", FIXTURE_FILES, ids=[p.stem for p in FIXTURE_FILES])
def test_checker_fails_wrong_solution(tmp_path: Path, fixture: Path) -> None:
    spec = json.loads(fixture.read_text(encoding="utf-8"))
    ws = make_workspace(tmp_path, spec["edits"])
    solve(ws, spec.get("solve", []))
    code, verdict = run_checker(ws, spec["check"])
    assert code == 1 and verdict["passed"] is False, (
        f"{fixture.stem}: expected a failed verdict, got {verdict}"
    )
    assert spec["expect"] in verdict["message"], (
        f"{fixture.stem}: message does not point at the mistake: {verdict['message']}"
    )
