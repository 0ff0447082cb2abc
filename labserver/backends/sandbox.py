"""Process isolation of the local backend: what an attendee's process runs as, and what it sees.

Threat model
------------
Attendees run any code they like: in their terminal, through ``exec`` (self-test solve commands),
and inside checks (``labkit.check`` runs their functions). The server itself may run as root
(``make run`` on a fresh machine, CI) or as a normal user. For every attendee process:

- it is never privileged: never uid 0 on the host, no capabilities in any namespace that owns a
  mount it can see, ``no_new_privs``, an empty bounding set, and no user namespace of its own (so no
  ``mount``, ``umount``, ``remount,rw``, ``ptrace`` of the server, no setuid binary regains anything);
- it sees only what it needs: the runtime read-only, its own workspace, and during a check the
  checked lab's files without ``solution/`` and ``mutants/``;
- it never sees the server's data folder (database, instructor token, secret key, other
  workspaces), any lab's ``solution/`` or ``mutants/``, host sockets (``/run``, ``/var/run``,
  ``docker.sock``, PostgreSQL's socket: they are simply not in its file system), other processes
  (own PID namespace) or the network (own network namespace with only loopback).

Mechanism
---------
Server run by root (:class:`Identity` ``switch=True``), three steps in one command line:

1. an *outer* bubblewrap, run by root, builds the view below in new mount, PID, IPC, UTS, network
   and cgroup namespaces and drops every capability except ``CAP_SETUID``, ``CAP_SETGID`` and
   ``CAP_SETPCAP``;
2. ``setpriv`` uses those to become the environment's own uid/gid (``LABSERVER_LOCAL__UID_BASE`` +
   n), clears the supplementary groups, empties the bounding and inheritable sets and sets
   ``no_new_privs``; changing every uid away from 0 clears the remaining capabilities;
3. an *inner* bubblewrap, run by that uid, enters a user namespace that maps only that uid, with
   ``--disable-userns`` and ``--cap-drop ALL``, and binds the outer view as it is.

Root is needed for step 1 only: the runtime may live where the environment's uid cannot reach it
(``/root/.pyenv`` under a 0700 ``/root``), and bubblewrap 0.8 resolves bind sources, ``--bind-fd``
included, by path as the calling uid. Nothing the attendee controls runs before step 3.

Server run by a normal user (``switch=False``): one bubblewrap run by that user with
``--unshare-user --disable-userns --cap-drop ALL`` and the same view: the attendee is the server's
uid inside a user namespace, without capabilities outside it.

Without bubblewrap (not installed, or it does not work here: :func:`works`) there is no file system
isolation; processes of a root server still switch to the environment's uid (``setpriv``).
``LocalBackend`` reports this at start and refuses attendees from other machines unless
``LABSERVER_ALLOW_UNSANDBOXED`` is set.

The view (:func:`wrap`), nothing else exists in it:

- ``/usr`` read-only; ``/bin``, ``/sbin``, ``/lib*`` as on the host (symlinks recreated);
- from ``/etc`` only :data:`ETC_FILES` (the dynamic linker's cache, name service and time zone
  configuration, certificates, terminal data), plus ``passwd``, ``group`` and ``hosts`` written by
  the server for this environment (``View.etc``);
- the runtime (:func:`runtime_paths`: the interpreter, its prefixes, site-packages and the source
  folders of editable installs) read-only;
- the workspace read-write (read-only during checks and ``exec(readonly=True)``); during a check
  also the checked lab's folder without ``solution/`` and ``mutants/``, read-only;
- a fresh ``/proc``, a minimal ``/dev``, size-capped ``/tmp`` and ``/dev/shm``;
- ``View.masked`` (the data folder, the labs folder, every ``solution/`` and ``mutants/``) covered by
  an empty read-only tmpfs wherever one lies inside a bound folder (a checkout on ``sys.path``).
"""

from __future__ import annotations

import ast
import functools
import glob
import os
import shutil
import site
import stat
import subprocess
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from labserver.backends.base import BackendError

#: what an attendee process may read from the host's /etc (when present). Not there: shadow files,
#: machine-id, ssh keys, sudoers, the package manager's and services' configuration.
ETC_FILES = (
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "nsswitch.conf",
    "host.conf",
    "gai.conf",
    "protocols",
    "services",
    "localtime",
    "timezone",
    "alternatives",
    "ssl/certs",
    "ssl/openssl.cnf",
    "ca-certificates",
    "inputrc",
    "terminfo",
    "mime.types",
    "os-release",
)
SYSTEM_DIRS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
OUTER_CAPS = ("CAP_SETUID", "CAP_SETGID", "CAP_SETPCAP")


def bwrap_path(mode: str) -> str | None:
    if mode == "none":
        return None
    found = shutil.which("bwrap")
    if mode == "bwrap" and not found:
        raise RuntimeError(
            "LABSERVER_SANDBOX=bwrap but bubblewrap is not installed: apt-get install bubblewrap"
        )
    return found


@dataclass(frozen=True)
class Identity:
    """Who an environment's processes are. ``switch``: the server is root, so they become
    ``uid``/``gid`` before anything of the attendee's runs; otherwise they are the server's uid."""

    uid: int
    gid: int
    switch: bool


@dataclass(frozen=True)
class View:
    """What a sandboxed process sees besides the system folders. ``etc``: (file on the server,
    name under /etc) pairs, e.g. the environment's own ``passwd``."""

    runtime: tuple[Path, ...] = ()
    readonly: tuple[Path, ...] = ()
    writable: tuple[Path, ...] = ()
    masked: tuple[Path, ...] = ()
    etc: tuple[tuple[Path, str], ...] = ()
    tmp_mb: int = 256


@functools.cache
def runtime_paths() -> tuple[Path, ...]:
    """Every folder this Python needs to run the checkers and labkit, wherever it lives.

    Nothing of the host is visible in the sandbox unless bound, so every place an import can lead
    is: the interpreter and its prefixes, the site-packages folders, the source folders of editable
    installs (the folders ``.pth`` files add to ``sys.path``, which is how most build backends
    install in editable mode, and setuptools' editable finders). Computed once per process."""
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


class _Layout:
    """Builds bubblewrap's mount operations in order, creating every folder a mount point needs
    with mode 0755 (bubblewrap would make them 0700, unreachable for the environment's uid)."""

    def __init__(self) -> None:
        self.args: list[str] = []
        self.mounts: list[tuple[Path, str]] = []  # (path, "bind" | "tmpfs"), in order
        self.made: set[Path] = {Path("/")}

    def _exists(self, path: Path) -> bool:
        if path in self.made:
            return True
        for mount, kind in reversed(self.mounts):
            if path == mount or path.is_relative_to(mount):
                return kind == "bind" and path.is_dir()  # binds are same-path: the host decides
        return False

    def parents(self, path: Path) -> None:
        for parent in reversed(path.parents):
            if not self._exists(parent):
                self.args += ["--perms", "0755", "--dir", str(parent)]
                self.made.add(parent)

    def bind(self, path: Path, *, writable: bool = False, dest: str | None = None) -> None:
        target = Path(dest) if dest else path
        self.parents(target)
        self.args += ["--bind" if writable else "--ro-bind", str(path), str(target)]
        self.mounts.append((target, "bind"))

    def tmpfs(self, path: Path, size_mb: int | None = None, mode: str = "") -> None:
        self.parents(path)
        if size_mb:
            self.args += ["--size", str(size_mb * 1024 * 1024)]
        self.args += ["--tmpfs", str(path)]
        if mode:
            self.args += ["--chmod", mode, str(path)]
        self.mounts.append((path, "tmpfs"))
        self.made.add(path)

    def symlink(self, target: str, path: Path) -> None:
        self.parents(path)
        self.args += ["--symlink", target, str(path)]


def _etc_entries() -> list[str]:
    names = list(ETC_FILES)
    names += sorted(os.path.relpath(p, "/etc") for p in glob.glob("/etc/python3*"))  # Debian's python
    return names


def view_args(view: View, *, chdir: Path) -> list[str]:
    """The mount operations that build ``view`` (pure but for looking at the host's folders)."""
    lay = _Layout()
    lay.bind(Path("/usr"))
    for name in SYSTEM_DIRS:
        path = Path(name)
        if path.is_symlink():
            lay.symlink(os.readlink(path), path)
        elif path.is_dir():
            lay.bind(path)
    lay.args += ["--proc", "/proc", "--dev", "/dev"]
    lay.made |= {Path("/proc"), Path("/dev")}
    lay.tmpfs(Path("/tmp"), max(16, view.tmp_mb), "1777")
    lay.tmpfs(Path("/dev/shm"), max(16, view.tmp_mb // 2), "1777")
    lay.args += ["--perms", "0755", "--dir", "/etc"]
    lay.made.add(Path("/etc"))
    generated = {name for _, name in view.etc}
    for name in _etc_entries():
        path = Path("/etc") / name
        if name in generated:
            continue
        if path.is_symlink():
            lay.symlink(os.readlink(path), path)
        elif path.exists():
            lay.bind(path)
    for source, name in view.etc:
        lay.bind(source, dest=f"/etc/{name}")
    bound = [*view.runtime, *view.readonly, *view.writable]
    masks = [m for m in view.masked if m.is_dir() and any(m.is_relative_to(b) for b in bound)]
    # outer before inner, whatever the kind: a mask right after the bind it lies in, a workspace
    # after the mask over the data folder it lies in (sorted is stable: binds first at equal depth)
    ops = [(p, "ro") for p in view.runtime] + [(p, "ro") for p in view.readonly]
    ops += [(p, "rw") for p in view.writable] + [(m, "mask") for m in masks]
    for path, kind in sorted(ops, key=lambda op: (len(op[0].parts), op[1] == "mask")):
        if kind == "mask":
            lay.tmpfs(path)
        else:
            lay.bind(path, writable=kind == "rw")
    for mask in masks:
        lay.args += ["--remount-ro", str(mask)]
    lay.args += ["--remount-ro", "/", "--chdir", str(chdir)]
    return lay.args


def drop_privileges(identity: Identity, setpriv: str) -> list[str]:
    """``setpriv`` to the environment's uid/gid: no groups, no capabilities, ``no_new_privs``."""
    return [
        setpriv,
        f"--reuid={identity.uid}",
        f"--regid={identity.gid}",
        "--clear-groups",
        "--no-new-privs",
        "--bounding-set=-all",
        "--inh-caps=-all",
        "--",
    ]


def wrap(
    argv: Sequence[str],
    *,
    bwrap: str | None,
    view: View,
    identity: Identity,
    chdir: Path,
    network: bool = False,
    new_session: bool = True,
    setpriv: str = "/usr/bin/setpriv",
) -> list[str]:
    """``argv`` as an attendee process (see the module docstring for what that means)."""
    if not bwrap:
        return [*drop_privileges(identity, setpriv), *argv] if identity.switch else list(argv)
    cmd = [
        bwrap,
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--hostname",
        "lab",
        "--unshare-cgroup-try",
        "--die-with-parent",
    ]
    if new_session:  # no TIOCSTI into the caller's terminal; terminals keep their own PTY
        cmd.append("--new-session")
    if not network:
        cmd.append("--unshare-net")
    if identity.switch:
        cmd += ["--cap-drop", "ALL"]
        for cap in OUTER_CAPS:
            cmd += ["--cap-add", cap]
    else:
        cmd += ["--unshare-user", "--disable-userns", "--cap-drop", "ALL"]
    # a root outer sandbox has no CAP_DAC_OVERRIDE left: it stays at / and the inner one, as the
    # environment's uid (the owner of the workspace), goes to ``chdir``
    cmd += view_args(view, chdir=Path("/") if identity.switch else chdir)
    cmd.append("--")
    if identity.switch:
        cmd += drop_privileges(identity, setpriv)
        cmd += [bwrap, "--unshare-user", "--disable-userns", "--cap-drop", "ALL", "--die-with-parent"]
        cmd += ["--dev-bind", "/", "/", "--chdir", str(chdir), "--"]
    return cmd + list(argv)


def works(argv: Sequence[str], *, cwd: str = "/") -> str:
    """'' if ``argv`` (a wrapped ``true``) runs here; else what went wrong, for the operator."""
    try:
        res = subprocess.run(list(argv), capture_output=True, timeout=30, cwd=cwd)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"{type(exc).__name__}: {exc}"
    if res.returncode != 0:
        return (res.stderr or res.stdout).decode("utf-8", "replace").strip()[
            -500:
        ] or f"exit {res.returncode}"
    return ""


class CheckerCannotStart(BackendError):
    """The environment's uid cannot start the checkers' Python (a root server without bubblewrap
    whose Python lives under a 0700 folder such as ``/root/.pyenv``): the server's setup, not the
    attendee's work (services/grading/not_gradable.py, ``checker-start``). ``log`` says what stops it."""

    def __init__(self, log: str) -> None:
        message = "This server cannot start checkers: its Python is out of reach of your environment's user."
        super().__init__(message, reason="checker-start", log=log)


def unreachable(path: Path, uid: int, gid: int) -> str:
    """'' when a process of ``uid``/``gid`` (no supplementary groups, no capabilities: an attendee
    process without bubblewrap) can execute ``path``; else which folder or file stops it and why.
    Every folder on the way is looked at, through every symlink (a venv's ``python`` links into
    ``/root/.pyenv``, whose ``/root`` is 0700). Mode bits only, as the kernel checks them without
    ACLs; run as root, it never depends on what the caller itself may do."""
    seen = 0
    current = Path(os.path.abspath(path))
    while True:
        for folder in reversed(current.parents):
            if problem := _denied(folder, uid, gid, stat.S_IXOTH, "enter"):
                return problem
        try:
            target = os.readlink(current)
        except OSError:
            break
        seen += 1
        if seen > 40:
            return f"{path}: too many symlinks"
        current = Path(os.path.abspath(current.parent / target))
    return _denied(current, uid, gid, stat.S_IXOTH, "execute")


def _denied(path: Path, uid: int, gid: int, other_bit: int, what: str) -> str:
    try:
        st = os.stat(path)
    except OSError as exc:
        return f"{path}: {exc.strerror}"
    shift = 6 if st.st_uid == uid else 3 if st.st_gid == gid else 0
    if st.st_mode & (other_bit << shift):
        return ""
    return f"uid {uid} cannot {what} {path} (mode {stat.S_IMODE(st.st_mode):04o}, owner uid {st.st_uid})"
