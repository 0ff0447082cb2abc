"""Figures for the longcat-parallel lab from its reference solution, beside the talk's.

Emulated TPOT of full-size LongCat 2.0 decode plans on Atlas A2 cards (labkit.longcat's op list
priced by labkit.emu's roofline cost model and the A2 links), without and with the solution's
weight prefetch, next to the talk's 20 ms (DP128 + EP128, 1M-token sequences); which prefill
PP x CP grids fit 64 cards; and, with ``--ranks``, the pipeline bubble measured on 4 real gloo
processes against the GPipe formula. Every figure is computed here; only the talk's is typed in.

    .venv/bin/python bench/longcat.py [--context 1048576] [--ranks]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

LAB = Path(__file__).resolve().parents[1] / "labs" / "longcat-parallel"
sys.path.insert(0, str(LAB / "solution"))
sys.path.insert(0, str(LAB / "checks"))

import plan  # noqa: E402
import prefetch  # noqa: E402
from labkit.longcat import CLUSTER_A2, LONGCAT, decode_ops, timeline  # noqa: E402

TALK_TPOT_MS = 20.0  # [TALK] Atlas A2, decode DP128 + EP128 on 128 cards, 1M-token sequences
GiB = 2**30


def max_batch(cards: int, dp: int, ep: int, context: int) -> int:
    b = 0
    while plan.check_decode(cards, dp, ep, b + 1, context)["fits"]:
        b += 1
    return b


def decode_table(context: int) -> None:
    print(f"decode on Atlas A2 (64 GiB, 16 cards per node), sequences of {context} tokens")
    print(
        f"{'cards':>5} {'DP':>4} {'EP':>4} {'TP':>3} {'max batch':>9} {'GiB/card':>9} {'TPOT ms':>8} {'+prefetch':>9}  talk"
    )
    for cards, dp, ep in [
        (128, 128, 128),
        (128, 128, 64),
        (128, 64, 128),
        (128, 32, 128),
        (256, 256, 256),
        (64, 64, 64),
        (128, 128, 96),
    ]:
        b = max_batch(cards, dp, ep, context)
        if b == 0:
            r = plan.check_decode(cards, dp, ep, 1, context)
            total = f"{r['total'] / GiB:9.2f}" if "total" in r else f"{'-':>9}"
            print(
                f"{cards:5d} {dp:4d} {ep:4d} {cards // dp:3d} {'rejected':>9} {total} {'-':>8} {'-':>9}  reason: {r['reason']}"
            )
            continue
        r = plan.check_decode(cards, dp, ep, b, context)
        ops = decode_ops(dp, ep, b, context, tp=cards // dp)
        base = timeline(ops).tpot_ms
        pf = timeline(ops, prefetch.plan_prefetch(ops)).tpot_ms
        talk = f"{TALK_TPOT_MS:g} ms" if (cards, dp, ep) == (128, 128, 128) else ""
        print(
            f"{cards:5d} {dp:4d} {ep:4d} {cards // dp:3d} {b:9d} {r['total'] / GiB:9.2f} {base:8.2f} {pf:9.2f}  {talk}"
        )


def step_breakdown(context: int) -> None:
    b = max_batch(128, 128, 128, context)
    ops = decode_ops(128, 128, b, context)
    base, pf = timeline(ops), timeline(ops, prefetch.plan_prefetch(ops))
    rows: dict[str, list[float]] = {}
    for op, d0, d1 in zip(ops, base.durations, pf.durations, strict=True):
        k = op.name.split(".")[0]
        rows.setdefault(k, [0.0, 0.0])
        rows[k][0] += d0 * 1e3
        rows[k][1] += d1 * 1e3
    print(f"\nDP128 x EP128, batch {b}: emulated ms per step by op kind (no prefetch / prefetch)")
    for k, (a, c) in rows.items():
        print(f"  {k:14s} {a:7.3f} {c:7.3f}")
    print(f"  {'total':14s} {base.tpot_ms:7.3f} {pf.tpot_ms:7.3f}   talk {TALK_TPOT_MS:g} ms")


def prefill_table(context: int) -> None:
    print(
        f"\nprefill on 64 A2 cards, one {context}-token sequence (experts of a stage split over its CP ranks)"
    )
    print(f"{'PP':>3} {'CP':>3} {'fits':>5} {'GiB/card':>9}  reason")
    for pp in (1, 2, 4, 8, 16, 32, 64):
        r = plan.check_prefill(64, pp, 64 // pp, context)
        total = f"{r['total'] / GiB:9.2f}" if "total" in r else f"{'-':>9}"
        print(f"{pp:3d} {64 // pp:3d} {r['fits']!s:>5} {total}  {r['reason'] or ''}")


def bubbles() -> None:
    import torch
    from labkit import dist as ldist
    from labkit.longcat import TinyLongcatConfig
    from lc_harness import link_bytes_per_s

    cases = [
        {"seed": 1, "ids": (torch.arange(8 * 4).reshape(8, 4) % 64).tolist(), "n_micro": m}
        for m in (1, 2, 4, 8)
    ]
    os.chdir(LAB / "solution")
    res = ldist.run_ranks(
        str(LAB / "checks" / "lc_harness.py"),
        "pp",
        4,
        cases,
        link_bytes_per_s=link_bytes_per_s(TinyLongcatConfig()),
    )
    vals = res.unwrap()
    print(
        "\npipeline prefill on 4 gloo processes, batch 8 (each tiny token = a 4K-token chunk; stage = one full-size layer on a 910B)"
    )
    print(f"{'micro-batches':>13} {'measured bubble':>16} {'GPipe (p-1)/(m+p-1)':>20}")
    for i, c in enumerate(cases):
        m = c["n_micro"]
        print(f"{m:13d} {vals[0][i]['bubble']:16.4f} {3 / (m + 3):20.4f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--context", type=int, default=2**20)
    ap.add_argument("--ranks", action="store_true", help="also measure the pipeline bubble on 4 processes")
    args = ap.parse_args()
    c = LONGCAT
    print(
        f"LongCat 2.0 (labkit.longcat): {c.n_layers} layers, {c.n_routed} routed + {c.n_zero} zero experts, "
        f"MoE {c.moe_bytes / 2**40:.3f} TiB int8, dense {c.n_layers * c.dense_bytes_per_layer / GiB:.1f} GiB, "
        f"other {c.other_bytes / 1e9:.0f} GB, KV {c.kv_bytes_per_token / 1e3:.1f} KB/token; "
        f"A2 card {CLUSTER_A2.hbm_bytes / GiB:.0f} GiB, {CLUSTER_A2.hbm_bw / 1e12:.1f} TB/s\n"
    )
    decode_table(args.context)
    step_breakdown(args.context)
    prefill_table(args.context)
    if args.ranks:
        bubbles()


if __name__ == "__main__":
    main()
