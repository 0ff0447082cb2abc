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
    assert warnings == [], "every lab ships English and Chinese and >= 3 mutants per step: " + "; ".join(
        warnings
    )


@pytest.mark.parametrize("lab_dir", LAB_DIRS, ids=[p.name for p in LAB_DIRS])
def test_every_step_has_at_least_three_mutants(lab_dir: Path) -> None:
    """A step's check is only as good as the wrong solutions it was shown to fail (issue 15)."""
    lab = load_lab(lab_dir)
    assert isinstance(lab, Lab), lab
    for step in lab.steps:
        mutants = lab.mutants_of(step.id)
        assert len(mutants) >= 3, f"{lab.id}/{step.id}: {len(mutants)} mutants, at least 3 needed"
        assert all(m.spec.what.zh for m in mutants), f"{lab.id}/{step.id}: a mutant without zh text"


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


def test_without_the_starter_phase_only_the_solution_is_checked() -> None:
    """What the Docker lab test runs for every lab but one: each step's solve and check, in order."""
    lab = load_lab(REPO / "labs" / "getting-started")
    assert isinstance(lab, Lab)
    report = selftest(lab, starter=False, mutants=False)
    assert report.ok, "\n".join(report.lines())
    assert [(r.phase, r.step) for r in report.results] == [("solution", s.id) for s in lab.steps]


def _lab_with_mutants(tmp_path: Path, mutants: dict[str, dict[str, str]]) -> Lab:
    """getting-started copied to ``tmp_path`` with ``mutants`` ({"step/name": {file: text}})."""
    root = tmp_path / "getting-started"
    shutil.copytree(REPO / "labs" / "getting-started", root, ignore=shutil.ignore_patterns("mutants"))
    for key, files in mutants.items():
        for name, text in files.items():
            path = root / "mutants" / key / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    lab = load_lab(root)
    assert isinstance(lab, Lab), lab
    return lab


def test_mutants_must_fail_their_step_with_the_phrase_they_name(tmp_path: Path) -> None:
    lab = _lab_with_mutants(
        tmp_path,
        {
            # a real mistake, caught, and the message says so
            "write-file/no-newline": {
                "mutant.yaml": "what: {en: no final newline, zh: 没有结尾换行}\nclass: boundary\n",
                "notes/hello.txt": "Hello, Ascend!\n你好，昇腾！",
            },
            # caught, but the message does not contain the phrase the author asked for
            "write-file/wrong-phrase": {
                "mutant.yaml": "what: no file\nclass: missing\nexpect: {en: quantum entanglement, zh: 量子纠缠}\n",
                "notes/hello.txt": "hello\n",
            },
            # a "mistake" that changes nothing the check sees: it passes, and the selftest says so
            "find-device/harmless": {
                "mutant.yaml": "what: an extra file\nclass: logic\n",
                "unrelated.txt": "x\n",
            },
            # deleting a solution file (one no step's solve writes again)
            "write-file/deleted": {
                "mutant.yaml": "what: no file\nclass: missing\ndelete: [notes/hello.txt]\n"
            },
        },
    )
    assert [m.key for m in lab.mutants] == [
        "find-device/harmless",
        "write-file/deleted",
        "write-file/no-newline",
        "write-file/wrong-phrase",
    ]
    report = selftest(lab)
    mutants = {r.label: r for r in report.results if r.phase == "mutant"}
    assert mutants["write-file/deleted"].ok, mutants["write-file/deleted"]
    assert mutants["write-file/no-newline"].ok, mutants["write-file/no-newline"]
    assert mutants["find-device/harmless"].verdict.status == "passed"
    assert not mutants["find-device/harmless"].ok
    assert mutants["write-file/wrong-phrase"].verdict.status == "failed"
    assert "量子纠缠" in mutants["write-file/wrong-phrase"].problem
    assert not report.ok
    assert {r.label for r in report.failures()} == {"find-device/harmless", "write-file/wrong-phrase"}
    # the mutants did not leak into each other: the starter/solution phases all behaved
    assert all(r.ok for r in report.results if r.phase != "mutant")
    table = "\n".join(report.mutant_table())
    assert "find-device" in table and "0/1" in table and "2/3" in table


def test_a_malformed_mutant_is_a_lint_error_naming_the_file(tmp_path: Path) -> None:
    root = tmp_path / "getting-started"
    shutil.copytree(REPO / "labs" / "getting-started", root, ignore=shutil.ignore_patterns("mutants"))
    (root / "mutants" / "no-such-step" / "x").mkdir(parents=True)
    (root / "mutants" / "write-file" / "untold").mkdir(parents=True)
    (root / "mutants" / "write-file" / "untold" / "notes").mkdir()
    (root / "mutants" / "write-file" / "untold" / "notes" / "hello.txt").write_text("x")
    (root / "mutants" / "write-file" / "bad-class").mkdir(parents=True)
    (root / "mutants" / "write-file" / "bad-class" / "mutant.yaml").write_text("what: x\nclass: typo\n")
    errors = [str(p) for p in lint_lab(root) if p.level == "error"]
    assert any("mutants/no-such-step" in e and "no step" in e for e in errors), errors
    assert any("untold/mutant.yaml" in e and "missing" in e for e in errors), errors
    assert any("bad-class/mutant.yaml" in e and "class" in e for e in errors), errors
