"""Step 1: which PP x CP (prefill) and DP x EP (decode) plans fit the cards, and the TPOT.

Figures of the full-size model: labkit.longcat.LONGCAT (cfg); the cluster: CLUSTER_A2.
"""

import math  # noqa: F401

from labkit.longcat import CLUSTER_A2, LONGCAT, decode_ops, timeline  # noqa: F401

#: why a plan is rejected, checked in this order
REASONS = ("cards", "experts", "layers", "hbm")


def decode_memory(cards, dp, ep, batch, context, cfg=LONGCAT, cluster=CLUSTER_A2):
    """Bytes on one decode card, by part: {"experts", "dense", "other", "kv", "reserve"}."""
    raise NotImplementedError("TODO step 1: bytes per decode card")


def prefill_memory(cards, pp, cp, context, cfg=LONGCAT, cluster=CLUSTER_A2):
    """Bytes on one prefill card, by part: {"experts", "dense", "other", "kv", "reserve"}."""
    raise NotImplementedError("TODO step 1: bytes per prefill card")


def check_decode(cards, dp, ep, batch, context, cfg=LONGCAT, cluster=CLUSTER_A2):
    """{"fits": bool, "reason": one of REASONS or None, "bytes": decode_memory(...), "total": ...}
    ("bytes" and "total" only when the memory was counted)."""
    raise NotImplementedError("TODO step 1")


def check_prefill(cards, pp, cp, context, cfg=LONGCAT, cluster=CLUSTER_A2):
    """As check_decode, for a PP x CP prefill plan."""
    raise NotImplementedError("TODO step 1")


def tpot_ms(cards, dp, ep, batch, context):
    """Emulated time of one decode step of the plan, in ms (no prefetch yet)."""
    raise NotImplementedError("TODO step 1")
