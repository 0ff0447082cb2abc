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
    """o [H, T, V] (in q's dtype) and the final state [H, K, V] (fp32) of the per-token recurrence."""
    H, T, K = q.shape
    S = s0.to(torch.float32).clone()
    q, k, v, g, beta = (x.to(torch.float32) for x in (q, k, v, g, beta))
    o = torch.empty(H, T, v.shape[-1], dtype=torch.float32)
    for t in range(T):
        S = S * g[:, t].exp()[:, :, None]
        delta = v[:, t] - torch.einsum("hk,hkv->hv", k[:, t], S)
        o[:, t] = scale * torch.einsum("hk,hkv->hv", q[:, t], S)
        S = S + beta[:, t, None, None] * k[:, t, :, None] * delta[:, None, :]
    return o, S
