"""Run one step of the lab on the workspace's own text (seed 1) and print what it measures.

python run.py baseline | offload | overlap | pools | report
"""

from __future__ import annotations

import sys

import torch
from labkit import dsa, emu

torch.set_num_threads(1)
PROMPT, STEPS = 1024, 16
K = dsa.DSAConfig().topk


def capacity() -> int:
    with emu.session(dsa.LAB_PROFILE, scale=dsa.LAB_SCALE, measurer=False) as s:
        return s.memory.capacity


def decode(store: object, batch: int, warmup: int = 4) -> tuple[dsa.DecodeResult, emu.EmuReport]:
    model = dsa.ToyDSA()
    tokens = dsa.make_batch(1, batch, PROMPT + STEPS)
    kv, idx = dsa.prefill_batch(model, tokens[:, :PROMPT])
    with emu.session(dsa.LAB_PROFILE, graph_mode=True, scale=dsa.LAB_SCALE, measurer=False) as s:
        res = dsa.run_decode(model, kv, idx, tokens[:, PROMPT:], store, warmup=warmup)  # type: ignore[arg-type]
        return res, s.report()


def baseline() -> int:
    from kvoff.baseline import DeviceKV, kv_bytes_per_seq, max_batch, tokens_per_s

    cfg = dsa.DSAConfig()
    b0 = max_batch(cfg, capacity(), PROMPT + STEPS)
    print(
        f"KV + indexer keys per sequence: {kv_bytes_per_seq(cfg, PROMPT + STEPS) / 2**20:.2f} MiB; "
        f"weights {dsa.ToyDSA(cfg).weight_bytes() / 2**20:.2f} MiB; device {capacity() / 2**20:.0f} MiB"
    )
    _, rep = decode(DeviceKV(), b0)
    print(rep)
    print(f"largest batch {b0}: {tokens_per_s(b0, STEPS - 4, rep.elapsed_ms):.1f} tok/s (emulated)")
    return b0


def offload() -> None:
    from kvoff.baseline import max_batch
    from kvoff.offload import HostKV

    b = 2 * max_batch(dsa.DSAConfig(), capacity(), PROMPT + STEPS)
    res, rep = decode(HostKV(), b, warmup=0)
    ref = dsa.reference_decode(dsa.ToyDSA(), dsa.make_batch(1, b, PROMPT + STEPS), PROMPT)
    print(rep)
    print(
        f"batch {b}: max |logits - baseline| = {(res.logits - ref.logits).abs().max():.3g}; "
        f"H2D {rep.h2d_bytes} B, D2H {rep.d2h_bytes} B"
    )


def overlap() -> None:
    from kvoff.overlap import mean_overlap

    trace = dsa.reference_decode(dsa.ToyDSA(), dsa.make_batch(1, 2, PROMPT + 32), PROMPT).trace
    print(f"adjacent-step top-k overlap: {mean_overlap(trace):.2%} (talk: 58.85%)")


def pools() -> None:
    from kvoff.pool import hit_rates

    trace = dsa.reference_decode(dsa.ToyDSA(), dsa.make_batch(1, 2, PROMPT + 40), PROMPT).trace
    sizes = [K, 4 * K, 8 * K]
    rates = hit_rates(trace, sizes)
    print(f"{'policy':8}" + "".join(f"{f'{n} ({n * 64 // 1024}K-scaled)':>20}" for n in sizes))
    for policy, row in rates.items():
        print(f"{policy:8}" + "".join(f"{row[n]:>20.1%}" for n in sizes))
    print("talk: previous step only 58.85%, 8K LRU 90.5%, 8K FIFO ~85%, 16K FIFO > 90%")


def report() -> None:
    import runpy

    runpy.run_module("kvoff.report", run_name="__main__")


if __name__ == "__main__":
    steps = {"baseline": baseline, "offload": offload, "overlap": overlap, "pools": pools, "report": report}
    if len(sys.argv) != 2 or sys.argv[1] not in steps:
        sys.exit(f"usage: python run.py {' | '.join(steps)}")
    steps[sys.argv[1]]()
