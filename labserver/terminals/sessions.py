"""Terminal sessions that outlive a WebSocket.

A :class:`TerminalSession` owns one backend PTY per (environment, lab). Browsers attach and detach:
a network blip or a reload re-attaches to the same shell and first receives the recent output
(scrollback). Several viewers may attach (the attendee, and an instructor read-only). A session with
no viewer is closed after ``idle_close_s``; a shell that exits ends the session.

Input that arrives before the shell's first prompt (typed the moment the terminal opens, a "Run in
terminal" command queued while the socket was down) is held and written once that prompt is out,
when the terminal marks its prompts (``Terminal.marks_prompt``). Written earlier, the PTY would echo
it before the prompt, and the shell would show it a second time after: ``echo hi$ echo hi``.

Each viewer's backlog is bounded (:data:`VIEWER_MAX` bytes): the shell never waits for a viewer,
and a viewer that reads slower than the shell writes (a stalled browser, a slow link, a socket that
stops reading) has its backlog dropped and gets :data:`RESYNC` instead, after which the bridge
replays the scrollback. Memory per viewer stays under ``VIEWER_MAX + SCROLLBACK`` whatever it does.

A hub given a :class:`~labserver.terminals.recorder.RecordingStore` records each session it opens (output,
resizes, markers; input where asked): one file per shell, written off the event loop
(labserver/terminals/recorder.py). :meth:`TerminalHub.mark` puts a marker into a live session's recording."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

from labserver.backends.base import PROMPT_END, Terminal
from labserver.terminals.recorder import Recording, RecordingStore

Key = tuple[str, str]  # (env_id, lab_id)
SCROLLBACK = 128 * 1024
HELD_MAX = 64 * 1024  # input held before the first prompt; beyond this it is dropped
VIEWER_MAX = 1024 * 1024  # output queued for one viewer; beyond this it is dropped (resync)
RESYNC = b"\x00resync"  # a viewer's marker: what was queued was dropped; replay the scrollback


class Viewer:
    """One attached browser's backlog: a queue of output chunks bounded to ``limit`` bytes. ``b""``
    means the shell ended; :data:`RESYNC` that the backlog overflowed and was dropped."""

    def __init__(self, limit: int = VIEWER_MAX) -> None:
        self.limit = limit
        self.pending = 0
        self.dropped = 0  # bytes dropped in all (counted for the logs and the tests)
        self._queue: asyncio.Queue[bytes] = asyncio.Queue()
        self._resyncing = False  # RESYNC is queued: output until it is read is in the scrollback

    def put_nowait(self, data: bytes) -> None:
        if data and self._resyncing:
            self.dropped += len(data)
            return
        if data and self.pending + len(data) > self.limit:
            while not self._queue.empty():
                self.dropped += len(self._queue.get_nowait())
            self.dropped += len(data)
            self.pending = 0
            self._resyncing = True
            self._queue.put_nowait(RESYNC)
            return
        self.pending += len(data)
        self._queue.put_nowait(data)

    async def get(self) -> bytes:
        data = await self._queue.get()
        if data is RESYNC:  # the caller replays the scrollback now, before it awaits anything
            self._resyncing = False
        else:
            self.pending -= len(data)
        return data


class TerminalSession:
    def __init__(
        self, key: Key, term: Terminal, on_end: Callable[[Key], None], recording: Recording | None = None
    ) -> None:
        self.key = key
        self.term = term
        self.recording = recording
        self.scrollback = bytearray()
        #: bytes of output since the shell started (a read API: the gallery sees a change by it)
        self.output_bytes = 0
        self.viewers: set[Viewer] = set()
        self.closed = False
        #: set once the shell reads its input (its first prompt is out), or it has ended; viewers
        #: that type are told (routes/terminal.py)
        self.ready = asyncio.Event()
        self._held = bytearray()
        self._tail = b""  # the end of the output so far, for a mark split across two reads
        self._writing = asyncio.Lock()  # input reaches the PTY in the order it came
        self._flush: asyncio.Future[None] | None = None
        if not term.marks_prompt:
            self.ready.set()
        self._on_end = on_end
        self._pump = asyncio.ensure_future(self._run())
        self.idle_since: float | None = None

    async def _run(self) -> None:
        try:
            while True:
                data = await self.term.read()
                if not data:
                    break
                if not self.ready.is_set():
                    self._look_for_prompt(data)
                if self.recording is not None:
                    self.recording.output(data)
                self.scrollback.extend(data)
                self.output_bytes += len(data)
                if len(self.scrollback) > SCROLLBACK:
                    del self.scrollback[: len(self.scrollback) - SCROLLBACK]
                for q in list(self.viewers):
                    q.put_nowait(data)
        finally:
            self.closed = True
            self.ready.set()
            for q in list(self.viewers):
                q.put_nowait(b"")
            self._on_end(self.key)
            if self.recording is not None:
                await asyncio.shield(self.recording.close())

    def _look_for_prompt(self, data: bytes) -> None:
        seen = self._tail + data
        if PROMPT_END in seen:
            self.ready.set()
            self._flush = asyncio.ensure_future(self.write(b""))  # what was held, in order
        else:
            self._tail = seen[-(len(PROMPT_END) - 1) :]

    def attach(self) -> tuple[Viewer, bytes]:
        q = Viewer()
        self.viewers.add(q)
        self.idle_since = None
        return q, bytes(self.scrollback)

    def detach(self, q: Viewer) -> None:
        self.viewers.discard(q)
        if not self.viewers:
            self.idle_since = asyncio.get_running_loop().time()

    async def write(self, data: bytes) -> None:
        """Input for the shell: held until :attr:`ready`, then written in the order it came."""
        async with self._writing:
            if not self.ready.is_set():
                self._held += data[: max(0, HELD_MAX - len(self._held))]
                return
            if self._held:
                data, self._held = bytes(self._held) + data, bytearray()
            if data and not self.closed:
                if self.recording is not None:
                    self.recording.input(data)
                await self.term.write(data)

    async def resize(self, cols: int, rows: int) -> None:
        if self.recording is not None:
            self.recording.resize(cols, rows)
        await self.term.resize(cols, rows)

    async def close(self) -> None:
        await self.term.close()
        self._pump.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self._pump
        if self.recording is not None:
            await self.recording.close()


class TerminalHub:
    """The open sessions. Opening one is per key: a shell that is starting holds up only those who
    asked for the same (environment, lab) (they share its future), never another attendee's."""

    def __init__(self, idle_close_s: float = 1800.0, recordings: RecordingStore | None = None) -> None:
        self.sessions: dict[Key, TerminalSession] = {}
        self.idle_close_s = idle_close_s
        self.recordings = recordings
        self._opening: dict[Key, asyncio.Future[TerminalSession]] = {}

    async def get(
        self,
        key: Key,
        opener: Callable[[], Awaitable[Terminal]] | None,
        *,
        size: tuple[int, int] = (100, 30),
        title: str = "",
        record_input: bool = False,
    ) -> TerminalSession | None:
        """The live session for ``key``; opened with ``opener`` when absent (None: only existing).
        Concurrent callers for one key share one open; a caller that goes away does not cancel it
        (the shell is then closed as idle like any other). A session opened here is recorded when
        the hub has a store (``size``, ``title``: the recording's header; ``record_input``: its
        keystrokes too)."""
        session = self.sessions.get(key)
        if session is not None and not session.closed:
            return session
        if opener is None:
            return None
        pending = self._opening.get(key)
        if pending is None:
            pending = asyncio.ensure_future(self._open(key, opener, size, title, record_input))
            self._opening[key] = pending
            pending.add_done_callback(lambda _done: self._opening.pop(key, None))
        return await asyncio.shield(pending)

    async def _open(
        self,
        key: Key,
        opener: Callable[[], Awaitable[Terminal]],
        size: tuple[int, int],
        title: str,
        record_input: bool,
    ) -> TerminalSession:
        term = await opener()
        recording = None
        if self.recordings is not None:
            recording = await self.recordings.start(
                key[0], key[1], *size, title=title, record_input=record_input
            )
        session = TerminalSession(key, term, self._ended, recording)
        session.idle_since = asyncio.get_running_loop().time()  # until the first viewer attaches
        self.sessions[key] = session
        return session

    def _ended(self, key: Key) -> None:
        self.sessions.pop(key, None)

    def mark(self, key: Key, label: str) -> bool:
        """Put a marker into the recording of ``key``'s live session; False when none records."""
        session = self.sessions.get(key)
        if session is None or session.closed or session.recording is None:
            return False
        session.recording.mark(label)
        return True

    async def close(self, key: Key) -> None:
        session = self.sessions.pop(key, None)
        if session is not None:
            await session.close()

    async def close_env(self, env_id: str) -> None:
        for key in [k for k in self.sessions if k[0] == env_id]:
            await self.close(key)

    async def close_all(self) -> None:
        for key in list(self.sessions):
            await self.close(key)

    async def reap_idle(self) -> None:
        now = asyncio.get_running_loop().time()
        for key, session in list(self.sessions.items()):
            if session.idle_since is not None and now - session.idle_since > self.idle_close_s:
                await self.close(key)
