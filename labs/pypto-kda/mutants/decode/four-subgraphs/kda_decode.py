"""Step 6: the KDA decode op, one token for N sequences x H heads, tuned at Tile level:
the sequence and head loops merged into one parallel loop, the M=1 products k.S and q.S done on the
Vector core (broadcast multiply + sum), and one subgraph per token instead of four."""

from __future__ import annotations

import torch
from labkit import tile

#: (sequence, head) pairs per task: N*H need not be a multiple of it
NH_TILE = 1


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
    NH = N * H
    # one merged loop over (sequence, head): views, no copies
    q2, k2, g2 = q.reshape(NH, K), kk.reshape(NH, K), g.reshape(NH, K)
    v2, b2, s2, o2 = v.reshape(NH, V), beta.reshape(NH, 1), S.view(NH, K, V), o.view(NH, V)
    for i in range(0, NH, NH_TILE):
        j = min(i + NH_TILE, NH)
        with k.task("decay", i):
            s = k.load(s2[i:j], "UB", "S")
            gt = k.load(g2[i:j], "UB", "g")
            k.store(k.vec("decay", lambda a, b: a * b.exp()[:, :, None], s, gt, name="Sd"), s2[i:j])
        with k.task("kS", i):
            sd = k.load(s2[i:j], "UB", "Sd")
            kt = k.load(k2[i:j], "UB", "k")
            k.store(k.vec("kS", lambda a, b: (a[:, :, None] * b).sum(1), kt, sd, name="kS"), o2[i:j])
        with k.task("update", i):
            sd = k.load(s2[i:j], "UB", "Sd")
            kt = k.load(k2[i:j], "UB", "k")
            ks = k.load(o2[i:j], "UB", "kS")
            delta = k.sub(k.load(v2[i:j], "UB", "v"), ks, "delta")
            bd = k.mul(k.load(b2[i:j], "UB", "beta"), delta, "bdelta")
            s_new = k.vec("update", lambda a, b, c: a + b[:, :, None] * c[:, None, :], sd, kt, bd, name="S")
            k.store(s_new, s2[i:j])
        with k.task("qS", i):
            s_new = k.load(s2[i:j], "UB", "S")
            qt = k.muls(k.load(q2[i:j], "UB", "q"), scale, "qs")
            out = k.vec("qS", lambda a, b: (a[:, :, None] * b).sum(1), qt, s_new, name="o")
            k.store(s_new, s2[i:j])
            k.store(out, o2[i:j])
