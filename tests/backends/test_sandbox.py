"""The bubblewrap command line: what is hidden, writable, read-only and kept visible."""

from __future__ import annotations

from pathlib import Path

from labserver.backends.sandbox import wrap


def test_no_bwrap_means_the_command_unchanged() -> None:
    assert wrap(["python", "x.py"], bwrap=None, hide=[], writable=[], chdir=Path("/")) == ["python", "x.py"]


def test_runtime_under_tmp_stays_visible_and_data_is_hidden(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    venv.mkdir()
    data = tmp_path / "data"
    cmd = wrap(
        ["python"],
        bwrap="/usr/bin/bwrap",
        hide=[data],
        writable=[data / "ws"],
        chdir=data / "ws",
        keep=[venv, Path("/usr")],
    )
    joined = " ".join(cmd)
    assert f"--ro-bind {venv} {venv}" in joined  # under /tmp: bound again after the private /tmp
    assert "--ro-bind /usr /usr" not in joined  # outside /tmp: already visible
    assert cmd.index("--tmpfs", cmd.index("/tmp") - 1) < cmd.index(str(venv))
    assert f"--tmpfs {data}" in joined and f"--bind {data / 'ws'} {data / 'ws'}" in joined
    assert "--unshare-net" in cmd and cmd[-1] == "python"
