"""Process isolation for the local backend: bubblewrap when it is installed, else none.

With bubblewrap, a sandboxed process sees the host file system read-only, a private ``/tmp``, an
empty data folder (the server's database and secrets are hidden), its own PID namespace, no network
unless asked, and only the paths given as writable. Without it, processes run as the server's user
with no isolation (see docs/backends.md)."""

from __future__ import annotations

import ast
import functools
import shutil
import site
import sys
from collections.abc import Iterable, Sequence
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


@functools.cache
def runtime_paths() -> tuple[Path, ...]:
    """Every folder this Python needs to run the checkers and labkit, wherever it lives.

    Sandboxed processes get a private ``/tmp``; a runtime that lives there (a checkout or a venv
    in a temporary folder, as CI systems make them) must be bound back in, and so must every
    place an import can lead: the interpreter and its prefixes, the site-packages folders, the
    source folders of editable installs (the folders ``.pth`` files add to ``sys.path``, which is
    how most build backends install in editable mode, and setuptools' editable finders). Computed once per process."""
    found: list[Path] = [Path(sys.prefix), Path(sys.base_prefix), Path(sys.exec_prefix)]
    found.append(Path(sys.executable).parent)
    found.append(Path(sys.executable).resolve().parent.parent)  # the real interpreter's prefix
    sites = [Path(p) for p in site.getsitepackages()]
    found += sites
    for sp in sites:
        found += _pth_folders(sp)
        found += _editable_finder_folders(sp)
    return _outermost(p for p in found if p.exists())


def _pth_folders(site_packages: Path) -> list[Path]:
    """Folders named by path lines of ``.pth`` files (lines starting with ``import`` are code)."""
    out = []
    for pth in site_packages.glob("*.pth"):
        for line in pth.read_text(errors="replace").splitlines():
            line = line.strip()
            if line and not line.startswith(("#", "import ", "import\t")):
                out.append((site_packages / line).resolve())
    return out


def _editable_finder_folders(site_packages: Path) -> list[Path]:
    """Source folders in setuptools' ``__editable___*_finder.py`` ``MAPPING = {...}`` literals."""
    out = []
    for finder in site_packages.glob("__editable___*_finder.py"):
        for node in ast.parse(finder.read_text()).body:
            if isinstance(node, ast.AnnAssign | ast.Assign) and node.value is not None:
                targets = [node.target] if isinstance(node, ast.AnnAssign) else node.targets
                if any(isinstance(t, ast.Name) and t.id == "MAPPING" for t in targets):
                    out += [Path(v) for v in ast.literal_eval(node.value).values()]
    return out


def _outermost(paths: Iterable[Path]) -> tuple[Path, ...]:
    """The given folders without those inside another one of them (one bind covers both)."""
    unique = sorted({p.absolute() for p in paths}, key=lambda p: len(p.parts))
    kept: list[Path] = []
    for p in unique:
        if not any(p.is_relative_to(k) for k in kept):
            kept.append(p)
    return tuple(kept)


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
    folders (:func:`runtime_paths`, the labs) that must stay visible under the private ``/tmp``."""
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
        for seen in dict.fromkeys((path.absolute(), path.resolve())):
            if seen.is_relative_to("/tmp") and seen.exists():
                cmd += ["--ro-bind", str(seen), str(seen)]
    for path in hide:
        cmd += ["--tmpfs", str(path)]
    for path in writable:
        cmd += ["--bind", str(path), str(path)]
    for path in readonly:
        cmd += ["--ro-bind", str(path), str(path)]
    cmd += ["--chdir", str(chdir), "--"]
    return cmd + list(argv)
