"""Spine benchmark (local backend): time from "join" to a usable terminal, and the check round-trip
overhead of a trivial checker (median and p95 over N runs). Prints figures; asserts nothing.

    .venv/bin/python bench/spine.py [--runs 50]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from fastapi.testclient import TestClient
from sqlmodel import Session

from labserver.app import create_app
from labserver.config import Settings
from labserver.services.joining.events import create_event

TRIVIAL_CHECKER = """import json, os, sys
os.write(int(os.environ["LAB_RESULT_FD"]), json.dumps({"passed": True, "message": "ok"}).encode())
sys.exit(0)
"""


def make_lab(root: Path) -> None:
    lab = root / "bench-lab"
    for sub in ("steps", "checks", "starter", "solution"):
        (lab / sub).mkdir(parents=True)
    (lab / "steps" / "01-noop.md").write_text("# noop\n")
    (lab / "checks" / "01_noop.py").write_text(TRIVIAL_CHECKER)
    (lab / "starter" / "README.txt").write_text("bench\n")
    (lab / "lab.yaml").write_text(
        "id: bench-lab\ntitle: Bench\nsummary: s\nduration_min: 1\nsteps:\n"
        "  - {id: noop, title: noop, file: steps/01-noop.md, check: checks/01_noop.py}\n"
    )


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--sandbox", default="auto", choices=["auto", "bwrap", "none"])
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-spine-"))
    make_lab(tmp / "labs")
    settings = Settings(
        data_dir=tmp / "data", labs_dir=tmp / "labs", instructor_token="t", sandbox=args.sandbox
    )
    app = create_app(settings)
    with Session(app.state.ctx.engine) as s:
        create_event(s, title="bench", labs=["bench-lab"], code="BENCH")
    join_to_terminal: list[float] = []
    check_rt: list[float] = []
    check_inner: list[float] = []
    with TestClient(app) as client:
        for i in range(args.runs):
            start = time.perf_counter()
            token = client.post("/api/v1/join", json={"event_code": "BENCH", "name": f"a{i}"}).json()["token"]
            client.cookies.clear()
            with client.websocket_connect(f"/api/v1/labs/bench-lab/terminal?token={token}") as ws:
                ws.send_bytes(b"echo READY-$((1+1))\r")
                buf = b""
                while b"READY-2" not in buf:
                    buf += ws.receive_bytes()
            join_to_terminal.append(time.perf_counter() - start)
        headers = {"Authorization": f"Bearer {token}"}
        for _ in range(args.runs):
            start = time.perf_counter()
            run = client.post("/api/v1/labs/bench-lab/steps/noop/check", headers=headers).json()
            check_rt.append(time.perf_counter() - start)
            check_inner.append(run["duration_s"])
            assert run["status"] == "passed", run
    result = {
        "backend": "local",
        "sandbox": "bwrap" if app.state.ctx.backend.bwrap else "none",
        "runs": args.runs,
        "join_to_terminal_ms": {
            "median": statistics.median(join_to_terminal) * 1e3,
            "p95": pct(join_to_terminal, 0.95) * 1e3,
        },
        "check_roundtrip_ms": {"median": statistics.median(check_rt) * 1e3, "p95": pct(check_rt, 0.95) * 1e3},
        "checker_process_ms": {
            "median": statistics.median(check_inner) * 1e3,
            "p95": pct(check_inner, 0.95) * 1e3,
        },
    }
    for key, value in result.items():
        if isinstance(value, dict):
            print(f"{key:22} median {value['median']:8.1f}  p95 {value['p95']:8.1f}")
        else:
            print(f"{key:22} {value}")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
