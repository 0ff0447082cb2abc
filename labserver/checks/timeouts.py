"""How long a check may run, and whose fault a timeout is: two pure decisions (no clock, no I/O,
like ``backends/docker/scheduler.place``), from a step's ``timeout_s``, its recorded cost (CPU
seconds of its check on the reference solution, ``checks/costs.yaml``, written by ``labserver
selftest --record-costs``: :mod:`labserver.content.costs`) and what the backend measured of the
check's processes (:class:`~labserver.backends.base.CheckUsage`).

:func:`wall_budget`: the wall time a check gets
------------------------------------------------
- A step without a recorded cost gets its ``timeout_s``, as before.
- A step with a recorded cost ``c`` gets ``max(BUDGET_FLOOR_S, BUDGET_FACTOR x c)`` seconds, never
  more than its ``timeout_s``: a correct solution needs ``c`` CPU-seconds, so ten times that is
  room for a machine ten times busier than the one that recorded it, while a check whose attendee
  code sleeps or loops ends in seconds, not in the minute of its ``timeout_s`` (four such checks
  held every check slot of a room for that minute: issue 30). ``labserver lint`` warns when
  ``timeout_s`` is under ``LINT_FACTOR x c``.

:func:`blame`: whose fault a timeout is
---------------------------------------
A check that timed out is the **platform's** fault (``not_gradable``: the machine was too busy, the
attendee is told so and the check is retried) only when both hold:

1. **It was starved**: its processes spent at least ``STARVED_SHARE`` of the wall time runnable but
   not running (``run_delay_s``: Linux ``/proc/<pid>/task/<tid>/schedstat``, summed over the
   check's processes and threads). Attendee code that sleeps, waits for input or blocks on a lock is
   not runnable, so it is never starved, however busy the machine is.
2. **Its CPU time was under its budget**: ``cpu_s`` (user + system of the check's processes) is
   below ``CPU_BUDGET_FACTOR x`` the recorded cost, or below the wall time when no cost is recorded
   (one core for the whole time). A check that got that much CPU had the chance to finish a
   correct solution several times over: an endless loop, however busy the machine.

Everything else is the **attendee's** timeout, as before: not starved (their code was stuck or
sleeping, reason ``not-starved``), or enough CPU (``used-its-cpu``), or nothing measured (a backend
that cannot see the check's processes: ``unmeasured``).

What it cannot tell: an endless loop on a starved machine in a step with no recorded cost is
``not_gradable`` (retried once, then "press Check in a minute"): record the step's cost and the CPU
rule catches it.
"""

from __future__ import annotations

from dataclasses import dataclass

from labserver.backends.base import CheckUsage
from labserver.content.costs import LINT_FACTOR

__all__ = ["LINT_FACTOR", "Blame", "blame", "wall_budget"]

BUDGET_FLOOR_S = 10.0
BUDGET_FACTOR = 10.0
STARVED_SHARE = 0.5
CPU_BUDGET_FACTOR = 5.0


def wall_budget(timeout_s: float, cost_s: float | None) -> float:
    """The wall time (seconds) a check of a step gets (module rules)."""
    if cost_s is None:
        return timeout_s
    return min(timeout_s, max(BUDGET_FLOOR_S, BUDGET_FACTOR * cost_s))


@dataclass(frozen=True)
class Blame:
    """Whose fault a timeout was: ``platform`` True means not gradable. ``reason`` is a short label
    for logs and metrics: ``starved``, ``not-starved``, ``used-its-cpu`` or ``unmeasured``."""

    platform: bool
    reason: str
    cpu_s: float | None = None
    run_delay_s: float | None = None


def blame(*, wall_s: float, usage: CheckUsage | None, cost_s: float | None) -> Blame:
    """Whose fault the timeout of a check that ran ``wall_s`` seconds was (module rules), from what
    its processes used (``usage``, None when the backend could not see them) and its step's
    recorded cost (``cost_s``, None when not recorded)."""
    if usage is None:
        return Blame(False, "unmeasured")
    cpu_budget = CPU_BUDGET_FACTOR * cost_s if cost_s is not None else wall_s
    if usage.cpu_s >= cpu_budget:
        return Blame(False, "used-its-cpu", usage.cpu_s, usage.run_delay_s)
    if usage.run_delay_s >= STARVED_SHARE * wall_s:
        return Blame(True, "starved", usage.cpu_s, usage.run_delay_s)
    return Blame(False, "not-starved", usage.cpu_s, usage.run_delay_s)
