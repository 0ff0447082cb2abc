"""Per-environment resource limits of the local backend: processes, memory and CPU.

Threat model
------------
An attendee runs any code they like in their terminal, and their code runs inside checks. Without
limits one attendee forks until the process table is full, allocates until the kernel's OOM killer
picks the server or a neighbour, or keeps every core busy; the issue saw 400 processes and 1.5 GB
allowed. Each environment therefore gets a budget from its ``EnvSpec`` (``pids``, ``memory_mb``,
``cpus``, which come from the labs' ``requires``), and nothing an attendee does can lift it: the
budget is set by the server outside the sandbox, on files the attendee cannot see (``/sys`` is not
mounted in the sandbox) and with privileges the attendee does not have.

Mechanism, picked once per server by :func:`detect` (``LABSERVER_LOCAL__LIMITS`` forces one):

``cgroup2``
    a cgroup per environment (and one per running check) under the server's own cgroup (or
    ``LABSERVER_LOCAL__CGROUP_PARENT``), with ``pids.max``, ``memory.max`` + ``memory.swap.max = 0``
    and ``cpu.max``. Needs the ``pids memory cpu`` controllers delegated to that cgroup (root, or
    systemd ``Delegate=yes``); the server does not move itself to make room for them.
``cgroup1``
    the same in the v1 ``pids``, ``memory`` and ``cpu`` hierarchies (``pids.max``,
    ``memory.limit_in_bytes`` + ``memory.memsw.limit_in_bytes``, ``cpu.cfs_quota_us``). Needs write
    access to them (root).
``rlimit``
    per-process limits through ``prlimit``: ``RLIMIT_NPROC`` (counted per uid: a real
    per-environment process budget when the server is root and every environment has a uid of its
    own; for a server run by a normal user it is the budget *above* what that user already runs),
    ``RLIMIT_DATA`` = the memory budget per process (not per environment), and ``nice 10``
    instead of a CPU quota. The fallback that works everywhere, with weaker guarantees.

Whatever the mechanism, attendee processes yield the CPU to the server: they run at ``nice 10``
and their cgroups (the ``labserver`` folder and each environment's) carry a quarter of the default
CPU weight (``cpu.weight`` 25 on v2, ``cpu.shares`` 256 on v1). On a busy machine the checks of a
full room queue up, but joins, pages, the live streams and terminals stay answered (the load
rehearsal, ``bench/rehearsal.py``, saw join p95 climb to seconds when checks and server competed as
equals). The quota (``cpu.max``) still caps each environment.

And whatever the mechanism: no core dumps (``RLIMIT_CORE 0``), at most 8192 open files per process,
and no file bigger than 2 GiB (``RLIMIT_FSIZE``; the total is not limited).

A process enters its cgroup before it runs anything of the attendee's: the command line starts
with ``/bin/sh -c 'echo $$ > …/cgroup.procs; exec "$@"'`` (no window in which a fork escapes, no
``preexec_fn`` in a threaded server). A cgroup is removed when the last process the server
started in it has ended (:meth:`Limiter.release`); leftover processes are killed first.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

log = logging.getLogger(__name__)

Mechanism = Literal["cgroup2", "cgroup1", "rlimit", "none"]
ENTER = 'while [ "$1" != -- ]; do echo $$ > "$1" || exit 125; shift; done; shift; exec "$@"'
NICE = 10  # attendee processes give way to the server's
V1_SHARES = 256  # a quarter of the kernel's default 1024
V2_WEIGHT = 25  # a quarter of the kernel's default 100
NOFILE = 8192
#: the largest file an attendee process may write (RLIMIT_FSIZE): the local backend has no
#: per-workspace disk limit, so this at least stops one file from filling the disk (issue 13 item 10)
FSIZE = 2 * 1024**3
V1_CONTROLLERS = ("pids", "memory", "cpu")


@dataclass(frozen=True)
class Limits:
    """The budget of one environment (from its ``EnvSpec``)."""

    cpus: float = 1.0
    memory_mb: int = 2048
    pids: int = 256


def safe_name(name: str) -> str:
    """A cgroup folder name for ``name`` (environment ids are ``[A-Za-z0-9_-]`` already)."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:200] or "_"


def _write(path: Path, value: str) -> None:
    with open(path, "w") as f:  # one write(2) per value, as cgroup files expect
        f.write(value)


class Limiter:
    """Creates, fills and removes per-environment groups; builds the command prefix that puts a
    process into one. Subclasses are the mechanisms. Thread-safe; reference-counted per group, so a
    terminal, an ``exec`` and a check of one environment can share a group safely."""

    name: Mechanism = "none"

    def __init__(self, detail: str = "") -> None:
        self.detail = detail
        self._lock = threading.Lock()
        self._users: dict[str, int] = {}

    # -- the per-mechanism part ------------------------------------------------------------
    def _create(self, group: str, limits: Limits) -> list[Path]:
        """Make ``group`` (idempotent), write its limits, return the ``cgroup.procs`` files."""
        return []

    def _remove(self, group: str) -> None:
        return None

    def rlimits(self, limits: Limits, *, own_uid: bool) -> list[str]:
        """``prlimit`` options for a process of an environment with ``limits``. ``own_uid``: the
        environment runs under a uid of its own (so ``RLIMIT_NPROC`` counts only its processes)."""
        return ["--core=0:0", f"--nofile={NOFILE}:{NOFILE}", f"--fsize={FSIZE}:{FSIZE}"]

    def nice(self) -> list[str]:
        """``nice -n 10``: an attendee's process gives way to the server's (every mechanism)."""
        found = shutil.which("nice")
        return [found, "-n", str(NICE)] if found else []

    # -- shared ------------------------------------------------------------------------------
    def acquire(self, group: str, limits: Limits, *, own_uid: bool) -> list[str]:
        """The argv prefix that runs a command in ``group`` under ``limits``; call :meth:`release`
        once that command has ended."""
        with self._lock:
            procs = self._create(safe_name(group), limits)
            self._users[group] = self._users.get(group, 0) + 1
        prefix: list[str] = []
        if procs:
            prefix += ["/bin/sh", "-c", ENTER, "labserver-enter", *map(str, procs), "--"]
        prlimit = shutil.which("prlimit")
        if prlimit:
            prefix += [prlimit, *self.rlimits(limits, own_uid=own_uid), "--"]
        return prefix + self.nice()

    def release(self, group: str) -> None:
        with self._lock:
            left = self._users.get(group, 0) - 1
            if left > 0:
                self._users[group] = left
                return
            self._users.pop(group, None)
            self._remove(safe_name(group))

    def destroy(self, group: str) -> None:
        """Kill whatever still runs in ``group`` and remove it (environment destroyed)."""
        with self._lock:
            self._users.pop(group, None)
            self._remove(safe_name(group))


class RlimitLimiter(Limiter):
    name: Mechanism = "rlimit"

    def rlimits(self, limits: Limits, *, own_uid: bool) -> list[str]:
        nproc = limits.pids if own_uid else limits.pids + _processes_of(os.getuid())
        data = limits.memory_mb * 1024 * 1024
        return [
            *super().rlimits(limits, own_uid=own_uid),
            f"--nproc={nproc}:{nproc}",
            f"--data={data}:{data}",
        ]


def _processes_of(uid: int) -> int:
    count = 0
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                count += entry.stat().st_uid == uid
    return count


class _CgroupLimiter(Limiter):
    """Shared by v1 and v2: ``bases`` maps a controller name to the folder our groups go in."""

    def __init__(self, bases: dict[str, Path], detail: str = "") -> None:
        super().__init__(detail)
        self.bases = bases

    def _dirs(self, group: str) -> list[Path]:
        return list(dict.fromkeys(base / group for base in self.bases.values()))

    def _remove(self, group: str) -> None:
        for folder in self._dirs(group):
            _kill_and_rmdir(folder)
        for base in dict.fromkeys(self.bases.values()):  # our folder too, once nothing is left
            with contextlib.suppress(OSError):
                base.rmdir()


def _kill_and_rmdir(folder: Path, attempts: int = 60) -> None:
    for attempt in range(attempts):
        try:
            folder.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError as exc:
            if exc.errno != errno.EBUSY:
                log.warning("could not remove cgroup %s: %s", folder, exc)
                return
        with contextlib.suppress(OSError):
            _write(folder / "cgroup.kill", "1")  # cgroup v2, Linux >= 5.14
        with contextlib.suppress(OSError):
            for pid in (folder / "cgroup.procs").read_text().split():
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(int(pid), signal.SIGKILL)
        time.sleep(min(0.002 * 2**attempt, 0.05))  # a process that just ended leaves in a moment
    log.warning("cgroup %s still busy; left in place", folder)


class CgroupV1Limiter(_CgroupLimiter):
    name: Mechanism = "cgroup1"

    def _create(self, group: str, limits: Limits) -> list[Path]:
        pids, memory, cpu = (self.bases[c] / group for c in V1_CONTROLLERS)
        for folder in (pids, memory, cpu):
            folder.mkdir(parents=True, exist_ok=True)
        _write(pids / "pids.max", str(limits.pids))
        mem = str(limits.memory_mb * 1024 * 1024)
        swap = memory / "memory.memsw.limit_in_bytes"  # only with swap accounting
        if swap.exists():
            _write(swap, "-1")  # memsw >= memory at every moment, whichever way the limit moves
        _write(memory / "memory.limit_in_bytes", mem)
        if swap.exists():
            _write(swap, mem)
        period = 100_000
        _write(cpu / "cpu.cfs_period_us", str(period))
        _write(cpu / "cpu.cfs_quota_us", str(max(1000, int(limits.cpus * period))))
        for folder in (cpu.parent, cpu):  # the labserver folder competes with the server's tasks
            _write(folder / "cpu.shares", str(V1_SHARES))
        return [folder / "cgroup.procs" for folder in dict.fromkeys((pids, memory, cpu))]


class CgroupV2Limiter(_CgroupLimiter):
    name: Mechanism = "cgroup2"

    def _create(self, group: str, limits: Limits) -> list[Path]:
        base = self.bases["unified"]
        _enable(base.parent)  # the server's own cgroup hands the controllers down to ours ...
        base.mkdir(exist_ok=True)
        _enable(base)  # ... and ours to each environment's
        folder = base / group
        folder.mkdir(exist_ok=True)
        _write(folder / "pids.max", str(limits.pids))
        _write(folder / "memory.max", str(limits.memory_mb * 1024 * 1024))
        if (folder / "memory.swap.max").exists():
            _write(folder / "memory.swap.max", "0")
        period = 100_000
        _write(folder / "cpu.max", f"{max(1000, int(limits.cpus * period))} {period}")
        for weighted in (base, folder):  # the labserver folder competes with the server's cgroup
            _write(weighted / "cpu.weight", str(V2_WEIGHT))
        return [folder / "cgroup.procs"]


def _enable(folder: Path) -> None:
    have = set((folder / "cgroup.subtree_control").read_text().split())
    missing = [c for c in V1_CONTROLLERS if c not in have]
    if missing:
        _write(folder / "cgroup.subtree_control", " ".join(f"+{c}" for c in missing))


# -- finding out what this machine gives ------------------------------------------------------


@dataclass(frozen=True)
class CgroupMount:
    kind: Literal["cgroup", "cgroup2"]
    path: Path
    root: str  # the folder of the hierarchy that is mounted at path
    controllers: frozenset[str]


def cgroup_mounts(mountinfo: str) -> list[CgroupMount]:
    """Cgroup file systems in ``/proc/self/mountinfo`` text."""
    found = []
    for line in mountinfo.splitlines():
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) < 5 or len(tail) < 3 or tail[0] not in ("cgroup", "cgroup2"):
            continue
        options = set(tail[2].split(","))
        found.append(
            CgroupMount(
                tail[0],  # type: ignore[arg-type]
                Path(fields[4].replace("\\040", " ")),
                fields[3],
                frozenset(options & {"pids", "memory", "cpu"}),
            )
        )
    return found


def own_cgroups(text: str) -> dict[str, str]:
    """``/proc/self/cgroup`` text as {controller: path}; the v2 entry is under ``"unified"``."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if not controllers:
            out["unified"] = path
        for c in controllers.split(","):
            out.setdefault(c, path)
    return out


def _join(mount: CgroupMount, path: str, parent: str, instance: str) -> Path:
    rel = parent or path
    if mount.root != "/" and rel.startswith(mount.root):
        rel = rel[len(mount.root) :]
    return mount.path / rel.lstrip("/") / f"labserver-{instance}"


def candidates(mountinfo: str, cgroups: str, *, parent: str, instance: str) -> dict[str, dict[str, Path]]:
    """Where this server's groups would go, per mechanism: {"cgroup2": {"unified": folder},
    "cgroup1": {"pids": …, "memory": …, "cpu": …}} (absent when not mounted)."""
    mounts = cgroup_mounts(mountinfo)
    own = own_cgroups(cgroups)
    out: dict[str, dict[str, Path]] = {}
    v2 = next((m for m in mounts if m.kind == "cgroup2"), None)
    if v2 is not None and "unified" in own:
        out["cgroup2"] = {"unified": _join(v2, own["unified"], parent, instance)}
    v1 = {}
    for controller in V1_CONTROLLERS:
        mount = next((m for m in mounts if m.kind == "cgroup" and controller in m.controllers), None)
        if mount is not None and controller in own:
            v1[controller] = _join(mount, own[controller], parent, instance)
    if len(v1) == len(V1_CONTROLLERS):
        out["cgroup1"] = v1
    return out


def _works(limiter: Limiter) -> str:
    """'' when ``limiter`` can make a group, put a process in it and remove it; else why not."""
    group = f"probe-{os.getpid()}-{threading.get_ident()}"
    try:
        prefix = limiter.acquire(group, Limits(cpus=0.5, memory_mb=64, pids=8), own_uid=False)
    except OSError as exc:
        return f"{type(exc).__name__}: {exc}"
    try:
        res = subprocess.run([*prefix, "/bin/true"], capture_output=True, timeout=20)
        if res.returncode != 0:
            return f"entering the group failed: {res.stderr.decode(errors='replace').strip()}"
        return ""
    except (OSError, subprocess.SubprocessError) as exc:
        return f"{type(exc).__name__}: {exc}"
    finally:
        limiter.release(group)


def detect(
    wanted: str = "auto",
    *,
    parent: str = "",
    instance: str = "default",
    mountinfo: str | None = None,
    cgroups: str | None = None,
) -> Limiter:
    """The best mechanism that works here (``wanted`` = ``auto``) or the one asked for (raises
    ``RuntimeError`` if it does not work). ``detail`` says why the better ones were passed over."""
    if mountinfo is None:
        mountinfo = Path("/proc/self/mountinfo").read_text()
    if cgroups is None:
        cgroups = Path("/proc/self/cgroup").read_text()
    where = candidates(mountinfo, cgroups, parent=parent, instance=instance)
    order = ["cgroup2", "cgroup1", "rlimit"] if wanted == "auto" else [wanted]
    why: list[str] = []
    for name in order:
        limiter: Limiter
        if name == "cgroup2":
            if "cgroup2" not in where:
                why.append("cgroup2: not mounted")
                continue
            base = where["cgroup2"]["unified"]
            controllers = (
                set((base.parent / "cgroup.controllers").read_text().split())
                if (base.parent / "cgroup.controllers").exists()
                else set()
            )
            if not set(V1_CONTROLLERS) <= controllers:
                why.append(f"cgroup2: controllers {' '.join(sorted(controllers)) or 'none'} at {base.parent}")
                continue
            limiter = CgroupV2Limiter(where["cgroup2"])
        elif name == "cgroup1":
            if "cgroup1" not in where:
                why.append("cgroup1: pids, memory and cpu hierarchies not all mounted")
                continue
            limiter = CgroupV1Limiter(where["cgroup1"])
        elif name == "rlimit":
            if not shutil.which("prlimit"):
                why.append("rlimit: prlimit (util-linux) is not installed")
                continue
            limiter = RlimitLimiter()
        elif name == "none":
            return Limiter("limits switched off (LABSERVER_LOCAL__LIMITS=none)")
        else:
            raise ValueError(f"unknown limits mechanism {name!r}")
        problem = _works(limiter) if isinstance(limiter, _CgroupLimiter) else ""
        if problem:
            why.append(f"{name}: {problem}")
            continue
        limiter.detail = "; ".join(why)
        return limiter
    if wanted != "auto":
        raise RuntimeError(f"LABSERVER_LOCAL__LIMITS={wanted} does not work here: {'; '.join(why)}")
    return Limiter("no limits available: " + "; ".join(why))
