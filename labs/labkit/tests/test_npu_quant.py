"""labkit.npu MX ops: layouts as torch_npu gives them, values as labkit.mx computes them, and
the SANA-Video QuantLinear flow (cann-recipes ``patches/quant_module.py``) end to end."""

from __future__ import annotations

import pytest
import torch
from labkit import mx
from labkit.npu import npu_dynamic_mx_quant, npu_quant_matmul
from labkit.npu.quant import pairs_to_scales


def _g(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_dynamic_mx_quant_fp8_layout_and_values():
    x = torch.randn(4, 96, generator=_g(0)).bfloat16()  # 3 blocks -> padded to 4 -> 2 pairs
    y, s = npu_dynamic_mx_quant(x, dst_type=torch.float8_e4m3fn)
    assert y.dtype == torch.float8_e4m3fn and y.shape == (4, 96)
    assert s.dtype == torch.float8_e8m0fnu and s.shape == (4, 2, 2)
    q = mx.quantize_mx(x, "mxfp8_e4m3")
    assert torch.equal(y.view(torch.uint8), q.codes)
    assert s.view(torch.uint8)[:, :, :].flatten(1)[:, :3].tolist() == q.scales.tolist()
    assert s.view(torch.uint8)[:, 1, 1].tolist() == [0] * 4  # the padding block
    # independent: element * 2**(scale - 127) reproduces the dequantized values
    scales = 2.0 ** (s.view(torch.uint8).flatten(1)[:, :3].float() - 127)
    deq = y.float() * scales.repeat_interleave(32, 1)
    assert torch.equal(deq, mx.dequantize(q, torch.float32))


def test_dynamic_mx_quant_fp4_axis0_like_sana_a4w4_weight():
    w = torch.randn(48, 128, generator=_g(1))  # nn.Linear weight [N, K]
    y, s = npu_dynamic_mx_quant(w.t(), dst_type=torch.float4_e2m1fn_x2, axis=0)  # [K, N] along K
    assert y.dtype == torch.float4_e2m1fn_x2 and y.shape == (128, 24)  # packed along the last dim
    assert s.shape == (2, 48, 2)  # [K/64, N, 2]
    q = mx.quantize_mx(w.t(), "mxfp4", axis=0)
    assert torch.equal(y.view(torch.uint8), q.codes)
    assert torch.equal(pairs_to_scales(s, 0, 4), q.scales)


def test_dynamic_mx_quant_rejects_what_cpu_does_not_do():
    with pytest.raises(NotImplementedError):
        npu_dynamic_mx_quant(torch.randn(2, 32), round_mode="floor")
    with pytest.raises(ValueError, match="dst_type"):
        npu_dynamic_mx_quant(torch.randn(2, 32), dst_type=torch.int8)


def _sana_linear(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor, mode: str) -> torch.Tensor:
    """The cann-recipes SANA-Video QuantLinear forward, call for call."""
    if mode == "a8w8":
        wq, ws = npu_dynamic_mx_quant(w, dst_type=torch.float8_e4m3fn)
        wq, ws = wq.transpose(-1, -2), ws.transpose(0, 1)
        xq, xs = npu_dynamic_mx_quant(x.bfloat16(), dst_type=torch.float8_e4m3fn)
        return npu_quant_matmul(
            xq, wq, ws, pertoken_scale=xs, bias=bias, scale_dtype=torch.float8_e8m0fnu,
            pertoken_scale_dtype=torch.float8_e8m0fnu, output_dtype=torch.bfloat16, group_sizes=[1, 1, 32],
        )  # fmt: skip
    wq, ws = npu_dynamic_mx_quant(w.transpose(-1, -2), dst_type=torch.float4_e2m1fn_x2, axis=0)
    xq, xs = npu_dynamic_mx_quant(x.bfloat16(), dst_type=torch.float4_e2m1fn_x2)
    return npu_quant_matmul(
        xq, wq.contiguous(), ws.contiguous(), pertoken_scale=xs, pertoken_scale_dtype=torch.float8_e8m0fnu,
        output_dtype=torch.bfloat16, group_sizes=[1, 1, 32], bias=bias, x1_dtype=torch.float4_e2m1fn_x2,
        x2_dtype=torch.float4_e2m1fn_x2, scale_dtype=torch.float8_e8m0fnu,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("mode", "act", "wfmt", "max_rel"),
    [("a8w8", "mxfp8_e4m3", "mxfp8_e4m3", 0.08), ("a4w4", "mxfp4", "mxfp4", 0.3)],
)
def test_quant_matmul_mx_matches_dequantized_composition(mode, act, wfmt, max_rel):
    x = torch.randn(8, 128, generator=_g(2))
    w = torch.randn(40, 128, generator=_g(3)) / 8
    bias = torch.randn(40, generator=_g(4))
    out = _sana_linear(x, w, bias, mode)
    assert out.dtype == torch.bfloat16 and out.shape == (8, 40)
    # composition through labkit.mx: quantize both along K, dequantize, fp32 matmul
    comp = mx.mx_linear(x.bfloat16().float(), mx.quantize_mx(w, wfmt), act, bias=bias)
    assert torch.allclose(out.float(), comp, atol=2e-2, rtol=1e-2)
    ref = x @ w.t() + bias
    assert ((out.float() - ref).norm() / ref.norm()).item() < max_rel


def test_quant_matmul_int8_form():
    x1 = torch.randint(-5, 5, (3, 16), dtype=torch.int8, generator=_g(5))
    x2 = torch.randint(-5, 5, (16, 4), dtype=torch.int8, generator=_g(6))
    scale = torch.tensor([0.5, 0.25, 1.0, 0.1])
    per_token = torch.tensor([1.0, 2.0, 0.5])
    out = npu_quant_matmul(x1, x2, scale, pertoken_scale=per_token, output_dtype=torch.float32)
    acc = [[sum(int(x1[m, k]) * int(x2[k, n]) for k in range(16)) for n in range(4)] for m in range(3)]
    want = torch.tensor(
        [[acc[m][n] * scale[n].item() * per_token[m].item() for n in range(4)] for m in range(3)]
    )
    assert torch.allclose(out, want, atol=1e-5)
    out8 = npu_quant_matmul(x1, x2, scale)
    assert out8.dtype == torch.int8
    assert torch.equal(
        out8, torch.round(torch.tensor(acc).double() * scale.double()).clamp(-128, 127).to(torch.int8)
    )
