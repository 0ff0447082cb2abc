"""Rotary position embedding: ``npu_rotary_mul``."""

from __future__ import annotations

import torch

from ._common import account, charging, dtype_name, nbytes, on_npu, torch_npu


def npu_rotary_mul(
    input: torch.Tensor, r1: torch.Tensor, r2: torch.Tensor, rotary_mode: str = "half"
) -> torch.Tensor:
    """``out = r1 * x + r2 * rotate(x)`` on a 4-D input (BNSD / BSND / SBND), ``r1 = cos``,
    ``r2 = sin`` broadcastable to it.

    ``rotary_mode="half"``: ``rotate(x) = cat(-x2, x1)`` with ``x1, x2 = chunk(x, 2, -1)``;
    ``"interleave"``: ``rotate(x) = stack(-x[..., 1::2], x[..., ::2], -1).flatten(-2)``.
    """
    if on_npu(input, r1, r2):
        return torch_npu().npu_rotary_mul(input, r1, r2, rotary_mode=rotary_mode)  # type: ignore[no-any-return]
    if input.dim() != 4:
        raise ValueError(
            f"npu_rotary_mul expects a 4-D input (BNSD/BSND/SBND), got shape {tuple(input.shape)}"
        )
    d = input.shape[-1]
    if d % 2 or d >= 896:
        raise ValueError(f"npu_rotary_mul: the last dim must be even and < 896, got {d}")
    x = input.float()
    if rotary_mode == "half":
        x1, x2 = x.chunk(2, dim=-1)
        rot = torch.cat((-x2, x1), dim=-1)
    elif rotary_mode == "interleave":
        rot = torch.stack((-x[..., 1::2], x[..., 0::2]), dim=-1).flatten(-2)
    else:
        raise ValueError(f"npu_rotary_mul: rotary_mode must be 'half' or 'interleave', got {rotary_mode!r}")
    out = (r1.float() * x + r2.float() * rot).to(input.dtype)
    if charging():
        account(
            "rotary_mul", flops=3 * out.numel(), bytes=nbytes(input, r1, r2, out), dtype=dtype_name(input)
        )
    return out
