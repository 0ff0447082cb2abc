"""Step 5: the whole chunked KDA op at Tile level (steps/05)."""

from __future__ import annotations

import torch
from labkit import tile
from tileops import cube_mm, load_padded  # noqa: F401
from tril_inverse import tril_inverse  # noqa: F401


def chunk_kda_tile(
    k: tile.Kernel,
    q: torch.Tensor,
    kk: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    s0: torch.Tensor,
    o: torch.Tensor,
    s_out: torch.Tensor,
    scale: float,
    chunk: int = 64,
) -> None:
    """GM in: q, kk [H, T, K], v [H, T, V], g [H, T, K], beta [H, T], s0 [H, K, V].
    GM out: o [H, T, V], s_out [H, K, V] (the final state)."""
    # TODO: equal to the reference, within the budgets, and faster than kda_tile_naive.py.
    raise NotImplementedError("chunk_kda_tile: not written yet")
