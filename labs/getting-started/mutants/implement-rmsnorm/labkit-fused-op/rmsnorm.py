"""Step 4: implement RMSNorm the way torch_npu.npu_rms_norm defines it."""

import torch


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
    """delegates to labkit.npu.npu_rms_norm, the fused op the step reproduces (a wrong solution)."""
    from labkit.npu import npu_rms_norm

    return npu_rms_norm(x, weight, eps)
