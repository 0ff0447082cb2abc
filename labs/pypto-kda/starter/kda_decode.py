"""Step 6: the KDA decode op at Tile level, one token for N sequences x H heads (steps/06)."""

from __future__ import annotations

import torch
from labkit import tile


def decode_tile(
    k: tile.Kernel,
    q: torch.Tensor,
    kk: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    S: torch.Tensor,
    o: torch.Tensor,
    scale: float,
) -> None:
    """GM: q, kk, g [N, H, K]; v [N, H, V]; beta [N, H]; S [N, H, K, V] (updated in place); o [N, H, V]."""
    # TODO: start from kda_decode_naive.py and apply the talk's three changes.
    raise NotImplementedError("decode_tile: not written yet")
