"""Step 4: implement RMSNorm the way torch_npu.npu_rms_norm defines it."""

import torch


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
    """eps added after the square root: 1 / (sqrt(mean(x²)) + eps) (a wrong solution)."""
    xf = x.float()
    rstd = 1.0 / (xf.pow(2).mean(dim=-1, keepdim=True).sqrt() + eps)
    return (xf * rstd * weight.float()).to(x.dtype), rstd
