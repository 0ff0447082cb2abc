"""Step 4: (I + A)^-1 of a strictly lower-triangular A, as the KDA operator builds it: the 8x8
diagonal leaves by forward substitution on the Vector core, then merged 8 -> 16 -> 32 -> 64 with
matrix products on the Cube."""

from __future__ import annotations

import torch
from labkit import tile
from tileops import cube_mm, eye

LEAF = 8


def tril_inverse(k: tile.Kernel, a: tile.Tile) -> tile.Tile:
    """``a``: a UB tile [C, C], strictly lower triangular (C a multiple of 8, at most 64).
    Returns a UB tile holding (I + a)^-1."""
    C = a.shape[0]
    n = C // LEAF
    # the leaves: the n diagonal 8x8 blocks of -A side by side, [n, 8, 8]
    neg = k.vec(
        "leaves",
        lambda x: -torch.stack([x[b * LEAF : (b + 1) * LEAF, b * LEAF : (b + 1) * LEAF] for b in range(n)]),
        a,
        name="negA",
    )
    inv = eye(k, LEAF, n, "leafinv")
    # forward substitution, every leaf at once: row i = -A[i, :i] @ X[:i, :i]
    for i in range(1, LEAF):
        row = k.vec(
            "fwdsub", lambda na, x, i=i: (na[:, i, :i, None] * x[:, :i, :i]).sum(1), neg, inv, name="row"
        )
        k.assign(inv[:, i, :i], row)
        k.free(row)
    x = k.vec("place", lambda li: torch.block_diag(*li), inv, name="X")
    k.free(neg)
    k.free(inv)
    # merges: [[X1, 0], [A21, X2]]^-1 = [[X1, 0], [-X2 A21 X1, X2]]
    size = LEAF
    while size < C:
        for b in range(0, C, 2 * size):
            x11 = x[b : b + size, b : b + size]
            x22 = x[b + size : b + 2 * size, b + size : b + 2 * size]
            a21 = a[b + size : b + 2 * size, b : b + size]
            t = cube_mm(k, x11, a21, "X1A21")
            x21 = cube_mm(k, t, x22, "X21")
            nx = k.neg(x21)
            k.assign(x[b + size : b + 2 * size, b : b + size], nx)
            for tmp in (t, x21, nx):
                k.free(tmp)
        size *= 2
    return x
