"""A simulated event of 50 attendees on the getting-started lab, then its post-event report.

    .venv/bin/python bench/report_event.py [--attendees 50] [--seed 7] [--out /tmp/report-bench]

Everything goes through the real services and database (SQLite in a folder of its own): attendees
join (``services/joining/events.join``), open steps (``services/reporting/progress.open_step``), open hints
(``services/reporting/hints.open_hints``) and press Check (``services/grading/checking.run_check``, which commits the
run and, on a pass, the digests of the lab folder read through the local backend). The only stand-in
is the checker itself: ``ScriptedChecks`` (a subclass of the real local backend) answers each check
with the verdict the simulation drew, in the words of the lab's checkers, because 50 attendees x 5
steps x several attempts of real checkers would take far longer than a bench should on 2 cores.
Time is a ``TestClock`` moved from one action to the next (the event "lasts" about two hours, the
bench seconds).

Patterns (per step, from what instructors see: the harder steps fail more and lose more people):
a per-attendee skill scales think time (log-normal) and the chance that an attempt fails; after
two failures an attendee opens the hints with some chance; after each failure they may give up;
1% of checks are checker errors; the failure messages carry each attendee's own numbers (seeds,
values, shapes) so the report has to group them by template.

Printed: the time to simulate and to build the report (database queries + pure build), the report
size, and the report's figures per step; ``report.html`` and ``report.json`` are written to --out.
Nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import heapq
import json
import random
import tempfile
import time
from pathlib import Path

from sqlmodel import Session

from labserver import clock
from labserver.app import build_context
from labserver.backends.base import CheckRaw, CheckRequest, EnvRef
from labserver.backends.local import LocalBackend
from labserver.clock import TestClock
from labserver.config import Settings
from labserver.models import Attendee, Event
from labserver.routes.instructor.report import standalone_html
from labserver.services.grading import checking
from labserver.services.joining.events import create_event, join
from labserver.services.reporting import completion, hints, progress, report

REPO = Path(__file__).resolve().parent.parent
LAB = "getting-started"

#: step -> (median minutes of work before the first Check, chance an attempt fails, give-up chance
#: after a failure, failure messages: templates filled with the attendee's own numbers)
PATTERNS: dict[str, tuple[float, float, float, list[str]]] = {
    "find-device": (
        3.0,
        0.30,
        0.02,
        [
            "`device.txt` holds 'kind: {kind}': write only the value, without the `kind:` prefix.",
            "`device.txt` holds '{KIND}': the kind is lower case, '{kind}'.",
            "`device.txt` has {lines} lines; write only the kind ({kind}), on one line.",
        ],
    ),
    "run-script": (
        5.0,
        0.35,
        0.04,
        [
            "warmup.json was written with seed {seed2}, not {seed}: it is left over from another run.",
            "The trace in warmup.json is {trace}, but the matmul of seed {seed} has trace {want}: "
            "these numbers were written by hand.",
        ],
    ),
    "write-file": (
        6.0,
        0.40,
        0.05,
        [
            "notes/result.txt says {got}, but the run you did gives {want}.",
            "There is no file 'notes/result.txt' yet: write it with the editor.",
        ],
    ),
    "implement-rmsnorm": (
        14.0,
        0.60,
        0.12,
        [
            "rms_norm differs from the reference: max abs error {err} at row {row} (tolerance 1e-05).",
            "rms_norm ignores the weight: with weight = {w}, the output should scale by {w}.",
            "rms_norm returns dtype float32 for bfloat16 input: cast back to the input's dtype.",
            "eps is added outside the square root: max abs error {err} at row {row}.",
        ],
    ),
    "read-metric": (
        7.0,
        0.45,
        0.06,
        [
            "You wrote {got} us, but the emulated device time of this run is {want} us.",
            "metric.txt holds {got}: that is the figure of the talk, not of your run.",
        ],
    ),
}
ERROR_RATE = 0.01


class ScriptedChecks(LocalBackend):
    """The real local backend, whose checker answers with the verdict the simulation drew for the
    next check of that environment (see the module docstring)."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self.next: dict[str, tuple[str, str]] = {}  # env id -> (status, message)

    async def run_check(self, ref: EnvRef, request: CheckRequest) -> CheckRaw:
        status, message = self.next.pop(ref.env_id)
        if status == "error":
            return CheckRaw(139, b"", b"Segmentation fault", False, False, 0.4)
        verdict = {"passed": status == "passed", "message": message, "hints": [], "metrics": {}}
        return CheckRaw(0 if status == "passed" else 1, json.dumps(verdict).encode(), b"", False, False, 0.4)


def fill(template: str, rng: random.Random) -> str:
    kind = "cpu-emu"
    values = {
        "kind": kind,
        "KIND": kind.upper(),
        "lines": rng.randint(2, 4),
        "seed": rng.randint(1000, 9999),
        "seed2": rng.randint(1000, 9999),
        "trace": f"{rng.uniform(-40, 40):.4f}",
        "want": f"{rng.uniform(5, 900):.2f}",
        "got": f"{rng.uniform(5, 900):.1f}",
        "err": f"{rng.uniform(0.001, 0.3):.4f}",
        "row": rng.randint(0, 63),
        "w": f"{rng.uniform(0.5, 2):.2f}",
    }
    return template.format(**values)


async def simulate(n: int, seed: int, data: Path) -> tuple[Settings, Event, float, dict[str, int]]:
    rng = random.Random(seed)
    settings = Settings(data_dir=data, labs_dir=REPO / "labs", web_dir=REPO / "web", instructor_token="bench")
    ctx = build_context(settings)
    backend = ScriptedChecks(settings)
    ctx.backend = backend
    tc = TestClock()
    clock.use(tc)
    lab = ctx.catalog.labs[LAB]
    counts = {"checks": 0, "hints": 0, "opened": 0}
    with Session(ctx.engine, expire_on_commit=False) as s:
        event = create_event(s, title="Simulated workshop", labs=[LAB], code="SIM50")
        people: list[tuple[Attendee, float]] = []
        for i in range(n):
            attendee, _token, _ev = join(s, event_code=event.code, name=f"attendee-{i:02d}")
            people.append((attendee, rng.lognormvariate(0, 0.45)))  # skill: <1 fast, >1 slow
    # a queue of (time, order, attendee index, step index, failures so far)
    queue: list[tuple[float, int, int, int, int]] = []
    order = 0
    for i in range(n):
        heapq.heappush(queue, (rng.uniform(0, 300), order, i, 0, 0))
        order += 1
    t_start = time.perf_counter()
    now = 0.0
    while queue:
        t, _o, i, k, failures = heapq.heappop(queue)
        tc.advance(t - now)
        now = t
        attendee, skill = people[i]
        step = lab.steps[k]
        minutes, p_fail, p_quit, messages = PATTERNS[step.id]
        with Session(ctx.engine, expire_on_commit=False) as s:
            ev = s.get(Event, event.id)
            me = s.get(Attendee, attendee.id)
            assert ev is not None and me is not None and me.id is not None
            if failures == 0:
                progress.open_step(
                    ctx, s, event_id=ev.id or 0, attendee_id=me.id, lab_id=LAB, step_id=step.id
                )
                counts["opened"] += 1
                think = rng.lognormvariate(0, 0.5) * minutes * 60 * skill
                heapq.heappush(queue, (now + think, order, i, k, -1))  # -1: the first Check is due
                order += 1
                continue
            if failures >= 2 and rng.random() < 0.5:
                hints.open_hints(s, event_id=ev.id or 0, attendee_id=me.id, lab_id=LAB, step_id=step.id)
                counts["hints"] += 1
            tried = max(0, failures)
            fails = rng.random() < min(0.95, p_fail * skill * (0.7**tried))
            if rng.random() < ERROR_RATE:
                backend.next[f"ev{ev.id}-at{me.id}"] = ("error", "")
            elif fails:
                backend.next[f"ev{ev.id}-at{me.id}"] = ("failed", fill(rng.choice(messages), rng))
            else:
                backend.next[f"ev{ev.id}-at{me.id}"] = ("passed", "Right.")
            run = await checking.run_check(ctx, s, event=ev, attendee=me, lab=lab, step=step)
            counts["checks"] += 1
        if run.status == "passed":
            if k + 1 < len(lab.steps):
                heapq.heappush(queue, (now + rng.uniform(5, 40), order, i, k + 1, 0))
                order += 1
            continue
        if rng.random() < p_quit * skill * (1 + tried):
            continue  # gave up on this step
        heapq.heappush(queue, (now + rng.lognormvariate(0, 0.6) * 90 * skill, order, i, k, tried + 1))
        order += 1
    simulated = time.perf_counter() - t_start
    ctx.engine.dispose()
    return settings, event, simulated, counts


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--attendees", type=int, default=50)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "labserver-report-bench")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="reportbench") as tmp:
        settings, event, simulated, counts = asyncio.run(
            simulate(args.attendees, args.seed, Path(tmp) / "data")
        )
        ctx = build_context(settings)
        t0 = time.perf_counter()
        with Session(ctx.engine) as s:
            facts = report.load_report_facts(ctx, s, event)
            t1 = time.perf_counter()
            data = report.build_report(facts)
            t2 = time.perf_counter()
            key = completion.public_key(event, settings.ensure_secret_key())
        html = standalone_html(ctx, data, key)
        t3 = time.perf_counter()
        ctx.engine.dispose()
    args.out.mkdir(parents=True, exist_ok=True)
    body = json.dumps(data.model_dump(mode="json"), ensure_ascii=False, indent=1)
    (args.out / "report.json").write_text(body, encoding="utf-8")
    (args.out / "report.html").write_text(html, encoding="utf-8")
    print(f"simulated {args.attendees} attendees: {counts['checks']} checks, {counts['opened']} steps opened, "
          f"{counts['hints']} hint opens, in {simulated:.1f} s (real services, SQLite)")  # fmt: skip
    print(f"report: load {1000 * (t1 - t0):.0f} ms, build {1000 * (t2 - t1):.0f} ms, HTML {1000 * (t3 - t2):.0f} ms; "
          f"JSON {len(body) / 1024:.0f} KiB, HTML {len(html) / 1024:.0f} KiB -> {args.out}")  # fmt: skip
    (lab,) = data.labs
    ttf = lab.time_to_finish_s
    print(f"{lab.id}: {lab.started} started, {lab.finished} finished; time to finish median "
          f"{(ttf.median or 0) / 60:.0f} min, p90 {(ttf.p90 or 0) / 60:.0f} min")  # fmt: skip
    print(f"{'step':<20}{'reached':>8}{'passed':>7}{'med min':>8}{'p90 min':>8}{'att.med':>8}{'att.p90':>8}"
          f"{'failed':>7}{'errors':>7}{'hints':>6}{'stopped':>8}  top failure (checks/attendees)")  # fmt: skip
    for s in lab.steps:
        top = s.top_failures[0] if s.top_failures else None
        print(
            f"{s.id:<20}{s.reached:>8}{s.passed:>7}{(s.time_to_pass_s.median or 0) / 60:>8.1f}"
            f"{(s.time_to_pass_s.p90 or 0) / 60:>8.1f}{s.attempts_before_pass.median or 0:>8.1f}"
            f"{s.attempts_before_pass.p90 or 0:>8.1f}"
            f"{s.failed_runs:>7}{s.error_runs:>7}{s.hints_opened:>6}{s.stopped_here:>8}  "
            + (
                f"{top.template[:70]} ({top.count}/{top.attendees}), {len(s.top_failures)} templates"
                if top
                else ""
            )
        )


if __name__ == "__main__":
    main()
