"""``labserver selftest LAB``: on a throwaway environment, every step's check against the starter
must be *failed* (a pass means the checker accepts unfinished work; an error means the checker is
broken), then with the solution overlaid, step by step in order (running each step's ``solve``
command first), every check must *pass*. Then every mutant (:mod:`labserver.content.mutants`) is
laid over the solved lab, its step's ``solve`` command is run again, and its step's check must
*fail* with a message (containing the mutant's ``expect`` phrase, in Chinese for the mutants checked
in Chinese); the lab folder is restored from a snapshot between mutants.

Everything goes through the :class:`~labserver.backends.base.Backend` protocol (create, file
writes, exec, run_check, destroy), so the same self-test runs on every backend; the default is a
throwaway ``local`` backend from :func:`labserver.backends.make_backend`. Requests come from the
one builder, :func:`labserver.checks.request.check_request`, with each step's whole ``timeout_s``
(not the wall budget a room's checks get from the recorded costs).

Costs: each result keeps the ``cpu_s`` its checker reported; :meth:`SelftestReport.costs` is, per
step, the largest of its solution-phase checks, which ``labserver selftest LAB --record-costs``
writes to ``checks/costs.yaml`` (:mod:`labserver.content.costs`)."""

from __future__ import annotations

import asyncio
import shlex
import shutil
import tempfile
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from labserver.backends import make_backend
from labserver.backends.base import Backend, EnvRef, EnvSpec, LabSeed
from labserver.checks.request import check_request
from labserver.checks.verdict import Verdict, interpret
from labserver.config import Settings
from labserver.content.loader import Lab, Step
from labserver.content.mutants import Mutant
from labserver.models import CheckStatus


@dataclass
class StepResult:
    step: str
    phase: str  # "starter" | "solution" | "mutant"
    expected: str
    verdict: Verdict
    log: str = ""
    mutant: str = ""  # the mutant's name (phase "mutant")
    lang: str = "en"
    problem: str = ""  # why a failed verdict is still not good enough (no message, no phrase)
    seconds: float = 0.0  # wall time of the check run

    @property
    def cpu_s(self) -> float | None:
        """CPU seconds the checker reported for this run (None: it reported none)."""
        return self.verdict.cpu_s

    @property
    def ok(self) -> bool:
        return self.verdict.status == self.expected and not self.problem

    @property
    def label(self) -> str:
        return f"{self.step}/{self.mutant}" if self.mutant else self.step


@dataclass
class SelftestReport:
    lab: str
    results: list[StepResult] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return bool(self.results) and all(r.ok for r in self.results)

    def failures(self) -> list[StepResult]:
        return [r for r in self.results if not r.ok]

    def lines(self) -> list[str]:
        out = []
        for r in self.results:
            mark = "ok  " if r.ok else "FAIL"
            first = r.verdict.message.splitlines()[0][:100] if r.verdict.message else ""
            out.append(
                f"{mark} {r.phase:8} {r.label:40} expected {r.expected:6} got {r.verdict.status:7} "
                f"{r.problem or first}"
            )
        return out

    def costs(self) -> dict[str, float]:
        """Per step, the largest ``cpu_s`` of its passing solution-phase checks (steps whose
        checker reported none are left out)."""
        out: dict[str, float] = {}
        for r in self.results:
            if r.phase == "solution" and r.ok and r.cpu_s is not None:
                out[r.step] = max(out.get(r.step, 0.0), r.cpu_s)
        return out

    def mutant_table(self) -> list[str]:
        """Per step: mutants caught / mutants, and the slowest check of the step."""
        steps: dict[str, list[StepResult]] = {}
        for r in self.results:
            steps.setdefault(r.step, []).append(r)
        out = [f"{'step':28} {'mutants caught':>15} {'slowest check':>14}"]
        for step, results in steps.items():
            mutants = [r for r in results if r.phase == "mutant"]
            caught = sum(r.ok for r in mutants)
            slowest = max(r.seconds for r in results)
            out.append(f"{step:28} {f'{caught}/{len(mutants)}':>15} {slowest:>13.1f}s")
        return out


async def overlay(
    backend: Backend, ref: EnvRef, src: Path, lab_id: str, files: list[Path] | None = None
) -> None:
    """Copy ``files`` (default: every file of ``src``, a solution folder) over the lab folder, at
    their paths relative to ``src``, through the backend's file API, so the same self-test runs on
    every backend."""
    if files is None:
        files = [p for p in sorted(src.rglob("*")) if p.is_file() and "__pycache__" not in p.parts]
    for path in files:
        await backend.write_file(ref, f"{lab_id}/{path.relative_to(src).as_posix()}", path.read_bytes())


async def check_step(
    backend: Backend, ref: EnvRef, lab: Lab, step: Step, settings: Settings, lang: str = "en"
) -> tuple[Verdict, str, float]:
    """One press of ``step``'s check with its whole ``timeout_s``: (verdict, log, wall seconds)."""
    t0 = time.monotonic()
    request = check_request(
        lab, step, ref, lang=lang, log_limit=settings.checks.log_limit_bytes, timeout_s=step.spec.timeout_s
    )
    raw = await backend.run_check(ref, request)
    return interpret(raw, step.spec.timeout_s), raw.log.decode("utf-8", "replace"), time.monotonic() - t0


async def solve_step(backend: Backend, ref: EnvRef, lab: Lab, step: Step) -> Verdict | None:
    """Run the step's ``solve`` command (none: nothing to do); a verdict (error) when it fails, else
    None. Called after the solution is overlaid, before the step's check (bench/checks.py too)."""
    if not step.spec.solve:
        return None
    failure = await _bash(backend, ref, lab, step.spec.solve, timeout=max(step.spec.timeout_s, 300))
    return None if failure is None else Verdict(CheckStatus.error, f"solve command {failure}")


async def solution_step(
    backend: Backend, ref: EnvRef, lab: Lab, step: Step, settings: Settings
) -> tuple[Verdict, str, float]:
    """With the solution overlaid: the step's ``solve`` command, then its check; (verdict, log, the
    check's wall time). A failing ``solve`` is the verdict (error), with no check run."""
    failed_solve = await solve_step(backend, ref, lab, step)
    if failed_solve is not None:
        return failed_solve, "", 0.0
    return await check_step(backend, ref, lab, step, settings)


async def _bash(backend: Backend, ref: EnvRef, lab: Lab, script: str, timeout: float = 300) -> str | None:
    """Run ``script`` in the lab folder; None when it succeeded, else what it said (its tail)."""
    res = await backend.exec(ref, ["bash", "-c", script], cwd=lab.id, timeout=timeout)
    if res.exit_code == 0:
        return None
    out = (res.stdout + res.stderr).decode("utf-8", "replace")[-2000:]
    return f"{script!r} exited {res.exit_code}: {out}"


async def run_own(backend: Backend, ref: EnvRef, lab: Lab, script: str) -> None:
    """Run one of the self-test's own commands; raises when it fails (a fault of the self-test)."""
    failure = await _bash(backend, ref, lab, script)
    if failure is not None:
        raise RuntimeError(f"selftest: {failure}")


SNAPSHOT = "../.selftest-solved.tar"
RESTORE = f"find . -mindepth 1 -delete && tar -xf {SNAPSHOT}"  # the lab folder as it was solved


def _has_cjk(text: str) -> bool:
    return any("\u4e00" <= ch <= "\u9fff" for ch in text)


def judge_mutant(mutant: Mutant, verdict: Verdict, lang: str) -> str:
    """Why a mutant's failed verdict is still not good enough ("" when it is)."""
    message = verdict.message.strip()
    if verdict.status != CheckStatus.failed:
        return ""
    if not message:
        return "failed with no message: the attendee is not told what is wrong"
    if lang == "zh" and not _has_cjk(message):
        return "failed with no Chinese message under LAB_LANG=zh"
    expect = mutant.spec.expect
    phrase = None if expect is None else expect.en if lang == "en" else expect.zh
    if phrase and phrase.lower() not in message.lower():
        return f"message does not mention {phrase!r}"
    return ""


async def _apply_mutant(backend: Backend, ref: EnvRef, lab: Lab, mutant: Mutant) -> None:
    await overlay(backend, ref, mutant.path, lab.id, mutant.overlay_files())
    if mutant.spec.delete:
        await run_own(backend, ref, lab, "rm -rf -- " + " ".join(shlex.quote(d) for d in mutant.spec.delete))
    if mutant.patch is not None:
        await backend.write_file(ref, ".selftest-mutant.patch", mutant.patch.read_bytes())
        await run_own(backend, ref, lab, "patch -p1 --no-backup-if-mismatch -s < ../.selftest-mutant.patch")


async def _run_mutants(
    backend: Backend,
    ref: EnvRef,
    lab: Lab,
    settings: Settings,
    record: Callable[[StepResult], None],
    mutants: Sequence[Mutant],
) -> None:
    """Each of ``mutants`` on the solved lab, restored from a snapshot before each."""
    await run_own(backend, ref, lab, f"tar -cf {SNAPSHOT} .")
    for i, mutant in enumerate(mutants):
        step = lab.step(mutant.step)
        assert step is not None  # the loader refuses mutants of unknown steps
        lang = "zh" if i % 2 else "en"  # every lab's mutants are judged in both languages
        await run_own(backend, ref, lab, RESTORE)
        await _apply_mutant(backend, ref, lab, mutant)
        failed_solve = await solve_step(backend, ref, lab, step)
        if failed_solve is not None:
            # the mutant broke the step's script: that is caught, provided it says so
            verdict, log, seconds = Verdict(CheckStatus.failed, failed_solve.message), "", 0.0
        else:
            verdict, log, seconds = await check_step(backend, ref, lab, step, settings, lang)
        record(
            StepResult(
                step.id,
                "mutant",
                CheckStatus.failed,
                verdict,
                log,
                mutant=mutant.name,
                lang=lang,
                problem=judge_mutant(mutant, verdict, lang if failed_solve is None else "en"),
                seconds=seconds,
            )
        )
    await run_own(backend, ref, lab, f"{RESTORE} && rm -f {SNAPSHOT}")


def throwaway_spec(lab: Lab, settings: Settings, env_id: str = "") -> EnvSpec:
    """The environment the self-test (and bench/checks.py) runs ``lab`` in: the lab's starter
    only, the CPUs and memory the lab requires, owned by no event or attendee."""
    return EnvSpec(
        env_id=env_id or f"selftest-{lab.id}",
        event_id=0,
        attendee_id=0,
        labs=(LabSeed(lab.id, lab.starter),),
        image=settings.docker.image,
        cpus=lab.spec.requires.cpus,
        memory_mb=lab.spec.requires.memory_mb,
    )


async def run_selftest(
    lab: Lab,
    *,
    settings: Settings | None = None,
    solution: Path | None = None,
    on_result: Callable[[StepResult], None] | None = None,
    keep: bool = False,
    backend: Backend | None = None,
    mutants: bool = True,
    starter: bool = True,
    only: Collection[str] | None = None,
) -> SelftestReport:
    """Self-test ``lab`` on ``backend`` (default: a throwaway local backend). The mutants run only
    when the starter and the solution behaved (a mutant of a broken solution proves nothing).
    ``starter=False`` leaves out the starter phase (for a second backend: the local self-test
    already proved that every check rejects the starter). ``only`` (step ids; ``selftest --watch``)
    checks those steps alone: the steps before the last of them still run their ``solve``, so each
    is checked on the lab as an attendee would have left it."""
    report = SelftestReport(lab.id)
    chosen = [s for s in lab.steps if only is None or s.id in only]
    last = chosen[-1].index if chosen else -1
    tmp = Path(tempfile.mkdtemp(prefix=f"selftest-{lab.id}-"))
    ref: EnvRef | None = None
    try:
        base = settings or Settings()
        if backend is None:
            backend = make_backend(
                base.model_copy(update={"data_dir": tmp, "labs_dir": lab.path.parent}), "local"
            )
        ref = await backend.create(throwaway_spec(lab, base))

        def record(result: StepResult) -> None:
            report.results.append(result)
            if on_result:
                on_result(result)

        for step in chosen if starter else ():
            verdict, log, seconds = await check_step(backend, ref, lab, step, base)
            record(StepResult(step.id, "starter", CheckStatus.failed, verdict, log, seconds=seconds))
        await overlay(backend, ref, solution or lab.solution, lab.id)
        for step in lab.steps[: last + 1]:
            if step not in chosen:  # only played up to the chosen steps: its solve, no check
                failed_solve = await solve_step(backend, ref, lab, step)
                if failed_solve is not None:
                    record(StepResult(step.id, "solution", CheckStatus.passed, failed_solve))
                continue
            verdict, log, seconds = await solution_step(backend, ref, lab, step, base)
            record(StepResult(step.id, "solution", CheckStatus.passed, verdict, log, seconds=seconds))
        if mutants and report.ok:
            picked = [m for m in lab.mutants if any(m.step == s.id for s in chosen)]
            await _run_mutants(backend, ref, lab, base, record, picked)
    finally:
        if not keep:
            if ref is not None and backend is not None:
                await backend.destroy(ref)
            shutil.rmtree(tmp, ignore_errors=True)
    return report


def selftest(lab: Lab, **kw) -> SelftestReport:  # type: ignore[no-untyped-def]
    return asyncio.run(run_selftest(lab, **kw))
