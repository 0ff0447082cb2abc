"""Normalization and activation ops: ``npu_rms_norm``, ``npu_add_rms_norm``, ``npu_swiglu``.

CPU references compute in fp32 and cast the main output back to the input dtype, as the fused
kernels do; ``rstd`` is always fp32 and keeps the reduced dims with size 1.
"""

from __future__ import annotations

import torch

from ._common import account, charging, dtype_name, nbytes, on_npu, torch_npu


def _rstd(xf: torch.Tensor, norm_dims: int, epsilon: float) -> torch.Tensor:
    dims = tuple(range(-norm_dims, 0))
    return torch.rsqrt(xf.pow(2).mean(dim=dims, keepdim=True) + epsilon)


def npu_rms_norm(
    self: torch.Tensor, gamma: torch.Tensor, epsilon: float = 1e-06
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(y, rstd)`` with ``rstd = 1/sqrt(mean(x^2) + eps)`` over the last ``gamma.dim()`` dims
    (fp32, those dims kept as 1) and ``y = x * rstd * gamma`` in ``x.dtype``."""
    if on_npu(self, gamma):
        return torch_npu().npu_rms_norm(self, gamma, epsilon)  # type: ignore[no-any-return]
    xf = self.float()
    rstd = _rstd(xf, gamma.dim(), epsilon)
    y = (xf * rstd * gamma.float()).to(self.dtype)
    if charging():
        account(
            "rms_norm", flops=4 * self.numel(), bytes=nbytes(self, gamma, y, rstd), dtype=dtype_name(self)
        )
    return y, rstd


def npu_add_rms_norm(
    x1: torch.Tensor, x2: torch.Tensor, gamma: torch.Tensor, epsilon: float = 1e-06
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(y, rstd, x)``: ``x = x1 + x2`` (the new residual, in ``x1.dtype``), then RMSNorm of
    ``x`` computed from the fp32 sum: ``y = x * rstd * gamma``."""
    if on_npu(x1, x2, gamma):
        return torch_npu().npu_add_rms_norm(x1, x2, gamma, epsilon)  # type: ignore[no-any-return]
    xf = x1.float() + x2.float()
    rstd = _rstd(xf, gamma.dim(), epsilon)
    y = (xf * rstd * gamma.float()).to(x1.dtype)
    x = xf.to(x1.dtype)
    if charging():
        account(
            "add_rms_norm",
            flops=5 * x1.numel(),
            bytes=nbytes(x1, x2, gamma, y, rstd, x),
            dtype=dtype_name(x1),
        )
    return y, rstd, x


def npu_swiglu(input: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """``a, b = chunk(input, 2, dim)``; ``silu(a) * b`` (the first half is the gate)."""
    if on_npu(input):
        return torch_npu().npu_swiglu(input, dim=dim)  # type: ignore[no-any-return]
    if input.shape[dim] % 2:
        raise ValueError(f"npu_swiglu: dim {dim} has odd size {input.shape[dim]}")
    a, b = input.float().chunk(2, dim=dim)
    out = (a * torch.sigmoid(a) * b).to(input.dtype)
    if charging():
        account("swiglu", flops=5 * out.numel(), bytes=nbytes(input, out), dtype=dtype_name(input))
    return out
