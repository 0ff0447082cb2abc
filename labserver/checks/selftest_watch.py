"""``labserver selftest LAB --watch``: the self-test again, for the steps a change touched.

:func:`affected_steps` is the rule (pure, no I/O beyond the lab it is given), one line per kind of
file, paths relative to the lab folder:

==============================  ====================================================
changed                         steps run again
==============================  ====================================================
``steps/<file>.md`` / ``.zh.md``  the step whose text it is
``checks/<file>``               the step whose check it is; a helper (no step's
                                check): every step; ``checks/costs.yaml``: none
``mutants/<step>/...``          that step; ``mutants/equivalent.yaml``: none
``lab.yaml``, ``starter/``,     every step (the order, the solves, what every check
``solution/``, anything else    judges)
==============================  ====================================================

:func:`watch_selftest` runs the whole self-test once, then after each batch of changes loads the
lab again: a lab that does not lint is reported with its problems and waited on; otherwise the
affected steps are self-tested (:func:`labserver.checks.selftest.run_selftest` with ``only``)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from pathlib import Path

import watchfiles

from labserver.checks.selftest import SelftestReport, StepResult, selftest
from labserver.config import Settings
from labserver.content.costs import COSTS_FILE
from labserver.content.lab_watch import relevant, relint
from labserver.content.loader import Lab, Problem
from labserver.content.mutants import EQUIVALENT_FILE


def affected_steps(lab: Lab, changed: Iterable[Path]) -> list[str]:
    """The ids of the steps (in lab order) whose self-test a change of ``changed`` (absolute paths
    or relative to the lab folder) may change."""
    everything = [s.id for s in lab.steps]
    hit: set[str] = set()
    root = lab.path.resolve()
    for path in changed:
        rel = (path.resolve().relative_to(root) if path.is_absolute() else path).as_posix()
        parts = rel.split("/")
        if rel in (COSTS_FILE, f"mutants/{EQUIVALENT_FILE}"):
            continue
        if parts[0] == "steps":
            hit |= {
                s.id
                for s in lab.steps
                if rel in {s.markdown.relative_to(lab.path).as_posix(), s.spec.file}
                or (s.markdown_zh is not None and rel == s.markdown_zh.relative_to(lab.path).as_posix())
                or rel == s.spec.file.removesuffix(".md") + ".zh.md"
            }
        elif parts[0] == "checks":
            owners = {s.id for s in lab.steps if s.spec.check == rel}
            hit |= owners or set(everything)
        elif parts[0] == "mutants" and len(parts) > 1 and lab.step(parts[1]) is not None:
            hit.add(parts[1])
        else:
            return everything
    return [s for s in everything if s in hit]


def watch_selftest(
    path: Path,
    settings: Settings,
    *,
    on_result: Callable[[StepResult], None],
    on_report: Callable[[SelftestReport], None],
    on_problems: Callable[[list[Problem]], None],
    on_run: Callable[[list[str]], None],
    mutants: bool = True,
    stop: threading.Event | None = None,
) -> None:
    """The self-test of the lab in ``path``, then again after every batch of changes to it, until
    interrupted or ``stop`` is set."""
    loaded, problems = relint(path)
    if not isinstance(loaded, Lab):
        on_problems(problems)
    else:
        on_run([s.id for s in loaded.steps])
        on_report(selftest(loaded, settings=settings, on_result=on_result, mutants=mutants))
    for changes in watchfiles.watch(path, watch_filter=relevant, stop_event=stop, debounce=300):
        loaded, problems = relint(path)
        if not isinstance(loaded, Lab):
            on_problems(problems)
            continue
        steps = affected_steps(loaded, [Path(p) for _kind, p in changes])
        if not steps:
            continue
        on_run(steps)
        on_report(selftest(loaded, settings=settings, on_result=on_result, mutants=mutants, only=steps))
