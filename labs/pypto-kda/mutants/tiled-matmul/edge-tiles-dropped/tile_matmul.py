"""Step 1: a tiled matmul on the emulated Cube, within the on-chip buffer budgets."""

from __future__ import annotations

import torch
from labkit import tile

#: tile shape (M, K, N): the A tile goes to L0A (64 KiB), the B tile to L0B (64 KiB), the
#: accumulator to L0C (128 KiB); fp32 is 4 bytes an element
TILE_M, TILE_K, TILE_N = 64, 64, 128


def tiled_matmul(k: tile.Kernel, a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> None:
    """out = a @ b for a [M, K] and b [K, N] in GM."""
    M, K = a.shape
    N = b.shape[1]
    for i in range(0, M - TILE_M + 1, TILE_M):
        for j in range(0, N - TILE_N + 1, TILE_N):
            with k.task("mm", i, j):
                m, n = min(TILE_M, M - i), min(TILE_N, N - j)
                acc = k.zeros((m, n), "L0C", "acc")
                for p in range(0, K, TILE_K):
                    kk = min(TILE_K, K - p)
                    a1 = k.load(a[i : i + m, p : p + kk], "L1", "a")
                    b1 = k.load(b[p : p + kk, j : j + n], "L1", "b")
                    a0, b0 = k.move(a1, "L0A"), k.move(b1, "L0B")
                    k.matmul(a0, b0, acc)
                    for t in (a0, b0, a1, b1):
                        k.free(t)
                k.store(acc, out[i : i + m, j : j + n])
