"""Step 3: chunked KDA at Tensor level (what the operator computes, chunk by chunk)."""

from __future__ import annotations

import torch


def chunk_kda(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    s0: torch.Tensor,
    scale: float,
    chunk: int = 64,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Same result as recurrent_kda, computed chunk by chunk with matrix products (steps/03)."""
    # TODO: per chunk: gate cumsum, A, T = (I + A)^-1 diag(beta), w and u, output, state.
    raise NotImplementedError("chunk_kda: not written yet")
