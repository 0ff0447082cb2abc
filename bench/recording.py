"""What recording costs the terminal path (labserver/terminals/recorder.py).

    .venv/bin/python bench/recording.py [--lines 200000] [--chunks 20000]

1. The recorder alone, on the event loop: microseconds per ``Recording.output`` of a 4 KiB chunk
   (the incremental decode and the JSON line; the file is written by a thread in batches), and the
   longest the loop was held while the batches of those chunks were written.
2. End to end through the app (a real shell on the local backend, the terminal WebSocket): the
   shell prints ``seq 1 N``; the time until the last line arrives, with recording on and off, and
   the recording's size.

Figures depend on the machine and on what else runs; nothing here is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from fastapi.testclient import TestClient
from sqlmodel import Session

from labserver.app import create_app
from labserver.config import RecordingSettings, Settings
from labserver.services.joining.events import create_event
from labserver.terminals.recorder import RecordingStore

REPO = Path(__file__).resolve().parent.parent


async def recorder_alone(chunks: int) -> tuple[float, float, int, int]:
    with tempfile.TemporaryDirectory() as tmp:
        store = RecordingStore(Path(tmp), max_bytes=1 << 40, flush_s=0.5)
        rec = await store.start("ev1-at1", "lab", 120, 40)
        assert rec is not None
        chunk = ("0123456789abcdef" * 255 + "\r\n").encode()[:4096]
        worst = 0.0
        stop = False

        async def ticker() -> None:  # how late the loop wakes a 1 ms sleeper while batches are written
            nonlocal worst
            while not stop:
                t = time.perf_counter()
                await asyncio.sleep(0.001)
                worst = max(worst, time.perf_counter() - t - 0.001)

        tick = asyncio.ensure_future(ticker())
        t0 = time.perf_counter()
        for i in range(chunks):
            rec.output(chunk)
            if i % 64 == 0:
                await asyncio.sleep(0)
        per_chunk = (time.perf_counter() - t0) / chunks
        await rec.close()
        stop = True
        await tick
        return per_chunk * 1e6, worst * 1e3, rec.path.stat().st_size, rec.dropped


def end_to_end(lines: int, record: bool) -> tuple[float, int]:
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(
            data_dir=Path(tmp) / "data",
            labs_dir=REPO / "labs",
            web_dir=REPO / "web",
            instructor_token="bench",
            recording=RecordingSettings(enabled=record, max_mb=1024),
        )
        app = create_app(settings)
        with Session(app.state.ctx.engine) as session:
            create_event(session, title="bench", labs=["getting-started"], code="BENCH")
        with TestClient(app) as client:
            token = client.post("/api/v1/join", json={"event_code": "BENCH", "name": "b"}).json()["token"]
            with client.websocket_connect(f"/api/v1/labs/getting-started/terminal?token={token}") as ws:
                buf = b""
                while b"$ " not in buf:
                    buf += ws.receive().get("bytes") or b""
                t0 = time.perf_counter()
                ws.send_bytes(f"seq 1 {lines}; echo end-$((1+1))\r".encode())
                buf = b""
                while b"end-2\r\n" not in buf[-64:]:
                    buf += ws.receive().get("bytes") or b""
                took = time.perf_counter() - t0
        size = (
            sum(p.stat().st_size for p in (Path(tmp) / "data" / "recordings").rglob("*.cast"))
            if record
            else 0
        )
        return took, size


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lines", type=int, default=200_000)
    ap.add_argument("--chunks", type=int, default=20_000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    us, lag_ms, size, dropped = asyncio.run(recorder_alone(args.chunks))
    print(
        f"recorder alone: {us:.1f} us per 4 KiB output chunk ({args.chunks} chunks as fast as the loop goes: "
        f"{size / 2**20:.1f} MiB written, {dropped / 2**20:.1f} MiB dropped while the writer was behind)"
    )
    print(f"  longest loop delay while its batches were written: {lag_ms:.2f} ms")
    on, off = [], []
    rec_size = 0
    for _ in range(args.rounds):  # alternating, so a busy moment of the machine hits both
        off.append(end_to_end(args.lines, False)[0])
        t, rec_size = end_to_end(args.lines, True)
        on.append(t)
    print(
        f"seq 1 {args.lines} through the terminal WebSocket (median of {args.rounds}): "
        f"recording on {statistics.median(on):.2f} s, off {statistics.median(off):.2f} s; "
        f"recording {rec_size / 2**20:.1f} MiB"
    )


if __name__ == "__main__":
    main()
