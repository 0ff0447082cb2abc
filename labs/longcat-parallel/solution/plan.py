"""Step 1: which PP x CP (prefill) and DP x EP (decode) plans fit the cards, and the TPOT."""

import math

from labkit.longcat import CLUSTER_A2, LONGCAT, decode_ops, timeline

#: why a plan is rejected, checked in this order
REASONS = ("cards", "experts", "layers", "hbm")


def decode_memory(cards, dp, ep, batch, context, cfg=LONGCAT, cluster=CLUSTER_A2):
    """Bytes on one decode card, by part."""
    tp = cards // dp
    return {
        "experts": cfg.moe_bytes / ep,
        "dense": cfg.n_layers * cfg.dense_bytes_per_layer / tp,
        "other": cfg.other_bytes / cards,
        "kv": batch * context * cfg.kv_bytes_per_token / dp,
        "reserve": cluster.reserve_bytes,
    }


def prefill_memory(cards, pp, cp, context, cfg=LONGCAT, cluster=CLUSTER_A2):
    """Bytes on one prefill card (a stage of ceil(layers / PP) layers, its experts split over
    its CP ranks), by part."""
    layers = math.ceil(cfg.n_layers / pp)
    kv_layer = cfg.kv_bytes_per_token / cfg.n_layers
    return {
        "experts": layers * cfg.n_routed * cfg.expert_params / cp,
        "dense": layers * cfg.dense_bytes_per_layer,
        "other": cfg.other_bytes / cards,
        # this rank's shard of the stage's cache, plus one layer's KV all-gathered before LI/SFA
        "kv": layers * math.ceil(context / cp) * kv_layer + context * kv_layer,
        "reserve": cluster.reserve_bytes,
    }


def check_decode(cards, dp, ep, batch, context, cfg=LONGCAT, cluster=CLUSTER_A2):
    if cards % dp or cards % ep:
        return {"fits": False, "reason": "cards"}
    if cfg.n_routed % ep:
        return {"fits": False, "reason": "experts"}
    parts = decode_memory(cards, dp, ep, batch, context, cfg, cluster)
    total = sum(parts.values())
    fits = total <= cluster.hbm_bytes
    return {"fits": fits, "reason": None if fits else "hbm", "bytes": parts, "total": total}


def check_prefill(cards, pp, cp, context, cfg=LONGCAT, cluster=CLUSTER_A2):
    if pp * cp != cards:
        return {"fits": False, "reason": "cards"}
    if pp > cfg.n_layers:
        return {"fits": False, "reason": "layers"}
    parts = prefill_memory(cards, pp, cp, context, cfg, cluster)
    total = sum(parts.values())
    fits = total <= cluster.hbm_bytes
    return {"fits": fits, "reason": None if fits else "hbm", "bytes": parts, "total": total}


def tpot_ms(cards, dp, ep, batch, context):
    """Emulated time of one decode step of the plan (labkit's timeline, no prefetch)."""
    return timeline(decode_ops(dp, ep, batch, context, tp=cards // dp)).tpot_ms
