"""MX quantization ops: ``npu_dynamic_mx_quant`` and the MX form of ``npu_quant_matmul``.

Layouts follow torch_npu (as used by cann-recipes' SANA-Video ``QuantLinear``):

- ``npu_dynamic_mx_quant(x, axis=a)``: ``y`` has x's shape (FP8) or x's shape with the last dim
  halved (FP4, two codes per byte, dtype ``float4_e2m1fn_x2``); ``mxscale`` (``float8_e8m0fnu``)
  has ``shape[a]`` replaced by ``ceil(ceil(shape[a] / 32) / 2)`` and a trailing dim of 2: the
  block scales in pairs, the block count padded to even.
- ``npu_quant_matmul(x1, x2, scale, pertoken_scale=...)`` with x1 [M, K] quantized along K
  (``pertoken_scale`` [M, K/64, 2]) and x2 [K, N] quantized along K (``scale`` [K/64, N, 2]):
  ``out[m, n] = sum_k x1[m, k] * s1[m, k // 32] * x2[k, n] * s2[k // 32, n] (+ bias[n])``.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from .. import mx
from ._common import account, nbytes, on_npu, torch_npu

_FP4_NAMES = ("float4_e2m1fn_x2", "float4_e2m1")


def _is_fp4(dtype: Any) -> bool:
    return dtype is not None and any(str(dtype).endswith(n) for n in _FP4_NAMES)


def _format_for(dst_type: Any) -> mx.MXFormat:
    if _is_fp4(dst_type):
        return mx.FORMATS["mxfp4"]
    if isinstance(dst_type, torch.dtype):
        try:
            return mx.get_format(dst_type)
        except ValueError:
            raise ValueError(f"npu_dynamic_mx_quant: unsupported dst_type {dst_type}") from None
    name = str(dst_type).removeprefix("torch.").removeprefix("torch_npu.")
    for f in mx.FORMATS.values():
        if str(f.torch_dtype).removeprefix("torch.") == name:
            return f
    raise ValueError(f"npu_dynamic_mx_quant: unsupported dst_type {dst_type!r}")


def scales_to_pairs(scales: torch.Tensor, axis: int) -> torch.Tensor:
    """labkit.mx block scales (``axis`` dim = blocks) to torch_npu's mxscale layout."""
    s = scales.movedim(axis, -1)
    nb = s.shape[-1]
    s = torch.nn.functional.pad(s, (0, nb % 2))
    s = s.reshape(*s.shape[:-1], s.shape[-1] // 2, 2).movedim(-2, axis)
    return s.contiguous().view(torch.float8_e8m0fnu)


def pairs_to_scales(mxscale: torch.Tensor, axis: int, n_blocks: int) -> torch.Tensor:
    """Inverse of :func:`scales_to_pairs` (uint8 codes, ``axis`` dim = ``n_blocks``)."""
    s = mxscale.view(torch.uint8) if mxscale.dtype != torch.uint8 else mxscale
    s = s.movedim(axis, -2).flatten(-2)[..., :n_blocks]
    return s.movedim(-1, axis).contiguous()


def npu_dynamic_mx_quant(
    input: torch.Tensor,
    *,
    axis: int = -1,
    round_mode: str = "rint",
    dst_type: Any = torch.float8_e4m3fn,
    block_size: int = 32,
    scale_alg: int = 0,
    dst_type_max: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(y, mxscale)``: per-block MX quantization with the OCP scale rule (``scale_alg=0``),
    round-half-to-even (``round_mode="rint"``), block 32. See the module docstring for layouts."""
    if on_npu(input):
        return torch_npu().npu_dynamic_mx_quant(  # type: ignore[no-any-return]
            input, axis=axis, round_mode=round_mode, dst_type=dst_type, block_size=block_size,
            scale_alg=scale_alg, dst_type_max=dst_type_max,
        )  # fmt: skip
    if round_mode != "rint" or block_size != 32 or scale_alg != 0:
        raise NotImplementedError(
            "npu_dynamic_mx_quant on CPU: round_mode='rint', block_size=32, scale_alg=0 only"
        )
    fmt = _format_for(dst_type)
    q = mx.quantize_mx(input, fmt, axis)
    if fmt.bits == 4:
        if input.shape[-1] % 2:
            raise ValueError("npu_dynamic_mx_quant to FP4 needs an even last dim")
        y = q.codes.view(torch.float4_e2m1fn_x2)
    else:
        y = q.codes.view(fmt.torch_dtype)
    mxscale = scales_to_pairs(q.scales, q.axis)
    account("dynamic_mx_quant", flops=4 * input.numel(), bytes=nbytes(input, y, mxscale), dtype=fmt.name)
    return y, mxscale


def _values(t: torch.Tensor, declared: Any, n_last: int) -> tuple[torch.Tensor, bool]:
    """Element values (fp32) of an FP8 tensor or a packed FP4 tensor, and whether it was FP4."""
    if _is_fp4(declared) or _is_fp4(t.dtype):
        return mx.decode_e2m1(mx.unpack_fp4(t.view(torch.uint8), n_last)), True
    if t.dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        return t.to(torch.float32), False
    raise TypeError(f"npu_quant_matmul MX form: unsupported element dtype {t.dtype}")


def npu_quant_matmul(
    x1: torch.Tensor,
    x2: torch.Tensor,
    scale: torch.Tensor,
    *,
    offset: torch.Tensor | None = None,
    pertoken_scale: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    output_dtype: torch.dtype | None = None,
    x1_dtype: Any = None,
    x2_dtype: Any = None,
    pertoken_scale_dtype: Any = None,
    scale_dtype: Any = None,
    group_sizes: Any = None,
) -> torch.Tensor:
    """Quantized matmul. Two CPU forms:

    - **MX** (``scale`` is E8M0, i.e. ``float8_e8m0fnu`` or ``scale_dtype`` says so): see the
      module docstring; FP8 or FP4 (``x1_dtype``/``x2_dtype`` = ``float4_e2m1fn_x2``, x2 packed
      along N) elements, ``group_sizes=[1, 1, 32]``, output ``output_dtype`` (default bf16).
    - **int8**: ``out = (x1 @ x2) * scale[n] (* pertoken_scale[m]) (+ bias)``, then cast to
      ``output_dtype`` (default int8, rounded and saturated).
    """
    if on_npu(x1, x2, scale):
        return torch_npu().npu_quant_matmul(  # type: ignore[no-any-return]
            x1, x2, scale, offset=offset, pertoken_scale=pertoken_scale, bias=bias, output_dtype=output_dtype,
            x1_dtype=x1_dtype, x2_dtype=x2_dtype, pertoken_scale_dtype=pertoken_scale_dtype,
            scale_dtype=scale_dtype, group_sizes=group_sizes,
        )  # fmt: skip
    is_mx = scale.dtype == torch.float8_e8m0fnu or "e8m0" in str(scale_dtype)
    if not is_mx:
        return _int8_matmul(x1, x2, scale, offset, pertoken_scale, bias, output_dtype)
    if pertoken_scale is None:
        raise ValueError("npu_quant_matmul MX form needs pertoken_scale (the x1 block scales)")
    if group_sizes is not None and list(group_sizes) != [1, 1, 32]:
        raise NotImplementedError(
            f"npu_quant_matmul MX form: group_sizes must be [1, 1, 32], got {group_sizes}"
        )
    m = x1.shape[0]
    fp4_1 = _is_fp4(x1_dtype) or _is_fp4(x1.dtype)
    k = x1.shape[-1] * 2 if fp4_1 else x1.shape[-1]
    n = scale.shape[1]
    a, _ = _values(x1, x1_dtype, k)
    b, fp4_2 = _values(x2, x2_dtype, n)
    nb = math.ceil(k / mx.BLOCK_SIZE)
    s1 = mx.e8m0_to_float(pairs_to_scales(pertoken_scale, 1, nb))  # [M, nb]
    s2 = mx.e8m0_to_float(pairs_to_scales(scale, 0, nb))  # [nb, N]
    a = a * s1.repeat_interleave(mx.BLOCK_SIZE, dim=1)[:, :k]
    b = b * s2.repeat_interleave(mx.BLOCK_SIZE, dim=0)[:k]
    out = a @ b
    if bias is not None:
        out = out + bias.to(torch.float32)
    out = out.to(output_dtype or torch.bfloat16)
    account(
        "quant_matmul",
        flops=2 * m * n * k,
        bytes=nbytes(x1, x2, scale, pertoken_scale, out),
        dtype="mxfp4" if fp4_2 else "mxfp8",
    )
    return out


def _int8_matmul(
    x1: torch.Tensor,
    x2: torch.Tensor,
    scale: torch.Tensor,
    offset: torch.Tensor | None,
    pertoken_scale: torch.Tensor | None,
    bias: torch.Tensor | None,
    output_dtype: torch.dtype | None,
) -> torch.Tensor:
    if x1.dtype != torch.int8 or x2.dtype != torch.int8:
        raise NotImplementedError(
            "npu_quant_matmul on CPU: int8 x int8 or MX inputs only (int4-in-int32 is NPU-only)"
        )
    acc = x1.to(torch.int64) @ x2.to(torch.int64)
    if bias is not None and bias.dtype == torch.int32:
        acc = acc + bias.to(torch.int64)
        bias = None
    out = acc.to(torch.float64) * scale.to(torch.float64)
    if pertoken_scale is not None:
        out = out * pertoken_scale.to(torch.float64).unsqueeze(-1)
    if bias is not None:
        out = out + bias.to(torch.float64)
    dtype = output_dtype or torch.int8
    if dtype == torch.int8:
        if offset is not None:
            out = out + offset.to(torch.float64)
        result = torch.round(out).clamp(-128, 127).to(torch.int8)
    else:
        result = out.to(dtype)
    m, k = x1.shape[-2], x1.shape[-1]
    account("quant_matmul", flops=2 * m * x2.shape[-1] * k * max(1, acc.numel() // (m * x2.shape[-1])),
            bytes=nbytes(x1, x2, scale, result), dtype="int8")  # fmt: skip
    return result
