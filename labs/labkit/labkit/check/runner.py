"""Running attendee code in a child process, so a checker never executes it itself.

``run_function`` imports an attendee module and calls one function; ``run_script`` runs a
command. Both are forked by the check's fork server (:mod:`labkit.check.zygote`), which has
imported torch and labkit once: the backend's zygote when the checker was started by one
(``LABKIT_ZYGOTE_FD``), else one this checker starts at its first call. Each child gets:

- cwd = the checker's cwd (the attendee's lab folder) and, for ``run_function``, that folder
  first on the child's ``sys.path``;
- every descriptor closed except stdin (``/dev/null``), stdout and stderr (temp files), so the
  child cannot reach the result channel or the zygote; ``LAB_RESULT_FD``, ``LAB_RUN_ID`` and
  anything that looks like a secret removed from its environment (which it receives through a pipe
  only it reads, so the zygote never holds it);
- a new session (process group) killed as a whole on the wall-clock timeout and after the call;
- ``RLIMIT_AS`` (``memory_mb``; not applied when ``LAB_DEVICE`` is an NPU, whose driver maps large
  virtual ranges), ``RLIMIT_CPU``, no core dumps, no capabilities, death with the zygote (which
  dies with the checker or the backend that started it).

The checker process itself is made non-dumpable, so a child cannot open
``/proc/<checker>/fd/<LAB_RESULT_FD>`` either.

Return values come back through ``torch.save`` in the child and ``torch.load(weights_only=True)``
here: tensors, numbers, strings, bytes, ``None`` and lists/tuples/dicts of them. Plain pickle from
an attendee-controlled process is never loaded.
"""

from __future__ import annotations

import math
import os
import re
import signal
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from . import _child, _pyforward, spending, zygote
from .verdict import Failure, msg

__all__ = ["AttendeeError", "CallResult", "Frame", "ScriptResult", "child_env", "run_function", "run_script"]

MAX_OUTPUT_CHARS = 100_000
_SECRET = re.compile(r"TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|API_KEY|PRIVATE", re.IGNORECASE)


@dataclass(frozen=True)
class Frame:
    """One traceback line in the attendee's own files (path relative to the lab folder)."""

    file: str
    line: int
    function: str
    code: str


@dataclass(frozen=True)
class AttendeeError:
    """What went wrong in attendee code.

    ``phase`` is where: ``import`` (the module failed to import), ``lookup`` (no such function),
    ``call`` (the function raised), ``return`` (the value cannot be sent back), ``exit`` (the
    process ended before returning: ``os._exit``, a signal, the memory or CPU limit) or ``timeout``.
    """

    type: str
    message: str
    frames: tuple[Frame, ...] = ()
    phase: str = "call"

    def format(self) -> str:
        """The attendee's traceback lines then ``Type: message``, like Python prints it."""
        lines: list[str] = []
        if self.frames:
            lines.append(msg("Traceback (your code only):", "调用栈（仅你的代码）："))
            for f in self.frames:
                lines.append(f'  File "{f.file}", line {f.line}, in {f.function}')
                if f.code:
                    lines.append(f"    {f.code}")
        lines.append(f"{self.type}: {self.message}" if self.message else self.type)
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.format()


@dataclass(frozen=True)
class CallResult:
    """Outcome of :func:`run_function`: ``value`` is ``None`` whenever ``error`` is set."""

    value: Any
    stdout: str
    stderr: str
    error: AttendeeError | None
    timed_out: bool
    exit_code: int | None = None
    call: str = field(default="", compare=False)

    @property
    def ok(self) -> bool:
        return self.error is None

    def unwrap(self, hints: Sequence[str] | str = ()) -> Any:
        """Return the value, or raise :class:`Failure` explaining the attendee's error with their
        own traceback lines (and the tail of their stderr when the process died)."""
        if self.error is None:
            return self.value
        raise Failure(describe_error(self.call, self.error, self.stderr), hints)


@dataclass(frozen=True)
class ScriptResult:
    """Outcome of :func:`run_script`; ``exit_code`` is negative for a signal, None on timeout."""

    exit_code: int | None
    stdout: str
    stderr: str
    timed_out: bool

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out


def describe_error(call: str, error: AttendeeError, stderr: str = "") -> str:
    """A learner-facing explanation of ``error`` raised by ``call`` (e.g. ``"attention.py: attention()"``)."""
    if error.phase == "timeout":
        head = msg(f"{call} did not finish in time.", f"{call} 没有在限定时间内完成。")
    elif error.phase == "import":
        head = msg(f"Importing {call.split(':')[0]} failed.", f"导入 {call.split(':')[0]} 失败。")
    elif error.phase == "lookup":
        head = msg(f"{call} was not found.", f"找不到 {call}。")
    elif error.phase == "return":
        head = msg(f"The value returned by {call} cannot be checked.", f"{call} 的返回值无法检查。")
    elif error.phase == "exit":
        head = msg(f"{call} ended its process instead of returning.", f"{call} 没有返回，而是结束了进程。")
    else:
        head = msg(f"{call} raised an exception.", f"{call} 抛出了异常。")
    text = f"{head}\n{error.format()}"
    if error.phase == "exit" and stderr.strip():
        tail = "\n".join(stderr.strip().splitlines()[-10:])
        text += "\n" + msg("Last lines of its stderr:", "stderr 的最后几行：") + "\n" + tail
    return text


def child_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment attendee code gets: ours minus the result channel, the run id,
    ``LABSERVER_*`` settings and anything named like a secret; plus ``extra``."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("LAB_RESULT_FD", "LAB_RUN_ID", zygote.ENV_VAR)
        and not k.startswith("LABSERVER_")
        and not _SECRET.search(k)
    }
    env["PYTHONUNBUFFERED"] = "1"  # output printed just before a crash or a kill is kept
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # no __pycache__ left in the attendee's folder
    if extra:
        env.update(extra)
    return env


# ``import torch`` alone maps about 0.8 GB of address space, so a function call gets at least this.
MIN_CALL_MEMORY_MB = 1024


def _memory_limit(memory_mb: int | None, floor: int = 64) -> int:
    if memory_mb is None or os.environ.get("LAB_DEVICE", "").startswith("npu"):
        return 0
    return max(int(memory_mb), floor)


def _cpu_limit(timeout: float | None) -> int:
    # A backstop for when the wall timeout cannot act (the checker died): CPU seconds over all
    # threads, so allow two cores plus interpreter start-up.
    return 0 if timeout is None else int(math.ceil(timeout * 2)) + 10


def _read_capped(path: str) -> str:
    with open(path, "rb") as fh:
        data = fh.read(MAX_OUTPUT_CHARS * 4 + 1)
    text = data.decode("utf-8", errors="replace")
    if len(text) > MAX_OUTPUT_CHARS:
        half = MAX_OUTPUT_CHARS // 2
        text = text[:half] + "\n... (output truncated) ...\n" + text[-half:]
    return text


_client: zygote.Client | None = None


def _zygote() -> zygote.Client:
    """The fork server this checker's children come from: the one that started this checker, or
    one of our own started at the first call (it preloads torch once for every later call)."""
    global _client
    if _client is None:
        fd_text = os.environ.pop(zygote.ENV_VAR, "")
        if fd_text.isdigit():
            import socket

            _client = zygote.Client(socket.socket(fileno=int(fd_text)))
        else:
            _client = zygote.start(child_env(), cwd=os.getcwd())
            spending.add_spawned_cpu(_client.preload_cpu_s)
    return _client


def _forget_client() -> None:
    """A process forked from this one does not share its zygote connection."""
    global _client
    _client = None


spending.on_fork(_forget_client)


def _noexec(path: str) -> bool:
    """True when ``path`` is on a file system mounted ``noexec``."""
    try:
        return bool(os.statvfs(path).f_flag & os.ST_NOEXEC)
    except OSError:
        return True


def _run(
    mode: str,
    argv: list[str],
    cwd: str,
    env: dict[str, str],
    timeout: float | None,
    tmp: str,
    fork_python: bool = False,
) -> tuple[int | None, str, str, bool]:
    _child.set_non_dumpable()
    out_path, err_path = os.path.join(tmp, "stdout"), os.path.join(tmp, "stderr")
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        try:
            # a Unix socket path has at most 107 bytes: under a longer TMPDIR the pythons start
            # afresh; so they do where the shims could not run (a noexec /tmp, as Docker mounts
            # its tmpfs: a shell would skip them, and a python it started by name would take the
            # shim's folder for its home and lose its packages)
            if fork_python and len(os.fsencode(tmp)) < 90 and not _noexec(tmp):
                bin_dir, sock_path = _pyforward.install(tmp)
                env = {
                    **env,
                    "PATH": f"{bin_dir}:{env.get('PATH', os.defpath)}",
                    _pyforward.SOCKET_VAR: sock_path,
                }
                code, timed_out, cpu = _pyforward.run(
                    _zygote(),
                    argv,
                    cwd=cwd,
                    env=env,
                    stdout=out.fileno(),
                    stderr=err.fileno(),
                    timeout=timeout,
                    sock_path=sock_path,
                )
            else:
                code, timed_out, cpu = _zygote().run(
                    mode, argv, cwd=cwd, env=env, stdout=out.fileno(), stderr=err.fileno(), timeout=timeout
                )
        except zygote.ZygoteGone as exc:
            # the platform's fault: a checker error (exit 2), never a verdict about the attendee
            raise RuntimeError(f"labkit.check: {exc}") from exc
    spending.add_spawned_cpu(cpu)
    return code, _read_capped(out_path), _read_capped(err_path), timed_out


def _signal_name(code: int) -> str:
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


def _parse_payload(payload: Any) -> tuple[Any, AttendeeError | None]:
    if not isinstance(payload, dict) or payload.get("status") not in ("ok", "error"):
        return None, AttendeeError("BadResult", "the child process wrote an unexpected result", (), "return")
    if payload["status"] == "ok":
        return payload.get("value"), None
    frames = tuple(
        Frame(str(f[0]), int(f[1]), str(f[2]), str(f[3]))
        for f in payload.get("frames", [])
        if isinstance(f, list | tuple) and len(f) == 4
    )
    return None, AttendeeError(
        str(payload.get("type", "Exception")),
        str(payload.get("message", "")),
        frames,
        str(payload.get("phase", "call")),
    )


def run_function(
    file: str | os.PathLike[str],
    func: str,
    *args: Any,
    timeout: float | None = 30,
    memory_mb: int | None = 2048,
    **kwargs: Any,
) -> CallResult:
    """Import ``file`` (relative to the cwd, the lab folder) in a child process and return
    ``func(*args, **kwargs)`` from it (``func`` may be dotted: ``"Model.forward"``).

    ``file`` may also be an absolute path to trusted harness code (e.g. next to the checker)
    that imports the attendee's modules itself; the child still runs in the lab folder, and
    tracebacks still show only frames in the lab folder.

    Arguments are sent with ``torch.save`` (anything picklable). The value comes back as plain
    data (see the module docstring); an exception, exit, limit or timeout comes back as
    ``error`` with the attendee's traceback lines; ``timeout`` and ``memory_mb`` are reserved
    keyword names (``None`` = no limit; ``memory_mb`` is at least ``MIN_CALL_MEMORY_MB`` because
    the child imports torch).
    """
    import torch

    file = os.fspath(file)
    call = f"{file}: {func}()"
    lab_dir = os.getcwd()
    with tempfile.TemporaryDirectory(prefix="labkit-call-") as tmp:
        spec_path, result_path = os.path.join(tmp, "spec.pt"), os.path.join(tmp, "result.pt")
        torch.save({"args": tuple(args), "kwargs": dict(kwargs)}, spec_path)
        argv = [
            lab_dir,
            file,
            func,
            spec_path,
            result_path,
            str(_memory_limit(memory_mb, MIN_CALL_MEMORY_MB)),
            str(_cpu_limit(timeout)),
            "0",  # the parent pid: the zygote puts its own
        ]
        code, stdout, stderr, timed_out = _run("call", argv, lab_dir, child_env(), timeout, tmp)
        value: Any = None
        error: AttendeeError | None
        if timed_out:
            error = AttendeeError(
                "Timeout",
                msg(f"no result after {timeout:g} s (stopped)", f"{timeout:g} 秒后仍无结果（已终止）"),
                (),
                "timeout",
            )
        elif os.path.exists(result_path):
            try:
                payload = torch.load(result_path, weights_only=True, map_location="cpu")
            except Exception as exc:
                payload = None
                error = AttendeeError(
                    "BadResult", f"the result could not be read back safely: {exc}", (), "return"
                )
            if payload is not None:
                value, error = _parse_payload(payload)
        elif code is not None and code < 0:
            name = _signal_name(code)
            why = {
                "SIGKILL": msg(" (out of memory?)", "（内存不足？）"),
                "SIGXCPU": msg(" (CPU time limit)", "（CPU 时间超限）"),
                "SIGSEGV": msg(" (crash in native code)", "（本地代码崩溃）"),
            }.get(name, "")
            error = AttendeeError("Killed", f"killed by {name}{why}", (), "exit")
        else:
            error = AttendeeError(
                "Exited",
                msg(
                    f"the process exited with status {code} before the function returned (os._exit? sys.exit in a thread?)",
                    f"函数返回之前进程以状态 {code} 退出（os._exit？）",
                ),
                (),
                "exit",
            )
    return CallResult(value, stdout, stderr, error, timed_out, code, call)


def run_script(
    argv: Sequence[str],
    timeout: float | None = 60,
    env: Mapping[str, str] | None = None,
    *,
    memory_mb: int | None = 2048,
    fork_python: bool = False,
) -> ScriptResult:
    """Run a command (``["python", "run_me.py"]``; ``python``/``python3`` mean this interpreter)
    in the lab folder with the isolation described in the module docstring. ``env`` adds to or
    overrides the cleaned environment.

    ``fork_python=True`` (a shell script that runs python): ``python`` and ``python3`` come first
    on the command's ``PATH``, and each ``python FILE.py ...`` / ``python - ...`` it runs is forked
    by the fork server too (torch already imported) with the same stdin, stdout, stderr, cwd,
    environment and exit status, instead of starting an interpreter (``_pyforward.py``). The
    timeout and limits hold for the command and each of those pythons; their CPU is the check's."""
    command = [str(a) for a in argv]
    if not command:
        raise ValueError("run_script needs a command")
    if command[0] in ("python", "python3"):
        command[0] = sys.executable
    wrapper = [str(_memory_limit(memory_mb)), str(_cpu_limit(timeout)), "0", *command]
    with tempfile.TemporaryDirectory(prefix="labkit-run-") as tmp:
        code, stdout, stderr, timed_out = _run(
            "exec", wrapper, os.getcwd(), child_env(env), timeout, tmp, fork_python
        )
    return ScriptResult(code, stdout, stderr, timed_out)
