"""``labserver rehearse EVENT``: the instructor's pre-flight, the night before the doors open.

``K`` environments of the event's shape (its labs, image and limits) are created at once on the
configured backend, as a room's first minutes create them; in each, every lab of the event gets its
solution overlaid and every step's ``solve`` command and check run in order
(:func:`labserver.checks.selftest.solution_step`, the self-test's own path), so a step that does not
pass with its solution, an image without what a lab needs, or a backend that cannot start ``K``
environments shows up tonight rather than at 9:00. Reported: environment start times (p50 / max)
and, per lab and step, check times (p50 / max) and how many of the ``K`` passed. Every environment
is destroyed at the end, also when something failed; their ids (``rehearse-ev<event>-<i>``) belong
to no attendee, so nothing of the event's data is touched.
"""

from __future__ import annotations

import asyncio
import dataclasses
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from labserver.backends.base import Backend, BackendError, EnvRef, EnvSpec
from labserver.checks.selftest import overlay, solution_step
from labserver.config import Settings
from labserver.content.loader import Lab
from labserver.models import CheckStatus


@dataclass
class Timing:
    seconds: list[float] = field(default_factory=list)
    passed: int = 0
    problems: list[str] = field(default_factory=list)

    def line(self, label: str, k: int) -> str:
        xs = self.seconds or [0.0]
        first = f"  {self.problems[0][:80]}" if self.problems else ""
        return (
            f"{label:44} p50 {statistics.median(xs):6.2f} s  max {max(xs):6.2f} s  "
            f"passed {self.passed}/{k}{first}"
        )


@dataclass
class PreflightReport:
    environments: int
    start: Timing = field(default_factory=Timing)
    steps: dict[tuple[str, str], Timing] = field(default_factory=dict)  # (lab, step) -> timing

    @property
    def ok(self) -> bool:
        return self.start.passed == self.environments and all(
            t.passed == self.environments for t in self.steps.values()
        )

    def lines(self) -> list[str]:
        out = [self.start.line("environment start", self.environments)]
        lab = ""
        for (lab_id, step_id), timing in self.steps.items():
            if lab_id != lab:
                out.append(f"lab {lab_id}")
                lab = lab_id
            out.append("  " + timing.line(f"check {step_id}", self.environments))
        return out


def preflight_specs(event_id: int, k: int, *, template: EnvSpec) -> list[EnvSpec]:
    """``k`` environment specs like ``template`` (an attendee's of the event: labs, image, limits),
    with ids of their own that belong to no attendee."""
    return [
        dataclasses.replace(template, env_id=f"rehearse-ev{event_id}-{i}", attendee_id=0) for i in range(k)
    ]


async def rehearse(
    backend: Backend,
    labs: Sequence[Lab],
    specs: Sequence[EnvSpec],
    *,
    settings: Settings,
    on_line: Callable[[str], None] | None = None,
) -> PreflightReport:
    """Create every spec's environment at once, run each lab's solution checks in each, destroy
    them all; returns the timings. Never raises for a backend error: it is reported."""
    report = PreflightReport(len(specs))
    for lab in labs:
        for step in lab.steps:
            report.steps[(lab.id, step.id)] = Timing()
    say = on_line or (lambda _line: None)

    async def one(spec: EnvSpec) -> None:
        ref: EnvRef | None = None
        t0 = time.monotonic()
        try:
            try:
                ref = await backend.create(spec)
            except BackendError as exc:
                report.start.problems.append(f"{spec.env_id}: {exc.message} ({exc.reason})")
                say(f"{spec.env_id}: could not start: {exc.message} ({exc.reason})")
                return
            report.start.seconds.append(time.monotonic() - t0)
            report.start.passed += 1
            for lab in labs:
                await overlay(backend, ref, lab.solution, lab.id)
                for step in lab.steps:
                    timing = report.steps[(lab.id, step.id)]
                    try:
                        verdict, _log, seconds = await solution_step(backend, ref, lab, step, settings)
                    except BackendError as exc:
                        timing.problems.append(f"{exc.message} ({exc.reason})")
                        continue
                    timing.seconds.append(seconds)
                    if verdict.status == CheckStatus.passed:
                        timing.passed += 1
                    else:
                        timing.problems.append(f"{verdict.status}: {verdict.message.splitlines()[0][:120]}")
            say(f"{spec.env_id}: done in {time.monotonic() - t0:.1f} s")
        finally:
            if ref is not None:
                try:
                    await backend.destroy(ref)
                except BackendError as exc:
                    say(f"{spec.env_id}: could not remove it: {exc.message}; `labserver env reap-orphans`")

    await asyncio.gather(*(one(spec) for spec in specs))
    return report
