"""Process isolation for the local backend: bubblewrap when it is installed, else none.

With bubblewrap, a sandboxed process sees the host file system read-only, a private ``/tmp``, an
empty data folder (the server's database and secrets are hidden), its own PID namespace, no network
unless asked, and only the paths given as writable. Without it, processes run as the server's user
with no isolation (see docs/backends.md)."""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path


def bwrap_path(mode: str) -> str | None:
    if mode == "none":
        return None
    found = shutil.which("bwrap")
    if mode == "bwrap" and not found:
        raise RuntimeError(
            "LABSERVER_SANDBOX=bwrap but bubblewrap is not installed: apt-get install bubblewrap"
        )
    return found


def wrap(
    argv: Sequence[str],
    *,
    bwrap: str | None,
    hide: Sequence[Path],
    writable: Sequence[Path],
    readonly: Sequence[Path] = (),
    chdir: Path,
    network: bool = False,
    new_session: bool = True,
    keep: Sequence[Path] = (),
) -> list[str]:
    """``argv`` wrapped in bubblewrap (or unchanged when ``bwrap`` is None). ``keep`` lists runtime
    folders (the Python environment, the labs) that must stay visible under the private ``/tmp``."""
    if not bwrap:
        return list(argv)
    cmd = [
        bwrap,
        "--ro-bind",
        "/",
        "/",
        "--dev",
        "/dev",
        "--proc",
        "/proc",
        "--tmpfs",
        "/tmp",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--die-with-parent",
    ]
    if new_session:  # no TIOCSTI into the caller's terminal; terminals keep their own PTY
        cmd.append("--new-session")
    if not network:
        cmd.append("--unshare-net")
    for path in keep:  # the runtime (Python, labs) stays visible even when it lives under /tmp
        if path.resolve().is_relative_to("/tmp") and path.exists():
            cmd += ["--ro-bind", str(path), str(path)]
    for path in hide:
        cmd += ["--tmpfs", str(path)]
    for path in writable:
        cmd += ["--bind", str(path), str(path)]
    for path in readonly:
        cmd += ["--ro-bind", str(path), str(path)]
    cmd += ["--chdir", str(chdir), "--"]
    return cmd + list(argv)
