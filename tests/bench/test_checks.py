"""bench/checks.py runs end to end on one lab: a row per step, each check passing on the reference.
Nothing is timed (the figures are the bench's to print, not the test's to judge)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from labserver.content import LabCatalog

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def test_checks_bench_prints_a_row_per_step_of_getting_started() -> None:
    lab = LabCatalog(REPO / "labs").labs["getting-started"]
    out = subprocess.run(
        [
            sys.executable,
            str(REPO / "bench" / "checks.py"),
            "--lab",
            lab.id,
            "--repeat",
            "1",
            "--part",
            "steps",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    ).stdout
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.startswith(f"  {lab.id}/")}
    assert list(rows) == [f"{lab.id}/{step.id}" for step in lab.steps], out
    assert all(cells[1] == "passed" for cells in rows.values()), out
    assert f"{len(lab.steps)} steps (0 not passing)" in out
