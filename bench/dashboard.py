"""Benchmark of the instructor's dashboard (prints figures; asserts nothing).

    .venv/bin/python bench/dashboard.py [--attendees 300] [--instructors 5] [--checks 40]

1. The grid at 300 attendees x 40 steps (8 copies of getting-started), seeded with step starts and
   check runs: service time (load + build), and the server time and payload of
   ``GET /api/v1/events/{id}/progress`` and of the dashboard page ``GET /instructor/events/{id}``,
   through the ASGI app in process (median of repeats).
2. SSE delivery latency against a real server (uvicorn in a subprocess): 300 attendee streams and 5
   instructor streams stay connected while real checks run (``POST .../check``, local backend, 4 at a
   time); latency = the time an event is received minus the check run's ``finished_at`` (the moment
   the check finished, stored before the result is published), for the attendee's own
   ``check.finished`` and for every instructor's ``cell`` delta.

3. In Chromium (Playwright, Debian's ``/usr/bin/chromium``; ``--no-browser`` skips it): the dashboard
   page at 300 x 40, time to a usable grid (navigation to the table built) and the time the page's JS
   spends building it; then, for real checks, check finished -> cell changed on the page.

   The server runs unchanged (``labserver.app:create_app``): attendee streams hold no database
   connection (``tests/routes/test_stream.py``), so 300 open pages leave the pool free.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gzip
import os
import random
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from clients import REPO, free_port, sse_events, wait_healthy
from sqlmodel import Session

TOKEN = "bench-instructor-token"


def make_labs(root: Path, copies: int) -> list[str]:
    """``copies`` of getting-started (5 steps each) under new ids."""
    ids = []
    for i in range(1, copies + 1):
        lab_id = f"gs{i}"
        target = root / lab_id
        shutil.copytree(
            REPO / "labs" / "getting-started", target, ignore=shutil.ignore_patterns("__pycache__")
        )
        spec = (target / "lab.yaml").read_text()
        (target / "lab.yaml").write_text(spec.replace("id: getting-started", f"id: {lab_id}", 1))
        ids.append(lab_id)
    return ids


def seed(app, labs: list[str], attendees: int) -> tuple[int, dict[int, str]]:  # type: ignore[no-untyped-def]
    """An event with ``attendees`` attendees at random progress; returns (event id, {id: token})."""
    import datetime as dt

    from labserver import clock
    from labserver.models import Attendee, CheckRun, StepStart
    from labserver.services.joining.events import create_event, hash_token

    ctx = app.state.ctx
    rng = random.Random(7)
    steps = [(lab, s.id) for lab in labs for s in ctx.catalog.labs[lab].steps]
    t0 = clock.now() - dt.timedelta(hours=2)
    tokens: dict[int, str] = {}
    with Session(ctx.engine, expire_on_commit=False) as s:
        event = create_event(s, title="Bench event", labs=labs, code="BENCH1")
        people = []
        for i in range(attendees):
            token = secrets.token_urlsafe(16)
            a = Attendee(event_id=event.id or 0, name=f"Attendee {i:03d}", token_hash=hash_token(token))
            people.append((a, token))
        s.add_all([a for a, _ in people])
        s.commit()
        rows: list[object] = []
        for a, token in people:
            assert a.id is not None
            tokens[a.id] = token
            reached = rng.randint(0, len(steps))
            t = t0 + dt.timedelta(seconds=rng.randint(0, 600))
            for k, (lab, step) in enumerate(steps[:reached]):
                rows.append(StepStart(attendee_id=a.id, lab_id=lab, step_id=step, started_at=t))
                fails = rng.choice([0, 0, 0, 1, 2, 4])
                for _ in range(fails):
                    t += dt.timedelta(seconds=rng.randint(20, 120))
                    rows.append(
                        CheckRun(
                            event_id=event.id or 0,
                            attendee_id=a.id,
                            lab_id=lab,
                            step_id=step,
                            status="failed",
                            created_at=t,
                            finished_at=t,
                            log="x" * 200,
                        )
                    )
                t += dt.timedelta(seconds=rng.randint(20, 120))
                last = k == reached - 1 and rng.random() < 0.5
                rows.append(
                    CheckRun(
                        event_id=event.id or 0,
                        attendee_id=a.id,
                        lab_id=lab,
                        step_id=step,
                        status="failed" if last else "passed",
                        created_at=t,
                        finished_at=t,
                        log="y" * 200,
                    )
                )
        s.add_all(rows)  # type: ignore[arg-type]
        s.commit()
        runs = sum(1 for r in rows if isinstance(r, CheckRun))
        print(
            f"seeded {attendees} attendees x {len(steps)} steps: {runs} check runs, "
            f"{len(rows) - runs} step starts"
        )
        return event.id or 0, tokens


def median_ms(samples: list[float]) -> str:
    return f"median {statistics.median(samples) * 1000:.1f} ms (min {min(samples) * 1000:.1f}, max {max(samples) * 1000:.1f})"


async def grid_figures(app, event_id: int, repeats: int) -> None:  # type: ignore[no-untyped-def]
    from labserver.models import Event
    from labserver.services.dashboard import room

    ctx = app.state.ctx
    service = []
    for _ in range(repeats):
        start = time.perf_counter()
        with Session(ctx.engine, expire_on_commit=False) as s:
            event = s.get(Event, event_id)
            assert event is not None
            payload = room.grid(room.load_facts(ctx, s, event))
        service.append(time.perf_counter() - start)
    print(f"grid service (load_facts + grid): {median_ms(service)}; {len(payload['cells'])} touched cells")

    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://bench") as client:
        headers = {"Authorization": f"Bearer {TOKEN}"}
        for label, url in (
            ("GET /api/v1/events/{id}/progress", f"/api/v1/events/{event_id}/progress"),
            ("GET /api/v1/events/{id}/summary (funnel + stuck)", f"/api/v1/events/{event_id}/summary"),
            ("GET /instructor/events/{id} (page)", f"/instructor/events/{event_id}"),
        ):
            times = []
            body = b""
            for _ in range(repeats):
                start = time.perf_counter()
                resp = await client.get(url, headers=headers)
                times.append(time.perf_counter() - start)
                body = resp.content
                assert resp.status_code == 200, resp.text[:200]
            print(
                f"{label}: {median_ms(times)}; payload {len(body) / 1024:.1f} KiB "
                f"({len(gzip.compress(body)) / 1024:.1f} KiB gzipped)"
            )


class Streams:
    def __init__(self) -> None:
        self.ready = 0
        self.attendee_recv: dict[int, float] = {}  # run id -> time received on the attendee's stream
        self.instructor_recv: list[tuple[int, float]] = []  # (run id, time) per instructor stream
        self.finished_at: dict[int, float] = {}  # run id -> finished_at (epoch s)

    async def follow(self, client: httpx.AsyncClient, url: str, headers: dict[str, str], role: str) -> None:
        async for kind, data in sse_events(client, url, headers):
            now = time.time()
            if kind == "ready":
                self.ready += 1
            elif role == "attendee" and kind == "check.finished":
                self.attendee_recv[int(data["run_id"])] = now
            elif role == "instructor" and kind == "cell" and data.get("run"):
                self.instructor_recv.append((int(data["run"]), now))
                if data.get("at"):
                    self.finished_at[int(data["run"])] = float(data["at"])


async def sse_figures(
    url: str, event_id: int, tokens: dict[int, str], lab: str, instructors: int, checks: int
) -> None:
    streams = Streams()
    limits = httpx.Limits(max_connections=len(tokens) + instructors + 16, max_keepalive_connections=32)
    timeout = httpx.Timeout(120.0, connect=30.0)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=timeout) as client:
        tasks = [
            asyncio.ensure_future(
                streams.follow(client, "/api/v1/stream", {"Authorization": f"Bearer {tok}"}, "attendee")
            )
            for tok in tokens.values()
        ]
        tasks += [
            asyncio.ensure_future(
                streams.follow(
                    client,
                    f"/api/v1/events/{event_id}/stream",
                    {"Authorization": f"Bearer {TOKEN}"},
                    "instructor",
                )
            )
            for _ in range(instructors)
        ]
        total = len(tasks)
        start = time.monotonic()
        while streams.ready < total:
            if time.monotonic() - start > 120:
                raise RuntimeError(f"only {streams.ready} of {total} streams became ready")
            await asyncio.sleep(0.05)
        print(
            f"{streams.ready} SSE streams connected ({len(tokens)} attendees, {instructors} instructors) "
            f"in {time.monotonic() - start:.1f} s"
        )

        sample = random.Random(3).sample(sorted(tokens), checks)
        gate = asyncio.Semaphore(4)
        posts: list[float] = []
        measured: set[int] = set()

        async def one(aid: int) -> None:
            async with gate:
                t = time.perf_counter()
                resp = await client.post(
                    f"/api/v1/labs/{lab}/steps/write-file/check",
                    headers={"Authorization": f"Bearer {tokens[aid]}"},
                )
                posts.append(time.perf_counter() - t)
                assert resp.status_code == 200, resp.text[:300]
                measured.add(int(resp.json()["id"]))

        # warm-up: each sampled attendee's environment is created by its first check
        await asyncio.gather(*(one(aid) for aid in sample))
        posts.clear()
        measured.clear()
        await asyncio.gather(*(one(aid) for aid in sample))
        await asyncio.sleep(2.0)
        for task in tasks:
            task.cancel()
        with contextlib.suppress(BaseException):
            await asyncio.gather(*tasks, return_exceptions=True)

    att = [
        t - streams.finished_at[r]
        for r, t in streams.attendee_recv.items()
        if r in measured and r in streams.finished_at
    ]
    ins = [
        t - streams.finished_at[r]
        for r, t in streams.instructor_recv
        if r in measured and r in streams.finished_at
    ]
    print(f"checks: {checks} (write-file checker, 4 at a time); POST /check round trip {median_ms(posts)}")

    def line(label: str, xs: list[float], expected: int) -> None:
        if not xs:
            print(f"{label}: no events received")
            return
        xs = sorted(xs)
        p95 = xs[min(len(xs) - 1, int(0.95 * len(xs)))]
        print(
            f"{label}: {len(xs)}/{expected} events; latency median {statistics.median(xs) * 1000:.1f} ms, "
            f"p95 {p95 * 1000:.1f} ms, max {xs[-1] * 1000:.1f} ms"
        )

    line("SSE check finished -> attendee stream", att, checks)
    line("SSE check finished -> instructor streams (cell delta)", ins, checks * instructors)


def browser_figures(url: str, event_id: int, tokens: dict[int, str], lab: str, checks: int) -> None:
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    args = [
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",
        "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1, EXCLUDE localhost",
    ]
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=args)
        try:
            page = browser.new_context(base_url=url, viewport={"width": 1440, "height": 900}).new_page()
            page.goto("/instructor/login")
            page.fill("input[name=name]", "bench")
            page.fill("input[name=token]", TOKEN)
            page.click("#login-form button[type=submit]")
            page.wait_for_url("**/instructor")
            loads, builds = [], []
            for _ in range(3):
                page.goto(f"/instructor/events/{event_id}")
                page.wait_for_function(
                    "document.getElementById('grid').dataset.ready === '1'", timeout=120_000
                )
                loads.append(page.evaluate("performance.now()") / 1000)
                builds.append(float(page.get_attribute("#grid", "data-build-ms") or 0) / 1000)
            cells = page.locator("#grid td.cell").count()
            print(
                f"dashboard in Chromium: {cells} cells; navigation -> grid ready {median_ms(loads)}; "
                f"building the table in JS {median_ms(builds)}"
            )
            page.wait_for_function("document.body.dataset.live === 'ready'")
            lags, applies = [], []
            with httpx.Client(base_url=url, timeout=120) as client:
                for aid in random.Random(5).sample(sorted(tokens), checks):
                    before = page.get_attribute("#grid", "data-last-delta-lag")
                    resp = client.post(
                        f"/api/v1/labs/{lab}/steps/write-file/check",
                        headers={"Authorization": f"Bearer {tokens[aid]}"},
                    )
                    assert resp.status_code == 200, resp.text[:200]
                    page.wait_for_function(
                        "(b) => document.getElementById('grid').dataset.lastDeltaLag !== b",
                        arg=before,
                        timeout=30_000,
                    )
                    lags.append(float(page.get_attribute("#grid", "data-last-delta-lag") or 0))
                    applies.append(float(page.get_attribute("#grid", "data-last-delta-ms") or 0) / 1000)
            print(
                f"check finished -> cell changed in Chromium ({checks} checks): {median_ms(lags)}; "
                f"applying one delta in JS {median_ms(applies)}"
            )
        finally:
            browser.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--attendees", type=int, default=300)
    parser.add_argument("--instructors", type=int, default=5)
    parser.add_argument("--labs", type=int, default=8, help="copies of the 5-step lab (8 = 40 steps)")
    parser.add_argument("--checks", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--no-browser", action="store_true", help="skip the Chromium figures")
    args = parser.parse_args()

    from labserver.app import create_app
    from labserver.config import Settings

    root = Path(tempfile.mkdtemp(prefix="labserver-bench-"))
    proc = None
    try:
        labs_dir = root / "labs"
        labs = make_labs(labs_dir, args.labs)
        data_dir = root / "data"
        settings = Settings(
            data_dir=data_dir, labs_dir=labs_dir, web_dir=REPO / "web", instructor_token=TOKEN
        )
        app = create_app(settings)
        event_id, tokens = seed(app, labs, args.attendees)
        load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
        print(f"machine: {os.cpu_count()} CPUs, load average {load}; database: SQLite (WAL)")
        print(f"\n== grid at {args.attendees} attendees x {5 * args.labs} steps ==")
        asyncio.run(grid_figures(app, event_id, args.repeats))
        app.state.ctx.engine.dispose()

        print(f"\n== SSE delivery with {len(tokens)} attendee and {args.instructors} instructor streams ==")
        port = free_port()
        factory = "labserver.app:create_app"
        print(f"server: uvicorn {factory}")
        env = {
            **os.environ,
            "LABSERVER_DATA_DIR": str(data_dir),
            "LABSERVER_LABS_DIR": str(labs_dir),
            "LABSERVER_WEB_DIR": str(REPO / "web"),
            "LABSERVER_INSTRUCTOR_TOKEN": TOKEN,
            "LABSERVER_BACKEND": "local",
        }
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "uvicorn",
                "--factory",
                factory,
                "--app-dir",
                str(REPO),
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--log-level",
                "warning",
            ],
            env=env,
            cwd=root,
        )
        url = f"http://127.0.0.1:{port}"
        wait_healthy(proc, url, timeout_s=60)
        asyncio.run(sse_figures(url, event_id, tokens, labs[0], args.instructors, args.checks))
        if not args.no_browser:
            print(f"\n== the dashboard in Chromium at {args.attendees} x {5 * args.labs} ==")
            browser_figures(url, event_id, tokens, labs[0], min(10, args.checks))
    finally:
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
