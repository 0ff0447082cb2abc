"""Checks in a second (issue 30): what each step's check costs on the reference, and a room pressing
Check at the same moment.

    .venv/bin/python bench/checks.py [--lab LAB]... [--step STEP] [--repeat 3] [--json]
        [--part steps|room|both] [--runner zygote|process] [--cpu N]
        [--attendees 30] [--backend local|docker] [--check-slots N] [--cold]

**Part 1, each step on the reference solution**, the way ``labserver selftest`` runs it
(:mod:`labserver.checks.selftest`): a throwaway environment of the local backend from
``make_backend``, the lab's solution laid over its starter, each step's ``solve`` command run before
its check, the request from ``check_request``, the verdict from ``interpret``. This process, and so
every process it starts (the check runner, the checker and the attendee-code children), is pinned to
one CPU (``sched_setaffinity``, ``--cpu``). Each step is pressed ``--repeat`` times cold and warm:

- *cold*: the environment's check runner (the fork server that has imported torch,
  ``backends/local_zygote.py``) is stopped first, so the press starts it, as the first check of a
  lab in an environment does;
- *warm*: pressed again with the runner running (every later press).

Per press: the wall time of ``run_check`` (what the Check button waits for, without the queue), and
CPU seconds three ways:

- ``cpu`` (the table's figure), measured from outside: user + system time of every process this
  bench has started, living (``/proc/<pid>/stat``: own and reaped children's times, walking the tree
  down from this process) or reaped by it (``RUSAGE_CHILDREN``), before and after the press. It holds
  the checker, every child it ran, and on a cold press the runner's start (its torch import); not
  this process's own event loop (the server's side).
- ``runner``: what the backend reports (``CheckRaw.cpu_s``: the fork server's ``wait4`` of the
  checker, its children included), when it reports it.
- ``verdict``: what the checker says it cost (``cpu_s`` in its verdict JSON, labkit), when it says it.

**Part 2, a room**: ``--attendees`` press Check at the same moment on each lab's heaviest step (the
largest warm ``cpu`` of part 1, or ``--step``), through a real server over HTTP as browsers do:
``labserver serve`` on a free port with a data folder of its own (SQLite; ``--backend local``, or
``docker``: the product's Docker backend on this machine's engine, a grader container per check).
Each attendee joins, opens the lab page and its SSE stream, opens the terminal (its environment is
ready when the shell answers), writes the solution's files through the file API, types each step's
``solve`` command up to the heavy step in the terminal and, unless ``--cold``, presses Check on each
earlier step as it goes (so its check runner is warm, as in a workshop). When everyone is there, all
press Check on the heavy step at once. Printed: the time until all have their verdict, the
distribution (p50/p95/max), verdicts (timeouts, not_gradable: every not_gradable the stream reported,
retries included; errors), and the queue positions they were told (``check.queued`` on the
attendee's SSE stream: the Check POST itself answers only with the run once it finished).

Figures depend on the machine and on what else runs on it; nothing is asserted. ``--json`` prints
one JSON document instead of the tables.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
from clients import REPO, Refused, echo, join_as, open_terminal, pct, serve, sse_events, stop_server
from crowd_backend import docker_shortfall, remove_docker_environments

from labserver.backends import make_backend
from labserver.backends.base import EnvRef
from labserver.backends.local import LocalBackend
from labserver.checks.request import check_request
from labserver.checks.selftest import overlay, solve_step, throwaway_spec
from labserver.checks.verdict import interpret
from labserver.config import Settings
from labserver.content import Lab, LabCatalog, Step

TOKEN = "checks-bench-instructor"
CODE = "CHECKSBENCH"
PREFIX = f"lschecks{os.getpid()}"  # Docker names of this run only: another bench may share the engine
GOAL_MAX_CPU_S, GOAL_MEDIAN_CPU_S, GOAL_ROOM_S = 2.0, 1.0, 60.0  # issue 30's "done when"


# -- CPU of everything this process started -----------------------------------------------------------
def _proc_table() -> dict[int, tuple[int, float]]:
    """pid -> (parent pid, user + system + reaped children's seconds) of every process, from /proc."""
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[int, tuple[int, float]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                fields = fh.read().decode(errors="replace").rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        # fields after the name: state ppid ... utime(11) stime(12) cutime(13) cstime(14)
        out[int(entry)] = (int(fields[1]), sum(int(f) for f in fields[11:15]) / tick)
    return out


def tree_cpu_s() -> float:
    """CPU seconds of every process this one started, living or reaped (module docstring, ``cpu``)."""
    table = _proc_table()
    children: dict[int, list[int]] = {}
    for pid, (ppid, _cpu) in table.items():
        children.setdefault(ppid, []).append(pid)
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    total = usage.ru_utime + usage.ru_stime
    todo = list(children.get(os.getpid(), []))
    while todo:
        pid = todo.pop()
        total += table[pid][1]
        todo += children.get(pid, [])
    return total


# -- part 1: each step on the reference -------------------------------------------------------------
@dataclass
class Press:
    status: str
    wall_s: float
    cpu_s: float  # measured from outside (tree_cpu_s)
    runner_cpu_s: float | None  # CheckRaw.cpu_s
    verdict_cpu_s: float | None  # the checker's own report


@dataclass
class StepCost:
    lab: str
    step: str
    timeout_s: float
    cold: list[Press] = field(default_factory=list)
    warm: list[Press] = field(default_factory=list)
    problem: str = ""  # the solve command failed: no check was pressed

    def median(self, phase: str, what: str) -> float | None:
        values = [getattr(p, what) for p in getattr(self, phase)]
        values = [v for v in values if v is not None]
        return statistics.median(values) if values else None

    @property
    def statuses(self) -> str:
        seen = Counter(p.status for p in [*self.cold, *self.warm])
        return "/".join(seen) or "-"

    def figures(self) -> dict[str, Any]:
        out: dict[str, Any] = {"lab": self.lab, "step": self.step, "timeout_s": self.timeout_s}
        out["statuses"] = self.statuses
        out["problem"] = self.problem
        for phase in ("cold", "warm"):
            for what in ("wall_s", "cpu_s", "runner_cpu_s", "verdict_cpu_s"):
                out[f"{phase}_{what}"] = self.median(phase, what)
        out["presses"] = {"cold": [asdict(p) for p in self.cold], "warm": [asdict(p) for p in self.warm]}
        return out


def _verdict_cpu_s(result: bytes) -> float | None:
    """``cpu_s`` of the verdict JSON on the result channel, when it has one."""
    with contextlib.suppress(ValueError):
        verdict, _end = json.JSONDecoder().raw_decode(result.decode("utf-8", "replace").strip())
        value = verdict.get("cpu_s") if isinstance(verdict, dict) else None
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
    return None


async def press(backend: LocalBackend, ref: EnvRef, lab: Lab, step: Step, settings: Settings) -> Press:
    request = check_request(lab, step, ref, log_limit=settings.checks.log_limit_bytes)
    before = tree_cpu_s()
    start = time.monotonic()
    raw = await backend.run_check(ref, request)
    wall = time.monotonic() - start
    cpu = tree_cpu_s() - before
    verdict = interpret(raw, step.spec.timeout_s)
    return Press(str(verdict.status), wall, cpu, raw.cpu_s, _verdict_cpu_s(raw.result))


async def lab_costs(
    lab: Lab,
    settings: Settings,
    *,
    repeat: int,
    only: str = "",
    on_step: Callable[[StepCost], None] = lambda _: None,
) -> list[StepCost]:
    """Every step of ``lab`` (or only ``only``, its earlier steps solved but not pressed) pressed
    ``repeat`` times cold and warm on the reference solution, in a throwaway local environment."""
    tmp = Path(tempfile.mkdtemp(prefix=f"bench-checks-{lab.id}-"))
    backend = make_backend(
        settings.model_copy(update={"data_dir": tmp, "labs_dir": lab.path.parent}), "local"
    )
    assert isinstance(backend, LocalBackend)
    ref = await backend.create(throwaway_spec(lab, settings, env_id=f"bench-{lab.id}"))
    out: list[StepCost] = []
    try:
        await overlay(backend, ref, lab.solution, lab.id)
        for step in lab.steps:
            failed = await solve_step(backend, ref, lab, step)
            if only and step.id != only:
                continue
            cost = StepCost(lab.id, step.id, step.spec.timeout_s)
            if failed is not None:
                cost.problem = failed.message
            for _ in range(repeat if failed is None else 0):
                await backend.zygotes.stop_env(Path(ref.infra_id).name)  # the next press starts it
                cost.cold.append(await press(backend, ref, lab, step, settings))
                cost.warm.append(await press(backend, ref, lab, step, settings))
            out.append(cost)
            on_step(cost)
            if only:
                break
    finally:
        await backend.destroy(ref)
        await backend.aclose()
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def _s(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


STEP_HEADER = (
    f"  {'lab/step':<44} {'status':<8} {'cold wall':>9} {'cold cpu':>8} {'warm wall':>9} "
    f"{'warm cpu':>8} {'runner':>7} {'verdict':>7} {'limit':>5}"
)


def step_row(c: StepCost) -> str:
    name = f"{c.lab}/{c.step}"
    if c.problem:
        return f"  {name:<44} solve failed: {c.problem.splitlines()[0][:90]}"
    return (
        f"  {name:<44} {c.statuses:<8} {_s(c.median('cold', 'wall_s')):>9} {_s(c.median('cold', 'cpu_s')):>8} "
        f"{_s(c.median('warm', 'wall_s')):>9} {_s(c.median('warm', 'cpu_s')):>8} "
        f"{_s(c.median('warm', 'runner_cpu_s')):>7} {_s(c.median('warm', 'verdict_cpu_s')):>7} "
        f"{c.timeout_s:>4.0f}s"
    )


def steps_summary(costs: list[StepCost]) -> dict[str, Any]:
    pressed = [c for c in costs if not c.problem and c.warm]
    warm_cpu = {f"{c.lab}/{c.step}": c.median("warm", "cpu_s") or 0.0 for c in pressed}
    warm_wall = [c.median("warm", "wall_s") or 0.0 for c in pressed]
    cold_wall = [c.median("cold", "wall_s") or 0.0 for c in pressed]
    worst = max(warm_cpu, key=lambda k: warm_cpu[k]) if warm_cpu else ""
    return {
        "steps": len(costs),
        "not_passed": sum(1 for c in costs if c.problem or c.statuses != "passed"),
        "warm_cpu_median_s": statistics.median(warm_cpu.values()) if warm_cpu else None,
        "warm_cpu_max_s": warm_cpu.get(worst),
        "warm_cpu_max_step": worst,
        "warm_wall_median_s": statistics.median(warm_wall) if warm_wall else None,
        "warm_wall_max_s": max(warm_wall, default=None),
        "cold_wall_median_s": statistics.median(cold_wall) if cold_wall else None,
        "cold_wall_max_s": max(cold_wall, default=None),
    }


def print_steps_summary(summary: dict[str, Any]) -> None:
    med, top = summary["warm_cpu_median_s"], summary["warm_cpu_max_s"]
    print(
        f"\n  {summary['steps']} steps ({summary['not_passed']} not passing): warm CPU median {_s(med)} s, "
        f"max {_s(top)} s ({summary['warm_cpu_max_step']}); wall on 1 CPU warm median "
        f"{_s(summary['warm_wall_median_s'])} s, max {_s(summary['warm_wall_max_s'])} s; cold median "
        f"{_s(summary['cold_wall_median_s'])} s, max {_s(summary['cold_wall_max_s'])} s"
    )
    if med is not None and top is not None:
        print(
            f"  goal (issue 30): every step <= {GOAL_MAX_CPU_S:g} CPU-s "
            f"{'met' if top <= GOAL_MAX_CPU_S else 'NOT MET'}, median <= {GOAL_MEDIAN_CPU_S:g} "
            f"{'met' if med <= GOAL_MEDIAN_CPU_S else 'NOT MET'}"
        )


# -- part 2: a room presses Check at once --------------------------------------------------------------
@dataclass
class Seat:
    name: str
    pressing: bool = False  # the timed press is under way: its queue positions are recorded
    positions: list[int] = field(default_factory=list)  # check.queued positions told for it
    streamed: list[str] = field(default_factory=list)  # check.finished statuses on the stream
    before: list[str] = field(default_factory=list)  # verdicts of the earlier steps' presses
    status: str = ""  # the timed press's verdict, as the Check POST answered
    verdict_s: float | None = None  # from the moment all pressed to that answer
    cpu_s: float | None = None  # the run's cpu_s, when the server reports it
    failure: str = ""
    t0: float = field(default_factory=time.monotonic)
    marks: dict[str, float] = field(default_factory=dict)  # preparation phase -> seconds after t0

    def mark(self, phase: str) -> None:
        self.marks[phase] = time.monotonic() - self.t0


@dataclass
class Room:
    lab: str
    step: str
    backend: str
    seats: list[Seat]
    ready_s: float  # joins until everyone was ready to press
    all_s: float  # all pressed -> the last verdict

    def figures(self) -> dict[str, Any]:
        times = [s.verdict_s for s in self.seats if s.verdict_s is not None]
        told = [max(s.positions) for s in self.seats if s.positions]
        streamed = Counter(st for s in self.seats for st in s.streamed)
        return {
            "lab": self.lab,
            "step": self.step,
            "backend": self.backend,
            "attendees": len(self.seats),
            "ready_s": self.ready_s,
            "all_verdicts_s": self.all_s,
            "p50_s": pct(times, 50) if times else None,
            "p95_s": pct(times, 95) if times else None,
            "max_s": max(times, default=None),
            "verdicts": dict(Counter(s.status or "none" for s in self.seats)),
            "not_gradable_streamed": streamed.get("not_gradable", 0),
            "failures": dict(Counter(s.failure for s in self.seats if s.failure)),
            "told_a_position": len(told),
            "deepest_position": max(told, default=0),
            "positions_p50": pct(told, 50) if told else None,
            "earlier_presses": dict(Counter(v for s in self.seats for v in s.before)),
            "cpu_s_median": statistics.median(c) if (c := [s.cpu_s for s in self.seats if s.cpu_s]) else None,
            "preparation_p50_s": {
                phase: statistics.median(ts)
                for phase in (self.seats[0].marks if self.seats else {})
                if (ts := [s.marks[phase] for s in self.seats if phase in s.marks])
            },
        }


async def follow(client: httpx.AsyncClient, seat: Seat) -> None:
    """The attendee's SSE stream: queue positions told during the timed press, finished statuses."""
    with contextlib.suppress(Refused, httpx.HTTPError, asyncio.CancelledError):
        async for kind, data in sse_events(client, "/api/v1/stream"):
            if kind == "check.queued" and seat.pressing:
                seat.positions.append(int(data.get("position") or 0))
            elif kind == "check.finished" and seat.pressing:
                seat.streamed.append(str(data.get("status")))


async def attendee(
    base: str, lab: Lab, heavy: Step, seat: Seat, *, cold: bool, ready: Callable[[], None], go: asyncio.Event
) -> None:
    """One browser: join, lab page, stream, terminal, the solution's files, the solve commands (and
    the earlier steps' checks), then the heavy step's Check when ``go`` is set."""
    steps = lab.steps[: heavy.index + 1]
    async with httpx.AsyncClient(
        base_url=base, timeout=900, limits=httpx.Limits(max_connections=4)
    ) as client:
        stream: asyncio.Future[None] | None = None
        try:
            token, _id = await join_as(client, CODE, seat.name)
            seat.mark("joined")
            stream = asyncio.ensure_future(follow(client, seat))
            page = await client.get(f"/labs/{lab.id}", cookies={"labserver_token": token})
            if page.status_code != 200:
                raise Refused(f"lab page HTTP {page.status_code}")
            async with await open_terminal(base, lab.id, token) as ws:
                await echo(ws)  # the environment is ready: its shell answers
                seat.mark("shell answers")
                for path in sorted(lab.solution.rglob("*")):
                    if path.is_file() and "__pycache__" not in path.parts:
                        rel = path.relative_to(lab.solution).as_posix()
                        saved = await client.put(
                            f"/api/v1/labs/{lab.id}/files/{rel}", content=path.read_bytes()
                        )
                        if saved.status_code != 200:
                            raise Refused(f"save HTTP {saved.status_code}")
                seat.mark("solution saved")
                for step in steps:
                    if step.spec.solve:
                        code = await echo(ws, before=step.spec.solve, timeout_s=max(step.spec.timeout_s, 300))
                        if code:
                            raise Refused(f"solve of {step.id} exited {code}")
                    if step is not heavy and not cold:
                        run = await client.post(f"/api/v1/labs/{lab.id}/steps/{step.id}/check")
                        seat.before.append(
                            str(run.json().get("status")) if run.status_code == 200 else "HTTP"
                        )
                    seat.mark(f"{step.id} solved" + ("" if step is heavy or cold else " and checked"))
            ready()
            await go.wait()
            seat.pressing = True
            pressed = time.monotonic()
            run = await client.post(f"/api/v1/labs/{lab.id}/steps/{heavy.id}/check")
            seat.verdict_s = time.monotonic() - pressed
            if run.status_code != 200:
                raise Refused(f"check HTTP {run.status_code}")
            body = run.json()
            seat.status = str(body.get("status"))
            seat.cpu_s = body.get("cpu_s")
            await asyncio.sleep(1.0)  # the stream's check.finished arrives
        except Refused as exc:
            seat.failure = exc.kind
        except (httpx.HTTPError, OSError, TimeoutError) as exc:
            seat.failure = type(exc).__name__
        finally:
            if not seat.pressing:
                ready()  # never hold the room back
            if stream is not None:
                stream.cancel()
                await asyncio.gather(stream, return_exceptions=True)


async def run_room(base: str, lab: Lab, heavy: Step, args: argparse.Namespace) -> Room:
    run = uuid.uuid4().hex[:4]
    seats = [Seat(f"room-{run}-{i:02d}") for i in range(args.attendees)]
    go, everyone = asyncio.Event(), asyncio.Event()
    waiting = len(seats)

    def ready() -> None:
        nonlocal waiting
        waiting -= 1
        if waiting == 0:
            everyone.set()

    start = time.monotonic()
    tasks = [
        asyncio.ensure_future(attendee(base, lab, heavy, s, cold=args.cold, ready=ready, go=go))
        for s in seats
    ]
    await everyone.wait()
    ready_s = time.monotonic() - start
    pressed = time.monotonic()
    go.set()
    await asyncio.gather(*tasks)
    last = max((s.verdict_s for s in seats if s.verdict_s is not None), default=time.monotonic() - pressed)
    return Room(lab.id, heavy.id, args.backend, seats, ready_s, last)


def print_room(room: Room) -> None:
    f = room.figures()
    print(
        f"\n## room: {f['attendees']} attendees press Check at once on {room.lab}/{room.step} "
        f"({room.backend} backend; everyone ready after {f['ready_s']:.0f} s)"
    )
    print(
        f"  all verdicts after {f['all_verdicts_s']:.1f} s; per attendee p50 {_s(f['p50_s'])} s, "
        f"p95 {_s(f['p95_s'])} s, max {_s(f['max_s'])} s"
    )
    print(
        f"  verdicts {f['verdicts']}; not_gradable on the streams (retries included) "
        f"{f['not_gradable_streamed']}; failures {f['failures'] or 0}"
    )
    print(
        f"  queue: {f['told_a_position']} told a position, deepest {f['deepest_position']}, "
        f"p50 of each one's deepest {_s(f['positions_p50'])}; earlier steps' presses {f['earlier_presses'] or '-'}"
    )
    prep = ", ".join(f"{phase} {t:.0f} s" for phase, t in f["preparation_p50_s"].items())
    print(f"  preparation (p50, seconds after the join POST): {prep}")


def room_env(args: argparse.Namespace, data: Path) -> dict[str, str]:
    env = {
        "LABSERVER_DATA_DIR": str(data),
        "LABSERVER_BACKEND": args.backend,
        "LABSERVER_INSTRUCTOR_TOKEN": TOKEN,
        "LABSERVER_DEFAULT_EVENT_CODE": CODE,
        "LABSERVER_LABS_DIR": str(REPO / "labs"),
        "LABSERVER_WEB_DIR": str(REPO / "web"),
        "LABSERVER_DOCKER__NAME_PREFIX": PREFIX,
        "LABSERVER_LOCAL__CHECK_RUNNER": args.runner,
    }
    if args.check_slots:
        env["LABSERVER_CHECKS__MAX_CONCURRENT"] = str(args.check_slots)
    return env


def room(args: argparse.Namespace, lab: Lab, heavy: Step) -> Room:
    """One server for the lab's room (a data folder of its own), stopped after it."""
    root = Path(tempfile.mkdtemp(prefix=f"bench-room-{lab.id}-"))
    proc = None
    try:
        proc, base = serve(room_env(args, root / "data"), root / "server.log")
        if not args.json:
            print(f"\n# server {base} (log {root / 'server.log'})", flush=True)
        return asyncio.run(run_room(base, lab, heavy, args))
    finally:
        stop_server(proc)
        if args.backend == "docker":
            settings = Settings()
            asyncio.run(
                remove_docker_environments(
                    settings.model_copy(
                        update={"docker": settings.docker.model_copy(update={"name_prefix": PREFIX})}
                    )
                )
            )
        shutil.rmtree(root, ignore_errors=True)


# -- the command ------------------------------------------------------------------------------------------
def heaviest(lab: Lab, costs: list[StepCost], step_id: str) -> Step | None:
    """``--step``, else the step whose warm press cost the most CPU on the reference."""
    if step_id:
        return lab.step(step_id)
    mine = [c for c in costs if c.lab == lab.id and c.warm]
    if not mine:
        return None
    return lab.step(max(mine, key=lambda c: c.median("warm", "cpu_s") or 0.0).step)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lab", action="append", help="a lab id (repeatable; default: every lab)")
    ap.add_argument("--step", default="", help="only this step (part 1) and the room's step (part 2)")
    ap.add_argument("--repeat", type=int, default=3, help="cold and warm presses per step (medians printed)")
    ap.add_argument("--json", action="store_true", help="print one JSON document instead of the tables")
    ap.add_argument("--part", choices=["steps", "room", "both"], default="both")
    ap.add_argument(
        "--runner", choices=["zygote", "process"], default="zygote", help="LABSERVER_LOCAL__CHECK_RUNNER"
    )
    ap.add_argument(
        "--cpu", type=int, help="the CPU part 1 is pinned to (default: the last this process may use)"
    )
    ap.add_argument("--attendees", type=int, default=30)
    ap.add_argument("--backend", choices=["local", "docker"], default="local", help="the room's backend")
    ap.add_argument(
        "--check-slots", type=int, default=0, help="checks at once (default: the server's setting)"
    )
    ap.add_argument(
        "--cold", action="store_true", help="no earlier presses: the room's press starts each runner"
    )
    args = ap.parse_args()

    settings = Settings(labs_dir=REPO / "labs")
    settings = settings.model_copy(
        update={"local": settings.local.model_copy(update={"check_runner": args.runner})}
    )
    catalog = LabCatalog(settings.labs_dir)
    labs = [catalog.labs[i] for i in args.lab] if args.lab else list(catalog.labs.values())
    if args.part == "room" and not args.step:
        sys.exit("--part room needs --step (else part 1 finds each lab's heaviest step)")
    if args.part != "steps" and args.backend == "docker":
        why = docker_shortfall(settings, args.attendees)
        if why:
            sys.exit(f"--backend docker --attendees {args.attendees}: {why}")
    say = (lambda *_a, **_k: None) if args.json else print

    costs: list[StepCost] = []
    if args.part != "room":
        allowed = sorted(os.sched_getaffinity(0))
        cpu = args.cpu if args.cpu is not None else allowed[-1]
        say(
            f"# check costs on the reference: local backend, {args.runner} runner, pinned to CPU {cpu} "
            f"of {os.cpu_count()}, load {os.getloadavg()[0]:.1f}; median of {args.repeat} cold / warm presses"
        )
        say(
            "# cpu = CPU-s of everything the press ran, from /proc; runner = CheckRaw.cpu_s; verdict = its cpu_s"
        )
        say(STEP_HEADER)
        os.sched_setaffinity(0, {cpu})
        try:
            for lab in labs:
                costs += asyncio.run(
                    lab_costs(
                        lab,
                        settings,
                        repeat=args.repeat,
                        only=args.step,
                        on_step=lambda c: say(step_row(c), flush=True),
                    )
                )
        finally:
            os.sched_setaffinity(0, allowed)
        summary = steps_summary(costs)
        if not args.json:
            print_steps_summary(summary)

    rooms: list[Room] = []
    if args.part != "steps":
        for lab in labs:
            heavy = heaviest(lab, costs, args.step)
            if heavy is None:
                say(f"\n## room: {lab.id} has no step {args.step or 'that passed part 1'}")
                continue
            rooms.append(room(args, lab, heavy))
            if not args.json:
                print_room(rooms[-1])
        if rooms and not args.json:
            worst = max(rooms, key=lambda r: r.all_s)
            bad = sum(1 for r in rooms for s in r.seats if s.status != "passed")
            print(
                f"\n  rooms: {len(rooms)}, {args.attendees} attendees each ({args.backend}); slowest "
                f"{worst.lab}/{worst.step} {worst.all_s:.1f} s to all verdicts; {bad} presses not passed; "
                f"goal (issue 30): all within {GOAL_ROOM_S:g} s, none not passed "
                f"{'met' if worst.all_s <= GOAL_ROOM_S and not bad else 'NOT MET'}"
            )
    if args.json:
        doc = {
            "cpus": os.cpu_count(),
            "runner": args.runner,
            "steps": [c.figures() for c in costs],
            "steps_summary": steps_summary(costs) if costs else None,
            "rooms": [r.figures() for r in rooms],
        }
        json.dump(doc, sys.stdout, indent=1)
        print()


if __name__ == "__main__":
    main()
