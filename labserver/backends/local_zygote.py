"""The check fork servers of the local backend: one sandboxed zygote per environment and lab.

Why: ``import torch`` costs 1-3 CPU-seconds, and a check used to pay it in the checker and again
in every child that ran attendee code (2-4 per check): 3-16 CPU-seconds a press. A zygote
(:mod:`labkit.check.zygote`) imports torch and labkit once; the checker and every attendee child of
that environment's checks are forked from it. A press then costs what the check computes.

Threat model and mechanism
--------------------------
The zygote runs inside the environment's check sandbox, built by the same command line as a
one-off checker (:meth:`LocalBackend._command`: the environment's uid, bubblewrap with the
workspace read-only, the lab's files without ``solution/`` and ``mutants/``, no network, the
check's cgroup), so everything it forks has exactly the view and limits a checker had before. It
is started with the environment's base variables only (no ``LAB_RUN_ID``, no result channel): a
check's variables reach the forked checker through a pipe only that process reads
(:func:`labkit.check.zygote.env_pipe`). The result channel and the log are descriptors passed for
one spawn. What ``labkit.check.zygote`` promises (children cannot reach the zygote, escaped
processes are killed when a spawn ends, a checker may only spawn attendee children) holds here.

The server keeps the zygote's end of a ``SOCK_SEQPACKET`` socket pair. A zygote that stops
answering, dies, or is killed by attendee code fails the check it was running as a backend error
(the platform's fault: not gradable, retried) and is replaced at the next check.

It imports torch and labkit when it starts, before the check that started it gets its clock: the
first press of a lab in an environment waits for that start (about 3 CPU-seconds, once), and no
check's time ever holds it. (It started *lazy* for a while, importing torch at a check's first
attendee call so that a file comparison would not pay for it; but most checkers import torch
themselves (``labkit.device``), inside their clock: in a room of 30 on a loaded machine, 77 of 120
first presses of getting-started timed out on their 10 s budgets. A lazy zygote's import during a
check, should one be used, stops the check's clock: ``preloading`` / ``preloaded``.)

Lifetime: started at an environment's first check of a lab, stopped
after ``idle_s`` without a check, when the environment is reset or destroyed, and when the backend
closes. It costs about 150 MB of private memory while it lives.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from labserver.backends.base import CheckRaw, CheckRequest, EnvironmentGone
from labserver.backends.local_terminal import RESULT_LIMIT, drain

log = logging.getLogger(__name__)


def _protocol() -> ModuleType:
    """labkit's fork-server protocol, imported when a local check first needs it: the server image
    (docker-compose.yml), which runs the Docker backend, has no labkit."""
    from labkit.check import zygote

    return zygote


#: How long a zygote may take to import torch and labkit (a loaded 2-core machine: tens of seconds).
START_TIMEOUT_S = 180.0


class ZygoteFailed(EnvironmentGone):
    """The environment's fork server could not start or stopped answering (the platform's fault)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, reason="check-runner")


@dataclass
class Zygote:
    """One running fork server and the server's end of its channel."""

    key: tuple[str, str]
    proc: asyncio.subprocess.Process
    sock: socket.socket
    release: Callable[[], Awaitable[None]]
    last_used: float = field(default_factory=time.monotonic)
    busy: int = 0
    _next: int = 0
    _waiters: dict[int, asyncio.Queue[dict[str, Any]]] = field(default_factory=dict)
    _closed: bool = False
    loop: asyncio.AbstractEventLoop | None = None

    def start_reading(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.sock.setblocking(False)
        self.loop.add_reader(self.sock.fileno(), self._readable)

    def _readable(self) -> None:
        try:
            message, fds = _protocol().recv(self.sock)
        except BlockingIOError:
            return
        except OSError:
            message, fds = None, []
        for fd in fds:
            os.close(fd)
        if message is None:
            self._gone()
            return
        ident = message.get("id")
        queue = self._waiters.get(ident) if isinstance(ident, int) else None
        if message.get("op") == "ready":
            queue = self._waiters.get(0)
        if queue is not None:
            queue.put_nowait(message)

    def _gone(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self.loop is not None and not self.loop.is_closed():
            with contextlib.suppress(ValueError, OSError, RuntimeError):
                self.loop.remove_reader(self.sock.fileno())
        for queue in self._waiters.values():
            queue.put_nowait({"op": "gone"})

    @property
    def alive(self) -> bool:
        """Running, and served by the running event loop (``asyncio.run`` per call in tools and
        tests: a zygote read by a loop that has ended is stopped and replaced)."""
        try:
            here = asyncio.get_running_loop()
        except RuntimeError:
            here = None
        return not self._closed and self.proc.returncode is None and self.loop is here

    async def wait_ready(self) -> None:
        queue = self._waiters.setdefault(0, asyncio.Queue())
        try:
            message = await asyncio.wait_for(queue.get(), START_TIMEOUT_S)
        except TimeoutError:
            message = {"op": "timeout"}
        finally:
            self._waiters.pop(0, None)
        if message.get("op") != "ready":
            raise ZygoteFailed(f"the check runner did not start ({message.get('op')})")

    def spawn_checker(
        self, checker: str, *, cwd: str, env: Mapping[str, str], result_fd: int, log_fd: int
    ) -> int:
        """Ask the zygote to fork the checker with ``env`` in ``cwd``, its result channel
        ``result_fd`` and its stdout+stderr ``log_fd`` (the caller closes its copies after this
        returns); the id to pass to :meth:`wait_checker`. Raises :class:`ZygoteFailed`."""
        self._next += 1
        ident = self._next
        self._waiters[ident] = asyncio.Queue()
        self.busy += 1
        self.last_used = time.monotonic()
        env_fd = _protocol().env_pipe(env)
        devnull = os.open(os.devnull, os.O_RDONLY)
        try:
            _protocol().send(
                self.sock,
                {"op": "spawn", "id": ident, "mode": "checker", "argv": [checker], "cwd": cwd},
                [devnull, log_fd, log_fd, env_fd, result_fd],
            )
        except OSError as exc:
            self._done(ident)
            raise ZygoteFailed(f"the check runner is gone: {exc}") from exc
        finally:
            os.close(env_fd)
            os.close(devnull)
        return ident

    def _done(self, ident: int) -> None:
        self._waiters.pop(ident, None)
        self.busy -= 1
        self.last_used = time.monotonic()

    async def wait_checker(
        self, ident: int, timeout: float, before_kill: Callable[[], object] | None = None
    ) -> tuple[int | None, bool, float]:
        """``(exit code or None, timed out, CPU seconds of the checker process)``; a checker
        still running after ``timeout`` (not counting a lazy runner's torch import) is killed with
        its children, ``before_kill`` called just before."""
        queue = self._waiters[ident]
        deadline = time.monotonic() + timeout
        try:
            started = await queue.get()
            if started.get("op") != "started":
                raise ZygoteFailed(f"the check runner could not start the checker ({started.get('op')})")
            try:
                while True:
                    exited = await asyncio.wait_for(queue.get(), max(0.0, deadline - time.monotonic()))
                    if exited.get("op") != "preloading":
                        break
                    # a lazy runner imports torch for this check's first attendee code: its start,
                    # not the attendee's time (nor its CPU: the runner's own), so the clock stops
                    paused = time.monotonic()
                    preloaded = await asyncio.wait_for(queue.get(), START_TIMEOUT_S)
                    deadline += time.monotonic() - paused
                    if preloaded.get("op") != "preloaded":
                        exited = preloaded
                        break
            except TimeoutError:
                if before_kill is not None:
                    before_kill()
                with contextlib.suppress(OSError):
                    _protocol().send(self.sock, {"op": "kill", "id": ident})
                try:
                    killed = {"op": "preloading"}
                    while killed.get("op") in ("preloading", "preloaded"):
                        killed = await asyncio.wait_for(queue.get(), 10)
                except TimeoutError as exc:
                    raise ZygoteFailed(
                        "the check runner did not stop a checker that ran out of time"
                    ) from exc
                return None, True, float(killed.get("cpu_s") or 0)
            if exited.get("op") != "exited":
                raise ZygoteFailed("the check runner ended during the check")
            code = exited.get("code")
            return (int(code) if isinstance(code, int) else None), False, float(exited.get("cpu_s") or 0)
        finally:
            self._done(ident)

    async def stop(self) -> None:
        same_loop = self.loop is asyncio.get_running_loop()
        self._gone()
        with contextlib.suppress(OSError):
            self.sock.close()  # a zygote whose channel closes exits by itself
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, 9)
        if same_loop:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.proc.wait(), 10)
        await self.release()


Starter = Callable[
    [list[str], int], Awaitable[tuple[asyncio.subprocess.Process, Callable[[], Awaitable[None]]]]
]


class Zygotes:
    """The running zygotes of one backend, by (environment, lab); one start at a time per key."""

    def __init__(self, *, idle_s: float) -> None:
        self.idle_s = idle_s
        self._running: dict[tuple[str, str], Zygote] = {}
        self._locks: dict[tuple[str, str], asyncio.Lock] = {}
        self._reaper: asyncio.Task[None] | None = None

    async def get(self, key: tuple[str, str], start: Starter, python: str) -> Zygote:
        """The zygote of ``key``, started with ``start(argv, fd)`` if none is alive."""
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            current = self._running.get(key)
            if current is not None and current.alive:
                return current
            if current is not None:
                self._running.pop(key, None)
                await current.stop()
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            try:
                proc, release = await start(_protocol().command(theirs.fileno(), python), theirs.fileno())
            except BaseException:
                ours.close()
                raise
            finally:
                theirs.close()
            zyg = Zygote(key, proc, ours, release)
            zyg._waiters[0] = asyncio.Queue()
            zyg.start_reading()
            try:
                await zyg.wait_ready()
            except BaseException:
                await zyg.stop()
                raise
            self._running[key] = zyg
            self._ensure_reaper()
            log.info("check runner of %s/%s ready", *key)
            return zyg

    def _ensure_reaper(self) -> None:
        if (
            self._reaper is None
            or self._reaper.done()
            or self._reaper.get_loop() is not asyncio.get_running_loop()
        ):
            self._reaper = asyncio.get_running_loop().create_task(self._reap_idle())

    async def _reap_idle(self) -> None:
        while self._running:
            await asyncio.sleep(max(1.0, min(60.0, self.idle_s / 4)))
            now = time.monotonic()
            for key, zyg in list(self._running.items()):
                if zyg.busy == 0 and (not zyg.alive or now - zyg.last_used > self.idle_s):
                    await self.stop(key)

    async def stop(self, key: tuple[str, str]) -> None:
        zyg = self._running.pop(key, None)
        if zyg is not None:
            await zyg.stop()

    async def stop_env(self, env_name: str) -> None:
        """Stop every zygote of an environment (reset, destroy)."""
        for key in [k for k in self._running if k[0] == env_name]:
            await self.stop(key)

    async def close(self) -> None:
        for key in list(self._running):
            await self.stop(key)
        if self._reaper is not None and self._reaper.get_loop() is asyncio.get_running_loop():
            self._reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._reaper

    def running(self) -> list[tuple[str, str]]:
        return [k for k, z in self._running.items() if z.alive]


async def run_checker(
    zyg: Zygote, lab_dir: Path, checker: Path, env: dict[str, str], request: CheckRequest
) -> CheckRaw:
    """Run ``checker`` for ``request`` through ``zyg``: its result channel and log are pipes read by
    the loop; a checker out of time is killed by the zygote with its children."""
    if request.meter is not None:  # base.CheckMeter: the check is what the runner forks next
        await asyncio.to_thread(request.meter.attach, zyg.proc.pid, descendants_only=True)
    read_fd, write_fd = os.pipe()
    log_r, log_w = os.pipe()
    start = time.monotonic()
    try:
        ident = zyg.spawn_checker(str(checker), cwd=str(lab_dir), env=env, result_fd=write_fd, log_fd=log_w)
    except BaseException:
        os.close(read_fd)
        os.close(log_r)
        raise
    finally:
        os.close(write_fd)
        os.close(log_w)
    result_task = asyncio.ensure_future(drain(read_fd, RESULT_LIMIT))
    log_task = asyncio.ensure_future(drain(log_r, request.log_limit))
    # the runner kills a checker out of time itself: the meter reads it just before
    before_kill = request.meter.sample if request.meter is not None else None
    try:
        code, timed_out, cpu = await zyg.wait_checker(ident, request.timeout_s, before_kill)
    finally:
        # the zygote killed the checker's children with it: the pipes end at once
        done, pending = await asyncio.wait({result_task, log_task}, timeout=5.0)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
    result = result_task.result()[0] if result_task in done else b""
    log_bytes, truncated = log_task.result() if log_task in done else (b"", False)
    return CheckRaw(
        exit_code=None if timed_out else code,
        result=result,
        log=log_bytes,
        log_truncated=truncated,
        timed_out=timed_out,
        duration_s=time.monotonic() - start,
        cpu_s=cpu,
    )
