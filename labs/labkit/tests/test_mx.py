"""labkit.mx against hand-computed blocks and brute-force rounding references."""

from __future__ import annotations

import functools
import math

import pytest
import torch
from labkit import mx

E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]


def _block(values, fill=0.0, n=32):
    """A 32-element block starting with ``values``, padded with ``fill``."""
    return torch.tensor(list(values) + [fill] * (n - len(values)), dtype=torch.float32)


def _ref_e2m1(v: float) -> int:
    """Nearest E2M1 magnitude, ties to the even code, saturating at 6; sign in bit 3."""
    mag = min(abs(v), 6.0)
    best = min(range(8), key=lambda c: (abs(E2M1[c] - mag), c % 2))
    return best | (8 if math.copysign(1.0, v) < 0 else 0)


def test_e2m1_table_and_exact_values():
    q = mx.quantize_mx(_block([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.5, -6]), "mxfp4")
    assert q.scales.tolist() == [127]  # amax 6: floor(log2 6) - 2 = 0
    codes = mx.unpack_fp4(q.codes, 32)
    assert codes[:10].tolist() == [0, 1, 2, 3, 4, 5, 6, 7, 9, 15]
    assert torch.equal(mx.dequantize(q), _block([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.5, -6]))


def test_e2m1_round_half_to_even_and_saturation():
    ties = [0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, -5.0, -0.25, 0.3, 2.6, 5.9, 6.0]
    q = mx.quantize_mx(_block(ties), "mxfp4")
    assert q.scales.tolist() == [127]  # amax 6 -> scale 1
    got = mx.dequantize(q)[: len(ties)].tolist()
    assert got == [0.0, 1.0, 1.0, 2.0, 2.0, 4.0, 4.0, -4.0, -0.0, 0.5, 3.0, 6.0, 6.0]
    assert mx.unpack_fp4(q.codes, 32)[8].item() == 8  # -0.25 -> -0 keeps its sign
    # amax 7.5: floor(log2 7.5) = 2 -> scale 1; 7.5 saturates to 6 (not 8)
    q = mx.quantize_mx(_block([7.5, 6.9, 1.0]), "mxfp4")
    assert q.scales.tolist() == [127]
    assert mx.dequantize(q)[:3].tolist() == [6.0, 6.0, 1.0]


def test_encode_e2m1_matches_brute_force():
    g = torch.Generator().manual_seed(0)
    values = torch.cat([torch.randn(2000, generator=g) * 3, torch.tensor([m / 4 for m in range(-30, 31)])])
    codes = mx.encode_e2m1(values)
    assert codes.tolist() == [_ref_e2m1(v) for v in values.tolist()]
    assert torch.equal(mx.decode_e2m1(torch.arange(16)), torch.tensor(mx.E2M1_VALUES))


def test_scale_rule_with_power_of_two_amax():
    # amax exactly 8 = 2**3 -> shared_exp 3 - 2 = 1 -> scale 2; 8 / 2 = 4 is exact
    q = mx.quantize_mx(_block([8.0, 3.0, -1.0]), "mxfp4")
    assert q.scales.tolist() == [128]
    # 3 / 2 = 1.5 and -1 / 2 = -0.5 are exact in E2M1
    assert mx.dequantize(q)[:3].tolist() == [8.0, 3.0, -1.0]
    assert mx.unpack_fp4(q.codes, 3).tolist() == [6, 3, 9]
    # just below a power of two: amax 7.99 -> floor(log2) = 2 -> scale 1, saturates to 6
    q = mx.quantize_mx(_block([7.99]), "mxfp4")
    assert q.scales.tolist() == [127] and mx.dequantize(q)[0].item() == 6.0


def test_scaled_block_hand_computed():
    # amax 96: floor(log2 96) = 6 -> shared_exp 4 -> scale 16 (code 131)
    # 40/16 = 2.5 -> tie -> 2 -> 32;  20/16 = 1.25 -> tie -> 1 -> 16;  -96/16 = -6 -> -96;  7/16 = 0.4375 -> 0.5 -> 8
    q = mx.quantize_mx(_block([96.0, 40.0, 20.0, -96.0, 7.0]), "mxfp4")
    assert q.scales.tolist() == [131]
    assert mx.dequantize(q)[:5].tolist() == [96.0, 32.0, 16.0, -96.0, 8.0]
    assert mx.e8m0_to_float(q.scales).tolist() == [16.0]


def test_zero_block_nan_block_and_inf():
    x = torch.cat(
        [torch.zeros(32), _block([1.0, float("nan"), 2.0]), _block([3.0, float("inf")]), _block([6.0])]
    )
    q = mx.quantize_mx(x, "mxfp4")
    assert q.scales.tolist() == [0, 255, 255, 127]
    out = mx.dequantize(q)
    assert torch.equal(out[:32], torch.zeros(32))
    assert torch.isnan(out[32:96]).all()
    assert out[96].item() == 6.0 and torch.equal(out[97:], torch.zeros(31))
    q8 = mx.quantize_mx(x, "mxfp8_e4m3")
    assert q8.scales.tolist() == [0, 255, 255, 121]  # amax 6: floor(log2 6) - 8 = -6 -> code 121
    assert mx.e8m0_to_float(q8.scales)[3].item() == 2.0**-6
    assert mx.dequantize(q8)[96].item() == 6.0


def test_fp8_e4m3_hand_computed_with_subnormals():
    # amax 448: floor(log2 448) = 8 -> shared_exp 0. E4M3 subnormal step is 2**-9.
    s = 2.0**-9
    x = _block([448.0, s, 1.5 * s, 0.5 * s, 2.5 * s, 1.0625, 1.1875])
    q = mx.quantize_mx(x, "mxfp8_e4m3")
    assert q.scales.tolist() == [127]
    got = mx.dequantize(q)[:7].tolist()
    assert got == [448.0, s, 2 * s, 0.0, 2 * s, 1.0, 1.25]  # ties to even in the subnormals and normals
    assert q.codes[:2].tolist() == [0x7E, 0x01]


def test_fp8_saturation_e4m3_and_e5m2():
    # amax 500: floor(log2 500) = 8 -> scale 1; 500 > 448 saturates to 448 (torch alone gives NaN/inf for some)
    q = mx.quantize_mx(_block([500.0, -470.0]), "mxfp8_e4m3")
    assert q.scales.tolist() == [127]
    assert mx.dequantize(q)[:2].tolist() == [448.0, -448.0]
    # E5M2: amax 61440: floor(log2) = 15 -> scale 1; 61440 is the tie to inf -> saturates to 57344
    q = mx.quantize_mx(_block([61440.0, 3.0]), "mxfp8_e5m2")
    assert q.scales.tolist() == [127]
    assert mx.dequantize(q)[:2].tolist() == [57344.0, 3.0]


@functools.cache
def _fp8_table(dtype: torch.dtype) -> list[tuple[int, float]]:
    table = torch.arange(256, dtype=torch.int32).to(torch.uint8).view(dtype).to(torch.float64).tolist()
    return [(c, v) for c, v in enumerate(table) if math.isfinite(v)]


def _ref_fp8(v: float, dtype: torch.dtype, vmax: float) -> float:
    """Nearest finite FP8 value, ties to the even code, after saturating at the format max."""
    v = max(-vmax, min(vmax, v))
    _, value = min(_fp8_table(dtype), key=lambda cv: (abs(cv[1] - v), cv[0] % 2, cv[0]))
    return value


@pytest.mark.parametrize("fmt", ["mxfp8_e4m3", "mxfp8_e5m2"])
def test_fp8_elements_match_brute_force(fmt):
    f = mx.get_format(fmt)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(4, 32, generator=g) * torch.tensor([1e-3, 1.0, 50.0, 1e4]).unsqueeze(1)
    q = mx.quantize_mx(x, fmt)
    elements = q.element_values()
    scales = mx.e8m0_to_float(q.scales)
    for r in range(4):
        for c in range(0, 32, 3):
            scaled = x[r, c].item() / scales[r, 0].item()
            assert elements[r, c].item() == _ref_fp8(scaled, f.torch_dtype, f.max), (r, c, scaled)


def test_tiny_subnormal_fp32_block_clamps_scale():
    # amax 2**-130: floor(log2) - 8 = -138 -> clamped to -127 (code 0); 2**-130 / 2**-127 = 0.125 exact in E4M3
    q = mx.quantize_mx(_block([2.0**-130, -(2.0**-131)]), "mxfp8_e4m3")
    assert q.scales.tolist() == [0]
    assert mx.dequantize(q)[:2].tolist() == [2.0**-130, -(2.0**-131)]
    q4 = mx.quantize_mx(_block([2.0**-130]), "mxfp4")  # 0.125 < 0.25 -> rounds to 0 in E2M1
    assert q4.scales.tolist() == [0] and mx.dequantize(q4)[0].item() == 0.0


def test_shared_exponent_rule():
    amax = torch.tensor([6.0, 4.0, 3.99, 0.0, 1e-45, 3e38])
    assert mx.shared_exponent(amax, "mxfp4").tolist() == [0, 0, -1, -127, -127, 125]
    assert mx.shared_exponent(amax, "mxfp8_e5m2").tolist() == [-13, -13, -14, -127, -127, 112]


def test_pack_unpack_low_nibble_is_even_index():
    codes = torch.tensor([1, 2, 3, 4, 15, 0], dtype=torch.uint8)
    packed = mx.pack_fp4(codes)
    assert packed.tolist() == [0x21, 0x43, 0x0F]
    assert torch.equal(mx.unpack_fp4(packed), codes)
    odd = mx.pack_fp4(torch.tensor([7, 8, 9], dtype=torch.uint8))
    assert odd.tolist() == [0x87, 0x09] and mx.unpack_fp4(odd, 3).tolist() == [7, 8, 9]
    rnd = torch.randint(0, 16, (5, 64), dtype=torch.uint8)
    assert torch.equal(mx.unpack_fp4(mx.pack_fp4(rnd)), rnd)


def test_axis_partial_blocks_and_nbytes():
    g = torch.Generator().manual_seed(2)
    w = torch.randn(40, 64, generator=g)
    q0 = mx.quantize_mx(w, "mxfp8_e4m3", axis=0)
    qt = mx.quantize_mx(w.t().contiguous(), "mxfp8_e4m3", axis=-1)
    assert q0.scales.shape == (2, 64) and qt.scales.shape == (64, 2)
    assert torch.equal(mx.dequantize(q0), mx.dequantize(qt).t())
    q = mx.quantize_mx(torch.randn(64, 64, generator=g), "mxfp4")
    assert q.codes.shape == (64, 32) and q.scales.shape == (64, 2)
    assert q.nbytes == 64 * 32 + 64 * 2
    assert q.nbytes / q.numel == 0.53125 == mx.FORMATS["mxfp4"].bits_per_element / 8
    assert mx.quantize_mx(torch.randn(64, 64), "mxfp8_e5m2").nbytes == 4096 + 128


def test_dequantize_error_bounds_and_dtype():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(8, 256, generator=g, dtype=torch.bfloat16)
    for fmt, rel in (("mxfp4", 0.25), ("mxfp8_e4m3", 0.125), ("mxfp8_e5m2", 0.125)):
        q = mx.quantize_mx(x, fmt)
        y = q.dequantize()
        assert y.dtype == torch.bfloat16
        blocks = x.float().reshape(8, 8, 32)
        bound = (
            blocks.abs().amax(-1, keepdim=True) * rel
        )  # half a step in the top binade, or the clip to the format max
        assert ((y.float().reshape(8, 8, 32) - blocks).abs() <= bound).all(), fmt


def test_mx_linear_w4a4_w4a8_w8a8():
    g = torch.Generator().manual_seed(4)
    x = torch.randn(16, 128, generator=g)
    w = torch.randn(48, 128, generator=g) / 10
    bias = torch.randn(48, generator=g)
    ref = x @ w.t() + bias
    w4, w8 = mx.quantize_mx(w, "mxfp4"), mx.quantize_mx(w, "mxfp8_e4m3")
    outs = {
        "W4A16": mx.mx_linear(x, w4, bias=bias),
        "W4A4": mx.mx_linear(x, w4, "mxfp4", bias=bias),
        "W4A8": mx.mx_linear(x, w4, "mxfp8_e4m3", bias=bias),
        "W8A8": mx.mx_linear(x, w8, "mxfp8_e4m3", bias=bias),
    }
    # composition: quantize-dequantize both sides, then an fp32 matmul
    comp = mx.dequantize(mx.quantize_mx(x, "mxfp4")) @ mx.dequantize(w4).t() + bias
    assert torch.allclose(outs["W4A4"], comp, atol=1e-5)
    err = {k: ((v - ref).norm() / ref.norm()).item() for k, v in outs.items()}
    assert err["W8A8"] < err["W4A8"] < err["W4A4"] < 0.3
    assert err["W4A16"] < err["W4A4"]
    with pytest.raises(ValueError, match="features"):
        mx.mx_linear(torch.randn(2, 64), w4)


def test_format_lookup():
    assert mx.get_format("fp4").name == "mxfp4"
    assert mx.get_format(torch.float8_e5m2).name == "mxfp8_e5m2"
    assert mx.get_format("MXFP8").name == "mxfp8_e4m3"
    with pytest.raises(ValueError, match="unknown MX format"):
        mx.get_format("mxint8")


@pytest.mark.parametrize("fmt", ["mxfp4", "mxfp8_e4m3", "mxfp8_e5m2"])
def test_quantize_dequantize_is_dequantize_of_quantize_bit_for_bit(fmt: str) -> None:
    """The activation fast path gives exactly what quantizing then dequantizing gives, on ragged
    blocks, subnormal and huge blocks, ±0, NaN and ±inf (a NaN block), in every input dtype."""
    g = torch.Generator().manual_seed(3)
    for shape in [(1,), (31,), (33,), (3, 64), (2, 5, 100)]:
        for scale in (1e-44, 1e-39, 1e-3, 1.0, 1e10, 3e38):
            for dtype in (torch.float32, torch.bfloat16, torch.float16):
                x = (torch.randn(shape, generator=g) * scale * torch.rand(shape, generator=g) ** 8).to(dtype)
                flat = x.view(-1)
                if flat.numel() > 40:
                    flat[1], flat[2], flat[3], flat[-1] = 0.0, -0.0, float("nan"), float("-inf")
                q = mx.quantize_mx(x, fmt)
                ref = mx.dequantize(q, torch.float32)
                got, nbytes = mx.quantize_dequantize(x, fmt)
                assert nbytes == q.nbytes
                assert got.shape == ref.shape and got.dtype == ref.dtype
                assert torch.equal(got.isnan(), ref.isnan())
                assert torch.equal(
                    got.nan_to_num(7.0).view(torch.int32), ref.nan_to_num(7.0).view(torch.int32)
                )


@pytest.mark.parametrize("fmt", ["mxfp4", "mxfp8_e4m3", "mxfp8_e5m2"])
def test_finite_fast_path_equals_the_general_path(fmt: str) -> None:
    """quantize_mx and quantize_dequantize take a shorter path when every block is finite; a NaN
    in another row sends the same rows through the general path: the same codes, scales and values."""
    g = torch.Generator().manual_seed(5)
    for shape in [(3, 1), (3, 31), (4, 64), (3, 100)]:
        for scale in (1e-44, 1e-39, 1e-3, 1.0, 1e10, 3e38):
            x = torch.randn(shape, generator=g) * scale * torch.rand(shape, generator=g) ** 8
            x[0, 0], x[1, -1] = 0.0, -0.0
            x[2] = 0.0  # an all-zero block
            bad = torch.cat((x, torch.full((1, shape[1]), float("nan"))))
            a, b = mx.quantize_mx(x, fmt), mx.quantize_mx(bad, fmt)
            assert torch.equal(a.codes, b.codes[: shape[0]]) and torch.equal(a.scales, b.scales[: shape[0]])
            got, nbytes = mx.quantize_dequantize(x, fmt)
            ref, ref_nbytes = mx.quantize_dequantize(bad, fmt)
            assert nbytes == a.nbytes and ref_nbytes == b.nbytes
            assert torch.equal(got.view(torch.int32), ref[: shape[0]].view(torch.int32))


def test_finite_e2m1_encoder_equals_encode_e2m1_near_every_boundary() -> None:
    """The fast path's E2M1 encoder (one bucketize) against encode_e2m1 on every float32 within
    4096 ulps of each grid value and midpoint, both signs (checked once on all of [-6, 6])."""
    points = torch.tensor([0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 5.0, 6.0])
    bits = points.view(torch.int32).unsqueeze(1) + torch.arange(-4096, 4097, dtype=torch.int32)
    v = bits[bits >= 0].view(torch.float32)
    v = torch.cat((v[v <= 6.0], torch.rand(100_000) * 6))
    for s in (v, -v):
        assert torch.equal(mx._encode_e2m1_finite(s), mx.encode_e2m1(s))
