"""Load rehearsal (issue 22): one server on this machine, driven the way a room of browsers drives it.

    .venv/bin/python bench/rehearsal.py [--attendees 300] [--join-s 60] [--checks-per-s 10]
        [--minutes 10] [--instructors 5] [--docker 8] [--local 40] [--check-slots N] [--lab getting-started] [--step write-file]
        [--database-url postgresql://...] [--profile server-profile.txt] [--check-cpu-s 1.0]

N attendees join within T seconds; each, over the public interfaces only, joins (``POST
/api/v1/join``), opens the lab page (``GET /labs/<lab>``) and its SSE stream, opens the terminal
WebSocket and types a command, saves the step's file from the "editor" (``PUT .../files/...``), and
stays connected. From the first join on, checks are pressed at ``--checks-per-s`` in total (a random
attendee that is not already checking saves the file, types in the terminal now and then, and
presses Check: ``POST .../check``) until ``--minutes`` have passed. Meanwhile ``--instructors``
dashboards load the grid page and ``/progress``, stream the grid (``/events/{id}/stream``) and reload
``/progress`` every 30 s.

The server is ``labserver.app.create_app`` unchanged, started by uvicorn with a data folder of its
own; its backend is ``crowd_backend.RoomBackend`` (``docker+local+light``): the first ``--docker``
attendees get Docker environments (a container each, a grader container per check: the product's
Docker backend on this machine's engine and the ``labserver/cpu-emu`` image), the next ``--local``
real local environments (bubblewrap sandbox, cgroup or rlimit limits), the rest light ones (the
same folders, shells and checker processes, without the sandbox). Every check runs the lab's real
checker in a process of its own. The Docker environments get a name prefix of the run's own and
are removed after it. ``--check-cpu-s S`` makes the checked step's checker burn S CPU-seconds first
(in a copy of the labs folder in the run's own folder): at 10 checks a second of 1 CPU-s on 2
cores the checks outrun the machine, a queue forms, and the figures show whether the grid, the
joins and the pages stay on time while it does. With ``--database-url`` (PostgreSQL) a fresh database is made for
the run and dropped after it; else SQLite.

Printed: per-route p50/p95/p99 and counts, errors by kind, SSE delivery latency (check finished, as
stored on the run, -> the attendee's own stream, and -> every instructor stream's grid delta),
server RSS and CPU, database connections (PostgreSQL: ``pg_stat_activity`` of the server; SQLite:
open descriptors of the database file), and over time: joined, checks in flight, the deepest check
queue position told to attendees (``check.queued``), environment starts waiting for admission. Then
the issue's goals beside the figures. ``--profile FILE`` starts the server under py-spy (it samples
from outside the process, every thread, 100 times a second), writes the collapsed stacks to ``FILE``
and prints where the server's CPU went (``profile_summary.py``: event loop against worker threads,
top functions by self and inclusive samples). Figures depend on the machine and on
what else runs on it; nothing is asserted.
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import collections
import contextlib
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import profile_summary
import websockets.exceptions
from clients import (
    REPO,
    ProcStat,
    Refused,
    echo,
    epoch,
    free_port,
    join_as,
    open_terminal,
    pct,
    read_metrics,
    sse_events,
    stop_server,
    wait_healthy,
)
from crowd_backend import kind_of

TOKEN = "rehearsal-instructor"
PROFILE_RATE = 100  # py-spy samples per second (--profile)
CODE = "REHEARSE"
APP_NAME = "labserver-rehearsal"
#: the file each attendee saves before a check, per (lab, step): (path in the lab folder, bytes)
STEP_FILES = {
    ("getting-started", "write-file"): ("notes/hello.txt", "Hello, Ascend!\n你好，昇腾！\n".encode())
}
GOALS = (  # (label, figure key, at most)
    ("errors", "errors", 0),
    ("join p95 (ms)", "join_p95_ms", 300),
    ("check finished -> attendee page p95 (ms)", "attendee_p95_ms", 250),
    ("check finished -> instructor grid p95 (ms)", "instructor_p95_ms", 500),
    ("server RSS at the end (MB)", "rss_mb", 300),
)


@dataclass
class Person:
    index: int
    name: str
    token: str = ""
    ws: Any = None
    busy: bool = False
    kind: str = "light"  # docker | local | light: the environment the crowd backend gives it


@dataclass
class Sample:
    t: float
    joined: int
    in_flight: int
    queued_max: int
    env_queue: float
    rss_mb: float
    cpu_pct: float
    db_conns: int


@dataclass
class Figures:
    routes: dict[str, list[float]] = field(default_factory=lambda: collections.defaultdict(list))
    errors: collections.Counter[str] = field(default_factory=collections.Counter)
    finished_at: dict[int, float] = field(default_factory=dict)  # run id -> epoch (the stored finish)
    attendee_recv: dict[int, float] = field(default_factory=dict)  # run id -> epoch received
    instructor_recv: list[tuple[int, float, float | None]] = field(default_factory=list)  # run, got, at
    timeline: list[Sample] = field(default_factory=list)
    statuses: collections.Counter[str] = field(default_factory=collections.Counter)
    skipped: int = 0
    in_flight: int = 0
    queued_max: int = 0
    joined: int = 0
    streams_ready: int = 0
    server_counts: dict[str, float] = field(default_factory=dict)  # the server's /metrics at the end


class Rehearsal:
    def __init__(self, args: argparse.Namespace, base: str, event_id: int) -> None:
        self.args = args
        self.base = base
        self.event_id = event_id
        self.fig = Figures()
        self.ready: list[Person] = []
        self.stop = asyncio.Event()
        self.rng = random.Random(22)
        self.tasks: set[asyncio.Task[None]] = set()
        self.path, self.body = STEP_FILES.get((args.lab, args.step), ("notes/rehearsal.txt", b"rehearsal\n"))

    def spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def timed(self, route: str, coro: Any) -> Any:
        """``coro``'s result, its time recorded under ``route``; an error is counted by kind and
        re-raised as :class:`Refused` (so the caller stops this attendee's sequence)."""
        start = time.perf_counter()
        try:
            out = await coro
        except Refused as exc:
            self.fig.errors[f"{route}: {exc.kind}"] += 1
            raise
        except websockets.exceptions.InvalidStatus as exc:
            kind = f"{route}: HTTP {exc.response.status_code}"
            self.fig.errors[kind] += 1
            raise Refused(kind) from exc
        except (httpx.HTTPError, OSError, TimeoutError, websockets.exceptions.WebSocketException) as exc:
            kind = f"{route}: {type(exc).__name__}"
            self.fig.errors[kind] += 1
            raise Refused(kind) from exc
        self.fig.routes[route].append(time.perf_counter() - start)
        if isinstance(out, httpx.Response) and out.status_code >= 400:
            kind = f"{route}: HTTP {out.status_code}"
            self.fig.errors[kind] += 1
            raise Refused(kind)
        return out

    # -- an attendee ----------------------------------------------------------------------------------
    async def follow_attendee(self, client: httpx.AsyncClient, who: Person) -> None:
        opened = time.perf_counter()
        with contextlib.suppress(Refused, httpx.HTTPError, asyncio.CancelledError):
            async for kind, data in sse_events(client, "/api/v1/stream"):
                if kind == "ready":
                    self.fig.routes["SSE /api/v1/stream (ready)"].append(time.perf_counter() - opened)
                    self.fig.streams_ready += 1
                elif kind == "check.finished" and data.get("run_id"):
                    self.fig.attendee_recv[int(data["run_id"])] = time.time()
                elif kind == "check.queued":
                    self.fig.queued_max = max(self.fig.queued_max, int(data.get("position") or 0))
                elif kind == "resync":
                    self.fig.errors["attendee stream: resync"] += 1

    async def attendee(self, who: Person, at: float) -> None:
        await asyncio.sleep(max(0.0, at - time.monotonic()))
        limits = httpx.Limits(max_connections=4)
        lab = self.args.lab
        async with httpx.AsyncClient(base_url=self.base, timeout=120, limits=limits) as client:
            try:
                who.token, attendee_id = await self.timed(
                    "POST /api/v1/join", join_as(client, CODE, who.name)
                )
                who.kind = kind_of(attendee_id, docker=self.args.docker, local=self.args.local)
                self.fig.joined += 1
                stream = asyncio.ensure_future(self.follow_attendee(client, who))
                await self.timed(
                    "GET /labs/{lab}", client.get(f"/labs/{lab}", cookies={"labserver_token": who.token})
                )
                who.ws = await self.timed("WS terminal open", open_terminal(self.base, lab, who.token))
                await self.timed(
                    f"WS terminal first echo ({who.kind}; the environment starting)",
                    echo(who.ws, timeout_s=120),
                )
                await self.save(client)
                self.ready.append(who)
                await self.stop.wait()
                stream.cancel()
            except Refused:
                return
            finally:
                if who.ws is not None:
                    with contextlib.suppress(Exception):
                        await who.ws.close()

    async def save(self, client: httpx.AsyncClient) -> None:
        await self.timed(
            "PUT /api/v1/labs/{lab}/files/{path}",
            client.put(f"/api/v1/labs/{self.args.lab}/files/{self.path}", content=self.body),
        )

    async def check(self, who: Person) -> None:
        self.fig.in_flight += 1
        try:
            async with httpx.AsyncClient(
                base_url=self.base, timeout=300, headers={"Authorization": f"Bearer {who.token}"}
            ) as client:
                if who.ws is not None and self.rng.random() < 0.3:
                    await self.timed(f"WS terminal echo ({who.kind})", echo(who.ws, timeout_s=120))
                await self.save(client)
                resp = await self.timed(
                    "POST /api/v1/labs/{lab}/steps/{step}/check",
                    client.post(f"/api/v1/labs/{self.args.lab}/steps/{self.args.step}/check"),
                )
                run = resp.json()
                self.fig.statuses[run["status"]] += 1
                if run["status"] != "passed":
                    self.fig.errors[f"check {run['status']}: {run['message'][:80]}"] += 1
                self.fig.routes[f"(the checker process, {who.kind}, as the server timed it)"].append(
                    float(run["duration_s"])
                )
                finished = epoch(run.get("finished_at"))
                if run.get("id") and finished is not None:
                    self.fig.finished_at[int(run["id"])] = finished
        except Refused:
            pass
        finally:
            self.fig.in_flight -= 1
            who.busy = False

    async def pacer(self, until: float) -> None:
        interval = 1.0 / self.args.checks_per_s
        next_t = time.monotonic()
        while time.monotonic() < until:
            idle = [p for p in self.ready if not p.busy]
            if idle:
                who = self.rng.choice(idle)
                who.busy = True
                self.spawn(self.check(who))
            elif self.ready:
                self.fig.skipped += 1
            next_t += interval
            await asyncio.sleep(max(0.0, next_t - time.monotonic()))

    # -- an instructor --------------------------------------------------------------------------------
    async def instructor(self) -> None:
        headers = {"Authorization": f"Bearer {TOKEN}"}
        async with httpx.AsyncClient(base_url=self.base, timeout=120, headers=headers) as client:
            try:
                await self.timed(
                    "GET /instructor/events/{id}", client.get(f"/instructor/events/{self.event_id}")
                )
                stream = asyncio.ensure_future(self.follow_instructor(client))
                while not self.stop.is_set():
                    await self.timed(
                        "GET /api/v1/events/{id}/progress",
                        client.get(f"/api/v1/events/{self.event_id}/progress"),
                    )
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self.stop.wait(), 30)
                stream.cancel()
            except Refused:
                return

    async def follow_instructor(self, client: httpx.AsyncClient) -> None:
        opened = time.perf_counter()
        with contextlib.suppress(Refused, httpx.HTTPError, asyncio.CancelledError):
            async for kind, data in sse_events(client, f"/api/v1/events/{self.event_id}/stream"):
                if kind == "ready":
                    self.fig.routes["SSE /api/v1/events/{id}/stream (ready)"].append(
                        time.perf_counter() - opened
                    )
                elif kind == "cell" and data.get("run"):
                    at = data.get("at")
                    self.fig.instructor_recv.append(
                        (int(data["run"]), time.time(), float(at) if at else None)
                    )
                elif kind == "resync":
                    self.fig.errors["instructor stream: resync"] += 1

    # -- the server's side ----------------------------------------------------------------------------
    async def sampler(self, stat: ProcStat, db: DbCounter, started: float) -> None:
        env_queue = 0.0
        tick = 0
        while not self.stop.is_set():
            if tick % 5 == 0:
                metrics = await asyncio.to_thread(read_metrics, self.base, TOKEN)
                env_queue = metrics.get("labserver_env_queue_length", 0.0)
            tick += 1
            self.fig.timeline.append(
                Sample(
                    t=time.monotonic() - started,
                    joined=self.fig.joined,
                    in_flight=self.fig.in_flight,
                    queued_max=self.fig.queued_max,
                    env_queue=env_queue,
                    rss_mb=stat.rss_mb(),
                    cpu_pct=stat.cpu_percent(),
                    db_conns=await asyncio.to_thread(db.count),
                )
            )
            self.fig.queued_max = 0
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stop.wait(), 1.0)

    async def run(self, stat: ProcStat, db: DbCounter) -> float:
        args = self.args
        started = time.monotonic()
        sampler = asyncio.ensure_future(self.sampler(stat, db, started))
        for _ in range(args.instructors):
            self.spawn(self.instructor())
        for i in range(args.attendees):
            at = started + (i / max(args.attendees - 1, 1)) * args.join_s
            self.spawn(self.attendee(Person(i, f"rehearsal-{i:03d}"), at))
        await self.pacer(started + args.minutes * 60)
        deadline = time.monotonic() + 300  # the checks pressed last finish
        while self.fig.in_flight and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        await asyncio.sleep(2.0)  # their SSE events arrive
        wall = time.monotonic() - started
        self.fig.server_counts = await asyncio.to_thread(read_metrics, self.base, TOKEN)
        self.stop.set()
        await sampler
        for task in list(self.tasks):
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        return wall


class DbCounter:
    """Open database connections of the server: PostgreSQL from ``pg_stat_activity`` (the server
    connects with ``application_name`` set), SQLite from its open descriptors of the database file."""

    def __init__(self, stat: ProcStat, pg_url: str | None) -> None:
        self.stat = stat
        self.pg_url = pg_url

    def count(self) -> int:
        if not self.pg_url:
            return self.stat.open_files_matching(("labserver.db",))
        import psycopg

        with psycopg.connect(self.pg_url) as conn:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (APP_NAME,)
            ).fetchone()
        return int(row[0]) if row else 0


# -- the report ---------------------------------------------------------------------------------------
def ms(x: float) -> str:
    return f"{1000 * x:8.1f}"


def latencies(fig: Figures) -> tuple[list[float], list[float]]:
    att = [t - fig.finished_at[r] for r, t in fig.attendee_recv.items() if r in fig.finished_at]
    ins = []
    for run, got, at in fig.instructor_recv:
        finished = at if at is not None else fig.finished_at.get(run)
        if finished is not None:
            ins.append(got - finished)
    return att, ins


def live_counts(metrics: dict[str, float]) -> None:
    """The server's live events per check that finished: what each check cost the room's streams."""
    kinds = {
        name.split('kind="', 1)[1].split('"', 1)[0]: n
        for name, n in metrics.items()
        if name.startswith("labserver_live_events_total{")
    }
    finished = kinds.get("check.finished", 0.0)
    if not finished:
        return
    print(f"\n  live events per check finished ({finished:.0f} checks), as the server counted them")
    for kind, n in sorted(kinds.items(), key=lambda kv: -kv[1]):
        print(f"    {kind:<24} {n / finished:8.2f}")
    for label, name in (
        ("handed to streams", "labserver_live_deliveries_total"),
        ("encoded as JSON", "labserver_live_encodes_total"),
    ):
        print(f"    {label:<24} {metrics.get(name, 0.0) / finished:8.2f}")


def report(args: argparse.Namespace, fig: Figures, wall: float, backend_note: str) -> dict[str, float]:
    print(f"\n## rehearsal: {args.attendees} attendees joining in {args.join_s:.0f} s,")
    print(
        f"   {args.checks_per_s:g} checks/s for {args.minutes:g} min, {args.instructors} instructor dashboards"
    )
    print(f"   {backend_note}; wall {wall:.0f} s; {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}")
    print("\n  route                                            n      p50 ms   p95 ms   p99 ms")
    for route, xs in sorted(fig.routes.items()):
        print(f"  {route:<44} {len(xs):6d} {ms(pct(xs, 50))} {ms(pct(xs, 95))} {ms(pct(xs, 99))}")
    total = sum(fig.errors.values())
    print(f"\n  errors: {total}")
    for kind, n in fig.errors.most_common(20):
        print(f"    {n:5d} x {kind}")
    print(
        f"  check verdicts: {dict(fig.statuses)}; checks not pressed (every joined attendee busy): {fig.skipped}"
    )
    att, ins = latencies(fig)
    print(
        "\n  SSE delivery (check finished as stored -> received)    n      p50 ms   p95 ms   p99 ms   max ms"
    )
    for label, xs in (("-> attendee page", att), ("-> instructor grid (every dashboard)", ins)):
        if xs:
            print(
                f"  {label:<52} {len(xs):6d} {ms(pct(xs, 50))} {ms(pct(xs, 95))} {ms(pct(xs, 99))} {ms(max(xs))}"
            )
        else:
            print(f"  {label:<52}      0")
    tl = fig.timeline
    rss = [s.rss_mb for s in tl] or [0.0]
    cpu = [s.cpu_pct for s in tl[1:]] or [0.0]
    conns = [s.db_conns for s in tl] or [0]
    print(
        f"\n  server: RSS max {max(rss):.0f} MB, at the end {rss[-1]:.0f} MB; CPU mean {statistics.mean(cpu):.0f}% "
        f"p95 {pct(cpu, 95):.0f}% of one core; database connections max {max(conns)}, mean {statistics.mean(conns):.1f}"
    )
    print(
        "\n  over time   joined  checks in flight  deepest check queue  env starts queued  RSS MB  CPU %  db conns"
    )
    step = max(1, len(tl) // 20)
    for k in range(0, len(tl), step):
        chunk = tl[k : k + step]
        last = chunk[-1]
        print(
            f"  {last.t:7.0f} s {last.joined:8d} {max(s.in_flight for s in chunk):17d} "
            f"{max(s.queued_max for s in chunk):20d} {max(s.env_queue for s in chunk):18.0f} "
            f"{last.rss_mb:7.0f} {statistics.mean(s.cpu_pct for s in chunk):6.0f} {max(s.db_conns for s in chunk):9d}"
        )
    live_counts(fig.server_counts)
    joins = fig.routes.get("POST /api/v1/join", [])
    figures = {
        "errors": float(total),
        "join_p95_ms": 1000 * pct(joins, 95),
        "attendee_p95_ms": 1000 * pct(att, 95),
        "instructor_p95_ms": 1000 * pct(ins, 95),
        "rss_mb": rss[-1],
    }
    print("\n  goal (issue 22)                                     figure     goal")
    for label, key, goal in GOALS:
        value = figures[key]
        verdict = "met" if value <= goal else "NOT MET"
        print(f"  {label:<48} {value:9.1f} {'<=':>4} {goal:<5} {verdict}")
    return figures


# -- the server ---------------------------------------------------------------------------------------
def make_pg_database(url: str) -> tuple[str, str]:
    """A fresh database for the run: (its URL for the server, its name)."""
    import psycopg

    name = f"rehearsal_{os.getpid()}"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')
    base, _, _ = url.rpartition("/")
    return f"{base}/{name}", name


def drop_pg_database(url: str, name: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


#: put before a checker's own code by ``--check-cpu-s``: the check first burns that much CPU time
BURN = (
    "import time as _rehearsal_time\n"
    "_rehearsal_end = _rehearsal_time.process_time() + {cpu_s!r}\n"
    "while _rehearsal_time.process_time() < _rehearsal_end:\n"
    "    pass\n"
)


def costly_labs(args: argparse.Namespace, root: Path) -> Path:
    """A copy of the labs folder in the run's own folder whose ``--lab``/``--step`` checker first
    burns ``--check-cpu-s`` CPU-seconds (after its docstring and ``__future__`` imports): a room whose
    checks cost what the machine cannot do at ``--checks-per-s``."""
    from labserver.content.loader import LabCatalog

    labs = root / "labs"
    shutil.copytree(REPO / "labs", labs, ignore=shutil.ignore_patterns("__pycache__"))
    step = next(s for s in LabCatalog(labs).labs[args.lab].steps if s.id == args.step)
    lines = step.checker.read_text().splitlines(keepends=True)
    at = max((i + 1 for i, line in enumerate(lines) if line.startswith("from __future__")), default=0)
    if not at:  # after the module docstring, if any
        text = "".join(lines)
        tree = ast.parse(text)
        doc = tree.body[0] if tree.body and isinstance(tree.body[0], ast.Expr) else None
        at = (doc.end_lineno or 0) if doc is not None and isinstance(doc.value, ast.Constant) else 0
    lines.insert(at, BURN.format(cpu_s=args.check_cpu_s))
    step.checker.write_text("".join(lines))
    return labs


def start_server(
    args: argparse.Namespace, root: Path, db_url: str | None, labs_dir: Path
) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = dict(os.environ)
    env.update(
        {
            "LABSERVER_DATA_DIR": str(root / "data"),
            "LABSERVER_BACKEND": "local",
            "LABSERVER_INSTRUCTOR_TOKEN": TOKEN,
            "LABSERVER_DEFAULT_EVENT_CODE": CODE,
            "LABSERVER_WEB_DIR": str(REPO / "web"),
            "LABSERVER_LABS_DIR": str(labs_dir),
            "REHEARSAL_LOCAL": str(args.local),
            "REHEARSAL_DOCKER": str(args.docker),
            "LABSERVER_DOCKER__NAME_PREFIX": docker_prefix(),
        }
    )
    if args.check_slots:
        env["LABSERVER_CHECKS__MAX_CONCURRENT"] = str(args.check_slots)
    if db_url:
        sep = "&" if "?" in db_url else "?"
        env["LABSERVER_DATABASE_URL"] = f"{db_url}{sep}application_name={APP_NAME}"
    uvicorn = [
        "-m",
        "uvicorn",
        "--factory",
        "crowd_backend:create_crowd_app",
        "--app-dir",
        str(REPO / "bench"),
    ]
    uvicorn += ["--host", "127.0.0.1", "--port", str(port), "--no-access-log", "--log-level", "warning"]
    uvicorn += ["--timeout-graceful-shutdown", "3", "--loop", args.loop]  # `labserver serve` runs asyncio
    # py-spy starts the server and samples it from outside (no cost inside the process, every thread)
    profiler = (
        [str(Path(sys.executable).with_name("py-spy")), "record", "--rate", str(PROFILE_RATE)]
        + ["--format", "raw", "--nonblocking", "-o", str(Path(args.profile).resolve()), "--", sys.executable]
        if args.profile
        else [sys.executable]
    )
    log = open(root / "server.log", "wb")  # noqa: SIM115 (kept open for the server's life)
    proc = subprocess.Popen([*profiler, *uvicorn], env=env, cwd=root, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    wait_healthy(proc, base, log=str(root / "server.log"))
    return proc, base


def profiled_pid(proc: subprocess.Popen[bytes]) -> int:
    """The server's pid under ``py-spy record -- python ...`` (py-spy's child), for its RSS and CPU."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
            if children:
                return int(children[0])
        time.sleep(0.1)
    sys.exit("--profile: py-spy started no server")


def docker_prefix() -> str:
    """The Docker name prefix of this run's environments (removed after it)."""
    return f"labserver-rehearsal-{os.getpid()}"


def docker_preflight(args: argparse.Namespace) -> None:
    """Exit with what to do when ``--docker`` environments are asked and cannot be had."""
    if not args.docker:
        return
    from crowd_backend import docker_shortfall

    from labserver.config import Settings

    why = docker_shortfall(Settings(labs_dir=REPO / "labs"), args.docker)
    if why:
        sys.exit(f"--docker {args.docker}: {why} (or pass --docker 0)")


def remove_docker(args: argparse.Namespace) -> None:
    if not args.docker:
        return
    from crowd_backend import remove_docker_environments

    from labserver.config import Settings

    os.environ["LABSERVER_DOCKER__NAME_PREFIX"] = docker_prefix()
    removed = asyncio.run(remove_docker_environments(Settings()))
    print(f"  removed {removed} Docker environments ({docker_prefix()}-*)")


def event_id_of(base: str) -> int:
    events = httpx.get(
        f"{base}/api/v1/events", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30
    ).json()
    return next(int(e["id"]) for e in events if e.get("code") == CODE)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--attendees", type=int, default=300)
    ap.add_argument("--join-s", type=float, default=60.0, help="the crowd joins within this many seconds")
    ap.add_argument("--checks-per-s", type=float, default=10.0, help="checks pressed per second, in total")
    ap.add_argument(
        "--minutes", type=float, default=10.0, help="how long checks are pressed, from the first join"
    )
    ap.add_argument("--instructors", type=int, default=5)
    ap.add_argument("--docker", type=int, default=8, help="attendees with a Docker environment (0: none)")
    ap.add_argument("--local", type=int, default=40, help="attendees with a sandboxed local environment")
    ap.add_argument(
        "--check-slots", type=int, default=0, help="checks at once (default: the server's setting)"
    )
    ap.add_argument(
        "--loop", choices=["asyncio", "uvloop"], default="asyncio", help="the server's event loop"
    )
    ap.add_argument(
        "--check-cpu-s",
        type=float,
        default=0.0,
        help="the checked step's checker first burns this much CPU (a copy of the labs; e.g. 1.0: "
        "checks the machine cannot keep up with, so a queue forms)",
    )
    ap.add_argument("--lab", default="getting-started")
    ap.add_argument("--step", default="write-file")
    ap.add_argument("--database-url", help="PostgreSQL server to make a fresh database on (default SQLite)")
    ap.add_argument(
        "--profile",
        help="sample the server with py-spy into this file (collapsed stacks) and print where its CPU went",
    )
    args = ap.parse_args()
    docker_preflight(args)

    root = Path(tempfile.mkdtemp(prefix="labserver-rehearsal-"))
    proc = None
    db_url, db_name = (None, "")
    if args.database_url:
        db_url, db_name = make_pg_database(args.database_url)
    try:
        labs_dir = costly_labs(args, root) if args.check_cpu_s else REPO / "labs"
        proc, base = start_server(args, root, db_url, labs_dir)
        server_pid = profiled_pid(proc) if args.profile else proc.pid
        stat = ProcStat(server_pid)
        event_id = event_id_of(base)
        docker = min(args.docker, args.attendees)
        local = min(args.local, args.attendees - docker)
        note = (
            f"backend {'docker+' if docker else ''}local+light: "
            f"{f'{docker} Docker + ' if docker else ''}{local} local (sandboxed) + "
            f"{args.attendees - docker - local} light environments, "
            f"database {'PostgreSQL' if db_url else 'SQLite'}, check slots {args.check_slots or 'default (4)'}, "
            f"{args.loop} loop"
            + (f", the checked step burns {args.check_cpu_s:g} CPU-s first" if args.check_cpu_s else "")
        )
        print(f"# {note}; server {base} (log {root / 'server.log'})", flush=True)
        rehearsal_db = DbCounter(stat, f"{args.database_url.rpartition('/')[0]}/postgres" if db_url else None)
        rehearsal = Rehearsal(args, base, event_id)
        wall = asyncio.run(rehearsal.run(stat, rehearsal_db))
        report(args, rehearsal.fig, wall, note)
    finally:
        if args.profile and proc is not None:  # the server ends; py-spy then writes its file and exits
            with contextlib.suppress(ProcessLookupError):
                os.kill(server_pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(120)
        stop_server(proc)
        if args.profile and Path(args.profile).exists():
            print()
            print(profile_summary.summarize(Path(args.profile), rate=PROFILE_RATE))
        if db_url:
            drop_pg_database(args.database_url, db_name)
        remove_docker(args)
        print(f"  server log: {root / 'server.log'}")


if __name__ == "__main__":
    main()
