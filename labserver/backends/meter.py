"""What a running check's processes use, read from Linux ``/proc``: the :class:`CheckMeter` of
backends that run checkers as processes of this machine (``local``).

A check is the checker's process and its descendants (found by parent pid, so attendee code that
``labkit.check`` starts in a session of its own is included). Per process, ``/proc/<pid>/stat``
gives its CPU (``utime + stime``) and that of the children it has waited for (``cutime +
cstime``): summing both over the live tree counts a finished child once, in its parent.

The wait (``CheckUsage.run_delay_s``) is that of the check's *work*, not of every process: per
thread, ``/proc/<pid>/task/<tid>/schedstat`` gives the run delay (nanoseconds runnable but not
running). Summed over all processes it would mostly count what a busy machine does to processes
that wait for others: a checker polling its child wakes twenty times a second, and on a loaded
machine each wake-up waits (a room of four sleeping checks measured 14 s of summed run delay in
10 s, while their attendee code slept). So the meter counts only the **leaves** of the tree, the
processes no other one of the check waits for (the attendee code running, or the checker itself
while it computes): per interval between two samples, the largest increase of run delay of any
leaf (its threads summed), at most the interval. A check starved of CPU has a leaf that is always
runnable and rarely running; a sleeping one has no leaf that is runnable at all: ``asleep`` says
that every thread of every leaf slept at the last sample (the one a backend takes just before it
kills a check out of time).

Both files are readable for processes of any user (mode 0444), also those made non-dumpable.

:func:`sample_all` reads the process table once for many meters (the fair queue samples every
running check each second); the parsers are pure functions, tested on kernel text.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from labserver.backends.base import CheckUsage

PROC = Path("/proc")
CLK_TCK = float(os.sysconf("SC_CLK_TCK"))


@dataclass(frozen=True)
class ProcStat:
    pid: int
    ppid: int
    start: int  # clock ticks after boot: with the pid, names one process
    cpu_s: float  # utime + stime + cutime + cstime


def parse_stat(text: str) -> ProcStat:
    """``/proc/<pid>/stat`` (proc(5)): the command may hold spaces and parentheses, so fields are
    counted after its last ``)``."""
    pid = int(text[: text.index(" ")])
    rest = text[text.rindex(")") + 2 :].split()
    # rest[0] is field 3 (state): field n is rest[n - 3]
    ticks = sum(int(rest[i]) for i in (11, 12, 13, 14))  # utime stime cutime cstime (14-17)
    return ProcStat(pid, int(rest[1]), int(rest[19]), ticks / CLK_TCK)


#: thread states (proc(5)) of code that neither runs nor waits for a CPU: sleeping (a timer, input,
#: a lock, a child), stopped, traced, a zombie; ``R`` (runnable) and ``D`` (disk) are not
ASLEEP = frozenset("STtZXI")


def parse_state(text: str) -> str:
    """The state letter of a ``/proc/<pid>[/task/<tid>]/stat`` text."""
    return text[text.rindex(")") + 2 :].split()[0]


def parse_schedstat(text: str) -> float:
    """Run delay in seconds from ``schedstat`` (``on-cpu-ns run-delay-ns timeslices``)."""
    return int(text.split()[1]) / 1e9


def process_table(proc: Path = PROC) -> dict[int, ProcStat]:
    """Every process now alive, by pid (processes that end while it is read are left out)."""
    table: dict[int, ProcStat] = {}
    for entry in os.scandir(proc):
        if not entry.name.isdigit():
            continue
        try:
            stat = parse_stat((proc / entry.name / "stat").read_text())
        except (OSError, ValueError, IndexError):
            continue
        table[stat.pid] = stat
    return table


def tree(table: Mapping[int, ProcStat], root: int) -> list[ProcStat]:
    """``root`` and its descendants in ``table`` (empty when ``root`` is gone)."""
    if root not in table:
        return []
    children: dict[int, list[int]] = {}
    for stat in table.values():
        children.setdefault(stat.ppid, []).append(stat.pid)
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(table[pid])
        todo.extend(children.get(pid, ()))
    return out


class ProcessMeter:
    """A :class:`~labserver.backends.base.CheckMeter` over ``/proc``: the check is the process
    ``attach`` names and its descendants, or its descendants only (a fork server that forks the
    check's processes); what they had used when ``attach`` was called is not the check's (module
    docstring: what ``run_delay_s`` counts)."""

    def __init__(self, proc: Path = PROC, clock: Callable[[], float] = time.monotonic) -> None:
        self._proc = proc
        self._clock = clock
        self._lock = threading.Lock()
        self._root: tuple[int, int] | None = None  # (pid, start): a reused pid is not ours
        self._descendants_only = False
        self._cpu_base = 0.0
        self._delays: dict[tuple[int, int, str], float] = {}  # last run delay of each thread seen
        self._sampled_at = 0.0
        self._cpu_s = 0.0
        self._wait_s = 0.0
        self._last: CheckUsage | None = None

    def attach(self, pid: int, *, descendants_only: bool = False) -> None:
        try:
            start = parse_stat((self._proc / str(pid) / "stat").read_text()).start
        except (OSError, ValueError, IndexError):
            return  # already gone: nothing to measure
        with self._lock:
            self._root = (pid, start)
            self._descendants_only = descendants_only
            self._sampled_at = self._clock()
            if not descendants_only:
                return  # a process just started: it has used nothing yet (and no /proc scan)
            # what the runner's processes had used before (its own start and earlier checks)
            members = self._members(process_table(self._proc))
            self._cpu_base = sum(m.cpu_s for m in members)
            for m in members:
                self._delays.update(self._thread_delays(m))

    def _members(self, table: Mapping[int, ProcStat]) -> list[ProcStat]:
        assert self._root is not None
        pid, start = self._root
        root = table.get(pid)
        if root is None or root.start != start:
            return []
        members = tree(table, pid)
        return members[1:] if self._descendants_only else members

    @property
    def attached(self) -> bool:
        return self._root is not None

    @property
    def last(self) -> CheckUsage | None:
        """The last sample (None when none was taken)."""
        return self._last

    def _thread_delays(self, m: ProcStat) -> dict[tuple[int, int, str], float]:
        out: dict[tuple[int, int, str], float] = {}
        try:
            tasks = list(os.scandir(self._proc / str(m.pid) / "task"))
        except OSError:
            return out
        for task in tasks:
            try:
                out[(m.pid, m.start, task.name)] = parse_schedstat(
                    (Path(task.path) / "schedstat").read_text()
                )
            except (OSError, ValueError, IndexError):
                continue
        return out

    def sample(self, table: Mapping[int, ProcStat] | None = None) -> CheckUsage | None:
        with self._lock:
            if self._root is None:
                return None
            if table is None:
                table = process_table(self._proc)
            members = self._members(table)
            if not members:
                return self._last
            now = self._clock()
            interval, self._sampled_at = max(0.0, now - self._sampled_at), now
            self._cpu_s = max(self._cpu_s, sum(m.cpu_s for m in members) - self._cpu_base)
            parents = {m.ppid for m in members}
            leaf_waits, asleep = [0.0], True
            for m in members:
                delays = self._thread_delays(m)
                if m.pid not in parents:  # a leaf: what the rest of the check waits for
                    leaf_waits.append(sum(d - self._delays.get(k, 0.0) for k, d in delays.items()))
                    asleep = asleep and self._asleep(m)
                self._delays.update(delays)
            self._wait_s += min(max(leaf_waits), interval)
            self._last = CheckUsage(round(self._cpu_s, 3), round(self._wait_s, 3), asleep)
            return self._last

    def _asleep(self, m: ProcStat) -> bool:
        """Every thread of ``m`` sleeps (``S``), is stopped or is a zombie: none runs or wants to."""
        try:
            tasks = list(os.scandir(self._proc / str(m.pid) / "task"))
        except OSError:
            return True  # gone: it runs no more
        for task in tasks:
            try:
                state = parse_state((Path(task.path) / "stat").read_text())
            except (OSError, ValueError, IndexError):
                continue
            if state not in ASLEEP:
                return False
        return True


def sample_all(meters: Iterable[ProcessMeter], proc: Path = PROC) -> None:
    """Sample every attached meter of ``meters`` from one read of the process table."""
    attached = [m for m in meters if m.attached]
    if attached:
        table = process_table(proc)
        for meter in attached:
            meter.sample(table)
