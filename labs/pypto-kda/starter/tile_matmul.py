"""Step 1: a tiled matmul on the emulated Cube, within the on-chip buffer budgets.

Run `python run.py matmul` to try it. This first version puts each whole matrix in one tile."""

from __future__ import annotations

import torch
from labkit import tile

#: tile shape (M, K, N), if you tile
TILE_M, TILE_K, TILE_N = 0, 0, 0


def tiled_matmul(k: tile.Kernel, a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> None:
    """out = a @ b for a [M, K] and b [K, N] in GM."""
    # TODO: this does not fit the on-chip buffers for a real size; tile it.
    with k.task("mm"):
        a1 = k.load(a, "L1", "a")
        b1 = k.load(b, "L1", "b")
        c = k.matmul(k.move(a1, "L0A"), k.move(b1, "L0B"))
        k.store(c, out)
