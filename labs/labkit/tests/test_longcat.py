"""labkit.longcat: the tiny zero-expert MoE and the full-size decode timeline with prefetch."""

from __future__ import annotations

import math

import pytest
import torch
from labkit.longcat import (
    CLUSTER_A2,
    LONGCAT,
    Op,
    Prefetch,
    TinyLongcat,
    TinyLongcatConfig,
    causal_attention,
    decode_ops,
    op_window,
    timeline,
)

GiB = 2**30


def test_full_size_figures_match_the_reference() -> None:
    c = LONGCAT
    assert c.moe_bytes / 2**40 == pytest.approx(1.34, abs=0.005)  # "MoE 1.34 TB int8"
    assert c.n_layers * c.top_routed * c.expert_params / GiB == pytest.approx(
        14.3, abs=0.1
    )  # activated MoE per token
    assert c.n_layers * c.rounds * c.mlp_params / GiB == pytest.approx(21.3, abs=0.1)  # dense MLP per token
    assert 0 < c.other_bytes < c.total_bytes


def test_sharded_attention_with_offsets_equals_the_full_one() -> None:
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, 12, 8, generator=g) for _ in range(3))
    full = causal_attention(q, k, v)
    for r in range(4):
        sl = slice(3 * r, 3 * r + 3)
        part = causal_attention(q[:, :, sl], k[:, :, : 3 * r + 3], v[:, :, : 3 * r + 3], q_offset=3 * r)
        assert torch.allclose(part, full[:, :, sl], atol=1e-6)


def test_zero_experts_return_the_token_and_routing_is_normalised() -> None:
    m = TinyLongcat(TinyLongcatConfig(seed=3))
    x = torch.randn(5, m.cfg.d_model)
    ids, w = m.route(0, x)
    assert torch.allclose(w.sum(-1), torch.ones(5))
    zero_ids = torch.full((5, m.cfg.top_k), m.cfg.n_routed)  # every pick the first zero expert
    assert torch.allclose(m.moe(0, x, zero_ids, w), x, atol=1e-6)
    with pytest.raises(ValueError, match="zero experts have no weights"):
        m.expert(0, m.cfg.n_routed, x)


def test_forward_in_shards_equals_one_forward() -> None:
    m = TinyLongcat()
    ids = torch.randint(0, m.cfg.vocab_size, (1, 8), generator=torch.Generator().manual_seed(1))
    full = m.forward(ids)
    # layer by layer with causal attention over the whole prefix: the harness's CP view
    x = m.embed(ids)
    for i in range(m.cfg.n_layers):
        x = m.layer(i, x, torch.arange(8))
    assert torch.allclose(m.logits(x), full)


def test_timeline_is_the_sum_of_op_windows_and_deterministic() -> None:
    ops = decode_ops(128, 128, 8, 2**20)
    tl = timeline(ops)
    assert tl.tpot_s == pytest.approx(sum(op_window(o)[0] for o in ops))
    assert timeline(ops).tpot_s == tl.tpot_s
    assert {o.name.split(".")[0] for o in ops} >= {
        "attn_proj",
        "indexer",
        "sparse_attn",
        "mlp",
        "dispatch",
        "experts",
        "combine",
    }
    assert 10 < tl.tpot_ms < 60


def test_prefetch_within_the_idle_window_saves_exactly_its_bytes() -> None:
    ops = decode_ops(128, 128, 8, 2**20)
    i = next(k for k, o in enumerate(ops) if o.engine == "link" and o.bytes > 0)
    j = next(k for k in range(i + 1, len(ops)) if ops[k].weight_bytes > 0)
    d, mem, bound = op_window(ops[i])
    assert bound == "link" and mem == 0
    room = CLUSTER_A2.hbm_bw * (d - mem)
    base = timeline(ops)
    tl = timeline(ops, [Prefetch(i, j, room)])
    assert max(tl.stretch) == pytest.approx(0, abs=1e-15) and not tl.errors
    assert base.tpot_s - tl.tpot_s == pytest.approx(room / CLUSTER_A2.hbm_bw, rel=1e-9)
    over = timeline(ops, [Prefetch(i, j, 2 * room)])
    assert over.stretch[i] == pytest.approx(room / CLUSTER_A2.hbm_bw, rel=1e-9)


def test_prefetch_rules() -> None:
    ops = [Op("a", 0, 0, 1e6), Op("w", 0, 1e9, 1e8, 1e8), Op("w2", 0, 1e9, 4e8, 4e8)]
    assert timeline(ops, [Prefetch(1, 0, 1.0)]).errors  # target before host
    assert timeline(ops, [Prefetch(0, 1, 2e8)]).errors  # more than the target's weights
    assert timeline(ops, [Prefetch(0, 2, 3e8)]).errors  # more than L2 in flight
    assert op_window(ops[1])[2] == "memory"
    assert timeline(ops, [Prefetch(1, 2, 1e3)]).memory_bound_hosts == [1]
    assert math.isclose(timeline(ops, [Prefetch(0, 1, 0.0)]).tpot_s, timeline(ops).tpot_s)
