"""Step 4: implement RMSNorm the way torch_npu.npu_rms_norm defines it."""

import torch


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
    """Return (y, rstd) as npu_rms_norm does: rstd = 1 / sqrt(mean(x**2 over the last dim) + eps),
    float32, the last dim kept with size 1; y = x * rstd * weight in x's dtype."""
    xf = x.float()
    rstd = torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + eps)
    y = (xf * rstd * weight.float()).to(x.dtype)
    return y, rstd
