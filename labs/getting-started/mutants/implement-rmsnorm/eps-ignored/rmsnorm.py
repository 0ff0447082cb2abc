"""Step 4: implement RMSNorm the way torch_npu.npu_rms_norm defines it."""

import torch


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
    """eps left out: rstd = 1 / sqrt(mean(x²)) (a wrong solution)."""
    xf = x.float()
    rstd = torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True))
    return (xf * rstd * weight.float()).to(x.dtype), rstd
