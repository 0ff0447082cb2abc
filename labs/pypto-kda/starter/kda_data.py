"""Seeded KDA inputs for your own experiments (the checker draws its own, unseen ones).

Layout (one sequence): q, k [H, T, K]; v [H, T, V]; g [H, T, K] the log-space gate (<= 0, one per key
channel); beta [H, T]; s0 [H, K, V] the initial state."""

from __future__ import annotations

import torch


def make_inputs(
    seed: int = 0, H: int = 2, T: int = 128, D: int = 32, dtype: torch.dtype = torch.float32
) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)

    def r(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen, dtype=torch.float64)

    q = torch.nn.functional.normalize(r(H, T, D), dim=-1)
    k = torch.nn.functional.normalize(r(H, T, D), dim=-1)
    v = r(H, T, D)
    g = -0.25 * torch.sigmoid(r(H, T, D) - 1.5)
    beta = torch.sigmoid(r(H, T))
    s0 = 0.1 * r(H, D, D)
    out = {"q": q, "k": k, "v": v, "g": g, "beta": beta, "s0": s0}
    return {n: t.to(dtype) for n, t in out.items()}
