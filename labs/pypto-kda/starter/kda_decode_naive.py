"""The first Tile-level KDA decode op (the "before" of steps/06; do not edit: the checker times its own
copy). One token for N sequences x H heads.

The sequence loop is parallel but the head loop runs inside it, one head after another (they share
the sequence's workspace); each head is four subgraphs (decay, k.S, update, q.S), and the two M=1
products k.S and q.S run on the Cube."""

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
    N, H, K = q.shape
    V = v.shape[-1]
    ws_s = torch.zeros(N, K, V)
    ws_row = torch.zeros(N, 1, V)
    for n in range(N):
        for h in range(H):
            with k.task("decay", n, h):
                s = k.load(S[n, h], "UB", "S")
                eg = k.exp(k.load(g[n, h, :, None], "UB", "g"))
                k.store(k.vec("decay", lambda a, b: a * b, s, eg, name="Sd"), ws_s[n])
            with k.task("kS", n, h):
                kt = k.move(k.load(kk[n, h, None], "L1", "k"), "L0A")
                st = k.move(k.load(ws_s[n], "L1", "Sd"), "L0B")
                k.store(k.matmul(kt, st, name="kS"), ws_row[n])
            with k.task("update", n, h):
                s = k.load(ws_s[n], "UB", "Sd")
                ks = k.load(ws_row[n], "UB", "kS")
                delta = k.sub(k.load(v[n, h, None], "UB", "v"), ks, "delta")
                kb = k.mul(
                    k.load(kk[n, h, :, None], "UB", "k"), k.load(beta[n, h, None, None], "UB", "beta"), "bk"
                )
                k.store(k.add(s, k.mul(kb, delta), "S"), S[n, h])
                k.store(k.muls(k.load(q[n, h, None], "UB", "q"), scale, "qs"), ws_row[n])
            with k.task("qS", n, h):
                qt = k.move(k.load(ws_row[n], "L1", "qs"), "L0A")
                st = k.move(k.load(S[n, h], "L1", "S"), "L0B")
                k.store(k.matmul(qt, st, name="o"), o[n, h, None])
