"""The dir-fd file operations (labserver/backends/local_files.py) on a plain folder."""

from __future__ import annotations

import io
import os
import zipfile
from pathlib import Path

import pytest

from labserver.backends.base import PathRefused
from labserver.backends.local_files import Workspace


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    root = tmp_path / "ws"
    (root / "lab").mkdir(parents=True)
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret").write_text("SECRET")
    return Workspace(root, None, frozenset({".marker", ".backups"}))


def test_no_symlink_is_ever_followed(ws: Workspace, tmp_path: Path) -> None:
    (ws.root / "lab" / "out").symlink_to(tmp_path / "outside")
    (ws.root / "lab" / "file").symlink_to(tmp_path / "outside" / "secret")
    for bad in ("lab/out/secret", "lab/file"):
        with pytest.raises(PathRefused):
            ws.read(bad)
        with pytest.raises(PathRefused):
            ws.write(bad, b"x")
    with pytest.raises(PathRefused):
        ws.write("lab/out/new", b"x")
    assert sorted(os.listdir(tmp_path / "outside")) == ["secret"]
    assert (tmp_path / "outside" / "secret").read_text() == "SECRET"
    assert {e.path for e in ws.listing("lab")} == set()
    assert b"SECRET" not in ws.zip("lab", "lab")
    with pytest.raises(PathRefused):
        ws.listing("lab/out")
    ws.delete("lab/out")  # removes the link, not what it names
    assert (tmp_path / "outside" / "secret").exists()


def test_a_fifo_is_refused_not_waited_on(ws: Workspace) -> None:
    os.mkfifo(ws.root / "lab" / "pipe")
    with pytest.raises(PathRefused):
        ws.read("lab/pipe")


def test_write_keeps_the_mode_and_makes_folders(ws: Workspace) -> None:
    ws.write("lab/run.sh", b"#!/bin/sh\n")
    os.chmod(ws.root / "lab" / "run.sh", 0o755)
    ws.write("lab/run.sh", b"#!/bin/sh\necho hi\n")
    assert os.stat(ws.root / "lab" / "run.sh").st_mode & 0o777 == 0o755
    ws.write("lab/a/b/c.txt", b"deep")
    assert ws.read("lab/a/b/c.txt") == b"deep"
    with pytest.raises(IsADirectoryError):
        ws.write("lab/a", b"x")
    with pytest.raises(PathRefused):
        ws.write("lab/.backups", b"x")
    names = zipfile.ZipFile(io.BytesIO(ws.zip("lab", "lab"))).namelist()
    assert names == ["lab/a/b/c.txt", "lab/run.sh"]


def test_backup_refuses_a_symlinked_backups_and_seed_never_writes_through_a_link(
    ws: Workspace, tmp_path: Path
) -> None:
    (ws.root / ".backups").symlink_to(tmp_path / "outside")
    with pytest.raises(PathRefused):
        ws.move_to_backup("lab", "20260101")
    assert (ws.root / "lab").is_dir() and sorted(os.listdir(tmp_path / "outside")) == ["secret"]
    (ws.root / ".backups").unlink()
    assert ws.move_to_backup("lab", "20260101") == ".backups/20260101/lab"
    starter = tmp_path / "starter"
    starter.mkdir()
    (starter / "hello.py").write_text("print('hi')\n")
    (ws.root / "other").symlink_to(tmp_path / "outside")
    ws.seed("other", starter)  # an existing name, here a link: left alone, not followed
    assert sorted(os.listdir(tmp_path / "outside")) == ["secret"]
    ws.seed("lab", starter)
    assert ws.read("lab/hello.py") == b"print('hi')\n"
