"""A room joins: N attendees do what a browser does, one at a time and all at once.

    .venv/bin/python bench/room.py [--backend local|docker] [--crowd 30] [--sequential 5]
                                   [--warm N] [--cpus 0.5] [--memory-mb 1024] [--lab getting-started]
                                   [--url http://127.0.0.1:8000 --code CODE]

Each attendee, over the public interfaces only: ``POST /api/v1/join``, ``GET /labs/<lab>`` (the
lab page), ``GET /api/v1/stream`` (SSE, kept open), then the terminal WebSocket
``/api/v1/labs/<lab>/terminal``, where it types ``echo`` and waits for the answer. "Usable" is the
moment the answer arrives, measured from the join POST. Without ``--url`` a server is started on a
free port with a data folder of its own (SQLite, the chosen backend; Docker containers get the name
prefix ``lsroom`` and are removed at the end).

Printed: p50/p95 join -> usable, time until all are usable, failures by kind, where the time went
(the phases the server streams to the attendee: queue, create/start, seed, ready; then terminal
open and echo), and the server's database pool waits when it exposes them on ``/metrics``.
Figures depend on the machine and on what else runs; nothing here is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import statistics
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import websockets.exceptions
from clients import (
    Refused,
    echo,
    join,
    open_terminal,
    pct,
    read_metrics,
    serve,
    sse_events,
)

TOKEN = "room-bench-instructor"
CODE = "ROOMBENCH"
PREFIX = f"lsroom{os.getpid()}"  # of this run only: another bench may share the engine
TIMEOUT_S = 300.0


@dataclass
class Attendee:
    name: str
    t0: float = 0.0
    marks: dict[str, float] = field(default_factory=dict)  # phase -> seconds since t0
    failure: str = ""

    def mark(self, phase: str) -> None:
        self.marks.setdefault(phase, time.monotonic() - self.t0)


async def follow_stream(client: httpx.AsyncClient, who: Attendee, stop: asyncio.Event) -> None:
    """Reads the attendee's SSE stream and marks each environment phase when it is first seen."""
    try:
        async for kind, data in sse_events(client, "/api/v1/stream"):
            if stop.is_set():
                return
            if kind == "ready":
                who.mark("stream open")
            elif kind.startswith("env."):
                who.mark(f"env {data.get('phase') or data.get('state') or kind}")
    except Refused as exc:
        who.failure = who.failure or exc.kind
    except (httpx.HTTPError, asyncio.CancelledError):
        return


async def one_attendee(base: str, code: str, lab: str, who: Attendee) -> None:
    who.t0 = time.monotonic()
    stop = asyncio.Event()
    limits = httpx.Limits(max_connections=4)
    async with httpx.AsyncClient(base_url=base, timeout=TIMEOUT_S, limits=limits) as client:
        try:
            token = await join(client, code, who.name)
            who.mark("joined")
            stream = asyncio.ensure_future(follow_stream(client, who, stop))
            page = await client.get(f"/labs/{lab}", cookies={"labserver_token": token})
            if page.status_code != 200:
                who.failure = f"lab page HTTP {page.status_code}"
                return
            who.mark("lab page")
            async with await open_terminal(base, lab, token, timeout_s=TIMEOUT_S) as ws:
                who.mark("terminal open")
                try:
                    await echo(ws, timeout_s=TIMEOUT_S, on_first_output=lambda: who.mark("first output"))
                except TimeoutError:
                    who.failure = "echo timeout"
                    return
                who.mark("usable")
            stream.cancel()
        except Refused as exc:
            who.failure = exc.kind
        except TimeoutError:
            who.failure = who.failure or "timeout"
        except websockets.exceptions.InvalidStatus as exc:
            who.failure = f"terminal HTTP {exc.response.status_code}"
        except websockets.exceptions.ConnectionClosed as exc:
            code = f"{exc.rcvd.code} {exc.rcvd.reason}".strip() if exc.rcvd else "no close frame"
            who.failure = f"terminal closed ({code})"
        except (httpx.HTTPError, OSError) as exc:
            who.failure = f"{type(exc).__name__}"
        finally:
            stop.set()


def report(label: str, people: list[Attendee], wall: float) -> None:
    ok = [p for p in people if not p.failure and "usable" in p.marks]
    usable = [p.marks["usable"] for p in ok]
    print(f"\n## {label}: {len(people)} attendees, {len(people) - len(ok)} failed")
    if usable:
        print(
            f"  join -> usable terminal   p50 {statistics.median(usable):6.2f} s   p95 {pct(usable, 95):6.2f} s"
            f"   all usable after {max(usable):6.2f} s (wall {wall:.2f} s)"
        )
    fails = collections.Counter(p.failure for p in people if p.failure)
    for kind, n in fails.most_common():
        print(f"  failed: {n:3d} x {kind}")
    phases: dict[str, list[float]] = collections.defaultdict(list)
    for p in ok:
        for phase, t in p.marks.items():
            phases[phase].append(t)
    if phases:
        print("  where the time went (seconds after the join POST; p50 / p95 over those that saw it):")
        for phase, ts in sorted(phases.items(), key=lambda kv: statistics.median(kv[1])):
            print(f"    {phase:<28} {statistics.median(ts):6.2f} / {pct(ts, 95):6.2f}   (n={len(ts)})")


def pool_waits(base: str) -> str:
    """The server's own figures from ``/metrics``: database pool checkout waits (count, mean, how
    many waited over 0.1 s, timeouts) and environment start time by phase (queue, create)."""
    values = read_metrics(base, TOKEN)
    if not values:
        return "n/a (no /metrics)"
    count = values.get("labserver_db_pool_wait_seconds_count")
    if count is None:
        return "n/a (the server exposes no labserver_db_pool_wait_seconds)"
    total = values.get("labserver_db_pool_wait_seconds_sum", 0.0)
    fast = values.get('labserver_db_pool_wait_seconds_bucket{le="0.1"}', 0.0)
    out = [
        f"{count:.0f} checkouts, mean {1000 * total / max(count, 1):.1f} ms, {count - fast:.0f} waited > 0.1 s, "
        f"{values.get('labserver_db_pool_timeouts_total', 0):.0f} timed out"
    ]
    for phase in ("queue", "create"):
        n = values.get(f'labserver_env_start_seconds_count{{phase="{phase}"}}')
        if n:
            mean = values.get(f'labserver_env_start_seconds_sum{{phase="{phase}"}}', 0.0) / n
            out.append(f"env {phase}: {n:.0f} x mean {mean:.2f} s")
    return "; ".join(out)


def start_server(args: argparse.Namespace, data: Path) -> tuple[subprocess.Popen[bytes], str]:
    env = {
        "LABSERVER_DATA_DIR": str(data),
        "LABSERVER_BACKEND": args.backend,
        "LABSERVER_INSTRUCTOR_TOKEN": TOKEN,
        "LABSERVER_DEFAULT_EVENT_CODE": CODE,
        "LABSERVER_DOCKER__NAME_PREFIX": PREFIX,
        "LABSERVER_DOCKER__CPUS": str(args.cpus),
        "LABSERVER_DOCKER__MEMORY_MB": str(args.memory_mb),
        "LABSERVER_DOCKER__WARM_POOL": str(args.warm),
    }
    return serve(env, data.parent / "server.log")


def remove_containers() -> None:
    try:
        import docker
    except ImportError:
        return
    client = docker.from_env()
    for c in client.containers.list(all=True, filters={"name": PREFIX}):
        if c.name.startswith(PREFIX + "-"):
            c.remove(force=True)
    for v in client.volumes.list(filters={"name": PREFIX}):
        if v.name.startswith(PREFIX):
            v.remove(force=True)


async def run_wave(base: str, code: str, lab: str, names: list[str], *, at_once: bool) -> None:
    people = [Attendee(n) for n in names]
    start = time.monotonic()
    if at_once:
        await asyncio.gather(*(one_attendee(base, code, lab, p) for p in people))
    else:
        for p in people:
            await one_attendee(base, code, lab, p)
    report(("all at once" if at_once else "one at a time"), people, time.monotonic() - start)


def stop_all(base: str, code: str) -> None:
    """The instructor's "Stop all" for the bench's event, so the crowd meets a room with nothing
    else running (the sequential wave's environments would otherwise hold capacity)."""
    auth = {"Authorization": f"Bearer {TOKEN}"}
    events = httpx.get(f"{base}/api/v1/events", headers=auth, timeout=30).json()
    for event in events:
        if event.get("code") == code:
            out = httpx.post(f"{base}/api/v1/events/{event['id']}/stop-all", headers=auth, timeout=300)
            print(f"\n# stop all between the waves: HTTP {out.status_code} {out.text[:200]}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", choices=["local", "docker"], default="local")
    ap.add_argument("--crowd", type=int, default=30)
    ap.add_argument("--sequential", type=int, default=5)
    ap.add_argument("--warm", type=int, default=0, help="warm pool size (Docker)")
    ap.add_argument("--cpus", type=float, default=0.5)
    ap.add_argument("--memory-mb", type=int, default=1024)
    ap.add_argument("--lab", default="getting-started")
    ap.add_argument("--url", help="an already running server (with --code); none is started")
    ap.add_argument("--code", default=CODE)
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="labserver-room-"))
    proc = None
    try:
        if args.url:
            base = args.url.rstrip("/")
        else:
            proc, base = start_server(args, tmp / "data")
        print(f"# room bench: {args.backend} backend, lab {args.lab}, {os.cpu_count()} cores, server {base}")
        if args.backend == "docker":
            print(f"# limits {args.cpus} CPU / {args.memory_mb} MiB per environment, warm pool {args.warm}")
        run = uuid.uuid4().hex[:4]
        if args.sequential:
            names = [f"seq-{run}-{i}" for i in range(args.sequential)]
            asyncio.run(run_wave(base, args.code, args.lab, names, at_once=False))
            if args.crowd and not args.url:
                stop_all(base, args.code)
        if args.crowd:
            names = [f"crowd-{run}-{i}" for i in range(args.crowd)]
            asyncio.run(run_wave(base, args.code, args.lab, names, at_once=True))
        print(f"\n  database pool waits: {pool_waits(base)}")
    finally:
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
            if args.backend == "docker":
                remove_containers()
            print(f"  server log: {tmp / 'server.log'}")


if __name__ == "__main__":
    main()
