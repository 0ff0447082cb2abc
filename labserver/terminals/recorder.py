"""Terminal recordings as asciicast v2: one file per shell (a :class:`~labserver.terminals.sessions.TerminalSession`),
kept per environment under ``DATA_DIR/recordings/<env id>/`` and deleted with the environment.

What is recorded, and the promises kept:

- **Output** (``"o"`` events) as the attendee's terminal shows it, resizes (``"r"``) and markers
  (``"m"``: each Check press and its result, the start and end of a shared session). **Input**
  (``"i"``) only when the event enables it (``Event.record_input``); off by default.
- **The terminal never waits for the recorder.** On the event loop a read only appends
  ``(time, bytes)`` to an in-memory batch. A thread takes the batch every ``flush_s`` seconds (at
  once past :data:`FLUSH_BYTES`), one batch in flight per recording, and does the rest there:
  the incremental UTF-8 decode (a sequence split across reads is completed by the next), merging
  output within :data:`MERGE_S` into one event, ``json.dumps``, the budget, the write. A write that
  fails (disk full, the folder deleted with its environment) loses that batch, never the shell; a
  writer so far behind that :data:`MAX_PENDING` bytes wait drops output (counted) rather than
  grow without bound. No database connection is used here at all.
- **A size cap per attendee** (``max_bytes``: all of one environment's files together): each
  environment has one :class:`Budget`, read from disk when its first shell of this server's run
  opens and charged with every line queued. A line that does not fit ends the recording: a last
  ``"m"`` event says the cap was reached (its bytes are held back from the start, so a file never
  goes past the cap), and nothing more is recorded until the files are deleted. The budget is
  read from disk again after a restart, so the cap holds across restarts.
- **Names the attendee cannot steer**: a file is ``<lab id>__<UTC time>.cast`` in a folder named
  by the environment id (both ours, never attendee input); a recording id given to a route is
  looked up among the folder's files (:meth:`RecordingStore.find`), never joined to a path.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import datetime as dt
import json
import logging
import re
import shutil
import threading
from dataclasses import dataclass
from pathlib import Path

from labserver import clock

log = logging.getLogger(__name__)

FLUSH_BYTES = 64 * 1024  # a batch this large is written at once
MAX_PENDING = 8 * 1024 * 1024  # output queued beyond this while the writer is behind is dropped
MERGE_S = 0.02  # consecutive output within this is one event (a frame: no visible difference)
MERGE_MAX = 16 * 1024  # ... up to this many characters (each json.dumps holds the GIL briefly)
CAP_MARK = "recording stopped: size cap reached"
SKIP_MARK = "output skipped: the recorder fell behind"
#: held back for each file at its start, for the line that says the cap was reached
RESERVE = len(json.dumps([1e9, "m", CAP_MARK])) + 2
NAME = re.compile(r"^(?P<lab>[a-z0-9][a-z0-9-]{0,62})__(?P<stamp>\d{8}T\d{6}\d{6})$")


class Budget:
    """Bytes one environment's recordings may still take (shared by its shells, whose writers
    charge it from their threads)."""

    def __init__(self, left: int) -> None:
        self.left = left
        self._lock = threading.Lock()

    def take(self, n: int) -> bool:
        with self._lock:
            if n > self.left:
                return False
            self.left -= n
            return True


@dataclass(frozen=True)
class RecordingFile:
    id: str  # the file name without ``.cast``
    lab: str
    started_at: dt.datetime
    bytes: int
    path: Path


class Recording:
    """One shell's recording. Every method but :meth:`close` is synchronous and O(1) on the event
    loop (a tuple appended to the batch); the writer thread decodes, merges, serializes, charges
    the budget and writes, one batch at a time. :meth:`close` writes what is left."""

    def __init__(
        self,
        path: Path,
        budget: Budget,
        *,
        flush_s: float,
        record_input: bool,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self.path = path
        self.budget = budget
        self.flush_s = flush_s
        self.record_input = record_input
        self.full = False  # the cap was reached: nothing more is recorded (set by the writer)
        self.written = 0  # bytes written to the file (tests, logs)
        self.dropped = 0  # bytes of output dropped because the writer fell behind (MAX_PENDING)
        self._loop = loop
        self._thread = threading.get_ident()  # the loop's thread (made on it, by RecordingStore.start)
        self._t0 = loop.time()
        self._out = codecs.getincrementaldecoder("utf-8")("replace")  # used by the writer only
        self._in = codecs.getincrementaldecoder("utf-8")("replace")
        self._batch: list[tuple[float, str, bytes | str]] = []
        self._batched = 0
        self._timer: asyncio.TimerHandle | None = None
        self._writer: asyncio.Task[None] | None = None
        self._closed = False
        self._skipping = False

    # -- what the terminal calls (on the loop, never waits) --------------------------------------
    def output(self, data: bytes) -> None:
        self._event("o", data)

    def input(self, data: bytes) -> None:
        if self.record_input:
            self._event("i", data)

    def resize(self, cols: int, rows: int) -> None:
        self._event("r", f"{int(cols)}x{int(rows)}")

    def mark(self, label: str) -> None:
        """A marker; from any thread (a sync route ends a shared session from a worker thread)."""
        if threading.get_ident() == self._thread:
            self._event("m", label[:200])
        else:
            with contextlib.suppress(RuntimeError):  # the loop is closed: nothing records any more
                self._loop.call_soon_threadsafe(self._event, "m", label[:200])

    def _event(self, code: str, data: bytes | str) -> None:
        if self.full or self._closed:
            return
        if self._batched > MAX_PENDING and code in ("o", "i"):
            if not self._skipping:  # said once per stretch, so a replay shows where output is missing
                self._skipping = True
                self._batch.append((self._loop.time() - self._t0, "m", SKIP_MARK))
            self.dropped += len(data)
            return
        self._skipping = False
        self._batch.append((self._loop.time() - self._t0, code, data))
        self._batched += len(data)
        if self._batched >= FLUSH_BYTES:
            self._kick()
        elif self._timer is None:
            self._timer = self._loop.call_later(self.flush_s, self._kick)

    # -- writing (a thread, one batch at a time) -------------------------------------------------
    def _kick(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._writer is None or self._writer.done():
            self._writer = self._loop.create_task(self._drain())

    async def _drain(self) -> None:
        while self._batch:
            batch, self._batch, self._batched = self._batch, [], 0
            final = self._closed and not self._batch
            try:
                await asyncio.to_thread(self._write, batch, final)
            except OSError as exc:  # the folder went with its environment, or the disk is full
                log.warning("recording %s: a batch was lost: %s", self.path.name, exc)

    def _write(self, batch: list[tuple[float, str, bytes | str]], final: bool) -> None:
        """In the writer thread: the batch's events as asciicast lines, consecutive output within
        :data:`MERGE_S` merged into one event; each line charged to the budget; appended."""
        lines: list[bytes] = []
        merged: list[str] = []
        at = 0.0
        size = 0  # characters in ``merged``

        def line(t: float, code: str, text: str) -> bool:
            out = (json.dumps([round(t, 6), code, text], ensure_ascii=False) + "\n").encode()
            if self.full:
                return False
            if not self.budget.take(len(out)):
                self.full = True
                lines.append((json.dumps([round(t, 6), "m", CAP_MARK]) + "\n").encode())  # RESERVE pays
                return False
            lines.append(out)
            return True

        def flush_output() -> None:
            if merged:
                line(at, "o", "".join(merged))
                merged.clear()

        for t, code, data in batch:
            if code == "o":
                text = self._out.decode(data)  # type: ignore[arg-type]
                if not text:
                    continue
                if merged and (t - at > MERGE_S or size > MERGE_MAX):
                    flush_output()
                    size = 0
                size += len(text)
                if not merged:
                    at = t
                merged.append(text)
                continue
            flush_output()
            if code == "i":
                text = self._in.decode(data)  # type: ignore[arg-type]
                if text:
                    line(t, "i", text)
            else:
                line(t, code, str(data))
        if final:
            tail = self._out.decode(b"", final=True)
            if tail:
                merged.append(tail)
        flush_output()
        if lines:
            _append(self.path, b"".join(lines))
            self.written += sum(map(len, lines))

    async def close(self) -> None:
        """Write what is queued (the decoder's tail too) and wait until it is written; nothing is
        recorded after. Any number of callers may wait."""
        if not self._closed:
            self._closed = True
            self._batch.append((self._loop.time() - self._t0, "o", b""))  # the last batch is final
            self._kick()
        if self._writer is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(self._writer)


def _append(path: Path, data: bytes) -> None:
    with path.open("ab") as f:  # never creates the folder: a deleted environment stays deleted
        f.write(data)


def _header(cols: int, rows: int, title: str) -> bytes:
    head = {
        "version": 2,
        "width": int(cols),
        "height": int(rows),
        "timestamp": int(clock.now().timestamp()),
        "env": {"TERM": "xterm-256color", "SHELL": "/bin/bash"},
        "title": title[:200],
    }
    return (json.dumps(head, ensure_ascii=False) + "\n").encode()


class RecordingStore:
    """Every environment's recordings on this server (module docstring)."""

    def __init__(self, root: Path, *, max_bytes: int, flush_s: float = 0.5, enabled: bool = True) -> None:
        self.root = root
        self.max_bytes = max_bytes
        self.flush_s = flush_s
        self.enabled = enabled
        self._budgets: dict[str, Budget] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    def folder(self, env_id: str) -> Path:
        if not re.fullmatch(r"[A-Za-z0-9_.-]{1,80}", env_id) or env_id.startswith("."):
            raise ValueError(f"not an environment id: {env_id!r}")
        return self.root / env_id

    async def start(
        self, env_id: str, lab_id: str, cols: int, rows: int, *, title: str = "", record_input: bool = False
    ) -> Recording | None:
        """A new recording for a shell of ``env_id`` in ``lab_id`` (None when recording is off or
        the environment's cap is reached). File work runs in a thread."""
        if not self.enabled or not NAME.match(f"{lab_id}__00000000T000000000000"):
            return None
        folder = self.folder(env_id)
        async with self._locks.setdefault(env_id, asyncio.Lock()):
            budget = self._budgets.get(env_id)
            if budget is None:
                used = await asyncio.to_thread(_used, folder)
                budget = self._budgets[env_id] = Budget(self.max_bytes - used)
            head = _header(cols, rows, title or lab_id)
            if not budget.take(len(head) + RESERVE):  # each file can always say why it stopped
                return None
            stamp = clock.now().astimezone(dt.UTC).strftime("%Y%m%dT%H%M%S%f")
            path = folder / f"{lab_id}__{stamp}.cast"
            try:
                await asyncio.to_thread(_create, path, head)
            except OSError as exc:
                log.warning("recording for %s not started: %s", env_id, exc)
                return None
        return Recording(
            path, budget, flush_s=self.flush_s, record_input=record_input, loop=asyncio.get_running_loop()
        )

    def list(self, env_id: str) -> list[RecordingFile]:
        """The environment's recordings, newest first (blocking: call in a thread)."""
        folder = self.folder(env_id)
        out = []
        with contextlib.suppress(FileNotFoundError):
            for p in folder.iterdir():
                m = NAME.match(p.stem)
                if m is None or p.suffix != ".cast" or not p.is_file() or p.is_symlink():
                    continue
                started = dt.datetime.strptime(m["stamp"], "%Y%m%dT%H%M%S%f").replace(tzinfo=dt.UTC)
                out.append(RecordingFile(p.stem, m["lab"], started, p.stat().st_size, p))
        return sorted(out, key=lambda r: r.id.split("__")[1], reverse=True)

    def find(self, env_id: str, rec_id: str) -> RecordingFile | None:
        """The recording ``rec_id`` of ``env_id``, looked up among its files (blocking)."""
        return next((r for r in self.list(env_id) if r.id == rec_id), None)

    async def delete_env(self, env_id: str) -> None:
        """Delete every recording of ``env_id`` (with its workspace). Shells of it must be closed
        first (their last batch is written by then); deleting what is gone is success."""
        async with self._locks.setdefault(env_id, asyncio.Lock()):
            self._budgets.pop(env_id, None)
            await asyncio.to_thread(shutil.rmtree, self.folder(env_id), True)


def _used(folder: Path) -> int:
    with contextlib.suppress(FileNotFoundError):
        return sum(p.stat().st_size for p in folder.iterdir() if p.is_file())
    return 0


def _create(path: Path, head: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("xb") as f:
        f.write(head)
