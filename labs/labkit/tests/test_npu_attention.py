"""labkit.npu attention ops against a per-row formula and torch's scaled_dot_product_attention."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from labkit.npu import npu_fused_infer_attention_score, npu_fusion_attention


def _g(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _rowwise(q, k, v, scale, masked):
    """Independent reference on BNSD tensors, one query row at a time in float64.
    ``masked(b, h, i, j)`` says whether key j is hidden from query i."""
    b_, n_, sq, d = q.shape
    nk = k.shape[1]
    out = torch.zeros(b_, n_, sq, v.shape[-1], dtype=torch.float64)
    for b in range(b_):
        for h in range(n_):
            kh = h // (n_ // nk)
            for i in range(sq):
                keys = [j for j in range(k.shape[2]) if not masked(b, h, i, j)]
                if not keys:
                    continue
                s = [scale * float(q[b, h, i].double() @ k[b, kh, j].double()) for j in keys]
                m = max(s)
                w = [math.exp(x - m) for x in s]
                tot = sum(w)
                for wj, j in zip(w, keys, strict=True):
                    out[b, h, i] += (wj / tot) * v[b, kh, j].double()
    return out


def _bnsd(b=2, n=2, s=6, d=8, seed=0, nk=None, skv=None):
    g = _g(seed)
    return (
        torch.randn(b, n, s, d, generator=g),
        torch.randn(b, nk or n, skv or s, d, generator=g),
        torch.randn(b, nk or n, skv or s, d, generator=g),
    )


def test_fusion_attention_bnsd_no_mask():
    q, k, v = _bnsd()
    scale = 1 / math.sqrt(8)
    out, smax, ssum, sout, seed, offset, numels = npu_fusion_attention(q, k, v, 2, "BNSD", scale=scale)
    assert out.shape == q.shape and (seed, offset, numels) == (0, 0, 0) and sout.numel() == 0
    assert torch.allclose(out.double(), _rowwise(q, k, v, scale, lambda *a: False), atol=1e-5)
    assert torch.allclose(out, F.scaled_dot_product_attention(q, k, v, scale=scale), atol=1e-5)
    scores = (q @ k.transpose(-1, -2)) * scale
    assert smax.shape == (2, 2, 6, 8) and smax.dtype == torch.float32
    assert torch.allclose(smax[..., 0], scores.amax(-1)) and torch.equal(smax[..., 0], smax[..., 7])
    assert torch.allclose(ssum[..., 3], torch.exp(scores - scores.amax(-1, keepdim=True)).sum(-1))


def test_fusion_attention_bsh_causal_mask_true_means_masked():
    b, n, s, d = 1, 2, 5, 4
    q, k, v = _bnsd(b, n, s, d, seed=1)
    to_bsh = lambda t: t.transpose(1, 2).reshape(b, s, n * d)  # noqa: E731
    mask = torch.triu(torch.ones(s, s, dtype=torch.bool), diagonal=1)  # True above the diagonal
    out = npu_fusion_attention(to_bsh(q), to_bsh(k), to_bsh(v), n, "BSH", atten_mask=mask, scale=0.5)[0]
    assert out.shape == (b, s, n * d)
    ref = _rowwise(q, k, v, 0.5, lambda bb, h, i, j: j > i)
    assert torch.allclose(out.double(), to_bsh(ref), atol=1e-5)
    sdpa = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.5)
    assert torch.allclose(out, to_bsh(sdpa), atol=1e-5)
    # sparse_mode 2 builds the same causal mask itself (the passed template is not read)
    template = ~torch.tril(torch.ones(2048, 2048, dtype=torch.bool))
    out2 = npu_fusion_attention(
        to_bsh(q), to_bsh(k), to_bsh(v), n, "BSH", atten_mask=template, scale=0.5, sparse_mode=2
    )[0]
    assert torch.allclose(out2, out, atol=1e-6)


def test_fusion_attention_uint8_mask_band_and_fully_masked_row():
    q, k, v = _bnsd(1, 1, 4, 4, seed=2)
    mask = torch.zeros(4, 4, dtype=torch.uint8)
    mask[2, :] = 1  # query 2 sees nothing -> zeros
    mask[0, 3] = 1
    out = npu_fusion_attention(q, k, v, 1, "BNSD", atten_mask=mask, scale=1.0)[0]
    assert torch.equal(out[0, 0, 2], torch.zeros(4))
    ref = _rowwise(q, k, v, 1.0, lambda b, h, i, j: bool(mask[i, j]))
    assert torch.allclose(out.double(), ref, atol=1e-5)
    band = npu_fusion_attention(q, k, v, 1, "BNSD", scale=1.0, pre_tockens=1, next_tockens=0)[0]
    ref = _rowwise(q, k, v, 1.0, lambda b, h, i, j: j > i or j < i - 1)
    assert torch.allclose(band.double(), ref, atol=1e-5)


def test_fused_infer_prefill_gqa_sparse_mode_3_bsh():
    b, n, nk, s, d = 2, 4, 2, 6, 8
    q, k, v = _bnsd(b, n, s, d, seed=3, nk=nk)
    to_bsh = lambda t: t.transpose(1, 2).reshape(b, s, -1)  # noqa: E731
    mask = ~torch.tril(torch.ones(2048, 2048, dtype=torch.bool))
    out, lse = npu_fused_infer_attention_score(
        to_bsh(q), to_bsh(k), to_bsh(v), num_heads=n, num_key_value_heads=nk, input_layout="BSH",
        scale=d**-0.5, atten_mask=mask, sparse_mode=3, softmax_lse_flag=True,
    )  # fmt: skip
    ref = _rowwise(q, k, v, d**-0.5, lambda bb, h, i, j: j > i)
    assert torch.allclose(out.double(), to_bsh(ref), atol=1e-5)
    sdpa = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=d**-0.5, enable_gqa=True)
    assert torch.allclose(out, to_bsh(sdpa), atol=1e-5)
    kk = k.repeat_interleave(2, 1)
    scores = (q @ kk.transpose(-1, -2)) * d**-0.5
    scores = scores.masked_fill(torch.triu(torch.ones(s, s, dtype=torch.bool), 1), float("-inf"))
    assert lse.shape == (b, n, s, 1) and torch.allclose(lse[..., 0], torch.logsumexp(scores, -1), atol=1e-5)


def test_fused_infer_decode_with_cache_lengths_equals_sliced_cache():
    b, n, d, cache = 2, 2, 8, 10
    q, k, v = _bnsd(b, n, 1, d, seed=4, skv=cache)
    lengths = [7, 3]
    out, lse = npu_fused_infer_attention_score(
        q, k, v, num_heads=n, input_layout="BNSD", scale=0.3, actual_seq_lengths_kv=lengths
    )
    assert lse.numel() == 0
    for bi, length in enumerate(lengths):
        sliced = F.scaled_dot_product_attention(
            q[bi : bi + 1], k[bi : bi + 1, :, :length], v[bi : bi + 1, :, :length], scale=0.3
        )
        assert torch.allclose(out[bi : bi + 1], sliced, atol=1e-5)


def test_fused_infer_bsh_decode_bsnd_and_bf16():
    b, n, d, skv = 1, 2, 4, 5
    q, k, v = _bnsd(b, n, 1, d, seed=5, skv=skv)
    out_bnsd = npu_fused_infer_attention_score(q, k, v, num_heads=n, input_layout="BNSD", scale=0.5)[0]
    out_bsnd = npu_fused_infer_attention_score(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), num_heads=n, input_layout="BSND", scale=0.5
    )[0]
    assert torch.allclose(out_bsnd.transpose(1, 2), out_bnsd, atol=1e-6)
    out16 = npu_fused_infer_attention_score(
        q.bfloat16(), k.bfloat16(), v.bfloat16(), num_heads=n, input_layout="BNSD", scale=0.5
    )[0]
    assert out16.dtype == torch.bfloat16 and torch.allclose(out16.float(), out_bnsd, atol=3e-2)


def test_unsupported_arguments_are_explicit():
    q, k, v = _bnsd(1, 1, 2, 4)
    with pytest.raises(NotImplementedError, match="block_table"):
        npu_fused_infer_attention_score(q, k, v, input_layout="BNSD", block_table=torch.zeros(1))
    with pytest.raises(TypeError, match="unexpected"):
        npu_fused_infer_attention_score(q, k, v, input_layout="BNSD", no_such_arg=1)
    with pytest.raises(NotImplementedError, match="dropout"):
        npu_fusion_attention(q, k, v, 1, "BNSD", keep_prob=0.9)
    with pytest.raises(NotImplementedError, match="TND"):
        npu_fusion_attention(q, k, v, 1, "TND")
