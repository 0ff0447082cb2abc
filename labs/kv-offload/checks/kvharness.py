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
    with emu.session(dsa.LAB_PROFILE, graph_mode=True, scale=dsa.LAB_SCALE, measurer=False) as s:
        try:
            res = dsa.run_decode(model, kv, idx, tokens[:, prompt_len:], store, warmup=warmup)
        except emu.OutOfDeviceMemory as exc:
            return {"oom": str(exc)}
        rep = s.report()
    return {
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
