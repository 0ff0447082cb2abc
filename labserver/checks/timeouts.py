"""How long a check may run, and whose fault a timeout is: two pure decisions (no clock, no I/O,
like ``backends/docker/scheduler.place``), from a step's ``timeout_s``, its recorded cost (CPU
seconds of its check on the reference solution, ``checks/costs.yaml``, written by ``labserver
selftest --record-costs``: :mod:`labserver.content.costs`) and what the backend measured of the
check's processes (:class:`~labserver.backends.base.CheckUsage`).

:func:`wall_budget`: the wall time a check gets
------------------------------------------------
- A step without a recorded cost gets its ``timeout_s``, as before.
- A step with a recorded cost ``c`` gets ``max(BUDGET_FLOOR_S, BUDGET_FACTOR x c)`` seconds, plus
  what its backend needs before the checker runs (``START_ALLOWANCE_S``: 0 on the local backend,
  whose check runner is ready before the clock starts; 60 s for a grader container), never
  more than its ``timeout_s``: a correct solution needs ``c`` CPU-seconds, so ten times that is
  room for a machine ten times busier than the one that recorded it, while a check whose attendee
  code sleeps or loops ends in seconds, not in the minute of its ``timeout_s`` (four such checks
  held every check slot of a room for that minute: issue 30). ``labserver lint`` warns when
  ``timeout_s`` is under ``LINT_FACTOR x c``.

:func:`blame`: whose fault a timeout is
---------------------------------------
What the backend measured of a check's processes: ``cpu_s`` (user + system) and ``run_delay_s``,
the time its *work* was runnable but not running (Linux ``schedstat`` of the leaves of its process
tree, the processes the others wait for: :mod:`labserver.backends.meter`). Attendee code that
sleeps, waits for input or blocks on a lock is not runnable, so it adds nothing to the wait,
however busy the machine (and the checker's own wake-ups while it waits for that code are not
counted). In order:

1. **Nothing measured** (a backend that cannot see the check's processes): the attendee's timeout,
   as before (``unmeasured``).
2. **Asleep at the end**: when the time ran out, none of the check's work ran or waited for a CPU
   (``asleep``, read just before the kill: the attendee's code slept, waited for input or for a
   lock): the attendee's (``asleep``), however long a busy machine took to start it.
3. **Enough CPU**: ``cpu_s`` at or above ``CPU_BUDGET_FACTOR x`` the recorded cost, or above the
   wall time when no cost is recorded (one core for the whole time): the check could have finished
   a correct solution several times over: an endless loop, however busy the machine. The
   attendee's (``used-its-cpu``).
4. **With a recorded cost** ``c``: the machine's (``starved``) when the work waited at least
   ``MIN_WAIT_SHARE`` of the wall time *and* the time it was not waiting, ``wall - run_delay``,
   is under ``NEEDS_FACTOR x c``: it never had the time a correct solution needs. A check that
   waited at the start (a busy machine starts processes slowly) but then had its time, and
   slept through it, is the attendee's (``had-its-time``).
5. **Without a recorded cost**: the machine's (``starved``) when the work waited at least
   ``STARVED_SHARE`` of the wall time; else the attendee's (``not-starved``).

What it cannot tell: an endless loop on a starved machine in a step with no recorded cost is
``not_gradable`` (retried once, then "press Check in a minute"): record the step's cost, and rule 3
or 4 decides.
"""

from __future__ import annotations

from dataclasses import dataclass

from labserver.backends.base import CheckUsage
from labserver.content.costs import LINT_FACTOR

__all__ = ["LINT_FACTOR", "Blame", "blame", "wall_budget"]

BUDGET_FLOOR_S = 10.0
BUDGET_FACTOR = 10.0
#: Seconds a backend needs before the checker itself runs, added to the budget: a Docker or
#: Kubernetes check starts a grader and its fork server (one torch import) inside the time it gets;
#: the local backend's check runner is started (or found warm) before the clock starts.
START_ALLOWANCE_S = {"local": 0.0}
DEFAULT_START_ALLOWANCE_S = 60.0
STARVED_SHARE = 0.5
MIN_WAIT_SHARE = 0.25
NEEDS_FACTOR = 2.0
CPU_BUDGET_FACTOR = 5.0


def wall_budget(timeout_s: float, cost_s: float | None, backend: str = "local") -> float:
    """The wall time (seconds) a check of a step gets on ``backend`` (module rules)."""
    if cost_s is None:
        return timeout_s
    start = START_ALLOWANCE_S.get(backend, DEFAULT_START_ALLOWANCE_S)
    return min(timeout_s, start + max(BUDGET_FLOOR_S, BUDGET_FACTOR * cost_s))


@dataclass(frozen=True)
class Blame:
    """Whose fault a timeout was: ``platform`` True means not gradable. ``reason`` is a short label
    for logs and metrics: ``starved``, ``not-starved``, ``had-its-time``, ``asleep``,
    ``used-its-cpu`` or ``unmeasured``."""

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
    if usage.asleep:
        return Blame(False, "asleep", usage.cpu_s, usage.run_delay_s)
    cpu_budget = CPU_BUDGET_FACTOR * cost_s if cost_s is not None else wall_s
    if usage.cpu_s >= cpu_budget:
        return Blame(False, "used-its-cpu", usage.cpu_s, usage.run_delay_s)
    figures = (usage.cpu_s, usage.run_delay_s)
    if cost_s is not None:
        waited = usage.run_delay_s >= MIN_WAIT_SHARE * wall_s
        if waited and wall_s - usage.run_delay_s < NEEDS_FACTOR * cost_s:
            return Blame(True, "starved", *figures)
        return Blame(False, "had-its-time" if waited else "not-starved", *figures)
    if usage.run_delay_s >= STARVED_SHARE * wall_s:
        return Blame(True, "starved", *figures)
    return Blame(False, "not-starved", *figures)
