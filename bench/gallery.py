"""Benchmark of the live gallery at a full room (prints figures; asserts nothing).

    .venv/bin/python bench/gallery.py [--attendees 200] [--heavy 5] [--seconds 20] [--no-browser]

1. A real server (``labserver.app:create_app`` under uvicorn, local backend) with ``--attendees``
   attendees seeded with random progress (so the sort orders have something to order). Each opens
   its terminal (the attendee WebSocket), starts a printing loop and goes away (the shell lives on,
   as after a closed laptop lid): most print one line a second; ``--heavy`` of them print about
   1.3 MB/s (base64 of 100 kB every 0.1 s). The loops use bash builtins only (a FIFO as the timer),
   so 200 of them cost little CPU of their own.
2. The server's CPU while nothing watches, then while one gallery page is open (the feed's cost).
3. Chromium (Playwright, ``/usr/bin/chromium``) opens the gallery: time until every thumbnail is
   drawn, then for ``--seconds`` seconds, first idle and then scrolling: frame time from
   requestAnimationFrame deltas (median, p95, p99, max, frames over 50 ms), long tasks (the
   Performance API), and the bytes per second received on the page's one stream (Chrome DevTools
   Protocol ``Network.dataReceived``), with messages and thumbnail updates per second.

Figures depend on the machine and on what else runs on it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import secrets
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import websockets

REPO = Path(__file__).resolve().parent.parent
TOKEN = "bench-instructor-token"
LAB = "getting-started"
TIMER = "rm -f .gf; mkfifo .gf; exec 9<>.gf; rm -f .gf; "  # `read -t` on a FIFO: a sleep without a process
CHATTY = (
    TIMER
    + "i=0; while :; do i=$((i+1)); printf 'line %d %(%T)T lorem ipsum dolor sit amet\\n' $i -1; read -t 1 -u 9; done\r"
)
HEAVY = TIMER + "while :; do head -c 100000 /dev/urandom | base64; read -t 0.1 -u 9; done\r"


def seed(data_dir: Path, labs_dir: Path, attendees: int) -> tuple[int, list[str]]:
    """An event with ``attendees`` attendees at random progress; returns (event id, tokens)."""
    import datetime as dt

    from sqlmodel import Session

    from labserver import clock
    from labserver.app import create_app
    from labserver.config import Settings
    from labserver.models import Attendee, CheckRun, StepStart
    from labserver.services.joining.events import create_event, hash_token

    app = create_app(
        Settings(data_dir=data_dir, labs_dir=labs_dir, web_dir=REPO / "web", instructor_token=TOKEN)
    )
    ctx = app.state.ctx
    rng = random.Random(7)
    steps = [s.id for s in ctx.catalog.labs[LAB].steps]
    t0 = clock.now() - dt.timedelta(hours=1)
    with Session(ctx.engine, expire_on_commit=False) as s:
        event = create_event(s, title="Gallery bench", labs=[LAB], code="GALLERY1")
        people = [
            (Attendee(event_id=event.id or 0, name=f"Attendee {i:03d}", token_hash=hash_token(tok)), tok)
            for i, tok in ((i, secrets.token_urlsafe(16)) for i in range(attendees))
        ]
        s.add_all([a for a, _ in people])
        s.commit()
        rows: list[object] = []
        for a, _tok in people:
            t = t0 + dt.timedelta(seconds=rng.randint(0, 600))
            for step in steps[: rng.randint(0, len(steps))]:
                rows.append(StepStart(attendee_id=a.id or 0, lab_id=LAB, step_id=step, started_at=t))
                t += dt.timedelta(seconds=rng.randint(20, 300))
                status = "failed" if rng.random() < 0.3 else "passed"
                run = CheckRun(event_id=event.id or 0, attendee_id=a.id or 0, lab_id=LAB, step_id=step)
                run.status, run.created_at, run.finished_at = status, t, t
                rows.append(run)
                if status == "failed":
                    break
        s.add_all(rows)  # type: ignore[arg-type]
        s.commit()
        event_id = event.id or 0
    ctx.engine.dispose()
    return event_id, [tok for _, tok in people]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def start_loop(url: str, token: str, command: str, gate: asyncio.Semaphore) -> float:
    """Open the attendee's terminal, start ``command`` once the prompt is out, leave; seconds taken."""
    ws_url = url.replace("http://", "ws://") + f"/api/v1/labs/{LAB}/terminal?token={token}&cols=100&rows=30"
    async with gate:
        t = time.monotonic()
        async with websockets.connect(ws_url, max_size=None, open_timeout=120) as ws:
            while True:
                frame = await asyncio.wait_for(ws.recv(), 120)
                if isinstance(frame, str) and json.loads(frame).get("ready"):
                    break
            await ws.send(command.encode())
            while True:  # the loop's first output: it runs
                frame = await asyncio.wait_for(ws.recv(), 60)
                if isinstance(frame, bytes) and (b"line 1 " in frame or b"==" in frame or len(frame) > 2000):
                    break
        return time.monotonic() - t


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def percentile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


FRAMES_JS = """() => { window.__frames = []; window.__long = [];
  new PerformanceObserver((l) => { for (const e of l.getEntries()) window.__long.push(e.duration); }).observe({ type: 'longtask', buffered: false });
  const f = (t) => { window.__frames.push(t); requestAnimationFrame(f); }; requestAnimationFrame(f); }"""
TAKE_JS = """() => { const f = window.__frames, d = []; for (let i = 1; i < f.length; i++) d.push(f[i] - f[i - 1]);
  const out = { deltas: d, long: window.__long, stats: Object.assign({}, window.galleryStats) };
  window.__frames = []; window.__long = []; return out; }"""


def frame_line(label: str, took: dict, seconds: float, wire: int, before: dict) -> None:
    d = took["deltas"]
    if not d:
        print(f"{label}: no frames")
        return
    print(
        f"{label}: {len(d) / seconds:.0f} frames/s; frame time median {statistics.median(d):.1f} ms, "
        f"p95 {percentile(d, 0.95):.1f} ms, p99 {percentile(d, 0.99):.1f} ms, max {max(d):.1f} ms, "
        f"{sum(1 for x in d if x > 50)} frames over 50 ms; long tasks {len(took['long'])} "
        f"({sum(took['long']):.0f} ms in all)"
    )
    after = took["stats"]
    msgs, updates = after["messages"] - before["messages"], after["updates"] - before["updates"]
    draws = max(1, after["draws"] - before["draws"])
    print(
        f"{label}: stream {wire / seconds / 1024:.1f} KiB/s on the wire, {msgs / seconds:.2f} messages/s, "
        f"{updates / seconds:.1f} thumbnail updates/s; drawing them {(after['drawMs'] - before['drawMs']) / draws:.1f} ms "
        f"per frame that had some (max so far {after['drawMaxMs']:.1f} ms)"
    )


def browser_figures(url: str, event_id: int, attendees: int, seconds: float, server_pid: int) -> None:
    from playwright.sync_api import sync_playwright

    args = ["--disable-gpu", "--no-first-run", "--disable-background-networking"]
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=shutil.which("chromium") or "/usr/bin/chromium", args=args
        )
        try:
            page = browser.new_context(base_url=url, viewport={"width": 1440, "height": 900}).new_page()
            page.goto("/instructor/login")
            page.fill("input[name=name]", "bench")
            page.fill("input[name=token]", TOKEN)
            page.click("#login-form button[type=submit]")
            page.wait_for_url("**/instructor")
            cdp = page.context.new_cdp_session(page)
            cdp.send("Network.enable")
            stream_ids: set[str] = set()
            wire = {"bytes": 0}

            def on_request(ev: dict) -> None:
                if "/gallery/stream" in ev["request"]["url"]:
                    stream_ids.add(ev["requestId"])

            def on_data(ev: dict) -> None:
                if ev["requestId"] in stream_ids:
                    wire["bytes"] += int(ev.get("encodedDataLength") or ev.get("dataLength") or 0)

            cdp.on("Network.requestWillBeSent", on_request)
            cdp.on("Network.dataReceived", on_data)
            start = time.monotonic()
            page.goto(f"/instructor/events/{event_id}/gallery")
            page.wait_for_function(
                "document.getElementById('gallery').dataset.ready === '1'", timeout=120_000
            )
            page.wait_for_function(
                f"document.querySelectorAll('#gallery .thumb[data-term=open]').length >= {attendees}",
                timeout=120_000,
            )
            print(
                f"gallery in Chromium: the first lines of all {attendees} terminals in {time.monotonic() - start:.2f} s after navigation"
            )
            page.evaluate(FRAMES_JS)
            for label, scroll in (("idle", False), ("scrolling", True)):
                page.evaluate(TAKE_JS)
                before = dict(page.evaluate("() => Object.assign({}, window.galleryStats)"))
                wire["bytes"] = 0
                cpu0, t0 = cpu_seconds(server_pid), time.monotonic()
                end = t0 + seconds / 2
                step = 0
                while time.monotonic() < end:
                    if scroll:
                        page.mouse.move(700, 500)
                        page.mouse.wheel(0, 600 if (step // 20) % 2 == 0 else -600)
                        step += 1
                    page.wait_for_timeout(100)
                took = page.evaluate(TAKE_JS)
                span = time.monotonic() - t0
                cpu = (cpu_seconds(server_pid) - cpu0) / span
                frame_line(f"gallery {label}", took, span, wire["bytes"], before)
                print(f"gallery {label}: server CPU {cpu * 100:.0f}% of one core meanwhile")
            page.screenshot(path=str(REPO / "test-results" / "bench-gallery.png"))
        finally:
            browser.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--attendees", type=int, default=200)
    parser.add_argument("--heavy", type=int, default=5, help="terminals printing ~1.3 MB/s")
    parser.add_argument(
        "--seconds", type=float, default=20.0, help="measured in Chromium (half idle, half scrolling)"
    )
    parser.add_argument("--no-browser", action="store_true")
    args = parser.parse_args()

    root = Path(tempfile.mkdtemp(prefix="labserver-bench-gallery-"))
    proc = None
    try:
        labs_dir = root / "labs"
        shutil.copytree(REPO / "labs" / LAB, labs_dir / LAB, ignore=shutil.ignore_patterns("__pycache__"))
        data_dir = root / "data"
        event_id, tokens = seed(data_dir, labs_dir, args.attendees)
        load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
        print(
            f"machine: {os.cpu_count()} CPUs, load average {load}; {args.attendees} attendees, {args.heavy} heavy printers"
        )
        port = free_port()
        env = {
            **os.environ,
            "LABSERVER_DATA_DIR": str(data_dir),
            "LABSERVER_LABS_DIR": str(labs_dir),
            "LABSERVER_WEB_DIR": str(REPO / "web"),
            "LABSERVER_INSTRUCTOR_TOKEN": TOKEN,
            "LABSERVER_BACKEND": "local",
        }
        cmd = [
            sys.executable,
            "-m",
            "uvicorn",
            "--factory",
            "labserver.app:create_app",
            "--app-dir",
            str(REPO),
        ]
        cmd += ["--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"]
        proc = subprocess.Popen(cmd, env=env, cwd=root)
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the server did not start")
            time.sleep(0.2)

        async def open_all() -> list[float]:
            gate = asyncio.Semaphore(8)
            commands = [HEAVY if i < args.heavy else CHATTY for i in range(len(tokens))]
            return await asyncio.gather(
                *(start_loop(url, t, c, gate) for t, c in zip(tokens, commands, strict=True))
            )

        t = time.monotonic()
        opened = asyncio.run(open_all())
        print(
            f"{len(opened)} terminals started in {time.monotonic() - t:.1f} s "
            f"(each: median {statistics.median(opened):.2f} s, 8 at a time)"
        )
        cpu0, t0 = cpu_seconds(proc.pid), time.monotonic()
        time.sleep(5)
        print(
            f"server CPU with no gallery open: {(cpu_seconds(proc.pid) - cpu0) / (time.monotonic() - t0) * 100:.0f}% of one core"
        )
        if not args.no_browser:
            browser_figures(url, event_id, args.attendees, args.seconds, proc.pid)
    finally:
        if proc is not None:
            proc.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=15)
            if proc.poll() is None:
                proc.kill()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
