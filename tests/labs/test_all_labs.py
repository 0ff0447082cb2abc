"""Every lab in labs/ lints clean and passes its self-test: the starter fails each check, the
solution passes each, in order (Instruqt-style)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from labserver.checks.selftest import selftest
from labserver.content import Lab, load_lab
from labserver.content.lint import lint_lab
from tests.conftest import REPO

LAB_DIRS = sorted(p for p in (REPO / "labs").iterdir() if (p / "lab.yaml").exists())


@pytest.mark.parametrize("lab_dir", LAB_DIRS, ids=[p.name for p in LAB_DIRS])
def test_lint(lab_dir: Path) -> None:
    errors = [str(p) for p in lint_lab(lab_dir) if p.level == "error"]
    assert errors == []
    warnings = [str(p) for p in lint_lab(lab_dir) if p.level == "warning"]
    assert warnings == [], "every lab ships English and Chinese: " + "; ".join(warnings)


@pytest.mark.slow
@pytest.mark.parametrize("lab_dir", LAB_DIRS, ids=[p.name for p in LAB_DIRS])
def test_selftest(lab_dir: Path) -> None:
    lab = load_lab(lab_dir)
    assert isinstance(lab, Lab), lab
    report = selftest(lab)
    assert report.ok, "\n".join(report.lines())


def test_a_broken_solution_fails_the_selftest_naming_the_step(tmp_path: Path) -> None:
    lab = load_lab(REPO / "labs" / "getting-started")
    assert isinstance(lab, Lab)
    broken = tmp_path / "solution"
    shutil.copytree(lab.solution, broken)
    (broken / "rmsnorm.py").write_text(
        (broken / "rmsnorm.py").read_text().replace("keepdim=True", "keepdim=False")
    )
    report = selftest(lab, solution=broken)
    assert not report.ok
    assert [(r.phase, r.step) for r in report.failures()] == [("solution", "implement-rmsnorm")]
    assert "rstd" in report.failures()[0].verdict.message
