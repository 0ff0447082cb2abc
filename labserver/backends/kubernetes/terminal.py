"""``KubeTerminal``: a TTY exec over the exec WebSocket, bridged to asyncio (resize on channel 4)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from typing import Any

RESIZE_CHANNEL = 4


class KubeTerminal:
    marks_prompt = False  # the image's shell may set its own PS1

    def __init__(self, ws: Any) -> None:
        self._ws = ws
        self._loop = asyncio.get_running_loop()
        self._queue: asyncio.Queue[bytes] = asyncio.Queue()
        self._closed = False
        self._send = threading.Lock()
        threading.Thread(target=self._pump, daemon=True, name="labserver-k8s-tty").start()

    def _pump(self) -> None:
        try:
            while not self._closed and self._ws.is_open():
                self._ws.update(timeout=0.5)
                data = self._ws.read_channel(1)
                if data:
                    self._loop.call_soon_threadsafe(self._queue.put_nowait, bytes(data))
        except Exception:  # the socket died: the shell is gone for us
            pass
        finally:
            with contextlib.suppress(RuntimeError):  # the loop may be closed already
                self._loop.call_soon_threadsafe(self._queue.put_nowait, b"")

    async def read(self) -> bytes:
        data = await self._queue.get()
        if not data:
            self._queue.put_nowait(b"")  # every later read sees the end too
        return data

    def _write(self, channel: int, data: bytes | str) -> None:
        with self._send:
            self._ws.write_channel(channel, data)

    async def write(self, data: bytes) -> None:
        if not self._closed:
            await asyncio.to_thread(self._write, 0, data)

    async def resize(self, cols: int, rows: int) -> None:
        if not self._closed:
            await asyncio.to_thread(self._write, RESIZE_CHANNEL, json.dumps({"Width": cols, "Height": rows}))

    async def close(self) -> None:
        self._closed = True
        with contextlib.suppress(Exception):
            await asyncio.to_thread(self._ws.close)
