"""Step 4: implement RMSNorm the way torch_npu.npu_rms_norm defines it."""

import torch


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
    """returns sqrt(mean(x²) + eps) as rstd (the RMS, not its reciprocal) (a wrong solution)."""
    xf = x.float()
    rms = torch.sqrt(xf.pow(2).mean(dim=-1, keepdim=True) + eps)
    return (xf / rms * weight.float()).to(x.dtype), rms
