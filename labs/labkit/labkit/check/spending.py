"""What this checker process has spent on children that ``getrusage`` cannot see, and what a
process forked from a checker or a zygote must forget.

A fork server (:mod:`.zygote`) forks attendee-code children for us, so their CPU time never
reaches our ``RUSAGE_CHILDREN``: whoever waits for them adds it here (:func:`add_spawned_cpu`), and
:func:`labkit.check.verdict.cpu_seconds` reads it. A process forked from a checker or a zygote
starts with its parent's state; :func:`reset_after_fork` clears it, and runs the hooks modules
registered for their own per-process state (:func:`on_fork`), such as the runner's zygote client.

This module imports nothing of labkit, so every module of the package may use it.
"""

from __future__ import annotations

from collections.abc import Callable

_spawned_cpu_s = 0.0
_hooks: list[Callable[[], None]] = []


def spawned_cpu_s() -> float:
    """CPU seconds (user + system) of the attendee-code children a fork server ran for us."""
    return _spawned_cpu_s


def add_spawned_cpu(seconds: float) -> None:
    global _spawned_cpu_s
    _spawned_cpu_s += max(0.0, float(seconds))


def on_fork(hook: Callable[[], None]) -> None:
    """Run ``hook`` in a process forked from this one, before it does anything else."""
    _hooks.append(hook)


def reset_after_fork() -> None:
    """Forget the state of the process this one was forked from (the zygote's, a checker's)."""
    global _spawned_cpu_s
    _spawned_cpu_s = 0.0
    for hook in _hooks:
        hook()
