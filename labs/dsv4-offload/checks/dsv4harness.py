"""Trusted harness of the dsv4-offload checkers: runs in the *child* process (``run_function`` with
this file's absolute path), imports the attendee's ``offload`` package from the lab folder and
drives it. It replaces the workspace's ``offload/harness.py`` for judging, so an edited harness
cannot change what is measured; only plain data goes back to the checker.

``serve`` can also record every accounted op as a span ``(op, stream, start_ms, end_ms)`` in issue
order (the emulated streams' timeline), which is how the overlap check verifies the order the
step teaches (the CPU result is waited for before it is combined), not only the time it saves.
"""

from __future__ import annotations

import importlib
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


def serve(
    requests: list[list[int]],
    prefill_len: int | list[int],
    overrides: dict[str, object],
    logits: bool = True,
    trace: bool = False,
) -> dict[str, Any]:
    """The attendee's engine on ``requests`` (as ``offload/harness.py: serve``), measured here.

    ``prefill_len`` may differ per request. An out-of-memory error ends the run and is returned
    as ``oom`` (the message and the request it happened in) with what was measured so far."""
    from offload import recipe as recipe_mod
    from offload.engine import OffloadEngine

    torch.set_num_threads(1)
    lens = prefill_len if isinstance(prefill_len, list) else [prefill_len] * len(requests)
    rec = recipe_mod.load(overrides)
    ckpt = Checkpoint.load()
    out: dict[str, Any] = {"recipe": rec.to_dict(), "requests": [], "oom": None, "spans": []}
    with emu.session(rec.PROFILE, graph_mode=True, scale=toy_scale(ckpt.cfg), measurer=False) as s:
        if trace:
            _trace(s, out["spans"])
        engine = OffloadEngine(ckpt, rec, s)
        stage = "load"
        try:
            engine.load()
            s.synchronize()
            out["static_bytes"] = s.memory.used
            out["used_by_tag_after_load"] = s.memory.used_by_tag()
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


def serve_each(cases: list[list[Any]]) -> list[dict[str, Any]]:
    """``serve(*case)`` for every case, in order (one child for several runs; each run builds its
    own engine in its own emulated session)."""
    return [serve(*case) for case in cases]


def plan_tags(overrides: dict[str, object]) -> dict[str, int]:
    """The attendee's ``plan_memory()`` under the recipe with ``overrides``."""
    from offload import plan, recipe

    return dict(plan.plan_memory(Checkpoint.load().cfg, recipe.load(overrides)))


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
