"""``labserver new LAB`` (issue 34): the lab it writes lints clean and passes its self-test as
written (the real commands, in a temporary folder), and bad names or folders are refused."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from labserver.content import Lab, load_lab
from labserver.content.lint import lint_lab
from labserver.content.scaffold import ScaffoldRefused, new_lab


def labserver(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "labserver.cli", *args], capture_output=True, text=True, cwd=cwd, check=False
    )


def test_a_new_lab_lints_clean_and_passes_its_selftest(tmp_path: Path) -> None:
    made = labserver("new", "labs/my-lab", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    assert "labserver serve --dev labs/my-lab" in made.stdout
    lint = labserver("lint", "--strict", "labs/my-lab", cwd=tmp_path)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    assert "1 labs, 0 errors, 0 warnings" in lint.stdout
    test = labserver("selftest", "labs/my-lab", cwd=tmp_path)
    assert test.returncode == 0, test.stdout + test.stderr
    assert "selftest my-lab: all 5 checks behaved" in test.stdout
    assert "swiglu                                   3/3" in test.stdout  # three mutants caught
    # each mutant was caught for its own reason, in the language it was judged in
    assert "whatever dim" in test.stdout or "无论传入什么 dim" in test.stdout


def test_the_lab_has_both_languages_three_mutants_and_a_failing_starter(tmp_path: Path) -> None:
    new_lab(tmp_path / "swiglu-lab")
    lab = load_lab(tmp_path / "swiglu-lab")
    assert isinstance(lab, Lab)
    assert lab.id == "swiglu-lab" and [s.id for s in lab.steps] == ["swiglu"]
    assert lab.steps[0].markdown_zh is not None and "SwiGLU" in lab.steps[0].instructions("zh")
    assert {m.spec.mistake_class for m in lab.mutants} == {"logic", "parameter"} and len(lab.mutants) == 3
    assert "NotImplementedError" in (lab.starter / "swiglu.py").read_text()
    assert lint_lab(tmp_path / "swiglu-lab") == []


def test_the_new_lab_is_written_as_the_repository_writes_python(tmp_path: Path) -> None:
    """ruff (the repository's settings) finds nothing to change: a lab made here can be committed."""
    new_lab(tmp_path / "my-lab")
    config = Path(__file__).resolve().parents[2] / "pyproject.toml"
    for args in (["check"], ["format", "--check"]):
        run = subprocess.run(
            [sys.executable, "-m", "ruff", *args, "--config", str(config), str(tmp_path / "my-lab")],
            capture_output=True,
            text=True,
            check=False,
        )
        assert run.returncode == 0, run.stdout + run.stderr


@pytest.mark.parametrize("name", ["My Lab", "-lab", "lab_1", "x" * 70])
def test_a_name_that_cannot_be_a_lab_id_is_refused(tmp_path: Path, name: str) -> None:
    with pytest.raises(ScaffoldRefused, match="cannot be a lab id"):
        new_lab(tmp_path / name)
    assert not (tmp_path / name).exists()


def test_a_folder_with_files_is_never_overwritten(tmp_path: Path) -> None:
    (tmp_path / "my-lab").mkdir()
    (tmp_path / "my-lab" / "notes.txt").write_text("mine")
    refused = labserver("new", "my-lab", cwd=tmp_path)
    assert refused.returncode == 2 and "exists and is not empty" in refused.stderr
    assert (tmp_path / "my-lab" / "notes.txt").read_text() == "mine"
    assert sorted(p.name for p in (tmp_path / "my-lab").iterdir()) == ["notes.txt"]
