"""Processes of the local backend the server talks to: an attendee's terminal (:class:`PtyTerminal`,
a real PTY read by the event loop) and :func:`drain`, which reads a check's pipes to their end."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Callable

import ptyprocess

RESULT_LIMIT = 1024 * 1024  # what a check's result channel may carry (CheckRaw.result)


async def drain(fd: int, limit: int) -> tuple[bytes, bool]:
    """Read a pipe to its end, keeping at most ``limit`` bytes: ``(data, truncated)``.

    Read by the loop, not by a worker thread blocked in read() for a check's whole run: four
    running checks used to hold four of the loop's six default worker threads, and every database
    step and file operation of the room queued behind them (bench/rehearsal.py). The descriptor is
    ours alone and closed once, here (a pipe transport would close it too, and under uvloop the
    file object a second time)."""
    loop = asyncio.get_running_loop()
    data = bytearray()
    truncated = False
    os.set_blocking(fd, False)
    eof: asyncio.Future[None] = loop.create_future()

    def readable() -> None:
        nonlocal truncated
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        room = limit - len(data)
        if chunk and room > 0:
            data.extend(chunk[:room])
        if len(chunk) > max(room, 0):
            truncated = True
        if not chunk and not eof.done():
            eof.set_result(None)

    loop.add_reader(fd, readable)
    try:
        await eof
    finally:
        loop.remove_reader(fd)
        os.close(fd)
    return bytes(data), truncated


class PtyTerminal:
    """A bash on a PTY. ``read`` waits for output; b"" means the shell exited. ``on_end`` runs once,
    in a worker thread, when the shell has exited or the terminal was closed."""

    marks_prompt = True  # LocalBackend.terminal starts bash with PS1 ending in PS1_PROMPT_END

    def __init__(self, proc: ptyprocess.PtyProcess, on_end: Callable[[], None] | None = None) -> None:
        self.proc = proc
        self._queue: asyncio.Queue[bytes] = asyncio.Queue()
        self._loop = asyncio.get_running_loop()
        self._closed = False
        self._on_end = on_end
        self._loop.add_reader(proc.fd, self._on_readable)

    def _ended(self) -> None:
        on_end, self._on_end = self._on_end, None
        if on_end is not None:
            self._loop.run_in_executor(None, on_end)

    def _on_readable(self) -> None:
        try:
            data = os.read(self.proc.fd, 65536)
        except OSError:
            data = b""
        if not data:
            self._loop.remove_reader(self.proc.fd)
            self._ended()
        self._queue.put_nowait(data)

    async def read(self) -> bytes:
        if self._closed and self._queue.empty():
            return b""
        return await self._queue.get()

    async def write(self, data: bytes) -> None:
        if not self._closed:
            await asyncio.to_thread(os.write, self.proc.fd, data)

    async def resize(self, cols: int, rows: int) -> None:
        if not self._closed:
            self.proc.setwinsize(max(2, min(rows, 500)), max(2, min(cols, 1000)))

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(ValueError, OSError):
            self._loop.remove_reader(self.proc.fd)
        sid = self.proc.pid
        await asyncio.to_thread(self.proc.close, True)
        # jobs that ignored SIGHUP stay in bash's session: end them too
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    if os.getsid(int(entry)) == sid:
                        os.kill(int(entry), signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        self._queue.put_nowait(b"")
        self._ended()

    @property
    def pid(self) -> int:
        return int(self.proc.pid)
