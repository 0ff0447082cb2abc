"""Bootstrap that runs attendee code in a child process (see ``runner.py``).

The runner passes this file's *source* to ``python -c`` (so nothing in the attendee's folder can
shadow it) with one of two modes:

- ``call LAB_DIR FILE FUNC SPEC RESULT MEMORY_MB CPU_S PARENT_PID``: import FILE, call FUNC with
  the arguments stored (``torch.save``) in SPEC, write ``{"status": "ok", "value": ...}`` or
  ``{"status": "error", ...}`` to RESULT with ``torch.save`` (plain data only: the parent loads it
  with ``weights_only=True``), then ``os._exit(0)``.
- ``exec MEMORY_MB CPU_S PARENT_PID ARGV...``: apply the same limits, then ``execvp`` ARGV.

Before any attendee code runs the child: dies with its parent (``PR_SET_PDEATHSIG``), takes
hard memory / CPU limits, drops every Linux capability (so even as root it cannot open
``/proc/<checker>/fd/N`` of the non-dumpable checker) and sets ``no_new_privs``.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import resource
import signal
import sys
import traceback
from typing import Any

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
_CAP_VERSION_3 = 0x20080522
MAX_FRAMES = 30
MAX_TEXT = 4000


def _libc() -> Any:
    return ctypes.CDLL(None, use_errno=True)


def set_non_dumpable() -> bool:
    """Make this process non-dumpable: other processes without CAP_SYS_PTRACE cannot open its
    ``/proc/<pid>/fd``, ``mem`` or ptrace it. Returns False where unsupported."""
    try:
        return int(_libc().prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def drop_privileges() -> None:
    """Best effort: no capabilities (effective, permitted, inheritable, bounding, ambient) and
    ``no_new_privs``, so setuid programs cannot give them back."""
    try:
        libc = _libc()
    except OSError:
        return
    libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    for cap in range(64):
        libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [
            ("effective", ctypes.c_uint32),
            ("permitted", ctypes.c_uint32),
            ("inheritable", ctypes.c_uint32),
        ]

    header = Header(_CAP_VERSION_3, 0)
    data = (Data * 2)()
    with contextlib.suppress(AttributeError):
        libc.capset(ctypes.byref(header), data)
    libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)


def apply_limits(memory_mb: int, cpu_s: int, parent_pid: int) -> None:
    with contextlib.suppress(OSError, AttributeError):
        _libc().prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    if os.getppid() != parent_pid:  # the parent died before PDEATHSIG was armed
        os._exit(125)
    if memory_mb > 0:
        limit = memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    if cpu_s > 0:
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 1))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    drop_privileges()


def _inside(path: str, folder: str) -> bool:
    if not path or path.startswith("<"):  # "<string>" (this bootstrap), "<frozen importlib...>"
        return False
    try:
        real = os.path.realpath(path)
    except (OSError, ValueError):
        return False
    return real == folder or real.startswith(folder + os.sep)


def _error(phase: str, exc: BaseException, lab_dir: str) -> dict:
    frames: list[list[Any]] = []
    for fs in traceback.extract_tb(exc.__traceback__):
        if _inside(fs.filename, lab_dir):
            rel = os.path.relpath(os.path.realpath(fs.filename), lab_dir)
            frames.append([rel, int(fs.lineno or 0), str(fs.name), (fs.line or "").strip()])
    if isinstance(exc, SyntaxError) and exc.filename and _inside(exc.filename, lab_dir):
        rel = os.path.relpath(os.path.realpath(exc.filename), lab_dir)
        frames.append([rel, int(exc.lineno or 0), "<module>", (exc.text or "").strip()])
    if isinstance(exc, SystemExit):
        message = f"exit status {exc.code!r}"
    else:
        try:
            message = str(exc)
        except Exception:
            message = "<unprintable exception message>"
    return {
        "status": "error",
        "phase": phase,
        "type": type(exc).__name__,
        "message": message[:MAX_TEXT],
        "frames": frames[-MAX_FRAMES:],
    }


def _plain(obj: Any, torch: Any, depth: int = 0) -> Any:
    """Convert a return value to what ``torch.load(weights_only=True)`` accepts."""
    if depth > 50:
        raise TypeError("the return value is nested too deeply")
    if obj is None or isinstance(obj, bool | int | float | complex | str | bytes):
        return obj
    if isinstance(obj, torch.Tensor):
        t = obj.detach().cpu().clone()  # clone: a view must not send its whole base storage
        return t if type(t) is torch.Tensor else t.as_subclass(torch.Tensor)
    if isinstance(obj, torch.dtype | torch.device):
        return str(obj)
    if isinstance(obj, torch.Size):
        return tuple(int(v) for v in obj)
    if isinstance(obj, list):
        return [_plain(v, torch, depth + 1) for v in obj]
    if isinstance(obj, tuple):  # namedtuples become plain tuples
        return tuple(_plain(v, torch, depth + 1) for v in obj)
    if isinstance(obj, dict):
        out = {}
        for key, value in obj.items():
            if not isinstance(key, str | int):
                raise TypeError(f"dictionary key {key!r} is not a str or int")
            out[key] = _plain(value, torch, depth + 1)
        return out
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        if isinstance(obj, numpy.ndarray):
            return torch.from_numpy(numpy.array(obj, copy=True))
        if isinstance(obj, numpy.generic):
            return obj.item()
    raise TypeError(
        f"returned an object of type {type(obj).__module__}.{type(obj).__qualname__}; return tensors, "
        "numbers, strings, or lists/tuples/dicts of them"
    )


def _import_attendee(lab_dir: str, file: str) -> Any:
    import importlib
    import importlib.util

    path = os.path.realpath(os.path.join(lab_dir, file))
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{file} does not exist in the lab folder")
    rel = os.path.relpath(path, lab_dir)
    parts = rel[:-3].split(os.sep) if rel.endswith(".py") else []
    if parts and not rel.startswith("..") and all(p.isidentifier() for p in parts):
        name = ".".join(parts)
        existing = sys.modules.get(name)
        if existing is None or os.path.realpath(getattr(existing, "__file__", "") or "") == path:
            return importlib.import_module(name)
    # A name taken by an already-imported module (e.g. ``types.py``) or not a module path.
    name = "_attendee_" + "".join(c if c.isalnum() else "_" for c in rel)
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {file}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _write(torch: Any, payload: dict, result_path: str) -> None:
    tmp = result_path + ".tmp"
    torch.save(payload, tmp)
    os.replace(tmp, result_path)


def _call(argv: list[str]) -> None:
    lab_dir, file, func, spec_path, result_path, memory_mb, cpu_s, parent_pid = argv
    apply_limits(int(memory_mb), int(cpu_s), int(parent_pid))
    lab_dir = os.path.realpath(lab_dir)
    # torch first, with the lab folder not yet on sys.path: an attendee file named like one of
    # torch's own imports (numpy.py, typing_extensions.py) must not break the bootstrap.
    import torch

    spec = torch.load(spec_path, weights_only=False)  # written by the checker: trusted
    with contextlib.suppress(OSError):
        os.unlink(spec_path)
    sys.path[:] = [lab_dir] + [p for p in sys.path if p not in ("", ".", lab_dir)]
    sys.argv = [file]
    phase = "import"
    try:
        target: Any = _import_attendee(lab_dir, file)
        phase = "lookup"
        for attr in func.split("."):
            target = getattr(target, attr)
        phase = "call"
        value = target(*spec["args"], **spec["kwargs"])
        phase = "return"
        payload = {"status": "ok", "value": _plain(value, torch)}
    except BaseException as exc:  # noqa: BLE001 - everything the attendee raises, SystemExit included
        payload = _error(phase, exc, lab_dir)
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            if stream is not None:
                stream.flush()
        except Exception:
            pass
    try:
        _write(torch, payload, result_path)
    except BaseException as exc:  # noqa: BLE001
        _write(torch, _error("return", exc, lab_dir), result_path)
    os._exit(0)


def _exec(argv: list[str]) -> None:
    memory_mb, cpu_s, parent_pid, *command = argv
    apply_limits(int(memory_mb), int(cpu_s), int(parent_pid))
    try:
        os.execvp(command[0], command)
    except OSError as exc:
        print(f"cannot run {command[0]!r}: {exc}", file=sys.stderr)
        os._exit(127)


if __name__ == "__main__":
    if sys.argv[1] == "call":
        _call(sys.argv[2:])
    else:
        _exec(sys.argv[2:])
