"""Helpers over labkit.tile you may use in every Tile-level step."""

from __future__ import annotations

import torch
from labkit import tile


def cube_mm(k: tile.Kernel, a: tile.Tile, b: tile.Tile, name: str = "", b_trans: bool = False) -> tile.Tile:
    """``a @ b`` (``a @ b.T`` with ``b_trans``) of two UB tiles on the Cube: UB -> L0A / L0B, matmul
    into L0C, L0C -> UB. The operands' staging tiles are freed again; the result is a UB tile."""
    la = k.move(a, "L0A")
    lb = k.move(b, "L0B")
    c = k.matmul(la, lb, b_trans=b_trans)
    out = k.move(c, "UB", name or f"{a.name}@{b.name}")
    k.free(la)
    k.free(lb)
    k.free(c)
    return out


def eye(k: tile.Kernel, n: int, batch: int | None = None, name: str = "eye") -> tile.Tile:
    """An identity tile in UB, ``[n, n]`` or ``[batch, n, n]``."""
    e = torch.eye(n)
    return k.const(e if batch is None else e.expand(batch, n, n), name)


def load_padded(k: tile.Kernel, gm: torch.Tensor, rows: int, name: str = "") -> tile.Tile:
    """Load a GM view of up to ``rows`` rows into a UB tile of exactly ``rows`` rows, the rest zero
    (the last, shorter chunk of a sequence)."""
    t = k.load(gm, "UB", name)
    if t.shape[0] == rows:
        return t
    z = k.zeros((rows, *t.shape[1:]), "UB", name)
    k.assign(z[: t.shape[0]], t)
    k.free(t)
    return z
