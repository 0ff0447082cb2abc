"""Fairness of the Check button under a flood (issue 13 item 6; prints figures, asserts nothing).

    .venv/bin/python bench/fairness.py [--flooders 4] [--slots 4] [--hold 5] [--checks 20]
                                       [--budget 10] [--warmup 15]

A real ``labserver serve`` (local backend, SQLite, a subprocess) with a copy of getting-started
whose ``write-file`` checker holds its slot ``--hold`` seconds (an attendee's code that runs until
near the step's timeout). ``--flooders`` joined names press Check on it in a loop, one request each
at a time (what a browser allows per attendee). After ``--warmup`` seconds one normal attendee presses
Check on ``find-device`` (a quick checker) ``--checks`` times, one after another, and we report the
median and p95 of that latency (request sent -> result received).

It runs twice: ``LABSERVER_CHECKS__FAIR_QUEUE=false`` (the plain semaphore, exactly what main's
``services/grading/checking.py`` did: ``async with ctx.check_slots``) and ``true`` (services/grading/fair_queue.py),
with ``LABSERVER_CHECKS__FAIR_BUDGET_S=--budget`` so the flooders exhaust their budget during the
warm-up. With the default 60 s budget the same happens after 60 s of slot time per flooder.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parent.parent
LAB = "getting-started"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def make_labs(root: Path, hold_s: float) -> Path:
    labs = root / "labs"
    shutil.copytree(REPO / "labs" / LAB, labs / LAB)
    checker = labs / LAB / "checks" / "03_write_file.py"
    checker.write_text(f"import time\ntime.sleep({hold_s})\n" + checker.read_text())
    return labs


def serve(
    root: Path, labs: Path, *, fair: bool, slots: int, budget: float
) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    data = root / ("data-fair" if fair else "data-plain")
    env = dict(
        os.environ,
        LABSERVER_DATA_DIR=str(data),
        LABSERVER_LABS_DIR=str(labs),
        LABSERVER_BACKEND="local",
        LABSERVER_INSTRUCTOR_TOKEN="bench-fair",
        LABSERVER_DEFAULT_EVENT_CODE="FAIRBENCH",
        LABSERVER_CHECKS__MAX_CONCURRENT=str(slots),
        LABSERVER_CHECKS__FAIR_QUEUE="true" if fair else "false",
        LABSERVER_CHECKS__FAIR_BUDGET_S=str(budget),
    )
    log = (root / f"serve-{'fair' if fair else 'plain'}.log").open("ab")
    proc = subprocess.Popen(
        [sys.executable, "-m", "labserver.cli", "serve", "--host", "127.0.0.1", "--port", str(port)],
        env=env,
        cwd=REPO,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}/api/v1"
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"labserver serve exited {proc.returncode}; see {log.name}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                return proc, base
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise SystemExit("no /healthz after 90 s")


def join(base: str, name: str) -> dict[str, str]:
    resp = httpx.post(f"{base}/join", json={"event_code": "FAIRBENCH", "name": name}, timeout=30)
    resp.raise_for_status()
    auth = {"Authorization": f"Bearer {resp.json()['token']}"}
    httpx.post(f"{base}/environment", headers=auth, timeout=120).raise_for_status()
    return auth


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(0.95 * len(ordered)) - 1))]


def one_run(root: Path, labs: Path, args: argparse.Namespace, *, fair: bool) -> dict[str, float]:
    proc, base = serve(root, labs, fair=fair, slots=args.slots, budget=args.budget)
    stop = threading.Event()
    flood_checks = [0]
    try:
        normal = join(base, "normal attendee")
        bots = [join(base, f"bot{i}") for i in range(args.flooders)]
        for auth in bots:
            httpx.put(f"{base}/labs/{LAB}/files/notes/hello.txt", headers=auth, content=b"x", timeout=30)

        def flood(auth: dict[str, str]) -> None:
            with httpx.Client(timeout=600) as client:
                while not stop.is_set():
                    try:
                        client.post(f"{base}/labs/{LAB}/steps/write-file/check", headers=auth)
                    except httpx.HTTPError:
                        return  # the server was stopped at the end of the run
                    flood_checks[0] += 1

        threads = [threading.Thread(target=flood, args=(a,), daemon=True) for a in bots]
        for t in threads:
            t.start()
        time.sleep(args.warmup)
        latencies = []
        with httpx.Client(timeout=600) as client:
            for _ in range(args.checks):
                t0 = time.perf_counter()
                resp = client.post(f"{base}/labs/{LAB}/steps/find-device/check", headers=normal)
                latencies.append(time.perf_counter() - t0)
                resp.raise_for_status()
                time.sleep(0.2)
        stop.set()
        return {
            "median_s": statistics.median(latencies),
            "p95_s": p95(latencies),
            "max_s": max(latencies),
            "flood_checks": float(flood_checks[0]),
        }
    finally:
        stop.set()
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--flooders", type=int, default=4)
    ap.add_argument("--slots", type=int, default=4)
    ap.add_argument("--hold", type=float, default=5.0, help="seconds a flooder's check holds its slot")
    ap.add_argument("--checks", type=int, default=20, help="checks of the normal attendee")
    ap.add_argument("--budget", type=float, default=10.0, help="LABSERVER_CHECKS__FAIR_BUDGET_S")
    ap.add_argument("--warmup", type=float, default=15.0, help="seconds of flood before measuring")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="lsfair-"))
    try:
        labs = make_labs(root, args.hold)
        print(
            f"{args.flooders} flooders x {args.hold:g} s checks, {args.slots} slots, budget {args.budget:g} s, "
            f"warm-up {args.warmup:g} s, {args.checks} checks of the normal attendee (local backend)"
        )
        for fair in (False, True):
            r = one_run(root, labs, args, fair=fair)
            label = "fair queue (this branch)" if fair else "plain semaphore (main)"
            print(
                f"  {label:26s} normal attendee Check: median {r['median_s']:.2f} s, p95 {r['p95_s']:.2f} s, "
                f"max {r['max_s']:.2f} s  (flooders ran {int(r['flood_checks'])} checks)"
            )
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
