"""What the benches share: a browser's clients (join, SSE stream, terminal WebSocket, instructor
stream), a server subprocess, ``/metrics`` parsing and percentiles. Used by ``room.py``,
``dashboard.py`` and ``rehearsal.py``; nothing here asserts or prints figures of its own.

The benches run as scripts (``.venv/bin/python bench/x.py``), so this module is imported by its
plain name from the ``bench/`` folder on ``sys.path``."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import websockets

REPO = Path(__file__).resolve().parent.parent


def pct(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0..100) by nearest rank; NaN for no values."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def epoch(iso: str | None) -> float | None:
    """Seconds since the epoch of an ISO time from the API (naive = UTC)."""
    if not iso:
        return None
    t = dt.datetime.fromisoformat(iso)
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.UTC)
    return t.timestamp()


# -- the server ---------------------------------------------------------------------------------------
def wait_healthy(
    proc: subprocess.Popen[bytes], base: str, *, timeout_s: float = 120.0, log: str = ""
) -> None:
    """Until ``/healthz`` answers 200; raises SystemExit when the server exits or never answers."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the server exited (status {proc.returncode}); see {log or 'its output'}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{base}/healthz", timeout=2).status_code == 200:
                return
        time.sleep(0.2)
    raise SystemExit(f"the server did not answer /healthz within {timeout_s:.0f} s")


def serve(env: dict[str, str], log: Path) -> tuple[subprocess.Popen[bytes], str]:
    """``labserver serve`` on a free port with this process's environment plus ``env`` (the
    ``LABSERVER_*`` settings of the run), its output in ``log``; returns once ``/healthz`` answers."""
    port = free_port()
    exe = shutil.which("labserver", path=str(Path(sys.executable).parent)) or "labserver"
    with open(log, "wb") as out:  # the child keeps its own copy of the descriptor
        proc = subprocess.Popen(
            [exe, "serve", "--port", str(port)],
            env={**os.environ, **env},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    base = f"http://127.0.0.1:{port}"
    wait_healthy(proc, base, log=str(log))
    return proc, base


def stop_server(
    proc: subprocess.Popen[bytes] | None, *, signal_first: int = 15, wait_s: float = 30.0
) -> None:
    """Ask the server to stop (SIGTERM by default; SIGINT lets a profiler write its file), then kill."""
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal_first)
    try:
        proc.wait(wait_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


def read_metrics(base: str, token: str) -> dict[str, float]:
    """The server's ``/metrics`` as {sample name with labels: value}; empty when it has none."""
    try:
        resp = httpx.get(f"{base}/metrics", timeout=10, headers={"Authorization": f"Bearer {token}"})
    except httpx.HTTPError:
        return {}
    if resp.status_code != 200:
        return {}
    values: dict[str, float] = {}
    for line in resp.text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            with contextlib.suppress(ValueError):
                values[name] = float(value)
    return values


class ProcStat:
    """RSS and CPU of one process (and its threads) from ``/proc``: what ``ps`` would say."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.tick = os.sysconf("SC_CLK_TCK")
        self.last = (time.monotonic(), self._cpu_s())

    def _cpu_s(self) -> float:
        try:
            fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return 0.0
        return (int(fields[11]) + int(fields[12])) / self.tick  # utime + stime

    def rss_mb(self) -> float:
        try:
            for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        except OSError:
            pass
        return 0.0

    def cpu_percent(self) -> float:
        """CPU used since the last call, in percent of one core."""
        now, cpu = time.monotonic(), self._cpu_s()
        then, before = self.last
        self.last = (now, cpu)
        return 100 * (cpu - before) / max(now - then, 1e-6)

    def open_files_matching(self, suffixes: tuple[str, ...]) -> int:
        """How many of the process's descriptors are open on a file whose name ends with one of
        ``suffixes`` (SQLite: each pooled connection holds the database file open)."""
        count = 0
        with contextlib.suppress(OSError):
            for fd in os.listdir(f"/proc/{self.pid}/fd"):
                with contextlib.suppress(OSError):
                    if os.readlink(f"/proc/{self.pid}/fd/{fd}").endswith(suffixes):
                        count += 1
        return count


# -- a browser's clients --------------------------------------------------------------------------------
class Refused(Exception):
    """An HTTP answer that is not what a browser expects; ``kind`` is a short label for the report."""

    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self.kind = kind


async def join(client: httpx.AsyncClient, code: str, name: str) -> str:
    """``POST /api/v1/join``; returns the attendee token and sets it as the client's bearer."""
    token, _attendee_id = await join_as(client, code, name)
    return token


async def join_as(client: httpx.AsyncClient, code: str, name: str) -> tuple[str, int]:
    """:func:`join`, returning the attendee id too."""
    resp = await client.post("/api/v1/join", json={"event_code": code, "name": name})
    if resp.status_code != 200:
        raise Refused(f"join HTTP {resp.status_code}")
    body = resp.json()
    token = str(body["token"])
    client.headers["Authorization"] = f"Bearer {token}"
    return token, int(body["attendee"]["id"])


async def sse_events(
    client: httpx.AsyncClient, url: str, headers: dict[str, str] | None = None
) -> AsyncIterator[tuple[str, dict[str, Any]]]:
    """(event name, JSON data) of each SSE message on ``url``, ``ready`` first; raises
    :class:`Refused` when the stream is not opened."""
    async with client.stream("GET", url, headers=headers, timeout=httpx.Timeout(None, connect=60)) as resp:
        if resp.status_code != 200:
            raise Refused(f"stream HTTP {resp.status_code}")
        kind = ""
        async for line in resp.aiter_lines():
            if line.startswith("event:"):
                kind = line.split(":", 1)[1].strip()
            elif line.startswith("data:"):
                try:
                    data = json.loads(line.split(":", 1)[1])
                except ValueError:
                    continue
                yield kind, data if isinstance(data, dict) else {}


def ws_url(base: str, lab: str) -> str:
    return base.replace("http", "ws", 1) + f"/api/v1/labs/{lab}/terminal"


async def open_terminal(base: str, lab: str, token: str, *, timeout_s: float = 300.0) -> Any:
    """The attendee's terminal WebSocket (a ``websockets`` connection; the caller closes it)."""
    return await websockets.connect(
        ws_url(base, lab),
        additional_headers={"Authorization": f"Bearer {token}"},
        open_timeout=timeout_s,
        max_size=None,
    )


async def echo(ws: Any, *, timeout_s: float = 300.0, on_first_output: Any = None, before: str = "") -> int:
    """Type ``echo <marker>-$((6*7))-$?`` and wait for ``<marker>-42-<status>`` (the shell ran it);
    with ``before``, that command line is typed first, on the same line (``before; echo ...``), and
    its exit status is returned (0 without one). Raises TimeoutError when the marker does not come."""
    marker = f"bench-{uuid.uuid4().hex[:6]}"
    line = f"echo {marker}-$((6*7))-$?"
    await ws.send(f"{before}; {line}\r".encode() if before else f"{line}\r".encode())
    done = re.compile(rf"{marker}-42-(\d+)".encode())
    seen = b""
    deadline = time.monotonic() + timeout_s
    while (found := done.search(seen)) is None:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("echo")
        msg = await asyncio.wait_for(ws.recv(), left)
        if isinstance(msg, bytes):
            if not seen and on_first_output is not None:
                on_first_output()
            seen = (seen + msg)[-4096:]
    return int(found.group(1)) if before else 0
