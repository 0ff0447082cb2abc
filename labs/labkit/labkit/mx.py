"""OCP Microscaling (MX) formats: MXFP4 (E2M1) and MXFP8 (E4M3, E5M2), block size 32.

Every block of 32 consecutive elements along ``axis`` shares one E8M0 scale (an 8-bit power of
two, bias 127; code 0xFF is NaN). The scale rule is the OCP one that CANN's ``DynamicMxQuant``
uses with ``scale_alg=0``::

    shared_exp = floor(log2(amax)) - emax        # emax: E2M1 2, E4M3 8, E5M2 15
    scale      = 2 ** shared_exp                 # stored as shared_exp + 127, clamped to [0, 254]
    code_i     = cast(V_i / scale)               # round half to even, saturating at the format max

Choices where the spec leaves room (documented in docs/labkit.md, "MX formats"):

- a block whose amax is 0 gets scale code 0 (2^-127) and all-zero codes;
- a block holding a NaN or an infinity gets scale code 0xFF (NaN) and zero codes; it dequantizes
  to NaN everywhere, as the spec says for a NaN scale;
- a negative value that rounds to zero keeps its sign (E2M1 code 8, -0);
- a last partial block is padded with zeros (padding never changes the scale).

Storage: FP4 codes are packed two per byte along the *last* dimension, low nibble = even
index (as DeepSeek-V4 / cann-recipes checkpoints do); FP8 codes are one byte each (the bit
pattern of ``torch.float8_e4m3fn`` / ``torch.float8_e5m2``). Scales are ``uint8`` E8M0 codes with
``axis`` shrunk to the number of blocks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from labkit import emu

__all__ = [
    "BLOCK_SIZE",
    "E2M1_VALUES",
    "FORMATS",
    "MXFormat",
    "MXTensor",
    "decode_e2m1",
    "dequantize",
    "e8m0_to_float",
    "encode_e2m1",
    "get_format",
    "mx_linear",
    "pack_fp4",
    "quantize_dequantize",
    "quantize_mx",
    "shared_exponent",
    "unpack_fp4",
]

BLOCK_SIZE = 32
E8M0_NAN = 255
# Code -> value; bit 3 is the sign, bits 0-2 the magnitude.
E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)


@dataclass(frozen=True)
class MXFormat:
    name: str
    element: str  # "e2m1" | "e4m3" | "e5m2"
    bits: int
    emax: int  # exponent of the largest normal element value
    max: float  # largest finite element value (saturation bound)
    torch_dtype: torch.dtype  # the element dtype torch (and torch_npu) names

    @property
    def bits_per_element(self) -> float:
        """Element bits plus the shared 8-bit scale spread over the block: 4.25 for MXFP4."""
        return self.bits + 8 / BLOCK_SIZE


FORMATS: dict[str, MXFormat] = {
    "mxfp4": MXFormat("mxfp4", "e2m1", 4, 2, 6.0, torch.float4_e2m1fn_x2),
    "mxfp8_e4m3": MXFormat("mxfp8_e4m3", "e4m3", 8, 8, 448.0, torch.float8_e4m3fn),
    "mxfp8_e5m2": MXFormat("mxfp8_e5m2", "e5m2", 8, 15, 57344.0, torch.float8_e5m2),
}
_ALIASES = {
    "fp4": "mxfp4",
    "e2m1": "mxfp4",
    "mxfp4_e2m1": "mxfp4",
    "mxfp8": "mxfp8_e4m3",
    "fp8": "mxfp8_e4m3",
    "e4m3": "mxfp8_e4m3",
    "e5m2": "mxfp8_e5m2",
}


def get_format(fmt: str | MXFormat | torch.dtype) -> MXFormat:
    """``"mxfp4"``, ``"mxfp8_e4m3"``, ``"mxfp8_e5m2"`` (aliases ``fp4``, ``e2m1``, ``mxfp8``, ``e4m3``,
    ``e5m2``) or an element dtype such as ``torch.float8_e4m3fn``."""
    if isinstance(fmt, MXFormat):
        return fmt
    if isinstance(fmt, torch.dtype):
        for f in FORMATS.values():
            if f.torch_dtype == fmt:
                return f
        raise ValueError(f"no MX format has element dtype {fmt}")
    key = str(fmt).lower().replace("-", "_")
    key = _ALIASES.get(key, key)
    if key not in FORMATS:
        raise ValueError(f"unknown MX format {fmt!r}; use one of {sorted(FORMATS)}")
    return FORMATS[key]


def shared_exponent(amax: torch.Tensor, fmt: str | MXFormat) -> torch.Tensor:
    """``floor(log2(amax)) - emax`` clamped to [-127, 127] (int32); -127 where amax is 0.
    Exact for every float, subnormals included (``frexp`` rather than ``log2``)."""
    f = get_format(fmt)
    a = amax.to(torch.float64)
    _, e = torch.frexp(a)  # a = m * 2**e with 0.5 <= m < 1, so floor(log2 a) = e - 1
    se = (e.to(torch.int32) - 1 - f.emax).clamp(-127, 127)
    return torch.where(a > 0, se, torch.full_like(se, -127))


def e8m0_to_float(codes: torch.Tensor) -> torch.Tensor:
    """E8M0 codes (uint8) to float32 scales: ``2**(code - 127)``, NaN for 0xFF."""
    c = codes.to(torch.int32)
    out = torch.pow(2.0, c - 127)  # exact for every code (torch.ldexp(1, e) is 1 * 2.0**e)
    return torch.where(c == E8M0_NAN, float("nan"), out)


# E2M1 magnitudes 0, .5, 1, 1.5, 2, 3, 4, 6: a value above a boundary takes the next code; a tie
# takes the even code, the lower one at .25, 1.25, 2.5, 5, the upper one at .75, 1.75, 3.5 (there
# the boundary is the float32 just below the tie)
_E2M1_BOUNDS = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0])
_E2M1_BOUNDS[[1, 3, 5]] = torch.nextafter(_E2M1_BOUNDS[[1, 3, 5]], torch.zeros(3))


def _encode_e2m1_finite(v: torch.Tensor) -> torch.Tensor:
    """:func:`encode_e2m1` of a finite float32 ``v`` (the same codes for every float32 value,
    checked exhaustively on [-6, 6]), by one bucketize of ``|v|``: fewer kernels."""
    code = torch.bucketize(v.abs(), _E2M1_BOUNDS).to(torch.uint8)
    return code | (torch.signbit(v).to(torch.uint8) << 3)


def encode_e2m1(v: torch.Tensor) -> torch.Tensor:
    """Round to the nearest E2M1 value, ties to the even code, saturating at ±6 (uint8 codes).
    NaN encodes as 0 (E2M1 has no NaN; an MX block with a NaN gets a NaN *scale* instead).

    The grid has step 0.5 below 2, 1 in [2, 4) and 2 in [4, 6]; ``torch.round`` rounds half to
    even, and an even multiple of the step is exactly an even code."""
    a = v.to(torch.float32)
    mag = a.abs().nan_to_num(0.0).clamp(max=6.0)
    step = torch.where(mag < 2, 0.5, torch.where(mag < 4, 1.0, 2.0))
    q = torch.round(mag / step) * step  # 1.75 -> 2 and 3.5 -> 4 cross into the next binade: fine
    code = torch.where(q < 2, q * 2, torch.where(q < 4, q + 2, q / 2 + 4))
    sign = torch.signbit(a) & ~torch.isnan(a)
    return (code.to(torch.uint8) + sign.to(torch.uint8) * 8).to(torch.uint8)


def decode_e2m1(codes: torch.Tensor) -> torch.Tensor:
    """E2M1 codes (0..15) to float32."""
    table = torch.tensor(E2M1_VALUES, dtype=torch.float32)
    return table[codes.to(torch.int64) & 0xF]


def pack_fp4(codes: torch.Tensor) -> torch.Tensor:
    """Pack 4-bit codes two per byte along the last dim (low nibble = even index). An odd
    last dim is padded with a zero code."""
    c = codes.to(torch.uint8)
    if c.shape[-1] % 2:
        c = torch.nn.functional.pad(c, (0, 1))
    return (c[..., 0::2] & 0xF) | ((c[..., 1::2] & 0xF) << 4)


def unpack_fp4(packed: torch.Tensor, n: int | None = None) -> torch.Tensor:
    """Inverse of :func:`pack_fp4`; ``n`` trims the last dim to ``n`` codes."""
    p = packed.view(torch.uint8) if packed.dtype != torch.uint8 else packed
    out = torch.stack((p & 0xF, (p >> 4) & 0xF), dim=-1).flatten(-2)
    return out if n is None else out[..., :n]


@dataclass(frozen=True)
class MXTensor:
    """A quantized tensor: ``codes`` (uint8; FP4 packed along the last dim), ``scales`` (uint8
    E8M0, ``axis`` dim = number of blocks), the format, the original ``shape`` and ``axis``."""

    codes: torch.Tensor
    scales: torch.Tensor
    fmt: MXFormat
    shape: tuple[int, ...]
    axis: int = -1
    dtype: torch.dtype = torch.float32  # the dtype dequantize() returns by default

    @property
    def nbytes(self) -> int:
        """Bytes stored: codes plus scales (17 bytes per 32 MXFP4 elements)."""
        return int(self.codes.numel() + self.scales.numel())

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    def dequantize(self, dtype: torch.dtype | None = None) -> torch.Tensor:
        return dequantize(self, dtype)

    def element_values(self) -> torch.Tensor:
        """The unscaled element values (float32, original shape)."""
        if self.fmt.bits == 4:
            return decode_e2m1(unpack_fp4(self.codes, self.shape[-1]))
        return self.codes.view(self.fmt.torch_dtype).to(torch.float32)


def _norm_axis(axis: int, ndim: int) -> int:
    if not -ndim <= axis < ndim:
        raise ValueError(f"axis {axis} is out of range for a {ndim}-D tensor")
    return axis % ndim


def quantize_mx(x: torch.Tensor, fmt: str | MXFormat = "mxfp4", axis: int = -1) -> MXTensor:
    """Quantize ``x`` in blocks of 32 along ``axis`` (see the module docstring for the rules)."""
    f = get_format(fmt)
    if x.ndim == 0:
        raise ValueError("quantize_mx needs at least one dimension")
    ax = _norm_axis(axis, x.ndim)
    xf = x.detach().to("cpu", torch.float32).movedim(ax, -1)
    n = xf.shape[-1]
    nb = max(1, math.ceil(n / BLOCK_SIZE))
    pad = nb * BLOCK_SIZE - n
    blocks = (torch.nn.functional.pad(xf, (0, pad)) if pad else xf).reshape(*xf.shape[:-1], nb, BLOCK_SIZE)
    amax = blocks.abs().amax(-1)
    if math.isfinite(float(amax.sum())):
        # every block finite (a weight, nearly always): the steps below without the NaN and
        # infinity handling, which changes nothing here. The rescale is one correctly rounded
        # float32 division by a power of two, the value the exact float64 rescale rounds to
        _, e = torch.frexp(amax)  # exact in float32 as in shared_exponent()'s float64
        se = torch.where(amax > 0, (e - (1 + f.emax)).clamp_(-127, 127), -127)
        scale_codes = (se + 127).to(torch.uint8)
        scaled = (blocks / torch.pow(2.0, se).unsqueeze(-1)).clamp_(-f.max, f.max)
        codes = _encode_e2m1_finite(scaled) if f.bits == 4 else scaled.to(f.torch_dtype).view(torch.uint8)
    else:
        bad = (~torch.isfinite(blocks)).any(-1)
        amax = amax.nan_to_num(0.0, posinf=0.0)
        se = shared_exponent(amax, f)
        scale_codes = torch.where(bad, torch.full_like(se, E8M0_NAN), se + 127).to(torch.uint8)
        scaled = torch.ldexp(blocks.to(torch.float64), (-se).unsqueeze(-1).to(torch.float64))
        scaled = scaled.clamp(-f.max, f.max).to(torch.float32)  # exact: a power-of-two rescale of an fp32
        codes = (
            encode_e2m1(scaled) if f.bits == 4 else scaled.nan_to_num(0.0).to(f.torch_dtype).view(torch.uint8)
        )
        codes = torch.where(bad.unsqueeze(-1), torch.zeros_like(codes), codes)
    codes = codes.reshape(*xf.shape[:-1], nb * BLOCK_SIZE)[..., :n].movedim(-1, ax).contiguous()
    if f.bits == 4:
        codes = pack_fp4(codes)
    return MXTensor(codes, scale_codes.movedim(-1, ax).contiguous(), f, tuple(x.shape), ax, x.dtype)


def quantize_dequantize(x: torch.Tensor, fmt: str | MXFormat) -> tuple[torch.Tensor, int]:
    """``(dequantize(quantize_mx(x, fmt, -1), torch.float32), quantize_mx(x, fmt, -1).nbytes)``,
    bit for bit, without building the codes: the same scale rule, rounding, saturation and NaN
    blocks, with no packing, table decode or layout moves. For activations that are quantized and
    used at once (a W8A8 / W4A8 linear); about twice as fast on the small tensors of a decode step."""
    f = get_format(fmt)
    if x.ndim == 0:
        raise ValueError("quantize_dequantize needs at least one dimension")
    xf = x.detach().to("cpu", torch.float32)
    n = xf.shape[-1]
    nb = max(1, math.ceil(n / BLOCK_SIZE))
    pad = nb * BLOCK_SIZE - n
    blocks = (torch.nn.functional.pad(xf, (0, pad)) if pad else xf).reshape(*xf.shape[:-1], nb, BLOCK_SIZE)
    amax = blocks.abs().amax(-1, keepdim=True)  # NaN or inf exactly where the block holds one
    rows = xf.numel() // n if n else 0
    code_bytes = rows * ((n + 1) // 2) if f.bits == 4 else xf.numel()
    if math.isfinite(float(amax.sum())):
        # every block finite (an activation, nearly always): the steps below without the NaN and
        # infinity handling, which changes nothing here. The block scale 2**shared_exponent is
        # amax's exponent bits (2**floor(log2 amax) for a normal amax) times 2**-emax, at least
        # 2**-127: equal to the frexp rule for every positive finite float32 amax (checked
        # exhaustively); a zero block gets 2**-127, its values are zeros whatever the scale.
        # The same values, bit for bit (a finite sum that overflows takes the general path)
        p2 = ((amax.view(torch.int32) & 0x7F800000).view(torch.float32) * 2.0**-f.emax).clamp_min_(2.0**-127)
        scaled = (blocks / p2).clamp_(-f.max, f.max)  # a power of two: x / 2**s == x * 2**-s
        if f.bits == 4:  # decode_e2m1(encode_e2m1(v)): v rounded onto the E2M1 grid, sign kept
            mag = scaled.abs()
            step = torch.where(mag < 2, 0.5, torch.where(mag < 4, 1.0, 2.0))
            values = torch.copysign(torch.round(mag / step) * step, scaled)
        else:
            values = scaled.to(f.torch_dtype).to(torch.float32)
        out = (values * p2).reshape(*xf.shape[:-1], nb * BLOCK_SIZE)
        return (out[..., :n] if pad else out), int(code_bytes + rows * nb)
    bad = ~torch.isfinite(amax)
    a = amax.nan_to_num(0.0, posinf=0.0)
    _, e = torch.frexp(a)  # exact in float32 as in shared_exponent()'s float64, subnormals included
    se = torch.where(a > 0, (e - 1 - f.emax).clamp(-127, 127), torch.full_like(e, -127)).to(torch.float32)
    # 2**-se is a normal float32 for every se in [-127, 125], so one rounding, as in float64 then a cast
    scaled = torch.ldexp(blocks, -se).clamp(-f.max, f.max)
    if f.bits == 4:
        values = decode_e2m1(encode_e2m1(scaled))
    else:
        values = scaled.nan_to_num(0.0).to(f.torch_dtype).to(torch.float32)
    scale = torch.where(bad, float("nan"), torch.ldexp(torch.ones_like(se), se))
    out = (torch.where(bad, 0.0, values) * scale).reshape(*xf.shape[:-1], nb * BLOCK_SIZE)
    return out[..., :n], int(code_bytes + rows * nb)


def dequantize(mx: MXTensor, dtype: torch.dtype | None = None) -> torch.Tensor:
    """Element value times its block scale; NaN in blocks whose scale is 0xFF."""
    values = mx.element_values().movedim(mx.axis, -1)
    n = values.shape[-1]
    nb = mx.scales.shape[mx.axis]
    blocks = torch.nn.functional.pad(values, (0, nb * BLOCK_SIZE - n)).reshape(
        *values.shape[:-1], nb, BLOCK_SIZE
    )
    scales = e8m0_to_float(mx.scales.movedim(mx.axis, -1)).unsqueeze(-1)
    out = (blocks * scales).reshape(*values.shape[:-1], nb * BLOCK_SIZE)[..., :n].movedim(-1, mx.axis)
    return out.to(dtype or mx.dtype)


def mx_linear(
    x: torch.Tensor,
    w_mx: MXTensor,
    act_fmt: str | MXFormat | None = None,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """``x @ W.T (+ bias)`` with an MX weight ``W`` of shape [N, K] quantized along K (axis -1).

    ``act_fmt`` also quantizes the activations along K: W4A4 = (mxfp4 weight, ``"mxfp4"``),
    W4A8 = (mxfp4, ``"mxfp8_e4m3"``), W8A8 = (mxfp8, ``"mxfp8_e4m3"``); ``None`` keeps them as
    they are (weight-only). Accumulates in fp32 and returns ``x.dtype``. Charged to the emulated
    device as one MX matmul (and one dynamic quant when ``act_fmt`` is set), moving the
    *quantized* weight bytes.
    """
    if len(w_mx.shape) != 2 or w_mx.axis != 1:
        raise ValueError("mx_linear needs a 2-D [N, K] weight quantized along K (axis=-1)")
    n_out, k = w_mx.shape
    if x.shape[-1] != k:
        raise ValueError(f"x has {x.shape[-1]} features but the weight expects {k}")
    m = x.numel() // k
    xq = x
    act_bytes = x.numel() * x.element_size()
    if act_fmt is not None:
        xq, x_bytes = quantize_dequantize(x, act_fmt)
        _account("dynamic_mx_quant", 4.0 * x.numel(), act_bytes + x_bytes, get_format(act_fmt).name)
        act_bytes = x_bytes
    out = xq.to(torch.float32) @ dequantize(w_mx, torch.float32).t()
    if bias is not None:
        out = out + bias.to(torch.float32)
    out = out.to(x.dtype)
    _account(
        "mx_matmul",
        2.0 * m * n_out * k,
        act_bytes + w_mx.nbytes + out.numel() * out.element_size(),
        w_mx.fmt.name,
    )
    return out


def _account(op: str, flops: float, nbytes: float, dtype: str) -> None:
    # the emulated device's public entry point (labkit.npu charges its fused ops the same way)
    emu.account(op, flops=float(flops), bytes=float(nbytes), launches=1, fused=True, dtype=dtype)
