"""Trusted harness of the dsv4-offload checkers: runs in the *child* process (``run_function`` with
this file's absolute path), imports the attendee's ``offload`` package from the lab folder and
drives it. It replaces the workspace's ``offload/harness.py`` for judging, so an edited harness
cannot change what is measured; only plain data goes back to the checker.

``serve`` can also record every accounted op as a span ``(op, stream, start_ms, end_ms)`` in issue
order (the emulated streams' timeline), which is how the overlap check verifies the order the
step teaches (the CPU result is waited for before it is combined), not only the time it saves.
"""

from __future__ import annotations

import copy
import importlib
import io
import json
import os
import sys
from collections.abc import Callable
from typing import Any

import torch
from dsv4flash import Checkpoint, toy_scale
from labkit import emu


def _trace(session: emu.EmuSession, spans: list[tuple[str, str, float, float]]) -> None:
    """Record each op ``session`` accounts (public API only: the op's duration and the clock of
    the stream it was issued on, right after)."""
    account = session.account

    def traced(op: str, **kw: Any) -> float:
        stream = kw.get("stream") or session.current_stream
        dur = account(op, **kw)
        end = session.stream_ms(stream)
        spans.append((op, stream, end - dur, end))
        return dur

    session.account = traced  # type: ignore[method-assign]


@torch.inference_mode()
def serve(
    requests: list[list[int]],
    prefill_len: int | list[int],
    overrides: dict[str, object],
    logits: bool = True,
    trace: bool = False,
) -> dict[str, Any]:
    """The attendee's engine on ``requests`` (as ``offload/harness.py: serve``), measured here.

    ``prefill_len`` may differ per request. An out-of-memory error ends the run and is returned
    as ``oom`` (the message and the request it happened in) with what was measured so far.

    Runs in ``torch.inference_mode()``: the same values and the same emulated figures, without
    autograd's per-op bookkeeping (the toy model is thousands of tiny ops per token, where that
    bookkeeping is 10-18 % of the run's CPU)."""
    return serve_runs([(requests, prefill_len)], overrides, logits, trace)[0]


@torch.inference_mode()
def serve_runs(
    runs: list[tuple[list[list[int]], int | list[int]]],
    overrides: dict[str, object],
    logits: bool = True,
    trace: bool = False,
) -> list[dict[str, Any]]:
    """``serve(requests, prefill_len, overrides, logits, trace)`` for each ``(requests,
    prefill_len)`` of ``runs``, each on a fresh engine. The engine is built and loaded once; with
    several runs each goes on in a fork of this process taken right after the load, i.e. from the
    very state (engine, emulated card, clocks) a fresh engine has there, without building it again
    (CpuExperts' repack and the W8A8 load: 40-60 ms a run). A run that fails in its fork raises
    here (serve_all then runs every case on its own, which reports the attendee's error)."""
    from offload import recipe as recipe_mod
    from offload.engine import OffloadEngine

    torch.set_num_threads(1)
    rec = recipe_mod.load(overrides)
    ckpt = Checkpoint.load()
    head: dict[str, Any] = {"recipe": rec.to_dict(), "requests": [], "oom": None, "spans": []}
    with emu.session(rec.PROFILE, graph_mode=True, scale=toy_scale(ckpt.cfg), measurer=False) as s:
        if trace:
            _trace(s, head["spans"])
        engine = OffloadEngine(ckpt, rec, s)
        try:
            engine.load()
            s.synchronize()
            head["static_bytes"] = s.memory.used
            head["used_by_tag_after_load"] = s.memory.used_by_tag()
        except emu.OutOfDeviceMemory as oom:
            head["oom"] = {"where": "load", "message": str(oom)}
            return [_measured(copy.deepcopy(head), s) for _ in runs]
        if len(runs) == 1:
            return [_run_requests(head, s, engine, *runs[0], logits)]
        return [_in_fork(lambda run=run: _run_requests(head, s, engine, *run, logits)) for run in runs]


def _run_requests(
    out: dict[str, Any],
    s: emu.EmuSession,
    engine: Any,
    requests: list[list[int]],
    prefill_len: int | list[int],
    logits: bool,
) -> dict[str, Any]:
    """The requests, one after the other, on the loaded ``engine``; ``out`` gets their figures."""
    lens = prefill_len if isinstance(prefill_len, list) else [prefill_len] * len(requests)
    stage = ""
    try:
        for i, (ids, n) in enumerate(zip(requests, lens, strict=True)):
            stage = f"request {i}"
            engine.slots = {"prefill": [0, 0], "decode": [0, 0]}
            t0 = s.elapsed_ms()
            first = engine.prefill(ids[:n])[-1]
            s.synchronize()
            t1 = s.elapsed_ms()
            rows = [first]
            for tok in ids[n:]:
                rows.append(engine.decode(tok))
            s.synchronize()
            t2 = s.elapsed_ms()
            hits, slots = engine.slots["decode"]
            req: dict[str, Any] = {
                "prefill_ms": t1 - t0,
                "streamed_prefill": bool(engine.streamed_prefill),
                "decode_tokens": len(ids) - n,
                "decode_ms": t2 - t1,
                "hits": int(hits),
                "slots": int(slots),
                "resident": [sorted(int(e) for e in r) for r in engine.resident],
            }
            if logits:
                req["logits"] = torch.stack(rows)
            out["requests"].append(req)
    except emu.OutOfDeviceMemory as oom:
        out["oom"] = {"where": stage, "message": str(oom)}
    return _measured(out, s)


def _measured(out: dict[str, Any], s: emu.EmuSession) -> dict[str, Any]:
    """``out`` with the run's totals and the session's report."""
    rep = s.report()
    reqs = out["requests"]
    hits = sum(r["hits"] for r in reqs)
    slots = sum(r["slots"] for r in reqs)
    dec_ms = sum(r["decode_ms"] for r in reqs)
    dec_n = sum(r["decode_tokens"] for r in reqs)
    out.update(
        hit_rate=hits / slots if slots else 0.0,
        tpot_ms=dec_ms / dec_n if dec_n else 0.0,
        decode_tok_s=1000.0 * dec_n / dec_ms if dec_ms else 0.0,
        capacity_bytes=rep.capacity_bytes,
        peak_bytes=rep.peak_memory_bytes,
        peak_by_tag=rep.peak_by_tag,
        streams={k: {"busy_ms": v.busy_ms, "ops": v.ops} for k, v in rep.streams.items()},
        engines_busy_ms=rep.engines_busy_ms,
        op_bytes={k: v.bytes for k, v in rep.ops.items()},
    )
    return out


def _in_fork(run: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """``run()`` in a fork of this process (which stays as it is for the next one)."""
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the fork ends here
        os.close(read)
        code = 1
        try:
            buf = io.BytesIO()
            torch.save(run(), buf)
            with os.fdopen(write, "wb") as fh:
                fh.write(buf.getvalue())
            code = 0
        finally:
            for stream in (sys.stdout, sys.stderr):
                stream.flush()
            os._exit(code)
    os.close(write)
    with os.fdopen(read, "rb") as fh:
        data = fh.read()
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0 or not data:
        raise RuntimeError("a run of the engine failed in its fork")
    value: dict[str, Any] = torch.load(io.BytesIO(data), weights_only=False)
    return value


def serve_each(cases: list[list[Any]]) -> list[dict[str, Any]]:
    """``serve(*case)`` for every case, results in order (one child for several runs; each run
    on its own fresh engine in its own emulated session). Cases with the same overrides, logits
    and trace flags share the engine's build and load (:func:`serve_runs`)."""
    groups: dict[str, list[int]] = {}
    for i, (_reqs, _lens, overrides, logits, trace) in enumerate(cases):
        key = json.dumps([overrides, bool(logits), bool(trace)], sort_keys=True, default=str)
        groups.setdefault(key, []).append(i)
    out: list[dict[str, Any]] = [{} for _ in cases]
    for idx in groups.values():
        _reqs, _lens, overrides, logits, trace = cases[idx[0]]
        runs = [(cases[i][0], cases[i][1]) for i in idx]
        for i, value in zip(idx, serve_runs(runs, overrides, logits, trace), strict=True):
            out[i] = value
    return out


def plan_tags(overrides: dict[str, object]) -> dict[str, int]:
    """The attendee's ``plan_memory()`` under the recipe with ``overrides``."""
    from offload import plan, recipe

    return dict(plan.plan_memory(Checkpoint.load().cfg, recipe.load(overrides)))


@torch.inference_mode()
def cpu_part(
    layer: int, m: torch.Tensor, w: torch.Tensor, ids: torch.Tensor, cold: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The attendee's ``OffloadEngine.cpu_part()`` on the checker's tokens and cold mask."""
    from offload import recipe
    from offload.engine import OffloadEngine

    torch.set_num_threads(1)
    ckpt = Checkpoint.load()
    with emu.session("A3", graph_mode=True, scale=toy_scale(ckpt.cfg), measurer=False) as s:
        engine = OffloadEngine(ckpt, recipe.load({}), s)
        rows, y = engine.cpu_part(layer, m, w, ids, cold)
    return torch.as_tensor(rows).flatten().long(), torch.as_tensor(y).float()


def call_each(module: str, func: str, args: list[Any]) -> list[Any]:
    """``module.func(a)`` for every ``a`` (one child for many cheap calls)."""
    fn = getattr(importlib.import_module(module), func)
    return [fn(a) for a in args]
