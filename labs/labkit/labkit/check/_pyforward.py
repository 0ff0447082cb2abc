"""``run_script(..., fork_python=True)``: the ``python`` runs of a command (a shell script's
steps) forked by the check's fork server instead of starting an interpreter each.

A shell script that runs ``python`` three times pays three interpreter starts with ``import
torch`` (1-2 CPU-s each), where a fork of the zygote costs milliseconds. With ``fork_python`` the
command finds ``python`` and ``python3`` first on its ``PATH`` as a small shim; the shim sends
its command line, cwd, environment and its own stdin, stdout and stderr (``SCM_RIGHTS``) to the
checker over a Unix socket in the call's private temp folder, the checker has the zygote fork
``python FILE.py ARGS`` (or ``python - ARGS``) with them (an ``exec`` child like any other: its
own session, the call's limits), and the shim exits with the fork's status (a signal death as
a signal death). So the script sees what a fresh interpreter would give it (output, exit status,
the files it writes); only the start-up is skipped. Any other command line (``python -c``,
``-m``, options) and a shim that cannot reach the socket run a real interpreter, as before.

Trust: the socket answers whoever can open it (the command and what it starts, attendee code);
what it offers is what they could do anyway: run ``python`` as an ``exec`` child of this check,
with the descriptors they hold. Requests are size-bounded JSON; received descriptors are only
passed on to the zygote and closed.
"""

from __future__ import annotations

import array
import contextlib
import json
import os
import select
import socket
import sys
import time
from collections.abc import Mapping

from . import zygote

SOCKET_VAR = "LABKIT_PYTHON_SOCKET"
MAX_REQUEST = 1 << 20  # command line + environment of one python run

SHIM = """\
import array, json, os, socket, sys
REAL = {real!r}
args = sys.argv[1:]
path = os.environ.get({var!r}, "")
try:  # a closed stdin, stdout or stderr stays closed: a real interpreter (checked before any
    for fd in (0, 1, 2):  # socket takes its number)
        os.fstat(fd)
except OSError:
    path = ""
if path and args and (args[0] == "-" or (args[0].endswith(".py") and not args[0].startswith("-"))):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        s.connect(path)
    except OSError:
        s.close()
    else:
        req = json.dumps({{"argv": args, "cwd": os.getcwd(), "env": dict(os.environ)}}).encode()
        try:  # a request too large to send: a real interpreter
            s.sendmsg([req], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [0, 1, 2]))])
        except OSError:
            os.execv(REAL, [REAL, *args])
        answer = json.loads(s.recv(256) or b'{{"code": 1}}')
        if answer.get("exec"):  # the checker cannot fork this one: a real interpreter runs it
            os.execv(REAL, [REAL, *args])
        code = int(answer["code"])
        if code < 0:
            import signal
            signal.signal(-code, signal.SIG_DFL)
            os.kill(os.getpid(), -code)
        os._exit(code & 255)
os.execv(REAL, [REAL, *args])
"""


def install(folder: str) -> tuple[str, str]:
    """Write the shims into ``folder``: ``(bin folder to put first on PATH, socket path)``."""
    bin_dir = os.path.join(folder, "pybin")
    os.mkdir(bin_dir, 0o700)
    shim = os.path.join(folder, "pyshim.py")
    with open(shim, "w", encoding="utf-8") as fh:
        fh.write(SHIM.format(real=sys.executable, var=SOCKET_VAR))
    for name in ("python", "python3"):
        path = os.path.join(bin_dir, name)
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(f'#!/bin/sh\nexec "{sys.executable}" -I -S "{shim}" "$@"\n')
        os.chmod(path, 0o700)
    return bin_dir, os.path.join(folder, "py.sock")


def _request(conn: socket.socket) -> tuple[dict, list[int]]:
    """One shim's request: ``({"argv", "cwd", "env"}, [stdin, stdout, stderr])``; ValueError if
    malformed (its descriptors are closed then)."""
    fds = array.array("i")
    data, ancdata, _flags, _addr = conn.recvmsg(MAX_REQUEST, socket.CMSG_SPACE(8 * fds.itemsize))
    for level, kind, payload in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
    try:
        req = json.loads(data)
        argv, cwd, env = req["argv"], req["cwd"], req["env"]
        if not (
            len(fds) == 3
            and isinstance(argv, list)
            and argv
            and all(isinstance(a, str) for a in argv)
            and isinstance(cwd, str)
            and isinstance(env, dict)
            and all(isinstance(k, str) and isinstance(v, str) for k, v in env.items())
        ):
            raise ValueError("malformed request")
    except (ValueError, KeyError, TypeError):
        for fd in fds:
            os.close(fd)
        raise ValueError("malformed request") from None
    return {"argv": argv, "cwd": cwd, "env": env}, list(fds)


def _answer(conn: socket.socket, code: int | None, *, run_it_yourself: bool = False) -> None:
    """Tell a shim its python's exit status (or to exec a real interpreter) and hang up."""
    answer = {"exec": True} if run_it_yourself else {"code": 1 if code is None else code}
    with contextlib.suppress(OSError):
        conn.send(json.dumps(answer).encode())
    conn.close()


def _reap(client: zygote.Client, calls: dict[int, socket.socket | None]) -> float:
    """Take the ended forked pythons out of ``calls`` (zygote id -> its shim, or None when the shim
    is gone), give each shim its exit status, and return the CPU seconds they used."""
    cpu = 0.0
    for ident in list(calls):
        done = client.exited(ident)
        if done is not None:
            cpu += done[1]
            conn = calls.pop(ident)
            if conn is not None:
                _answer(conn, done[0])
    return cpu


def run(
    client: zygote.Client,
    wrapper: list[str],
    *,
    cwd: str,
    env: Mapping[str, str],
    stdout: int,
    stderr: int,
    timeout: float | None,
    sock_path: str,
) -> tuple[int | None, bool, float]:
    """Like :meth:`zygote.Client.run` (``exec`` ``wrapper`` = limits + command), serving the
    command's python shims meanwhile: ``(exit code or None on timeout, timed out, CPU seconds of
    the command and of every python it had forked)``."""
    limits = wrapper[:3]
    server = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    server.bind(sock_path)
    server.listen(16)
    devnull = os.open(os.devnull, os.O_RDONLY)
    try:
        main = client.spawn("exec", wrapper, cwd=cwd, env=env, fds=[devnull, stdout, stderr])
    finally:
        os.close(devnull)
    deadline = None if timeout is None else time.monotonic() + timeout
    waiting: list[socket.socket] = []  # shims connected, request not read yet
    calls: dict[int, socket.socket | None] = {}  # zygote id of a forked python -> its shim
    cpu, code, timed_out = 0.0, None, False
    try:
        while True:
            ended = client.exited(main)
            if ended is not None:
                code, main_cpu = ended
                cpu += main_cpu
                break
            cpu += _reap(client, calls)
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                timed_out = True
                client.kill(main)
                break
            shims = [c for c in calls.values() if c is not None]
            ready, _, _ = select.select([client.sock, server, *waiting, *shims], [], [], left)
            if client.sock in ready:
                client.pump(5.0)
            if server in ready:
                conn, _ = server.accept()
                waiting.append(conn)
            for conn in [c for c in waiting if c in ready]:
                waiting.remove(conn)
                try:
                    req, fds = _request(conn)
                except (ValueError, OSError):  # truncated (too large) or not a shim's
                    _answer(conn, None, run_it_yourself=True)
                    continue
                try:
                    ident = client.spawn(
                        "exec",
                        [*limits, sys.executable, *req["argv"]],
                        cwd=req["cwd"],
                        env=req["env"],
                        fds=fds,
                    )
                except ValueError:  # an environment too large to send: a real interpreter
                    _answer(conn, None, run_it_yourself=True)
                    continue
                finally:
                    for fd in fds:
                        os.close(fd)
                calls[ident] = conn
            for ident, shim in list(calls.items()):
                if (
                    shim is not None and shim in shims and shim in ready
                ):  # the shim is gone: so goes its python
                    client.kill(ident)
                    shim.close()
                    calls[ident] = None
    finally:
        for conn in waiting:
            conn.close()
        server.close()
        # what is still running: the command on a timeout, pythons it left behind or lost
        running = dict(calls)
        if timed_out:
            running[main] = None
        for ident in calls:
            client.kill(ident)
        end = time.monotonic() + 30
        while running and time.monotonic() < end:
            cpu += _reap(client, running)
            if running:
                client.pump(max(0.01, end - time.monotonic()))
        if running:
            raise zygote.ZygoteGone("the fork server did not end a process it was asked to kill")
    return (None if timed_out else code), timed_out, cpu
