"""Step 5: the weight-prefetch plan for full-size decode steps of this run: never hosted by a
memory-bound op, never more than the host's idle HBM time carries (no op stretched), valid for
L2; it must bring in what the idle time allows (>= 99 % of the checker's greedy plan's saving);
the TPOT per plan the attendee reports is recomputed on labkit's timeline."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # this folder, not the attendee's

import lcref as ref  # noqa: E402
from labkit.check import main, run_function  # noqa: E402
from labkit.longcat import Prefetch, decode_ops, op_window, timeline  # noqa: E402
from lccheck import SINGLE, Failure, choice, msg  # noqa: E402

FIX = msg("Fix prefetch.py.", "修改 prefetch.py。")
TALK_TPOT_MS = 20.0  # [TALK] Atlas A2, DP128 + EP128, 1M-token sequences


def check() -> tuple[str, dict[str, float]]:
    ctx = choice("ctx", [256 * 1024, 512 * 1024, 1024 * 1024])
    plans = []
    for cards, dp, ep in [(128, 128, 128), (128, 64, 128), (256, 256, 256)]:
        batch = max(1, min(ref.max_batch(cards, dp, ep, ctx), choice(f"b{cards}{dp}", [1, 3, 8])))
        plans.append((cards, dp, ep, batch, ctx))
    # DP 1 (TP 128) on short contexts: the idle HBM time of the light ops is worth several weight ops
    # of the layer, and each host must still serve the next op that reads weights first
    plans.append((128, 1, 128, choice("bshort", [64, 128, 256]), 1024))
    # DP 8 with a large batch on short contexts: the light ops' idle time fetches more than L2
    # holds before the weights are used, so L2 must be counted across prefetches (fixed: every press)
    plans.append((128, 8, 128, 512, 1024))
    got = run_function(SINGLE, "prefetch_cases", plans, timeout=60).unwrap(FIX)
    rows, metrics = [], {}
    for plan, pf in zip(plans, got["plans"], strict=True):
        cards, dp, ep, batch, context = plan
        name = msg(
            f"decode plan DP {dp} x EP {ep} on {cards} cards, batch {batch} x {context} tokens",
            f"解码方案 DP {dp} x EP {ep}（{cards} 张卡），batch {batch} x {context} token",
        )
        ops = decode_ops(dp, ep, batch, context, tp=cards // dp)
        mine = [Prefetch(*p) for p in pf]
        tl = timeline(ops, mine)
        if tl.memory_bound_hosts:
            i = tl.memory_bound_hosts[0]
            d, mem, _ = op_window(ops[i], ref.CL)
            raise Failure(
                msg(
                    f"{name}: a prefetch overlaps op {i} ({ops[i].name}, layer {ops[i].layer}), which is memory-bound: its own reads keep the HBM busy "
                    f"for {mem * 1e6:.2f} of its {d * 1e6:.2f} us. The talk prefetches only during bandwidth-light ops; a prefetch there competes with the op for HBM bandwidth.",
                    f"{name}：有预取与第 {i} 个算子（{ops[i].name}，第 {ops[i].layer} 层）重叠，而它是访存受限的（memory-bound）：它自己的读写在 {d * 1e6:.2f} 微秒里"
                    f"占用 HBM {mem * 1e6:.2f} 微秒。演讲只在带宽占用轻的算子期间预取；在这里预取会与算子争抢 HBM 带宽。",
                ),
                [FIX],
            )
        worst = max(range(len(ops)), key=lambda i: tl.stretch[i])
        if tl.stretch[worst] > 1e-12:
            i = worst
            d, mem, _ = op_window(ops[i], ref.CL)
            hosted = sum(p.bytes for p in mine if p.host == i)
            raise Failure(
                msg(
                    f"{name}: the prefetches during op {i} ({ops[i].name}) move {hosted / 1e6:.2f} MB, but its HBM is idle for only {(d - mem) * 1e6:.2f} us "
                    f"= {ref.CL.hbm_bw * (d - mem) / 1e6:.2f} MB at {ref.CL.hbm_bw / 1e12:.1f} TB/s: the op stretches by {tl.stretch[i] * 1e6:.2f} us. "
                    "At most HBM bandwidth x time available fits, the time available being the op's duration minus its own HBM time.",
                    f"{name}：第 {i} 个算子（{ops[i].name}）期间的预取搬运了 {hosted / 1e6:.2f} MB，但它的 HBM 只空闲 {(d - mem) * 1e6:.2f} 微秒"
                    f"，即 {ref.CL.hbm_bw / 1e12:.1f} TB/s 下的 {ref.CL.hbm_bw * (d - mem) / 1e6:.2f} MB：这个算子被拉长了 {tl.stretch[i] * 1e6:.2f} 微秒。"
                    "最多只能预取 HBM 带宽 x 可用时间，可用时间是算子时长减去它自己占用 HBM 的时间。",
                ),
                [FIX],
            )
        if tl.errors:
            raise Failure(
                msg(f"{name}: invalid prefetch: {tl.errors[0]}.", f"{name}：无效的预取：{tl.errors[0]}。"),
                [FIX],
            )
        base = timeline(ops).tpot_ms
        best = timeline(ops, ref.ref_prefetch(ops)).tpot_ms
        if base - tl.tpot_ms < 0.99 * (base - best):
            raise Failure(
                msg(
                    f"{name}: your prefetches save {base - tl.tpot_ms:.3f} ms of the {base:.3f} ms step; the idle HBM time allows {base - best:.3f} ms. "
                    "Every op that is not memory-bound can carry a prefetch: the norms and the link ops (gather, dispatch, combine) too; "
                    "each brings in weights of the next op that still has weights to read.",
                    f"{name}：你的预取只节省了 {base:.3f} ms 中的 {base - tl.tpot_ms:.3f} ms；空闲的 HBM 时间可以节省 {base - best:.3f} ms。"
                    "每个不是访存受限的算子都能承载预取：各个 norm 以及链路算子（gather、dispatch、combine）也可以；"
                    "每次预取的是下一个仍有权重要读的算子的权重。",
                ),
                [FIX],
            )
        key = f"DP{dp}-EP{ep}"
        rep = got["report"].get(key) if isinstance(got["report"], dict) else None
        for field, want in (("tpot_ms", base), ("tpot_prefetch_ms", tl.tpot_ms)):
            g = rep.get(field) if isinstance(rep, dict) else None
            if not isinstance(g, int | float) or abs(g - want) > 1e-6 * want:
                raise Failure(
                    msg(
                        f"report(): {key}.{field} is {g!r}; the emulated timeline of this plan gives {want:.4f} ms "
                        f"({'without' if field == 'tpot_ms' else 'with your'} prefetch). Compute each figure from the timeline, never type it in.",
                        f"report()：{key}.{field} 为 {g!r}；该方案的仿真时间线给出 {want:.4f} ms"
                        f"（{'不预取' if field == 'tpot_ms' else '使用你的预取'}）。每个数都要从时间线算出来，不能手填。",
                    ),
                    [FIX],
                )
        rows.append(f"{key} {base:.2f} -> {tl.tpot_ms:.2f} ms")
        metrics.setdefault("tpot_ms", base)
        metrics.setdefault("tpot_prefetch_ms", tl.tpot_ms)
    return msg(
        f"Prefetch plans valid (no memory-bound host, no stretched op) and as good as the idle HBM time allows; emulated TPOT: {'; '.join(rows)} (talk: {TALK_TPOT_MS:g} ms).",
        f"预取方案有效（没有访存受限的宿主算子，没有被拉长的算子），且充分利用了空闲 HBM 时间；仿真 TPOT：{'；'.join(rows)}（演讲：{TALK_TPOT_MS:g} ms）。",
    ), metrics


if __name__ == "__main__":
    main(check)
