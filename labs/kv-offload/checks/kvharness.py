"""Trusted harness the kv-offload checkers run *in the child process* (labkit.check.run_function
with this file's absolute path): it imports the attendee's ``kvoff`` package from the lab folder
(the child's working directory), runs it on the checker's inputs inside an emulation session and
returns plain data. Nothing here is read from the workspace but the attendee's own modules."""

from __future__ import annotations

import os
import sys
from typing import Any

import torch

sys.path.insert(0, os.getcwd())
torch.set_num_threads(1)

from labkit import dsa, emu  # noqa: E402


def _store(kind: str, opts: dict[str, Any]) -> Any:
    if kind == "device":
        from kvoff.baseline import DeviceKV

        return DeviceKV()
    if kind == "host":
        from kvoff.offload import HostKV

        return HostKV()
    if kind == "pooled":
        from kvoff.pool import POLICIES
        from kvoff.pooled import PooledKV

        return PooledKV(POLICIES[opts["policy"]], opts["n_slots"], side_stream=opts["side_stream"])
    raise ValueError(kind)


def decode(
    kind: str,
    tokens: torch.Tensor,
    prompt_len: int,
    opts: dict[str, Any],
    warmup: int = 0,
    prefill: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> dict[str, Any]:
    """The attendee's KV store ``kind`` on ``tokens`` ``[B, prompt+T]``: logits, trace and the
    emulated report (or ``{"oom": message}`` when the device ran out of memory). ``prefill``:
    the prompt's (KV, indexer keys) as the checker computed them with ``dsa.prefill_batch``
    (trusted, not charged by the emulator), so the same text is not prefilled twice."""
    model = dsa.ToyDSA()
    kv, idx = prefill if prefill is not None else dsa.prefill_batch(model, tokens[:, :prompt_len])
    store = _store(kind, opts)
    waited: list[bool] = []
    real_plan = dsa.Pool.plan
    with emu.session(dsa.LAB_PROFILE, graph_mode=True, scale=dsa.LAB_SCALE, measurer=False) as s:
        if kind == "pooled":
            _watch_refill(store, s, waited)
        try:
            res = dsa.run_decode(model, kv, idx, tokens[:, prompt_len:], store, warmup=warmup)
        except emu.OutOfDeviceMemory as exc:
            return {"oom": str(exc)}
        finally:
            dsa.Pool.plan = real_plan  # type: ignore[method-assign]
        rep = s.report()
    return {
        "plans_waited": waited,
        "logits": res.logits,
        "trace": res.trace,
        "elapsed_ms": rep.elapsed_ms,
        "h2d_bytes": rep.h2d_bytes,
        "d2h_bytes": rep.d2h_bytes,
        "peak_bytes": rep.peak_memory_bytes,
        "capacity_bytes": rep.capacity_bytes,
        "peak_by_tag": rep.peak_by_tag,
        "ops": {k: {"count": v.count, "time_ms": v.time_ms, "bytes": v.bytes} for k, v in rep.ops.items()},
        "streams": {k: {"busy_ms": v.busy_ms, "ops": v.ops} for k, v in rep.streams.items()},
    }


def _watch_refill(store: Any, s: Any, waited: list[bool]) -> None:
    """Note the streams ``store.after_attention`` issues work on (the refill), the waits of session
    ``s`` (``wait_event``, which ``wait_stream`` uses, and ``synchronize``), and, at every
    ``dsa.Pool.plan`` call, whether the stream planning has waited for all the work issued on the
    refill streams so far: the plan reads the pool's state the refill leaves. The waits, not the
    clocks: on the emulated timeline the refill often ends before the next plan anyway."""
    refill: set[str] = set()
    seen: dict[tuple[str, str], float] = {}  # (waiting stream, stream waited for) -> up to when (ms)
    real_after, real_plan = store.after_attention, dsa.Pool.plan
    real_wait, real_sync = s.wait_event, s.synchronize

    def after_attention(layer: int, *a: Any, **k: Any) -> Any:
        before = {n: r.ops for n, r in s.report().streams.items()}
        out = real_after(layer, *a, **k)
        cur = s.current_stream
        refill.update(n for n, r in s.report().streams.items() if n != cur and r.ops > before.get(n, 0))
        return out

    def wait_event(event: Any, stream: str | None = None) -> Any:
        key = (stream or s.current_stream, event.stream)
        seen[key] = max(seen.get(key, float("-inf")), event.time_s * 1e3)  # as stream_ms computes it
        return real_wait(event, stream)

    def synchronize() -> Any:
        for a in s.report().streams:
            for b in s.report().streams:
                seen[(a, b)] = s.stream_ms(b)
        return real_sync()

    def plan(self: Any, ids: Any) -> Any:
        if refill:
            cur = s.current_stream
            waited.append(all(seen.get((cur, n), float("-inf")) >= s.stream_ms(n) for n in refill))
        return real_plan(self, ids)

    store.after_attention = after_attention
    s.wait_event, s.synchronize = wait_event, synchronize
    dsa.Pool.plan = plan  # type: ignore[method-assign]


def pooled_repeat(policy: str, n_slots: int, batch: int, positions: int, k: int, seed: int) -> dict[str, Any]:
    """The attendee's ``PooledKV`` (``policy`` pools, side stream) on random KV: the same top-k
    (``k`` positions, at most one set's worth, so the pool keeps them all) selected two steps in
    a row, every layer fetched each time. The first step misses everything, the second hits
    everything: per step, the largest error of a fetch against the KV it selects and the bytes
    copied host -> device."""
    cfg = dsa.DSAConfig()
    g = torch.Generator().manual_seed(seed)
    kv = torch.randn(batch, cfg.n_layers, positions, cfg.kv_dim, generator=g)
    ids = torch.stack([torch.randperm(positions, generator=g)[:k] for _ in range(batch)])
    store = _store("pooled", {"policy": policy, "n_slots": n_slots, "side_stream": True})
    steps = []
    with emu.session(dsa.LAB_PROFILE, graph_mode=True, scale=dsa.LAB_SCALE, measurer=False) as s:
        with s.paused():
            store.prefill(kv.clone(), positions)
        for _ in range(2):
            h2d, err = s.report().h2d_bytes, 0.0
            for group in range(cfg.n_groups):
                store.select(group, ids.clone())
                for layer in range(group * cfg.group, (group + 1) * cfg.group):
                    got = torch.as_tensor(store.fetch(layer, ids.clone())).float()
                    want = dsa.gather(kv[:, layer], ids)
                    err = max(
                        err, float((got - want).abs().max()) if got.shape == want.shape else float("inf")
                    )
                    store.after_attention(layer)
            s.synchronize()
            steps.append({"max_error": err, "h2d_bytes": s.report().h2d_bytes - h2d})
        store.finish()
    return {"steps": steps}


def replay(
    policy: str, n_slots: int, streams: list[list[list[int]]]
) -> list[list[tuple[list[bool], list[int]]]]:
    """Each stream (one sequence and group: a list of steps' top-k lists) through a fresh pool of
    the attendee's ``policy``: every plan's (hit, slot) lists."""
    from kvoff.pool import POLICIES

    out = []
    for steps in streams:
        pool = POLICIES[policy](n_slots)
        plans = []
        for ids in steps:
            p = pool.plan(list(ids))
            plans.append(([bool(h) for h in p.hit], [int(x) for x in p.slot]))
        out.append(plans)
    return out


def many(module: str, func: str, calls: list[tuple[list[Any], dict[str, Any]]]) -> list[Any]:
    """``module.func(*args, **kwargs)`` of the attendee's code for every call, in one child."""
    import importlib

    fn = getattr(importlib.import_module(module), func)
    return [fn(*a, **kw) for a, kw in calls]


def replays(jobs: list[tuple[str, int]], streams: list[list[list[int]]]) -> list[Any]:
    """:func:`replay` for every (policy, n_slots) of ``jobs``, in one child."""
    return [replay(policy, n, streams) for policy, n in jobs]


def decodes(jobs: list[tuple[str, torch.Tensor, int, dict[str, Any], int]]) -> list[dict[str, Any]]:
    """:func:`decode` for every job, in one child."""
    return [decode(*job) for job in jobs]


def report(seed: int, n_slots: int, tokens: torch.Tensor, prefill: tuple[torch.Tensor, torch.Tensor]) -> Any:
    """The attendee's ``kvoff.report.throughput(seed, n_slots)``; the prompts of ``tokens`` (the
    texts it decodes, prefilled by the checker) are not prefilled again (``dsa.remember_prefill``)."""
    kv, idx = prefill
    dsa.remember_prefill(dsa.DSAConfig(), tokens[:, : kv.shape[2]], kv, idx)
    from kvoff.report import throughput

    return throughput(seed, n_slots)


def each(calls: list[tuple[str, list[Any]]]) -> list[Any]:
    """Every ``(function of this harness, args)`` in one child, in order."""
    return [globals()[func](*args) for func, args in calls]
