"""Step 5: the whole chunked KDA op at Tile level.

Only the state recursion is serial: every chunk's intra-chunk work (gate prefix sum, A, the inverse,
w, u) depends on the inputs alone, so those tasks run in parallel over chunks and heads; a short
"state" task per chunk then carries S from chunk to chunk."""

from __future__ import annotations

import torch
from labkit import tile
from tileops import cube_mm, load_padded
from tril_inverse import tril_inverse


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
    H, T, K = q.shape
    V = v.shape[-1]
    starts = list(range(0, T, chunk))
    nc = len(starts)
    # GM workspace between the two subgraphs
    ws = {n: torch.zeros(H, nc, chunk, d) for n, d in (("w", K), ("u", V), ("qe", K), ("kdec", K))}
    ws["aqk"] = torch.zeros(H, nc, chunk, chunk)
    ws["gl"] = torch.zeros(H, nc, 1, K)
    for h in range(H):
        for c, c0 in enumerate(starts):
            C = min(chunk, T - c0)
            sl = slice(c0, c0 + C)
            with k.task("intra", h, c):
                # the last chunk may be shorter: pad it with zeros to a whole chunk (k = beta = 0
                # there adds nothing to the state)
                qt = load_padded(k, q[h, sl], chunk, "q")
                kt = load_padded(k, kk[h, sl], chunk, "k")
                vt = load_padded(k, v[h, sl], chunk, "v")
                gt = load_padded(k, g[h, sl], chunk, "g")
                bt = load_padded(k, beta[h, sl, None], chunk, "beta")
                tri = k.const(torch.tril(torch.ones(chunk, chunk)), "tril1")
                gc = cube_mm(k, tri, gt, "gcum")  # inclusive prefix sum of the gate, as a matmul
                k.free(tri)
                eg = k.exp(gc)
                ke = k.mul(kt, eg, "ke")
                ng = k.exp(k.neg(gc))
                kd = k.mul(kt, ng, "kd")
                qe = k.mul(k.mul(qt, eg), eg, "qe")
                kkt = cube_mm(k, ke, kd, "kkT", b_trans=True)
                bk = k.mul(bt, kkt)
                a = k.tril(bk, -1, "A")
                k.free(kkt)
                k.free(bk)
                x = tril_inverse(k, a)
                k.free(a)
                tm = k.vec("colscale", lambda xx, b: xx * b.T, x, bt, name="T")
                w = cube_mm(k, tm, ke, "w")
                u = cube_mm(k, tm, vt, "u")
                qkt = cube_mm(k, qe, kd, "qkT", b_trans=True)
                aqk = k.tril(qkt, 0, "Aqk")
                for t in (eg, ng, x, tm, qkt):
                    k.free(t)
                gl = gc[C - 1 : C]  # the gate at the chunk's last real token
                kdec = k.mul(kt, k.exp(k.vec("glast-g", lambda last, x: last - x, gl, gc)), "kdec")
                k.store(w[:C], ws["w"][h, c, :C])
                k.store(u[:C], ws["u"][h, c, :C])
                k.store(qe[:C], ws["qe"][h, c, :C])
                k.store(kdec[:C], ws["kdec"][h, c, :C])
                k.store(aqk[:C, :C], ws["aqk"][h, c, :C, :C])
                k.store(k.exp(gl), ws["gl"][h, c])
        for c, c0 in enumerate(starts):
            C = min(chunk, T - c0)
            with k.task("state", h, c):
                S = k.load(s0[h] if c == 0 else s_out[h], "UB", "S")
                w = k.load(ws["w"][h, c, :C], "UB", "w")
                u = k.load(ws["u"][h, c, :C], "UB", "u")
                qe = k.load(ws["qe"][h, c, :C], "UB", "qe")
                kdec = k.load(ws["kdec"][h, c, :C], "UB", "kdec")
                aqk = k.load(ws["aqk"][h, c, :C, :C], "UB", "Aqk")
                gl = k.load(ws["gl"][h, c], "UB", "gl")
                vn = k.sub(u, cube_mm(k, w, S, "wS"), "vnew")
                out = k.muls(k.add(cube_mm(k, qe, S, "qS"), cube_mm(k, aqk, vn, "Av")), scale, "o")
                k.store(out, o[h, c0 : c0 + C])
                upd = cube_mm(k, k.transpose(kdec), vn, "kv")
                S2 = k.add(k.vec("decay", lambda s, e: s * e.T, S, gl), upd, "S")
                k.store(S2, s_out[h])
