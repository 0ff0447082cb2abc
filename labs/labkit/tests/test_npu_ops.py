"""labkit.npu norm, activation, RoPE and MoE ops: each against an independent formula and
against the unfused torch composition."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from labkit.npu import (
    npu_add_rms_norm,
    npu_grouped_matmul,
    npu_moe_gating_top_k_softmax,
    npu_rms_norm,
    npu_rotary_mul,
    npu_swiglu,
)


def _g(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# --- RMSNorm -------------------------------------------------------------------------------


def test_rms_norm_formula_and_composition():
    x = torch.randn(2, 5, 64, generator=_g(0))
    gamma = torch.randn(64, generator=_g(1))
    y, rstd = npu_rms_norm(x, gamma, epsilon=1e-6)
    # independent: float64, element by element for one row
    row = x[1, 3].double().tolist()
    inv = 1.0 / math.sqrt(sum(v * v for v in row) / 64 + 1e-6)
    assert rstd.dtype == torch.float32 and rstd.shape == (2, 5, 1)
    assert rstd[1, 3, 0].item() == pytest.approx(inv, rel=1e-6)
    expected_row = torch.tensor(
        [v * inv * g for v, g in zip(row, gamma.double().tolist(), strict=True)], dtype=torch.float64
    )
    assert torch.allclose(y[1, 3].double(), expected_row, atol=1e-5)
    # unfused composition
    assert torch.allclose(y, F.rms_norm(x, (64,), gamma, eps=1e-6), atol=1e-6)
    assert torch.allclose(y, x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * gamma, atol=1e-6)


def test_rms_norm_half_precision_keeps_dtype_and_fp32_rstd():
    x = torch.randn(4, 32, generator=_g(2)).to(torch.bfloat16)
    gamma = torch.ones(32, dtype=torch.bfloat16)
    y, rstd = npu_rms_norm(x, gamma)
    assert y.dtype == torch.bfloat16 and rstd.dtype == torch.float32
    ref = (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6)).to(torch.bfloat16)
    assert torch.equal(y, ref)


def test_rms_norm_over_two_gamma_dims():
    x = torch.randn(3, 4, 8, generator=_g(3))
    gamma = torch.randn(4, 8, generator=_g(4))
    y, rstd = npu_rms_norm(x, gamma)
    assert rstd.shape == (3, 1, 1)
    assert torch.allclose(y, F.rms_norm(x, (4, 8), gamma, eps=1e-6), atol=1e-6)


def test_add_rms_norm_returns_residual():
    x1 = torch.randn(2, 3, 16, generator=_g(5))
    x2 = torch.randn(2, 3, 16, generator=_g(6))
    gamma = torch.randn(16, generator=_g(7))
    y, rstd, x = npu_add_rms_norm(x1, x2, gamma, epsilon=1e-5)
    assert torch.equal(x, x1 + x2)
    y_ref, rstd_ref = npu_rms_norm(x1 + x2, gamma, 1e-5)
    assert torch.allclose(y, y_ref, atol=1e-6) and torch.allclose(rstd, rstd_ref)
    assert torch.allclose(y, F.rms_norm(x1 + x2, (16,), gamma, eps=1e-5), atol=1e-6)
    # fp16: the sum is formed in fp32, x is returned rounded to fp16
    h1, h2 = x1.half() * 100, x2.half() * 100
    _, _, xh = npu_add_rms_norm(h1, h2, gamma.half())
    assert xh.dtype == torch.float16 and torch.equal(xh, (h1.float() + h2.float()).half())


# --- SwiGLU --------------------------------------------------------------------------------


def test_swiglu_first_half_is_the_gate():
    x = torch.randn(3, 2 * 24, generator=_g(8))
    out = npu_swiglu(x)
    a, b = x[:, :24], x[:, 24:]
    assert torch.allclose(out, F.silu(a) * b, atol=1e-6)
    assert torch.allclose(out, a / (1 + torch.exp(-a)) * b, atol=1e-6)
    x0 = torch.randn(6, 5, generator=_g(9))
    assert torch.allclose(npu_swiglu(x0, dim=0), F.silu(x0[:3]) * x0[3:], atol=1e-6)
    with pytest.raises(ValueError, match="odd"):
        npu_swiglu(torch.randn(3, 5))


# --- RoPE ----------------------------------------------------------------------------------


def _angles(s: int, d: int) -> torch.Tensor:
    inv = 1.0 / (10000 ** (torch.arange(0, d, 2).float() / d))
    return torch.arange(s).float()[:, None] * inv[None, :]  # [S, D/2]


def test_rotary_mul_half_is_a_complex_rotation():
    b, n, s, d = 2, 3, 7, 16
    x = torch.randn(b, n, s, d, generator=_g(10))
    theta = _angles(s, d)
    cos = torch.cat([theta.cos(), theta.cos()], -1)[None, None]  # [1, 1, S, D]
    sin = torch.cat([theta.sin(), theta.sin()], -1)[None, None]
    out = npu_rotary_mul(x, cos, sin)
    # independent: (x1 + i x2) * e^{i theta}
    z = torch.complex(x[..., : d // 2], x[..., d // 2 :]) * torch.polar(torch.ones_like(theta), theta)
    assert torch.allclose(out, torch.cat([z.real, z.imag], -1), atol=1e-5)
    # unfused composition (the HF rotate_half idiom)
    rotate_half = torch.cat([-x[..., d // 2 :], x[..., : d // 2]], -1)
    assert torch.allclose(out, x * cos + rotate_half * sin, atol=1e-6)


def test_rotary_mul_interleave_rotates_adjacent_pairs():
    b, s, n, d = 1, 5, 2, 8  # BSND
    x = torch.randn(b, s, n, d, generator=_g(11))
    theta = _angles(s, d)  # [S, D/2]
    cos = theta.cos().repeat_interleave(2, -1)[None, :, None]  # [1, S, 1, D]
    sin = theta.sin().repeat_interleave(2, -1)[None, :, None]
    out = npu_rotary_mul(x, cos, sin, rotary_mode="interleave")
    z = (
        torch.view_as_complex(x.reshape(b, s, n, d // 2, 2).contiguous())
        * torch.polar(torch.ones_like(theta), theta)[None, :, None]
    )
    assert torch.allclose(out, torch.view_as_real(z).flatten(-2), atol=1e-5)
    rot = torch.stack((-x[..., 1::2], x[..., ::2]), -1).flatten(-2)
    assert torch.allclose(out, x * cos + rot * sin, atol=1e-6)


def test_rotary_mul_rejects_non_4d_and_bad_mode():
    with pytest.raises(ValueError, match="4-D"):
        npu_rotary_mul(torch.randn(3, 8), torch.ones(8), torch.zeros(8))
    with pytest.raises(ValueError, match="rotary_mode"):
        npu_rotary_mul(torch.randn(1, 1, 2, 8), torch.ones(8), torch.zeros(8), rotary_mode="full")


# --- MoE routing ---------------------------------------------------------------------------


def test_moe_gating_top_k_softmax_hand_example():
    x = torch.tensor([[1.0, 3.0, 2.0, 0.0], [0.0, 0.0, 5.0, 1.0], [2.0, 2.0, 2.0, 9.0]])
    y, idx, row_idx = npu_moe_gating_top_k_softmax(x, k=2)
    assert idx.dtype == torch.int32 and row_idx.dtype == torch.int32
    assert idx.tolist() == [[1, 2], [2, 3], [3, 0]]
    assert row_idx.tolist() == [[0, 3], [1, 4], [2, 5]]  # arange(N*k).reshape(k, N).T
    e = [math.exp(v) for v in x[0].tolist()]
    assert y[0].tolist() == pytest.approx([e[1] / sum(e), e[2] / sum(e)], rel=1e-6)


def test_moe_gating_matches_softmax_topk_and_finished_rows():
    x = torch.randn(10, 8, generator=_g(12))
    finished = torch.zeros(10, dtype=torch.bool)
    finished[[2, 7]] = True
    y, idx, _ = npu_moe_gating_top_k_softmax(x, finished, k=3)
    vals, ids = torch.softmax(x, -1).topk(3, -1)
    assert torch.allclose(y, vals) and torch.equal(idx[~finished], ids[~finished].int())
    assert (idx[finished] == 8).all()
    x3 = torch.randn(2, 5, 8, generator=_g(13))
    y3, idx3, row3 = npu_moe_gating_top_k_softmax(x3, k=2)
    assert y3.shape == idx3.shape == row3.shape == (2, 5, 2)
    assert row3.reshape(10, 2).tolist() == [[i, i + 10] for i in range(10)]


# --- Grouped matmul ------------------------------------------------------------------------


def _moe_inputs():
    x = torch.randn(10, 16, generator=_g(14))
    w = torch.randn(4, 16, 8, generator=_g(15))
    counts = [3, 0, 5, 1]  # 9 of 10 rows are routed; row 9 is past the last group
    return x, w, counts


def test_grouped_matmul_moe_form_cumsum_and_counts():
    x, w, counts = _moe_inputs()
    cumsum = torch.tensor(counts).cumsum(0)
    (y0,) = npu_grouped_matmul([x], [w], group_list=cumsum, split_item=2, group_type=0, group_list_type=0)
    (y1,) = npu_grouped_matmul(
        [x], [w], group_list=torch.tensor(counts), split_item=2, group_type=0, group_list_type=1
    )
    assert torch.equal(y0, y1) and y0.shape == (10, 8)
    # independent: each row times its own expert's weight
    expert_of_row = [e for e, c in enumerate(counts) for _ in range(c)]
    for r, e in enumerate(expert_of_row):
        assert torch.allclose(y0[r], x[r] @ w[e], atol=1e-5)
    assert torch.equal(y0[9], torch.zeros(8))
    # unfused composition: a loop over experts
    start, parts = 0, []
    for e, c in enumerate(counts):
        parts.append(x[start : start + c] @ w[e])
        start += c
    assert torch.allclose(y0[:9], torch.cat(parts), atol=1e-6)


def test_grouped_matmul_list_weights_bias_and_split_item_0():
    x, w, counts = _moe_inputs()
    bias = torch.randn(4, 8, generator=_g(16))
    outs = npu_grouped_matmul(
        [x], list(w.unbind(0)), bias=list(bias.unbind(0)), group_list=counts, split_item=0, group_type=0,
        group_list_type=1,
    )  # fmt: skip
    assert [o.shape[0] for o in outs] == counts
    assert torch.allclose(outs[2], x[3:8] @ w[2] + bias[2], atol=1e-5)
    xs = [torch.randn(2, 16, generator=_g(17)), torch.randn(3, 16, generator=_g(18))]
    plain = npu_grouped_matmul(xs, [w[0], w[1]])
    assert torch.allclose(plain[1], xs[1] @ w[1], atol=1e-6)
    with pytest.raises(ValueError, match="does not fit"):
        npu_grouped_matmul([x], [w], group_list=[5, 9, 12, 20], split_item=2, group_type=0)
    with pytest.raises(NotImplementedError, match="plain float"):
        npu_grouped_matmul([x], [w], antiquant_scale=[torch.ones(1)], group_list=counts, group_list_type=1)
