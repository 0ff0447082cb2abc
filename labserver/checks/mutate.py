"""``labserver mutate LAB``: machine-made mutants of the attendee's code, each judged by the check of
the step that teaches it (issue 29). Mutants written by a checker's author share the author's blind
spots; these do not.

On a throwaway environment (as :mod:`labserver.checks.selftest`), the solution is laid over the
starter and every step is solved and checked once (each must pass: a mutant of a solution that
fails proves nothing). The solved lab folder is snapshot. Then, for each mutant of
:func:`labserver.checks.mutation.mutations` over the attendee's part of the solution
(:func:`~labserver.checks.mutation.attendee_regions`): the folder is restored, the one mutated
file is written, and the checks of the steps that own the file run in lab order, each after its
``solve`` command, until one does not pass.

Which steps own a file: those whose hand-written mutants change it (overlay or patch); a file no
mutant touches is owned by every step. Outcomes:

- ``killed``: a check failed (the attendee would be told);
- ``timeout``: a check ran out of time (killed, but the attendee waits for it);
- ``error``: a check errored ("fault in the checker"): not a kill, the checker must say what is wrong;
- ``survived``: every owning step passed: a wrong program the checks accept, or an equivalent
  mutant (a right program), which ``mutants/equivalent.yaml`` lists with its reason;
- ``equivalent``: listed there, not run.

The score is killed (timeouts included) over all mutants but the equivalent ones. ``--limit N``
runs an even sample of N per step (by key, so the same N on every run of the same code)."""

from __future__ import annotations

import asyncio
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from labserver.backends import make_backend
from labserver.backends.base import Backend, EnvRef
from labserver.checks.mutation import Mutation, attendee_regions, mutations
from labserver.checks.selftest import (
    RESTORE,
    SNAPSHOT,
    check_step,
    overlay,
    run_own,
    solution_step,
    solve_step,
    throwaway_spec,
)
from labserver.config import Settings
from labserver.content.loader import Lab
from labserver.content.mutants import Equivalent, load_equivalents
from labserver.models import CheckStatus

OUTCOMES = ("killed", "timeout", "error", "survived", "equivalent")
_PATCHED = re.compile(r"^\+\+\+ [ab]/(\S+)", re.M)


@dataclass
class MutantResult:
    mutation: Mutation
    steps: tuple[str, ...]  # the steps whose checks judge it
    outcome: str  # one of OUTCOMES
    step: str = ""  # the step whose check decided (killed, timeout, error), or the last one run
    message: str = ""  # that check's message (first line), or the equivalent's reason
    seconds: float = 0.0
    cpu_s: float = 0.0


@dataclass
class MutateReport:
    lab: str
    results: list[MutantResult] = field(default_factory=list)
    baseline: list[str] = field(default_factory=list)  # why the solution did not pass, when it did not
    originals: dict[str, str] = field(default_factory=dict)  # path -> the solution's text
    stale: list[str] = field(default_factory=list)  # equivalent.yaml keys no mutant has any more

    @property
    def ok(self) -> bool:
        return not self.baseline

    def counts(self, results: Sequence[MutantResult] | None = None) -> dict[str, int]:
        rs = self.results if results is None else results
        return {o: sum(r.outcome == o for r in rs) for o in OUTCOMES}

    @staticmethod
    def score(counts: dict[str, int]) -> float | None:
        """Killed (timeouts included) over the non-equivalent mutants; None when there are none."""
        judged = sum(counts.values()) - counts["equivalent"]
        return None if judged == 0 else (counts["killed"] + counts["timeout"]) / judged

    def by_step(self) -> dict[str, list[MutantResult]]:
        out: dict[str, list[MutantResult]] = {}
        for r in self.results:
            out.setdefault(r.steps[0] if len(r.steps) == 1 else "+".join(r.steps), []).append(r)
        return out

    def table(self) -> list[str]:
        head = f"{'steps':32} {'mutants':>7} {'killed':>6} {'timeout':>7} {'error':>5} {'survived':>8} {'equiv':>5} {'score':>6}"
        out = [head]
        groups = self.by_step()
        for name, rs in [*groups.items(), ("(lab)", self.results)]:
            c = self.counts(rs)
            s = self.score(c)
            out.append(
                f"{name[:32]:32} {len(rs):>7} {c['killed']:>6} {c['timeout']:>7} {c['error']:>5} "
                f"{c['survived']:>8} {c['equivalent']:>5} {'-' if s is None else f'{s:.0%}':>6}"
            )
        return out

    def survivors(self) -> list[MutantResult]:
        return [r for r in self.results if r.outcome in ("survived", "error")]


def owned_files(lab: Lab) -> dict[str, set[str]]:
    """Step id -> the lab-relative files its hand-written mutants change (overlay or patch)."""
    out: dict[str, set[str]] = {s.id: set() for s in lab.steps}
    for m in lab.mutants:
        out[m.step].update(p.relative_to(m.path).as_posix() for p in m.overlay_files())
        if m.patch is not None:
            out[m.step].update(_PATCHED.findall(m.patch.read_text(errors="replace")))
    return out


def plan(
    lab: Lab,
    *,
    steps: Sequence[str] | None = None,
    limit: int | None = None,
    operators: Sequence[str] | None = None,
) -> list[tuple[Mutation, tuple[str, ...]]]:
    """Every mutant to run with the steps that judge it, in file and line order."""
    owners = owned_files(lab)
    regions = attendee_regions(lab.solution, lab.starter)
    by_file: dict[str, list] = {}
    for r in regions:
        by_file.setdefault(r.path, []).append(r)
    chosen: list[tuple[Mutation, tuple[str, ...]]] = []
    for path, rs in by_file.items():
        judges = tuple(s.id for s in lab.steps if path in owners[s.id]) or tuple(s.id for s in lab.steps)
        if steps:
            judges = tuple(s for s in judges if s in steps)
            if not judges:
                continue
        for m in mutations((lab.solution / path).read_text(), path, rs):
            if operators and m.operator not in operators:
                continue
            chosen.append((m, judges))
    if limit is not None:
        groups: dict[tuple[str, ...], list[tuple[Mutation, tuple[str, ...]]]] = {}
        for item in chosen:
            groups.setdefault(item[1], []).append(item)
        chosen = [item for g in groups.values() for item in _even_sample(g, limit)]
    return chosen


def _even_sample(items: list, n: int) -> list:
    if len(items) <= n:
        return items
    ranked = sorted(items, key=lambda item: item[0].key)  # stable across runs, spread over the file
    return sorted(ranked[:n], key=lambda item: (item[0].path, item[0].line))


async def _judge(
    backend: Backend, ref: EnvRef, lab: Lab, m: Mutation, judges: tuple[str, ...], settings: Settings
) -> MutantResult:
    await run_own(backend, ref, lab, RESTORE)
    await backend.write_file(ref, f"{lab.id}/{m.path}", m.text.encode())
    t0 = time.monotonic()
    cpu = 0.0
    result = MutantResult(m, judges, "survived")
    for step_id in judges:
        step = lab.step(step_id)
        assert step is not None
        failed_solve = await solve_step(backend, ref, lab, step)
        if failed_solve is not None:
            result.outcome, result.step, result.message = "killed", step_id, failed_solve.message
            break
        verdict, _log, _s = await check_step(backend, ref, lab, step, settings)
        cpu += verdict.cpu_s or 0.0
        result.step = step_id
        first = verdict.message.strip().splitlines()[0][:160] if verdict.message.strip() else ""
        if verdict.status == CheckStatus.passed:
            continue
        result.message = first
        result.outcome = {
            CheckStatus.failed: "killed",
            CheckStatus.timeout: "timeout",
            CheckStatus.not_gradable: "timeout",
        }.get(verdict.status, "error")
        break
    result.seconds, result.cpu_s = time.monotonic() - t0, cpu
    return result


async def run_mutate(
    lab: Lab,
    *,
    settings: Settings | None = None,
    steps: Sequence[str] | None = None,
    limit: int | None = None,
    operators: Sequence[str] | None = None,
    on_result: Callable[[MutantResult], None] | None = None,
    backend: Backend | None = None,
) -> MutateReport:
    report = MutateReport(lab.id)
    equivalents, problems = load_equivalents(lab.path)
    if problems:
        report.baseline = [f"{p.file} {p.field}: {p.message}" for p in problems]
        return report
    todo = plan(lab, steps=steps, limit=limit, operators=operators)
    report.originals = {m.path: (lab.solution / m.path).read_text() for m, _ in todo}
    keys = {m.key for m, _ in plan(lab)}
    report.stale = sorted(k for k in equivalents if k not in keys)
    tmp = Path(tempfile.mkdtemp(prefix=f"mutate-{lab.id}-"))
    ref: EnvRef | None = None
    base = settings or Settings()
    if backend is None:
        backend = make_backend(
            base.model_copy(update={"data_dir": tmp, "labs_dir": lab.path.parent}), "local"
        )
    try:
        ref = await backend.create(throwaway_spec(lab, base, env_id=f"mutate-{lab.id}"))
        await overlay(backend, ref, lab.solution, lab.id)
        needed = {s for _, judges in todo for s in judges}
        for step in lab.steps:
            verdict, _log, _s = await solution_step(backend, ref, lab, step, base)
            if step.id in needed and verdict.status != CheckStatus.passed:
                report.baseline.append(
                    f"{step.id}: the solution got {verdict.status}: {verdict.message[:300]}"
                )
        if report.baseline:
            return report
        await run_own(backend, ref, lab, f"tar -cf {SNAPSHOT} .")
        for m, judges in todo:
            known: Equivalent | None = equivalents.get(m.key)
            if known is not None:
                result = MutantResult(m, judges, "equivalent", message=known.reason)
            else:
                result = await _judge(backend, ref, lab, m, judges, base)
            report.results.append(result)
            if on_result:
                on_result(result)
        await run_own(backend, ref, lab, f"{RESTORE} && rm -f {SNAPSHOT}")
    finally:
        if ref is not None:
            await backend.destroy(ref)
        shutil.rmtree(tmp, ignore_errors=True)
    return report


def mutate(lab: Lab, **kw) -> MutateReport:  # type: ignore[no-untyped-def]
    return asyncio.run(run_mutate(lab, **kw))


def survivor_text(report: MutateReport) -> list[str]:
    """Each survivor (and checker error) with its key and diff, for the terminal."""
    out: list[str] = []
    for r in report.survivors():
        out.append(f"{r.outcome.upper()} {r.mutation.key} {r.mutation.summary}")
        out.append(f"  judged by: {', '.join(r.steps)}" + (f"; {r.step}: {r.message}" if r.message else ""))
        diff = r.mutation.diff(report.originals.get(r.mutation.path, ""))
        out.extend("  " + line for line in diff.splitlines())
    return out
