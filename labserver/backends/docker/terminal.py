"""A terminal in a Docker container: a TTY exec over the Docker API socket, bridged to asyncio.

With a TTY the exec's attach socket is a raw byte stream both ways (no multiplexing headers). A plain
socket (unix://, tcp://) is made non-blocking and watched by the event loop, so hundreds of open
terminals cost no threads; other transports (ssh://) get one reader thread each.

Closing a terminal hangs up its whole session inside the container (jobs included): the shell is
started through a tiny wrapper that records its pid, because Docker has no "kill this exec" call.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import socket
import threading
from typing import Any

import docker

from labserver.backends.docker import config as dc

PIDDIR = "/tmp/.labserver-term"


#: one id per server process: shells a previous (crashed or killed) server left behind are hung up
#: when this one opens a terminal in the same container
INSTANCE = secrets.token_hex(4)


def shell_argv(token: str) -> list[str]:
    reap = (
        f'for f in {PIDDIR}/*; do [ -f "$f" ] || continue; case "${{f##*/}}" in {INSTANCE}-*) ;; '
        '*) p=$(cat "$f"); [ -n "$p" ] && pkill -HUP -s "$p"; rm -f "$f";; esac; done; '
    )
    return ["sh", "-c", f'mkdir -p {PIDDIR} && {reap}echo $$ > {PIDDIR}/"$0" && exec bash -l', token]


class DockerTerminal:
    # `bash -l` reads the image's /etc/profile and bash.bashrc, which may set PS1 over ours: no
    # PROMPT_END to wait for, so input is written at once
    marks_prompt = False

    def __init__(
        self, client: docker.DockerClient, container_id: str, exec_id: str, sock: Any, token: str
    ) -> None:
        self.client = client
        self.container_id = container_id
        self.exec_id = exec_id
        self.token = token
        self._sock = sock
        self._queue: asyncio.Queue[bytes] = asyncio.Queue()
        self._loop = asyncio.get_running_loop()
        self._closed = False
        self._eof = False
        if isinstance(sock, socket.socket):
            sock.setblocking(False)
            self._loop.add_reader(sock.fileno(), self._on_readable)
            self._thread: threading.Thread | None = None
        else:
            self._thread = threading.Thread(target=self._read_thread, daemon=True)
            self._thread.start()

    def _on_readable(self) -> None:
        try:
            data = self._sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            with contextlib.suppress(ValueError, OSError):
                self._loop.remove_reader(self._sock.fileno())
        self._push(data)

    def _read_thread(self) -> None:
        while True:
            try:
                data = self._sock.recv(65536)
            except OSError:
                data = b""
            self._loop.call_soon_threadsafe(self._push, data)
            if not data:
                return

    def _push(self, data: bytes) -> None:
        if self._eof:
            return
        if not data:
            self._eof = True
        self._queue.put_nowait(data)

    async def read(self) -> bytes:
        """Output of the shell; b"" once it has exited (or the terminal was closed)."""
        if self._eof and self._queue.empty():
            return b""
        return await self._queue.get()

    async def write(self, data: bytes) -> None:
        if self._closed or self._eof:
            return
        try:
            if isinstance(self._sock, socket.socket):
                await self._loop.sock_sendall(self._sock, data)
            else:
                await asyncio.to_thread(self._sock.sendall, data)
        except OSError:
            self._push(b"")

    async def resize(self, cols: int, rows: int) -> None:
        if self._closed or self._eof:
            return
        with contextlib.suppress(docker.errors.APIError):
            await asyncio.to_thread(
                self.client.api.exec_resize, self.exec_id, max(2, min(rows, 500)), max(2, min(cols, 1000))
            )

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        hangup = (
            f'p=$(cat {PIDDIR}/"$0" 2>/dev/null) && [ -n "$p" ] && '
            f'pkill -HUP -s "$p"; sleep 0.2; [ -n "$p" ] && pkill -KILL -s "$p"; rm -f {PIDDIR}/"$0"'
        )

        def _kill() -> None:
            with contextlib.suppress(docker.errors.APIError, OSError):
                exec_id = self.client.api.exec_create(
                    self.container_id, ["sh", "-c", hangup, self.token], user=dc.USER
                )["Id"]
                self.client.api.exec_start(exec_id)

        await asyncio.to_thread(_kill)
        if isinstance(self._sock, socket.socket):
            with contextlib.suppress(ValueError, OSError):
                self._loop.remove_reader(self._sock.fileno())
        with contextlib.suppress(OSError):
            self._sock.close()
        self._push(b"")


def open_terminal(
    client: docker.DockerClient, container_id: str, cols: int, rows: int, workdir: str, env: dict[str, str]
) -> tuple[str, Any, str]:
    """Blocking part (run in a thread): create and start the TTY exec; returns (exec id, socket, token)."""
    token = f"{INSTANCE}-{secrets.token_hex(8)}"
    exec_id = client.api.exec_create(
        container_id,
        shell_argv(token),
        stdin=True,
        tty=True,
        user=dc.USER,
        workdir=workdir,
        environment={"TERM": "xterm-256color", "COLUMNS": str(cols), "LINES": str(rows), **env},
    )["Id"]
    raw = client.api.exec_start(exec_id, socket=True, tty=True)
    sock = getattr(raw, "_sock", raw)
    with contextlib.suppress(OSError, AttributeError):
        sock.settimeout(None)
    with contextlib.suppress(docker.errors.APIError):
        client.api.exec_resize(exec_id, height=max(2, rows), width=max(2, cols))
    return exec_id, sock, token
