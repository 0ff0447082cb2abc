"""Run attendee code on N ranks of ``torch.distributed`` (gloo), and judge a hang as a failure.

Threat model and mechanism (as ``labkit.check.runner``): the checker never runs attendee code
itself. :func:`run_ranks` has the check's fork server (:mod:`labkit.check.zygote`, which has
imported torch once) fork one *supervisor* child, exactly as it forks a ``run_function`` child:
the cleaned environment of ``labkit.check.child_env``, a new session, the memory / CPU limits,
death with the fork server and dropped privileges of ``labkit.check._child``. The supervisor
runs a boot file the checker wrote into the run's private temporary folder (so nothing in the
attendee's folder can stand in for it), wraps the blocking collectives and point-to-point calls
of ``torch.distributed`` so each one logs where the rank is, then forks one process per rank. No
process of the run starts an interpreter or imports torch again: a run costs what the ranks do.
Each rank joins a gloo group through a ``file://`` rendezvous of its own (the same fresh
temporary folder: no port to collide on), imports the attendee's file, calls the
function with ``(rank, world_size, *args)`` and writes its value (``torch.save`` of plain data,
read back with ``weights_only=True``) or its exception. A rank that returned stays alive (its
connections stay open) until every rank has returned, so a peer that waits for it hangs rather
than failing with a connection error.

The checker side polls the ranks' logs. Every process (supervisor and ranks) is in the one
session the fork server started for the supervisor, and that whole process group is killed on
every way out: all ranks done, a deadlock seen, the hard timeout (the fork server kills the
supervisor's group when asked, again when it reaps it, and, as a child subreaper, any rank that
left the group). A deadlock is declared early when, for ``stall_s``
seconds, no rank logged anything and every rank either returned, failed, or waits in a
collective that cannot complete (the ranks wait in different calls: some rank returned, another
is in a different collective, or every rank is blocked in ``send``/``recv`` with no matching
partner). :class:`Hang` then names the likely cause in the attendee's terms, e.g. "rank 2 never
joined the all_to_all_single (call 1) that ranks 0, 1, 3 wait in". The logs are written by the
attendee's own processes, so they are used to *explain* a failure, never to grant a pass: the
checker judges the returned values (and figures it recomputes from the logged events) on its
own inputs.

Inside a rank, :func:`charge`, :func:`now` and :func:`busy` keep an *emulated clock* (seconds):
``charge(t)`` advances it (compute on this rank); ``dist.send`` stamps the payload with the
sender's clock and ``dist.recv`` sets the receiver's clock to ``max(own, stamp + bytes /
link_bytes_per_s)``. Collectives do not touch the clock. The pipeline step of the
longcat-parallel lab measures its bubble with it.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .check import _child
from .check.runner import AttendeeError, Frame, _read_capped, describe_error
from .check.verdict import Failure, msg

__all__ = [
    "DistResult",
    "Hang",
    "RankResult",
    "busy",
    "charge",
    "now",
    "rank_events",
    "reset_clock",
    "run_ranks",
]

#: collectives whose call blocks until every rank of the group joins it
COLLECTIVES = (
    "all_reduce",
    "all_gather",
    "all_gather_into_tensor",
    "all_gather_object",
    "all_to_all",
    "all_to_all_single",
    "barrier",
    "broadcast",
    "broadcast_object_list",
    "gather",
    "reduce",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "scatter",
)
P2P = ("send", "recv")


# ----------------------------------------------------------------------------------------------
# Inside a rank: the emulated clock and the call log
# ----------------------------------------------------------------------------------------------

_STATE: dict[str, Any] = {"fd": None, "clock": 0.0, "busy": 0.0, "link": 0.0, "counts": {}}


def _log(event: dict[str, Any]) -> None:
    fd = _STATE["fd"]
    if fd is not None:
        os.write(fd, (json.dumps(event) + "\n").encode())


def charge(seconds: float, what: str = "compute") -> float:
    """Advance this rank's emulated clock by ``seconds`` of work; returns the new clock."""
    if seconds < 0:
        raise ValueError("charge() needs a non-negative time")
    _STATE["clock"] += seconds
    _STATE["busy"] += seconds
    _log({"ev": "charge", "what": what, "s": seconds, "clock": _STATE["clock"]})
    return float(_STATE["clock"])


def reset_clock() -> None:
    """Start this rank's emulated clock and busy time again at 0 (between independent cases;
    call it on every rank at the same point, e.g. after a barrier)."""
    _STATE["clock"] = 0.0
    _STATE["busy"] = 0.0
    _log({"ev": "reset"})


def now() -> float:
    """This rank's emulated clock (seconds since the run started)."""
    return float(_STATE["clock"])


def busy() -> float:
    """Emulated seconds this rank spent in :func:`charge`."""
    return float(_STATE["busy"])


def _shapes(args: Sequence[Any]) -> list[Any]:
    import torch

    out: list[Any] = []
    for a in args:
        if isinstance(a, torch.Tensor):
            out.append(list(a.shape))
        elif isinstance(a, list | tuple) and a and all(isinstance(t, torch.Tensor) for t in a):
            out.append([list(t.shape) for t in a])
    return out


def _wrap(dist: Any, name: str, orig: Callable[..., Any]) -> Callable[..., Any]:
    import torch

    @functools.wraps(orig)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        counts = _STATE["counts"]
        counts[name] = counts.get(name, 0) + 1
        info: dict[str, Any] = {"op": name, "n": counts[name]}
        if name in P2P:
            peer = kwargs.get("dst", kwargs.get("src", args[1] if len(args) > 1 else None))
            info["peer"] = None if peer is None else int(peer)
        if name == "all_to_all_single":
            splits = kwargs.get("input_split_sizes", args[3] if len(args) > 3 else None)
            info["in_splits"] = None if splits is None else [int(s) for s in splits]
        with contextlib.suppress(Exception):
            info["shapes"] = _shapes(args[:2])
        if kwargs.get("async_op"):
            _log({"ev": "issue", **info})
            return orig(*args, **kwargs)
        _log({"ev": "enter", **info})
        if name == "send":
            tensor = args[0] if args else kwargs["tensor"]
            result = orig(*args, **kwargs)
            stamp = torch.tensor(
                [_STATE["clock"], float(tensor.numel() * tensor.element_size())], dtype=torch.float64
            )
            orig(stamp, *args[1:], **{k: v for k, v in kwargs.items() if k != "tensor"})
        elif name == "recv":
            result = orig(*args, **kwargs)
            src = result if isinstance(result, int) and result >= 0 else info.get("peer")
            stamp = torch.zeros(2, dtype=torch.float64)
            rest = {k: v for k, v in kwargs.items() if k in ("group", "tag")}
            orig(stamp, src, *args[2:], **rest)
            link = _STATE["link"]
            arrive = float(stamp[0]) + (float(stamp[1]) / link if link > 0 else 0.0)
            _STATE["clock"] = max(_STATE["clock"], arrive)
            info["clock"] = _STATE["clock"]
        else:
            result = orig(*args, **kwargs)
        _log({"ev": "exit", **info})
        return result

    return wrapper


def _instrument(dist: Any) -> None:
    for name in COLLECTIVES + P2P:
        orig = getattr(dist, name, None)
        if orig is not None and not getattr(orig, "_labkit_wrapped", False):
            wrapped = _wrap(dist, name, orig)
            wrapped._labkit_wrapped = True  # type: ignore[attr-defined]
            setattr(dist, name, wrapped)


def _rank_main(rank: int, world: int, a: dict[str, Any], spec: dict[str, Any]) -> None:
    import datetime

    import torch
    import torch.distributed as dist

    out = a["out_dir"]
    _STATE["fd"] = os.open(
        os.path.join(out, f"rank{rank}.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600
    )
    _STATE["link"] = float(spec.get("link_bytes_per_s") or 0.0)
    os.environ.update({"RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(rank)})
    lab_dir = os.path.realpath(a["lab_dir"])
    phase = "init"
    try:
        dist.init_process_group(
            "gloo",
            init_method="file://" + os.path.join(out, "rendezvous"),
            rank=rank,
            world_size=world,
            timeout=datetime.timedelta(seconds=float(a["gloo_timeout"])),
        )
        _log({"ev": "joined"})
        sys.path[:] = [lab_dir] + [p for p in sys.path if p not in ("", ".", lab_dir)]
        phase = "import"
        target: Any = _child._import_attendee(lab_dir, a["file"])
        phase = "lookup"
        for attr in a["func"].split("."):
            target = getattr(target, attr)
        phase = "call"
        args = spec["rank_args"][rank] if spec.get("rank_args") else spec["args"]
        value = target(rank, world, *args, **spec["kwargs"])
        phase = "return"
        payload = {"status": "ok", "value": _child._plain(value, torch)}
    except BaseException as exc:  # noqa: BLE001 - everything the attendee raises
        payload = _child._error(phase, exc, lab_dir)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    try:
        _child._write(torch, payload, os.path.join(out, f"result{rank}.pt"))
    except BaseException as exc:  # noqa: BLE001
        _child._write(torch, _child._error("return", exc, lab_dir), os.path.join(out, f"result{rank}.pt"))
    _log(
        {
            "ev": "done" if payload["status"] == "ok" else "error",
            "clock": _STATE["clock"],
            "busy": _STATE["busy"],
        }
    )
    while True:  # keep this rank's connections open until the supervisor ends the run
        signal.pause()


#: The supervisor's entry point, written into the run's private folder (``run_function`` mode of
#: the fork server calls ``main(conf, spec)`` from it).
BOOT = "from labkit import dist\n\n\ndef main(conf, spec):\n    dist._supervise(conf, spec)\n"


def _supervise(a: dict[str, Any], spec: dict[str, Any]) -> None:
    """The supervisor child (see the module docstring); the fork server applied its limits."""
    lab = os.path.realpath(a["lab_dir"])
    # torch.distributed before the lab folder is on sys.path: no attendee file can shadow its imports
    sys.path[:] = [p for p in sys.path if p not in ("", ".") and os.path.realpath(p) != lab]
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    _instrument(dist)
    world = int(a["world"])
    me = os.getpid()
    pids = []
    for rank in range(world):
        pid = os.fork()
        if pid == 0:
            with contextlib.suppress(OSError, AttributeError):
                _child._libc().prctl(_child.PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
            if os.getppid() != me:
                os._exit(125)
            try:
                _rank_main(rank, world, a, spec)
            finally:
                os._exit(0)
        pids.append(pid)
    status_path = os.path.join(a["out_dir"], "supervisor.log")
    left = set(range(world))
    while left:
        for rank in sorted(left):
            if os.path.exists(os.path.join(a["out_dir"], f"result{rank}.pt")):
                left.discard(rank)
                continue
            pid, code = os.waitpid(pids[rank], os.WNOHANG)
            if pid:
                left.discard(rank)
                with open(status_path, "a") as fh:
                    fh.write(json.dumps({"rank": rank, "status": code}) + "\n")
        time.sleep(0.02)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    for pid in pids:  # reaped here, so their CPU time is accounted to the run
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(0)


def rank_events(log_text: str) -> list[dict[str, Any]]:
    """Parse one rank's log (lines of JSON; a torn or forged line is skipped)."""
    events = []
    for line in log_text.splitlines():
        with contextlib.suppress(ValueError):
            ev = json.loads(line)
            if isinstance(ev, dict) and isinstance(ev.get("ev"), str):
                events.append(ev)
    return events


# ----------------------------------------------------------------------------------------------
# The checker side
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Hang:
    """Why a run was stopped: ``kind`` is ``deadlock`` (seen early) or ``timeout``."""

    kind: str
    message: str


@dataclass(frozen=True)
class RankResult:
    rank: int
    value: Any
    error: AttendeeError | None
    events: list[dict[str, Any]] = field(default_factory=list)

    @property
    def calls(self) -> list[dict[str, Any]]:
        """The blocking calls this rank completed or entered, in order (``enter`` events)."""
        return [e for e in self.events if e["ev"] in ("enter", "issue")]


@dataclass(frozen=True)
class DistResult:
    ranks: list[RankResult]
    hang: Hang | None
    stdout: str
    stderr: str
    call: str = ""

    @property
    def ok(self) -> bool:
        return self.hang is None and all(r.error is None for r in self.ranks)

    def values(self) -> list[Any]:
        return [r.value for r in self.ranks]

    def unwrap(self, hints: Sequence[str] | str = ()) -> list[Any]:
        """Every rank's value, or :class:`Failure` naming the first rank's own error (an exception
        is the root cause even when its peers then hung waiting for it), else the hang."""
        for r in self.ranks:
            if r.error is not None and r.error.type != "Stopped":
                head = msg(
                    f"On rank {r.rank} of {len(self.ranks)}: ",
                    f"在第 {r.rank} 号进程（共 {len(self.ranks)} 个）上：",
                )
                text = head + describe_error(self.call, r.error, self.stderr)
                if self.hang is not None:
                    text += "\n" + msg(
                        "(the other ranks then waited for it and were stopped)",
                        "（其他进程随后一直在等它，已被终止）",
                    )
                raise Failure(text, hints)
        if self.hang is not None:
            raise Failure(self.hang.message, hints)
        return self.values()


def _state(events: list[dict[str, Any]]) -> tuple[str, dict[str, Any] | None]:
    """``(kind, call)``: kind is done | error | blocked | running | silent."""
    last_enter: dict[str, Any] | None = None
    kind = "silent"
    for e in events:
        if e["ev"] in ("done", "error"):
            return e["ev"], None
        if e["ev"] == "enter":
            last_enter, kind = e, "blocked"
        elif e["ev"] in ("exit", "joined", "charge", "issue", "reset"):
            last_enter, kind = None, "running"
    return kind, last_enter


def _ranks_text(ranks: Sequence[int]) -> str:
    return ", ".join(str(r) for r in ranks)


def _describe(call: dict[str, Any]) -> str:
    if call["op"] in P2P:
        arrow = "->" if call["op"] == "send" else "<-"
        return f"{call['op']} (call {call['n']}, {arrow} rank {call.get('peer')})"
    return f"{call['op']} (call {call['n']})"


def _entered(events: list[dict[str, Any]], op: str) -> int:
    return sum(1 for e in events if e["ev"] == "enter" and e.get("op") == op)


def diagnose(
    states: list[tuple[str, dict[str, Any] | None]], events: list[list[dict[str, Any]]] | None = None
) -> str | None:
    """The likely cause when no rank can progress, in the attendee's terms; None if some can.

    A collective that every rank has entered is matched and will complete (its ``exit`` may not
    be logged yet on a loaded machine), so it is never called a deadlock.
    """
    kinds = [k for k, _ in states]
    if any(k in ("running", "silent") for k in kinds):
        return None
    blocked = {r: c for r, (k, c) in enumerate(states) if k == "blocked" and c is not None}
    if not blocked:
        return None
    if events is not None:
        for c in blocked.values():
            if c["op"] in COLLECTIVES and all(_entered(ev, c["op"]) >= c["n"] for ev in events):
                return None
    finished = [r for r, k in enumerate(kinds) if k in ("done", "error")]
    groups: dict[tuple[str, int], list[int]] = {}
    for r, c in blocked.items():
        groups.setdefault((c["op"], c["n"]), []).append(r)
    coll = {key: rs for key, rs in groups.items() if key[0] in COLLECTIVES}
    p2p = {r: c for r, c in blocked.items() if c["op"] in P2P}
    if coll and finished:
        (op, n), waiting = max(coll.items(), key=lambda kv: len(kv[1]))
        return msg(
            f"Rank {_ranks_text(finished)} never joined the {op} (call {n}) that rank "
            f"{_ranks_text(waiting)} wait in: {'it' if len(finished) == 1 else 'they'} returned instead. "
            "A collective called on some ranks only (inside an `if` that depends on the rank or its data, "
            "e.g. 'nothing to send') deadlocks the others: every rank must make the same collective calls "
            "in the same order.",
            f"第 {_ranks_text(finished)} 号进程没有参加第 {_ranks_text(waiting)} 号进程正在等待的 {op}"
            f"（第 {n} 次调用），而是直接返回了。只在部分进程上调用的集合通信（放在依赖进程号或其数据的 `if` 里，"
            "例如“没有要发送的数据”）会让其他进程死锁：每个进程都必须以相同顺序进行相同的集合通信。",
        )
    if len(coll) > 1 or (coll and p2p):
        parts = [f"rank {_ranks_text(rs)} in {op} (call {n})" for (op, n), rs in sorted(coll.items())]
        parts += [f"rank {r} in {_describe(c)}" for r, c in sorted(p2p.items())]
        parts_zh = [
            f"第 {_ranks_text(rs)} 号进程在 {op}（第 {n} 次调用）" for (op, n), rs in sorted(coll.items())
        ]
        parts_zh += [f"第 {r} 号进程在 {_describe(c)}" for r, c in sorted(p2p.items())]
        return msg(
            "The ranks wait in different calls and none can complete: " + "; ".join(parts) + ". "
            "A collective called on some ranks only, or in a different order on different ranks, "
            "deadlocks: every rank must make the same collective calls in the same order.",
            "各进程停在不同的通信调用上，谁也无法完成：" + "；".join(parts_zh) + "。"
            "只在部分进程上调用、或在不同进程上以不同顺序调用的集合通信会死锁：每个进程都必须以相同顺序进行相同的集合通信。",
        )
    if p2p and not coll:
        sends = [r for r, c in p2p.items() if c["op"] == "send"]
        pairs = ", ".join(f"{r} -> {p2p[r].get('peer')}" for r in sorted(sends))
        if len(sends) == len(p2p) and not finished:
            return msg(
                f"Every rank is blocked in dist.send ({pairs}) and none is receiving: gloo's send waits for "
                "the matching recv, so a ring where every rank sends first deadlocks. Let even ranks send "
                "first and odd ranks receive first, or use dist.isend / dist.irecv (batch_isend_irecv).",
                f"所有进程都阻塞在 dist.send（{pairs}），没有进程在接收：gloo 的 send 要等到对端的 recv，"
                "所以每个进程都先发送的环会死锁。让偶数号进程先发、奇数号进程先收，或者使用 dist.isend / dist.irecv"
                "（batch_isend_irecv）。",
            )
        waits = "; ".join(f"rank {r} in {_describe(c)}" for r, c in sorted(p2p.items()))
        done = (
            msg(
                f" (rank {_ranks_text(finished)} already returned)",
                f"（第 {_ranks_text(finished)} 号进程已返回）",
            )
            if finished
            else ""
        )
        return msg(
            f"Point-to-point calls with no matching partner: {waits}{done}. Each send needs a recv on its "
            "destination, posted in an order that lets both meet.",
            f"点对点通信找不到匹配的对端：{waits}{done}。每个 send 都需要目标进程上的 recv，并且调用顺序要让双方能相遇。",
        )
    return None


def _exited(client: Any, ident: int, wait_s: float) -> bool:
    """Whether the fork server reported spawn ``ident`` ended, waiting up to ``wait_s``; the report
    stays queued for :meth:`labkit.check.zygote.Client.wait`."""
    message = client._wait_for(ident, ("exited",), time.monotonic() + wait_s)
    if message is None:
        return False
    client._pending[ident] = message
    return True


def run_ranks(
    file: str | os.PathLike[str],
    func: str,
    world_size: int,
    *args: Any,
    rank_args: Sequence[Sequence[Any]] | None = None,
    timeout: float = 60.0,
    stall_s: float = 2.0,
    memory_mb: int = 2048,
    link_bytes_per_s: float = 0.0,
    **kwargs: Any,
) -> DistResult:
    """Call ``func(rank, world_size, *args, **kwargs)`` from ``file`` on ``world_size`` processes
    joined in one gloo group (``rank_args[rank]`` replaces ``args`` per rank when given).

    ``file`` is relative to the lab folder (the cwd) or an absolute path to trusted harness code
    that imports the attendee's modules. Returns every rank's value or error, its logged calls,
    and :class:`Hang` when the run was stopped: a deadlock (no progress for ``stall_s`` seconds
    with every rank returned or waiting in calls that cannot meet) or the ``timeout``. Every
    process of the run is killed before this returns. Never raises for what the attendee does.
    """
    import torch

    from .check import runner, spending, zygote

    file = os.fspath(file)
    call = f"{file}: {func}()"
    lab_dir = os.getcwd()
    with tempfile.TemporaryDirectory(prefix="labkit-dist-") as tmp:
        spec = {
            "args": tuple(args),
            "rank_args": [tuple(r) for r in rank_args] if rank_args is not None else None,
            "kwargs": dict(kwargs),
            "link_bytes_per_s": link_bytes_per_s,
        }
        conf = {
            "lab_dir": lab_dir,
            "file": file,
            "func": func,
            "out_dir": tmp,
            "world": int(world_size),
            "gloo_timeout": timeout + 60,
        }
        boot_path, call_path = os.path.join(tmp, "supervisor.py"), os.path.join(tmp, "call.pt")
        with open(boot_path, "w") as fh:
            fh.write(BOOT)
        torch.save({"args": (conf, spec), "kwargs": {}}, call_path)
        # the argv of a run_function child (labkit.check._child: call mode)
        argv = [
            lab_dir,
            boot_path,
            "main",
            call_path,
            os.path.join(tmp, "supervisor.pt"),
            str(runner._memory_limit(memory_mb, runner.MIN_CALL_MEMORY_MB)),
            str(runner._cpu_limit(timeout)),
            "0",  # the parent pid: the fork server puts its own
        ]
        # loopback: gloo must not depend on the host name resolving (no network in a lab container)
        env = runner.child_env(
            {"OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": os.environ.get("GLOO_SOCKET_IFNAME", "lo")}
        )
        out_path, err_path = os.path.join(tmp, "stdout"), os.path.join(tmp, "stderr")
        hang: Hang | None = None
        logs = [os.path.join(tmp, f"rank{r}.log") for r in range(world_size)]

        def read_exits() -> dict[int, int]:
            exits: dict[int, int] = {}
            with contextlib.suppress(OSError), open(os.path.join(tmp, "supervisor.log")) as fh:
                for line in fh:
                    with contextlib.suppress(ValueError, KeyError):
                        row = json.loads(line)
                        exits[int(row["rank"])] = int(row["status"])
            return exits

        def read_states() -> tuple[list[list[dict[str, Any]]], int]:
            evs = []
            size = 0
            for p in logs:
                text = ""
                with contextlib.suppress(OSError), open(p, encoding="utf-8", errors="replace") as fh:
                    text = fh.read()
                size += len(text)
                evs.append(rank_events(text))
            return evs, size

        _child.set_non_dumpable()
        client = runner._zygote()
        with open(out_path, "wb") as out, open(err_path, "wb") as err:
            devnull = os.open(os.devnull, os.O_RDONLY)
            try:
                ident = client.spawn(
                    "call", argv, cwd=lab_dir, env=env, fds=[devnull, out.fileno(), err.fileno()]
                )
            except zygote.ZygoteGone as exc:
                # the platform's fault: a checker error (exit 2), never a verdict about the attendee
                raise RuntimeError(f"labkit.dist: {exc}") from exc
            finally:
                os.close(devnull)
            start = time.monotonic()
            last_size, last_change = -1, start
            try:
                while not _exited(client, ident, 0.05):
                    t = time.monotonic()
                    events, size = read_states()
                    if size != last_size:
                        last_size, last_change = size, t
                    gone = read_exits()
                    states = [("error", None) if r in gone else _state(e) for r, e in enumerate(events)]
                    why = diagnose(states, events)
                    if why is not None and t - last_change >= stall_s:
                        hang = Hang("deadlock", why)
                        break
                    if t - start > timeout:
                        where = "; ".join(
                            f"rank {r}: " + (_describe(c) if c else k) for r, (k, c) in enumerate(states)
                        )
                        hang = Hang(
                            "timeout",
                            msg(
                                f"{call} did not finish on all {world_size} ranks within {timeout:g} s (stopped). "
                                f"Where each rank was: {where}. A rank waiting forever usually means a "
                                "collective or a recv that its peers never call.",
                                f"{call} 没有在 {timeout:g} 秒内在全部 {world_size} 个进程上完成（已终止）。"
                                f"各进程所在位置：{where}。某个进程一直等待，通常是因为它在等一个对端从未调用的集合通信或 recv。",
                            ),
                        )
                        break
            finally:
                # kills the supervisor's whole process group unless it already ended (then it was reaped)
                try:
                    _code, _timed_out, cpu = client.wait(ident, 0)
                except zygote.ZygoteGone as exc:
                    raise RuntimeError(f"labkit.dist: {exc}") from exc
                spending.add_spawned_cpu(cpu)
        events, _ = read_states()
        exits = read_exits()
        ranks = []
        for r in range(world_size):
            value: Any = None
            error: AttendeeError | None = None
            path = os.path.join(tmp, f"result{r}.pt")
            if os.path.exists(path):
                try:
                    payload = torch.load(path, weights_only=True, map_location="cpu")
                except Exception as exc:
                    payload = {"status": "error", "phase": "return", "type": "BadResult", "message": str(exc)}
                if isinstance(payload, dict) and payload.get("status") == "ok":
                    value = payload.get("value")
                else:
                    p = payload if isinstance(payload, dict) else {}
                    frames = tuple(
                        Frame(str(f[0]), int(f[1]), str(f[2]), str(f[3]))
                        for f in p.get("frames", [])
                        if isinstance(f, list | tuple) and len(f) == 4
                    )
                    error = AttendeeError(
                        str(p.get("type", "Exception")),
                        str(p.get("message", "")),
                        frames,
                        str(p.get("phase", "call")),
                    )
            elif hang is not None:
                error = AttendeeError("Stopped", hang.message, (), "timeout")
            else:
                code = exits.get(r)
                error = AttendeeError(
                    "Exited",
                    msg(
                        f"rank {r} ended its process (status {code}) before the function returned",
                        f"第 {r} 号进程在函数返回之前结束了（状态 {code}）",
                    ),
                    (),
                    "exit",
                )
            ranks.append(RankResult(r, value, error, events[r]))
        return DistResult(ranks, hang, _read_capped(out_path), _read_capped(err_path), call)
