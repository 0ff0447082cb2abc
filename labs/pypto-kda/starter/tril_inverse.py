"""Step 4: (I + A)^-1 of a strictly lower-triangular A, as the KDA operator builds it (steps/04)."""

from __future__ import annotations

from labkit import tile
from tileops import cube_mm, eye  # noqa: F401

LEAF = 8


def tril_inverse(k: tile.Kernel, a: tile.Tile) -> tile.Tile:
    """``a``: a UB tile [C, C], strictly lower triangular (C a multiple of 8, at most 64).
    Returns a UB tile holding (I + a)^-1."""
    # TODO: 8x8 leaves by forward substitution (Vector), merged 8 -> 16 -> 32 -> 64 (Cube).
    raise NotImplementedError("tril_inverse: not written yet")
