"""Step 2: the recurrent KDA reference (the golden every faster version must equal)."""

from __future__ import annotations

import torch


def recurrent_kda(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    s0: torch.Tensor,
    scale: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """o [H, T, V] and the final state [H, K, V] of the per-token recurrence (steps/02)."""
    # TODO: the per-token recurrence; the state is fp32 whatever the inputs' dtype.
    raise NotImplementedError("recurrent_kda: not written yet")
