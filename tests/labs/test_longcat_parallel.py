"""longcat-parallel: the checkers' own references (planner boundary, greedy prefetch, ideal
pipeline makespan, the CP wrong-solution variants) on hand-made cases, and the lab's solution
planner and prefetcher against them on more plans than the checks use (the selftest then runs
every check and mutant on 4 real processes)."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest
import torch

LAB = Path(__file__).resolve().parents[2] / "labs" / "longcat-parallel"
sys.path.insert(0, str(LAB / "checks"))
sys.path.insert(0, str(LAB / "solution"))

import lcref as ref  # noqa: E402
import plan as solution_plan  # noqa: E402
import prefetch as solution_prefetch  # noqa: E402
from labkit.longcat import (  # noqa: E402
    CLUSTER_A2,
    Prefetch,
    TinyLongcat,
    TinyLongcatConfig,
    causal_attention,
    decode_ops,
    timeline,
)

check_cp = importlib.import_module("02_context_parallel")  # the checks run main() only as scripts


def test_max_batch_is_the_hbm_boundary() -> None:
    for cards, dp, ep, ctx in [(128, 128, 128, 2**20), (128, 64, 128, 2**20), (256, 256, 256, 2**19)]:
        b = ref.max_batch(cards, dp, ep, ctx)
        assert b > 0
        assert ref.decode_verdict(cards, dp, ep, b, ctx)[0]
        assert ref.decode_verdict(cards, dp, ep, b + 1, ctx)[:2] == (False, "hbm")


def test_rejection_reasons_in_order() -> None:
    assert ref.decode_verdict(128, 3, 128, 1, 1)[1] == "cards"
    assert ref.decode_verdict(160, 160, 160, 1, 1)[1] == "experts"
    assert ref.prefill_verdict(64, 64, 1, 2**20)[1] == "layers"
    assert ref.prefill_verdict(64, 3, 21, 2**20)[1] == "cards"
    assert ref.prefill_verdict(64, 1, 64, 2**20)[1] == "hbm"  # all 38 layers' dense weights on one card
    assert ref.prefill_verdict(64, 8, 8, 2**20)[0]


def test_solution_planner_agrees_with_the_reference_on_a_grid() -> None:
    for cards in (64, 128, 256):
        for dp in (cards, cards // 2, cards // 4):
            for ep in (cards, cards // 2, 96):
                for b in (1, 7, 40):
                    got = solution_plan.check_decode(cards, dp, ep, b, 2**19)
                    fits, reason, parts = ref.decode_verdict(cards, dp, ep, b, 2**19)
                    assert (got["fits"], got["reason"]) == (fits, reason)
                    if parts:
                        assert got["bytes"] == parts


def test_reference_prefetch_is_valid_and_pays() -> None:
    for dp, ep, b in [(128, 128, 8), (64, 128, 3), (256, 256, 1)]:
        ops = decode_ops(dp, ep, b, 2**20, tp=(128 if dp < 128 else dp) // dp)
        plan = ref.ref_prefetch(ops)
        tl = timeline(ops, plan)
        assert not tl.errors and not tl.memory_bound_hosts and max(tl.stretch) < 1e-15
        assert tl.tpot_ms < timeline(ops).tpot_ms
        mine = solution_prefetch.plan_prefetch(ops)
        assert timeline(ops, mine).tpot_ms <= tl.tpot_ms * (1 + 1e-12)


def test_prefetching_past_the_window_stretches_the_host() -> None:
    ops = decode_ops(128, 128, 8, 2**20)
    p = ref.ref_prefetch(ops)[0]
    tl = timeline(ops, [Prefetch(p.host, p.target, p.bytes * 1.5)])
    assert tl.stretch[p.host] > 0
    assert tl.stretch[p.host] * CLUSTER_A2.hbm_bw == pytest.approx(p.bytes * 0.5, rel=1e-9)


def test_cp_variants_differ_from_the_right_answer() -> None:
    """Every named wrong solution is distinguishable from the right one on the check's shapes
    (with more than one token per shard), so naming one never hides a right answer."""
    g = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(1, 2, 8, 8, generator=g) for _ in range(3))
    right = causal_attention(q, k, v).chunk(4, 2)
    for name, outs in check_cp.variants(q, k, v).items():
        assert any((outs[r] - right[r]).abs().max() > 1e-3 for r in range(4)), name


def test_solution_pipeline_reference_makespan() -> None:
    check_pp = importlib.import_module("04_pipeline")
    m = TinyLongcat(TinyLongcatConfig(n_layers=4))
    one = check_pp.ideal_makespan(m, [8], 4)
    four = check_pp.ideal_makespan(m, [2, 2, 2, 2], 4)
    assert four < one  # micro-batching shortens the pipeline
