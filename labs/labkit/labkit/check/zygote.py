"""The fork server ("zygote") of a check: one process that has imported torch and labkit once, and
forks from there every process the check needs: the checker itself (where the backend starts
checks through it) and each child that runs attendee code (:func:`labkit.check.run_function`,
:func:`labkit.check.run_script`). ``import torch`` costs 1-3 CPU-seconds; a fork costs
milliseconds, so a check no longer pays an import per child.

Threat model
------------
Attendee code runs in the children; it is hostile. The zygote holds nothing worth stealing and
nothing a child can reach:

- **Clean memory.** The zygote only imports modules and forwards requests. A check's variables
  (``LAB_RUN_ID``, the result channel, the checker's references) never pass through it: each spawn
  gets its environment from a pipe that only the forked process reads, and the checker runs in a
  sibling process, never in the zygote. The zygote is started with an environment free of secrets,
  so ``/proc/self/environ`` of a child shows nothing either.
- **No way back.** A child keeps stdin, stdout and stderr; every other descriptor is closed (the
  zygote's channels, the result channel). The zygote is non-dumpable and children drop every
  capability and set ``no_new_privs``, so a child can neither ptrace it nor open its
  ``/proc/<pid>/fd`` or ``mem``. A child of the same uid can still kill the zygote: that ends its
  own check (an error of the platform's side, retried), never a pass.
- **Limits as before.** Attendee children get what ``runner.py`` always promised: a new session,
  death with the zygote (``PR_SET_PDEATHSIG``, and the zygote dies with whoever started it),
  ``RLIMIT_AS`` / ``RLIMIT_CPU``, no core dumps; returned values come back through
  ``torch.save`` / ``torch.load(weights_only=True)`` (``_child.py``).
- **Nothing left running.** The zygote is a child subreaper: an attendee process that escapes its
  session is re-parented to it and killed when a spawn ends (:meth:`Zygote.sweep`), so a daemon
  left by one check cannot tamper with the next one of a long-lived zygote.
- **Who may ask for what.** Only the channel the zygote was started with may spawn a *checker*; a
  checker gets a sub-channel of its own on which it may only spawn attendee children (``call``,
  ``exec``), and kill only what it spawned. When a checker ends, its children are killed.

Protocol
--------
``SOCK_SEQPACKET`` Unix sockets, one JSON object per message, descriptors as ``SCM_RIGHTS``:

- ``{"op": "spawn", "id": N, "mode": "checker"|"call"|"exec", "argv": [...], "cwd": PATH}`` with
  descriptors ``[stdin, stdout, stderr, env_pipe]`` (+ ``result`` for a checker). The environment
  is a JSON object in ``env_pipe``. ``argv`` is the checker's path (``checker``), ``_child.py``'s
  ``call`` arguments (``call``) or ``_child.py``'s ``exec`` arguments (``exec``).
  Answer: ``{"op": "started", "id": N, "pid": P}`` or ``{"op": "refused", "id": N, "why": ...}``;
  later ``{"op": "exited", "id": N, "code": C, "cpu_s": S}`` (``code`` as ``subprocess`` reports
  it: negative for a signal; ``cpu_s`` user + system of the process and what it waited for, and
  for a checker also of every child it had the zygote spawn: what the check cost, measured by the
  zygote, never reported by the checker).
- ``{"op": "kill", "id": N}``: kill the spawn's process group.
- A lazy zygote that imports torch for a checker's first attendee-code spawn tells the checker's
  owner ``{"op": "preloading", "id": N}`` before and ``{"op": "preloaded", "id": N, "wall_s": W}``
  after (``N`` the checker): the owner stops the check's clock in between (the import is the
  platform's start, not the attendee's time; its CPU is the zygote's, not the check's).
- A checker finds its sub-channel in descriptor 4 (``LABKIT_ZYGOTE_FD``) and its result channel in
  descriptor 3 (``LAB_RESULT_FD``).

Start one with :func:`start` (a fresh interpreter, :func:`command`); its ``ready`` message says
what its preload cost (``cpu_s``), which a checker that started its own zygote counts as its own.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import resource
import selectors
import signal
import socket
import subprocess
import sys
import time
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from . import _child, spending

MAX_MESSAGE = 64 * 1024
MAX_FDS = 8
RESULT_FD, CHANNEL_FD = 3, 4
PR_SET_CHILD_SUBREAPER = 36
ENV_VAR = "LABKIT_ZYGOTE_FD"
#: What every zygote imports before it forks anything (what checkers and attendee code use).
PRELOAD = ("torch", "numpy", "labkit", "labkit.check", "labkit.emu", "labkit.npu", "labkit.device")


def send(sock: socket.socket, message: Mapping[str, Any], fds: Sequence[int] = ()) -> None:
    socket.send_fds(sock, [json.dumps(message).encode()], list(fds))


def recv(sock: socket.socket) -> tuple[dict[str, Any] | None, list[int]]:
    """One message and its descriptors; ``(None, [])`` at end of stream."""
    data, fds, _flags, _addr = socket.recv_fds(sock, MAX_MESSAGE, MAX_FDS)
    if not data:
        for fd in fds:
            os.close(fd)
        return None, []
    try:
        message = json.loads(data)
    except ValueError:
        message = None
    if not isinstance(message, dict):
        for fd in fds:
            os.close(fd)
        return {"op": "invalid"}, []
    return message, fds


def env_pipe(env: Mapping[str, str]) -> int:
    """The read end of a pipe holding ``env`` as JSON (written at once: it fits a pipe's buffer)."""
    data = json.dumps(dict(env)).encode()
    if len(data) > 60_000:
        raise ValueError("the environment is too large to send to the fork server")
    r, w = os.pipe()
    try:
        os.write(w, data)
    finally:
        os.close(w)
    return r


# -- the server ---------------------------------------------------------------------------------


@dataclass
class _Spawn:
    id: int
    channel: socket.socket
    mode: str
    pid: int
    sub: socket.socket | None = None  # a checker's own channel
    children: set[int] = field(default_factory=set)  # pids a checker spawned
    children_cpu_s: float = 0.0  # CPU of the ended ones (a checker's exit reports its own + these)
    parent: _Spawn | None = None  # the checker that asked for this one


class Zygote:
    """The server loop (single-threaded: nothing may run a thread in a process that forks)."""

    def __init__(self, control: socket.socket, *, lazy: bool = False) -> None:
        self.control = control
        self.preloaded = not lazy
        self.sel = selectors.DefaultSelector()
        self.spawns: dict[int, _Spawn] = {}  # by pid
        self.wake_r, wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        os.set_blocking(wake_w, False)
        signal.set_wakeup_fd(wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        self.sel.register(self.control, selectors.EVENT_READ, None)
        self.sel.register(self.wake_r, selectors.EVENT_READ, "wake")

    def run(self) -> None:
        while True:
            for key, _ in self.sel.select():
                if key.data == "wake":
                    with contextlib.suppress(BlockingIOError):
                        os.read(self.wake_r, 4096)
                elif not self._serve(key.fileobj, key.data):  # type: ignore[arg-type]
                    return
            self._reap()

    def _serve(self, channel: socket.socket, owner: _Spawn | None) -> bool:
        """Handle one message; False when the zygote should end (its own channel closed)."""
        try:
            message, fds = recv(channel)
        except OSError:
            message, fds = None, []
        if message is None:
            if owner is None:
                return False
            self._close_sub(owner)
            return True
        try:
            op = message.get("op")
            if op == "spawn":
                self._spawn(channel, owner, message, fds)
            elif op == "kill":
                self._kill(channel, owner, message)
            else:
                send(channel, {"op": "refused", "id": message.get("id"), "why": f"unknown op {op!r}"})
        finally:
            for fd in fds:
                with contextlib.suppress(OSError):
                    os.close(fd)
        return True

    def _spawn(self, channel: socket.socket, owner: _Spawn | None, message: dict, fds: list[int]) -> None:
        ident, mode = message.get("id"), str(message.get("mode"))
        allowed = ("checker", "call", "exec") if owner is None else ("call", "exec")
        want = 5 if mode == "checker" else 4
        if not isinstance(ident, int) or mode not in allowed or len(fds) != want:
            send(channel, {"op": "refused", "id": ident, "why": f"cannot spawn {mode!r} here"})
            return
        argv = [str(a) for a in message.get("argv", [])]
        cwd = str(message.get("cwd", "/"))
        if mode != "checker" and not self.preloaded:
            # a lazy zygote imports torch once something runs attendee code: a checker that needs
            # none (a file comparison) never pays for it; every later spawn forks with it loaded
            began = time.monotonic()
            if owner is not None:
                with contextlib.suppress(OSError):
                    send(owner.channel, {"op": "preloading", "id": owner.id})
            _preload()
            self.preloaded = True
            if owner is not None:
                with contextlib.suppress(OSError):
                    send(
                        owner.channel, {"op": "preloaded", "id": owner.id, "wall_s": time.monotonic() - began}
                    )
        sub_parent = sub_child = None
        if mode == "checker":
            sub_parent, sub_child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child never returns
            try:
                keep = [*fds, sub_child.detach()] if sub_child is not None else list(fds)
                _become(mode, argv, cwd, keep, zygote_pid=os.getppid())
            finally:
                os._exit(126)
        spawn = _Spawn(ident, channel, mode, pid, sub_parent, parent=owner)
        self.spawns[pid] = spawn
        if sub_child is not None:
            sub_child.close()
        if sub_parent is not None:
            self.sel.register(sub_parent, selectors.EVENT_READ, spawn)
        if owner is not None:
            owner.children.add(pid)
        send(channel, {"op": "started", "id": ident, "pid": pid})

    def _kill(self, channel: socket.socket, owner: _Spawn | None, message: dict) -> None:
        for spawn in self.spawns.values():
            if spawn.id == message.get("id") and spawn.channel is channel:
                _kill_group(spawn.pid)

    def _close_sub(self, checker: _Spawn) -> None:
        if checker.sub is None:
            return
        self.sel.unregister(checker.sub)
        checker.sub.close()
        checker.sub = None
        for pid in checker.children:
            _kill_group(pid)

    def _reap(self) -> None:
        ended = False
        while True:
            try:
                pid, status, usage = os.wait4(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            spawn = self.spawns.pop(pid, None)
            if spawn is None:
                continue  # an orphan re-parented to us (see sweep)
            ended = True
            _kill_group(pid)  # whatever it left in its session
            if spawn.mode == "checker":
                self._close_sub(spawn)
            cpu = usage.ru_utime + usage.ru_stime
            if spawn.parent is not None:
                spawn.parent.children.discard(pid)
                spawn.parent.children_cpu_s += cpu
            with contextlib.suppress(OSError):
                send(
                    spawn.channel,
                    {
                        "op": "exited",
                        "id": spawn.id,
                        "code": _exit_code(status),
                        "cpu_s": cpu + spawn.children_cpu_s,
                    },
                )
        if ended:
            self.sweep()

    def sweep(self) -> None:
        """Kill every process re-parented to us that is not a running spawn (escaped daemons)."""
        me = str(os.getpid())
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) in self.spawns:
                continue
            try:
                with open(f"/proc/{entry}/stat", "rb") as fh:
                    stat = fh.read().decode(errors="replace")
            except OSError:
                continue
            fields = stat.rsplit(")", 1)[-1].split()
            if len(fields) > 1 and fields[1] == me:
                with contextlib.suppress(OSError):
                    os.kill(int(entry), signal.SIGKILL)


def _exit_code(status: int) -> int:
    return os.waitstatus_to_exitcode(status)


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def _become(mode: str, argv: list[str], cwd: str, fds: list[int], *, zygote_pid: int) -> None:
    """In the forked process: take the descriptors, the environment and the limits of ``mode``,
    then run it. Never returns."""
    os.setsid()
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    stdin, stdout, stderr, env_fd, *extra = fds
    with os.fdopen(os.dup(env_fd), "rb") as fh:
        env = json.loads(fh.read() or b"{}")
    targets = {0: stdin, 1: stdout, 2: stderr}
    if mode == "checker":
        result, channel = extra
        targets |= {RESULT_FD: result, CHANNEL_FD: channel}
    # move every source out of the way first, so that no dup2 overwrites a source still needed
    moved = {target: os.dup(source) for target, source in targets.items()}
    for target, source in moved.items():
        os.dup2(source, target, inheritable=True)
    os.closerange(max(targets) + 1, _max_fd())
    os.environ.clear()
    os.environ.update({str(k): str(v) for k, v in env.items()})
    if mode == "checker":
        os.environ["LAB_RESULT_FD"] = str(RESULT_FD)
        os.environ[ENV_VAR] = str(CHANNEL_FD)
    random.seed()  # a forked process would otherwise repeat its siblings' draws
    os.chdir(cwd)
    # the parent whose death must kill the child is the zygote, whatever the requester wrote
    if mode == "call" and len(argv) == 8:
        _child._call([*argv[:7], str(zygote_pid)])  # never returns
    elif mode == "exec" and len(argv) >= 4:
        if _is_python_script(argv[3:]):
            _run_script(argv[3:], int(argv[0]), int(argv[1]), zygote_pid)
        _child._exec([*argv[:2], str(zygote_pid), *argv[3:]])  # never returns
    elif mode != "checker":
        os._exit(126)
    _run_checker(argv[0], zygote_pid)


def _is_python_script(command: list[str]) -> bool:
    """``python FILE.py ARGS...`` or ``python - ARGS...`` (the program on stdin) with this
    interpreter: run in the fork, torch already imported."""
    return (
        len(command) >= 2
        and os.path.realpath(command[0]) == os.path.realpath(sys.executable)
        and (command[1] == "-" or (command[1].endswith(".py") and not command[1].startswith("-")))
    )


def _run_script(command: list[str], memory_mb: int, cpu_s: int, zygote_pid: int) -> None:
    """What ``python FILE.py ARGS`` does (the script's folder first on ``sys.path``, ``__main__``,
    exit status), or ``python - ARGS`` (the program read from stdin, ``""`` first on
    ``sys.path``), under the limits of an ``exec`` child. Never returns."""

    _child.apply_limits(memory_mb, cpu_s, zygote_pid)
    script = command[1]
    sys.argv = command[1:]
    first = "" if script == "-" else os.path.dirname(os.path.abspath(script))
    sys.path[:] = [first] + [p for p in sys.path if p not in ("", ".")]
    _run_main(script)


def _run_checker(path: str, zygote_pid: int) -> None:

    _child.set_non_dumpable()
    with contextlib.suppress(OSError, AttributeError):
        _child._libc().prctl(_child.PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    if os.getppid() != zygote_pid:
        os._exit(125)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    spending.reset_after_fork()
    sys.argv = [path]
    _run_main(path)


def _run_main(path: str) -> None:
    """Run ``path`` (``-``: the program on stdin) as ``__main__`` and end the process with the
    status python would give it (``sys.exit`` codes as python treats them, a traceback and 1 for
    an uncaught exception)."""
    import runpy

    code = 0
    try:
        if path == "-":
            _run_stdin()
        else:
            runpy.run_path(path, run_name="__main__")
    except SystemExit as exc:
        if isinstance(exc.code, int) or exc.code is None:
            code = exc.code or 0
        else:
            print(exc.code, file=sys.stderr)
            code = 1
    except BaseException:  # noqa: BLE001 - as python prints an uncaught exception
        traceback.print_exc()
        code = 1
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


def _run_stdin() -> None:
    """What ``python -`` does: read the whole program from stdin, run it as ``__main__``
    (``__file__`` is ``<stdin>``)."""
    import types

    source = sys.stdin.buffer.read()
    main = types.ModuleType("__main__")
    main.__file__ = "<stdin>"
    main.__builtins__ = __builtins__  # type: ignore[attr-defined]
    sys.modules["__main__"] = main
    exec(compile(source, "<stdin>", "exec"), main.__dict__)  # noqa: S102 - what python - does


def _max_fd() -> int:
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return soft if 0 < soft < 1 << 20 else 65536


def _preload() -> None:
    import importlib

    for name in PRELOAD:
        importlib.import_module(name)


def serve(fd: int, lazy: bool = False) -> None:
    """The zygote's main: preload (``lazy``: at the first spawn that runs attendee code, not
    now), harden, then serve the channel in descriptor ``fd``."""
    control = socket.socket(fileno=fd)
    with contextlib.suppress(OSError, AttributeError):
        _child._libc().prctl(_child.PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    if not lazy:
        _preload()
    _child.set_non_dumpable()
    with contextlib.suppress(OSError, AttributeError):
        _child._libc().prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    os.closerange(3, fd)
    os.closerange(fd + 1, _max_fd())
    usage = resource.getrusage(resource.RUSAGE_SELF)
    send(control, {"op": "ready", "pid": os.getpid(), "cpu_s": usage.ru_utime + usage.ru_stime})
    Zygote(control, lazy=lazy).run()


def command(fd: int, python: str | None = None, *, lazy: bool = False) -> list[str]:
    """The command line that starts a zygote serving descriptor ``fd``; ``lazy`` for one that
    lives across checks (its first checker may need no torch), eager for one per check."""
    boot = "import sys; from labkit.check.zygote import serve; serve(int(sys.argv[1]), sys.argv[2] == 'lazy')"
    return [python or sys.executable, "-I", "-u", "-c", boot, str(fd), "lazy" if lazy else "eager"]


# -- the client ---------------------------------------------------------------------------------


class ZygoteGone(RuntimeError):
    """The fork server ended or refused: the platform's fault, never the attendee's."""


class Client:
    """A blocking client of one zygote channel (what a checker uses to run attendee code)."""

    def __init__(self, sock: socket.socket, proc: subprocess.Popen[bytes] | None = None) -> None:
        self.sock = sock
        self.proc = proc  # set when this process started the zygote itself
        self.preload_cpu_s = 0.0
        self._next = 0
        self._pending: dict[int, dict[str, Any]] = {}

    def _receive(self, timeout: float | None) -> dict[str, Any] | None:
        self.sock.settimeout(timeout)
        try:
            message, fds = recv(self.sock)
        except TimeoutError:
            return None
        except OSError as exc:
            raise ZygoteGone(f"the fork server's channel failed: {exc}") from exc
        for fd in fds:
            os.close(fd)
        if message is None:
            raise ZygoteGone("the fork server ended")
        return message

    def _wait_for(self, ident: int, ops: tuple[str, ...], deadline: float | None) -> dict[str, Any] | None:
        while True:
            key = self._pending.get(ident)
            if key is not None and key.get("op") in ops:
                return self._pending.pop(ident)
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return None
            message = self._receive(left)
            if message is None:
                return None
            if isinstance(message.get("id"), int):
                self._pending[message["id"]] = message

    def spawn(
        self, mode: str, argv: Sequence[str], *, cwd: str, env: Mapping[str, str], fds: Sequence[int]
    ) -> int:
        """Ask for one process: ``fds`` are its stdin, stdout, stderr (+ the result channel for a
        checker); the caller keeps and closes its own copies. Returns the id :meth:`wait` takes."""
        self._next += 1
        ident = self._next
        env_fd = env_pipe(env)
        try:
            send(
                self.sock,
                {"op": "spawn", "id": ident, "mode": mode, "argv": list(argv), "cwd": cwd},
                [*fds[:3], env_fd, *fds[3:]],
            )
        except OSError as exc:
            raise ZygoteGone(f"the fork server's channel failed: {exc}") from exc
        finally:
            os.close(env_fd)
        started = self._wait_for(ident, ("started", "refused"), None)
        if started is None or started.get("op") == "refused":
            why = started.get("why") if started else "no answer"
            raise ZygoteGone(f"the fork server refused to start the process: {why}")
        return ident

    def wait(self, ident: int, timeout: float | None) -> tuple[int | None, bool, float]:
        """``(exit code or None on timeout, timed out, CPU seconds)``; a process still running
        after ``timeout`` is killed with its process group."""
        deadline = None if timeout is None else time.monotonic() + timeout
        exited = self._wait_for(ident, ("exited",), deadline)
        timed_out = exited is None
        if exited is None:
            send(self.sock, {"op": "kill", "id": ident})
            exited = self._wait_for(ident, ("exited",), time.monotonic() + 30)
            if exited is None:
                raise ZygoteGone("the fork server did not end a process it was asked to kill")
        code = exited.get("code")
        cpu = float(exited.get("cpu_s") or 0.0)
        return (None if timed_out else int(code) if isinstance(code, int) else None), timed_out, cpu

    def kill(self, ident: int) -> None:
        """Kill the process group of spawn ``ident`` (its ``exited`` message follows)."""
        with contextlib.suppress(OSError):
            send(self.sock, {"op": "kill", "id": ident})

    def pump(self, timeout: float) -> None:
        """Receive at most one message (waiting up to ``timeout`` s) and keep it for
        :meth:`exited`: for a caller that waits on several spawns and other descriptors at once
        (``select`` on :attr:`sock`)."""
        message = self._receive(timeout)
        if message is not None and isinstance(message.get("id"), int):
            self._pending[message["id"]] = message

    def exited(self, ident: int) -> tuple[int | None, float] | None:
        """``(exit code, CPU seconds)`` of spawn ``ident`` once its ``exited`` message has come
        (:meth:`pump`), else None."""
        message = self._pending.get(ident)
        if message is None or message.get("op") != "exited":
            return None
        del self._pending[ident]
        code = message.get("code")
        return (int(code) if isinstance(code, int) else None), float(message.get("cpu_s") or 0.0)

    def run(
        self,
        mode: str,
        argv: Sequence[str],
        *,
        cwd: str,
        env: Mapping[str, str],
        stdout: int,
        stderr: int,
        timeout: float | None,
    ) -> tuple[int | None, bool, float]:
        """Spawn with stdin ``/dev/null`` and wait (:meth:`spawn`, :meth:`wait`)."""
        devnull = os.open(os.devnull, os.O_RDONLY)
        try:
            ident = self.spawn(mode, argv, cwd=cwd, env=env, fds=[devnull, stdout, stderr])
        finally:
            os.close(devnull)
        return self.wait(ident, timeout)

    def close(self) -> None:
        """Close the channel: the zygote ends, and every process it forked with it."""
        self.sock.close()
        if self.proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=10)


def start(env: Mapping[str, str], python: str | None = None, cwd: str = "/") -> Client:
    """Start a zygote of this process's own (a fresh interpreter with ``env``) and wait until it
    has preloaded; the zygote ends when this process does (or when the client is closed)."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        proc = subprocess.Popen(
            command(theirs.fileno(), python),
            cwd=cwd,
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=None,
            pass_fds=(theirs.fileno(),),
            start_new_session=True,
        )
    finally:
        theirs.close()
    client = Client(ours, proc)
    ready = client._receive(None)
    if ready is None or ready.get("op") != "ready":
        raise ZygoteGone(f"the fork server did not start (it said {ready!r})")
    client.preload_cpu_s = float(ready.get("cpu_s") or 0.0)
    return client
