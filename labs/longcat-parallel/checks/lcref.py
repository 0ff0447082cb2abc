"""The checkers' own planner and prefetch references for the full-size LongCat 2.0 (trusted)."""

from __future__ import annotations

import math

from labkit.check import msg
from labkit.longcat import CLUSTER_A2, LONGCAT, Prefetch, decode_ops, op_window, timeline

CFG, CL = LONGCAT, CLUSTER_A2
KV_LAYER = CFG.kv_bytes_per_token / CFG.n_layers


def decode_parts(cards: int, dp: int, ep: int, batch: int, context: int) -> dict[str, float]:
    return {
        "experts": CFG.moe_bytes / ep,
        "dense": CFG.n_layers * CFG.dense_bytes_per_layer / (cards // dp),
        "other": CFG.other_bytes / cards,
        "kv": batch * context * CFG.kv_bytes_per_token / dp,
        "reserve": float(CL.reserve_bytes),
    }


def prefill_parts(cards: int, pp: int, cp: int, context: int) -> dict[str, float]:
    layers = math.ceil(CFG.n_layers / pp)
    return {
        "experts": layers * CFG.n_routed * CFG.expert_params / cp,
        "dense": layers * CFG.dense_bytes_per_layer,
        "other": CFG.other_bytes / cards,
        "kv": layers * math.ceil(context / cp) * KV_LAYER + context * KV_LAYER,
        "reserve": float(CL.reserve_bytes),
    }


def decode_verdict(
    cards: int, dp: int, ep: int, batch: int, context: int
) -> tuple[bool, str | None, dict[str, float] | None]:
    if cards % dp or cards % ep:
        return False, "cards", None
    if CFG.n_routed % ep:
        return False, "experts", None
    parts = decode_parts(cards, dp, ep, batch, context)
    fits = sum(parts.values()) <= CL.hbm_bytes
    return fits, None if fits else "hbm", parts


def prefill_verdict(
    cards: int, pp: int, cp: int, context: int
) -> tuple[bool, str | None, dict[str, float] | None]:
    if pp * cp != cards:
        return False, "cards", None
    if pp > CFG.n_layers:
        return False, "layers", None
    parts = prefill_parts(cards, pp, cp, context)
    fits = sum(parts.values()) <= CL.hbm_bytes
    return fits, None if fits else "hbm", parts


def max_batch(cards: int, dp: int, ep: int, context: int) -> int:
    fixed = sum(decode_parts(cards, dp, ep, 0, context).values())
    return int((CL.hbm_bytes - fixed) * dp // (context * CFG.kv_bytes_per_token))


def tpot_ms(
    cards: int, dp: int, ep: int, batch: int, context: int, prefetch: list[Prefetch] | None = None
) -> float:
    return timeline(decode_ops(dp, ep, batch, context, tp=cards // dp), prefetch or []).tpot_ms


def ref_prefetch(ops: list) -> list[Prefetch]:
    """Greedy: every op whose own HBM traffic leaves room (not memory-bound) brings in as much of
    the next weight-reading op's weights as fits in its idle HBM time and in what L2 has free."""
    bw = CL.hbm_bw
    left = [op.weight_bytes for op in ops]
    consumed = [0.0] * len(ops)  # prefetched bytes leave L2 when their op runs
    level = 0.0  # bytes in L2, fetched and not yet consumed: never over its size
    out = []
    for i, op in enumerate(ops):
        level -= consumed[i]
        d, mem, bound = op_window(op, CL)
        if bound == "memory":
            continue
        j = next((j for j in range(i + 1, len(ops)) if left[j] > 0), None)
        take = 0.0 if j is None else min(bw * (d - mem), left[j], CL.l2_bytes - level)
        if j is not None and take > 0:
            left[j] -= take
            level += take
            consumed[j] += take
            out.append(Prefetch(i, j, take))
    return out


#: what each part of a card's memory is, for the messages
PART_RULE = {
    "decode": {
        "experts": msg("all routed experts (1.34 TiB int8) / EP", "全部路由专家（1.34 TiB int8）/ EP"),
        "dense": msg(
            "38 layers x (2 attention (bf16) + 2 dense MLP (int8) rounds) / TP, TP = cards / DP",
            "38 层 x（2 轮注意力（bf16）+ 2 轮稠密 MLP（int8））/ TP，TP = 卡数 / DP",
        ),
        "other": msg(
            "embeddings and over-embedding tables (the rest of ~2.1 TB) / cards",
            "词嵌入与 over-embedding 表（约 2.1 TB 的其余部分）/ 卡数",
        ),
        "kv": msg(
            "KV cache: batch x context x kv_bytes_per_token / DP (KV parallel)",
            "KV 缓存：batch x 上下文长度 x kv_bytes_per_token / DP（KV 并行）",
        ),
        "reserve": msg("cluster.reserve_bytes", "cluster.reserve_bytes"),
    },
    "prefill": {
        "experts": msg(
            "ceil(38 / PP) layers x 768 experts x 48 Mi int8 / CP (experts of a stage split over its CP ranks)",
            "ceil(38 / PP) 层 x 768 个专家 x 48 Mi int8 / CP（一个阶段的专家分到它的 CP 进程上）",
        ),
        "dense": msg("ceil(38 / PP) x dense_bytes_per_layer", "ceil(38 / PP) x dense_bytes_per_layer"),
        "other": msg("the rest of ~2.1 TB / cards", "约 2.1 TB 的其余部分 / 卡数"),
        "kv": msg(
            "ceil(38 / PP) layers x ceil(context / CP) tokens x per-layer KV, plus one layer's KV of the whole context all_gathered before LI/SFA",
            "ceil(38 / PP) 层 x ceil(上下文 / CP) 个 token x 每层 KV，再加上 LI/SFA 之前 all_gather 得到的一层完整上下文 KV",
        ),
        "reserve": msg("cluster.reserve_bytes", "cluster.reserve_bytes"),
    },
}
