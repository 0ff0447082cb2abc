"""Step 4: implement RMSNorm the way torch_npu.npu_rms_norm defines it."""

import torch


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
    """Return (y, rstd): rstd = 1 / sqrt(mean(x**2, last dim, kept) + eps); y = x * rstd * weight."""
    xf = x.float()
    rstd = torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + eps)
    y = (xf * rstd).to(x.dtype) * weight
    return y, rstd
