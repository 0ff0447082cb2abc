"""``labserver selftest LAB``: on a throwaway environment, every step's check against the starter
must be *failed* (a pass means the checker accepts unfinished work; an error means the checker is
broken), then with the solution overlaid, step by step in order (running each step's ``solve``
command first), every check must *pass*.

Everything goes through the :class:`~labserver.backends.base.Backend` protocol (create, file
writes, exec, run_check, destroy), so the same self-test runs on every backend; the default is a
throwaway ``local`` backend from :func:`labserver.backends.make_backend`. Requests come from the
one builder, :func:`labserver.checks.request.check_request`."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from labserver.backends import make_backend
from labserver.backends.base import Backend, EnvRef, EnvSpec, LabSeed
from labserver.checks.request import check_request
from labserver.checks.verdict import Verdict, interpret
from labserver.config import Settings
from labserver.content.loader import Lab, Step
from labserver.models import CheckStatus


@dataclass
class StepResult:
    step: str
    phase: str  # "starter" | "solution"
    expected: str
    verdict: Verdict
    log: str = ""

    @property
    def ok(self) -> bool:
        return self.verdict.status == self.expected


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
            out.append(
                f"{mark} {r.phase:8} step {r.step:24} expected {r.expected:6} got {r.verdict.status:7} "
                f"{r.verdict.message.splitlines()[0][:100] if r.verdict.message else ''}"
            )
        return out


async def overlay(backend: Backend, ref: EnvRef, src: Path, lab_id: str) -> None:
    """Copy ``src`` (a solution folder) over the lab folder through the backend's file API, so the
    same self-test runs on every backend."""
    for path in sorted(src.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            await backend.write_file(ref, f"{lab_id}/{path.relative_to(src).as_posix()}", path.read_bytes())


async def _check(
    backend: Backend, ref: EnvRef, lab: Lab, step: Step, settings: Settings
) -> tuple[Verdict, str]:
    raw = await backend.run_check(
        ref, check_request(lab, step, ref, log_limit=settings.checks.log_limit_bytes)
    )
    return interpret(raw, step.spec.timeout_s), raw.log.decode("utf-8", "replace")


async def run_selftest(
    lab: Lab,
    *,
    settings: Settings | None = None,
    solution: Path | None = None,
    on_result: Callable[[StepResult], None] | None = None,
    keep: bool = False,
    backend: Backend | None = None,
) -> SelftestReport:
    """Self-test ``lab`` on ``backend`` (default: a throwaway local backend)."""
    report = SelftestReport(lab.id)
    tmp = Path(tempfile.mkdtemp(prefix=f"selftest-{lab.id}-"))
    ref: EnvRef | None = None
    try:
        base = settings or Settings()
        if backend is None:
            backend = make_backend(base.model_copy(update={"data_dir": tmp}), "local")
        ref = await backend.create(
            EnvSpec(
                env_id=f"selftest-{lab.id}",
                event_id=0,
                attendee_id=0,
                labs=(LabSeed(lab.id, lab.starter),),
                image=base.docker.image,
                cpus=lab.spec.requires.cpus,
                memory_mb=lab.spec.requires.memory_mb,
            )
        )

        def record(result: StepResult) -> None:
            report.results.append(result)
            if on_result:
                on_result(result)

        for step in lab.steps:
            verdict, log = await _check(backend, ref, lab, step, base)
            record(StepResult(step.id, "starter", CheckStatus.failed, verdict, log))
        await overlay(backend, ref, solution or lab.solution, lab.id)
        for step in lab.steps:
            if step.spec.solve:
                res = await backend.exec(
                    ref, ["bash", "-c", step.spec.solve], cwd=lab.id, timeout=max(step.spec.timeout_s, 300)
                )
                if res.exit_code != 0:
                    out = (res.stdout + res.stderr).decode("utf-8", "replace")[-2000:]
                    record(
                        StepResult(
                            step.id,
                            "solution",
                            CheckStatus.passed,
                            Verdict(
                                CheckStatus.error,
                                f"solve command {step.spec.solve!r} exited {res.exit_code}: {out}",
                            ),
                        )
                    )
                    continue
            verdict, log = await _check(backend, ref, lab, step, base)
            record(StepResult(step.id, "solution", CheckStatus.passed, verdict, log))
    finally:
        if not keep:
            if ref is not None and backend is not None:
                await backend.destroy(ref)
            shutil.rmtree(tmp, ignore_errors=True)
    return report


def selftest(lab: Lab, **kw) -> SelftestReport:  # type: ignore[no-untyped-def]
    return asyncio.run(run_selftest(lab, **kw))
