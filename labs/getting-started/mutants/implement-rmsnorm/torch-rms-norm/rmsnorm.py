"""Step 4: implement RMSNorm the way torch_npu.npu_rms_norm defines it."""

import torch


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
    """y from torch.nn.functional.rms_norm instead of written by hand (a wrong solution)."""
    xf = x.float()
    rstd = torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + eps)
    y = torch.nn.functional.rms_norm(xf, (x.shape[-1],), weight.float(), eps)
    return y.to(x.dtype), rstd
