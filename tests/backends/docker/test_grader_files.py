"""The lab files a grader container gets: read once, then again only when one of them changed
(no Docker engine needed)."""

from __future__ import annotations

import os
from pathlib import Path

from labserver.backends.docker.grader import grader_lab_files


def make_lab(root: Path) -> Path:
    (root / "checks").mkdir(parents=True)
    (root / "starter").mkdir()
    (root / "solution").mkdir()
    (root / "lab.yaml").write_text("id: demo\n")
    (root / "checks" / "01_x.py").write_text("print('checker')\n")
    (root / "checks" / "helper.py").write_text("X = 1\n")
    (root / "starter" / "a.py").write_text("a = 1\n")
    (root / "solution" / "a.py").write_text("a = 2\n")
    return root / "checks" / "01_x.py"


def test_lab_files_are_trusted_ones_and_cached_until_a_file_changes(tmp_path: Path) -> None:
    checker = make_lab(tmp_path / "demo")
    files, name = grader_lab_files(checker)
    assert name == "lab/checks/01_x.py"
    assert dict(files) == {
        "checks/helper.py": b"X = 1\n",
        "lab.yaml": b"id: demo\n",
        "starter/a.py": b"a = 1\n",
    }
    again = grader_lab_files(checker)
    assert again[0] is files  # not read again
    helper = tmp_path / "demo" / "checks" / "helper.py"
    helper.write_text("X = 22\n")
    os.utime(helper, ns=(helper.stat().st_atime_ns, helper.stat().st_mtime_ns + 10**9))
    changed, _ = grader_lab_files(checker)
    assert dict(changed)["checks/helper.py"] == b"X = 22\n"


def test_a_checker_outside_a_lab_travels_alone(tmp_path: Path) -> None:
    lone = tmp_path / "check.py"
    lone.write_text("print(1)\n")
    assert grader_lab_files(lone) == ([], "check.py")
