"""The first Tile-level KDA op (the "before" of steps/05; do not edit: the checker times its own copy).

Correct, but every chunk is one task that does everything, the intra-chunk work included, after the
previous chunk's state: the chunks of a head run strictly one after another. The inverse is plain
forward substitution, row after row, on the Vector core."""

from __future__ import annotations

import torch
from labkit import tile


def _mm(k: tile.Kernel, a: tile.Tile, b: tile.Tile, name: str, b_trans: bool = False) -> tile.Tile:
    la, lb = k.move(a, "L0A"), k.move(b, "L0B")
    c = k.matmul(la, lb, b_trans=b_trans)
    out = k.move(c, "UB", name)
    for t in (la, lb, c):
        k.free(t)
    return out


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
    H, T, K = q.shape
    for h in range(H):
        for c, c0 in enumerate(range(0, T, chunk)):
            C = min(chunk, T - c0)
            sl = slice(c0, c0 + C)
            with k.task("chunk", h, c):
                qt, kt, vt = (
                    k.load(q[h, sl], "UB", "q"),
                    k.load(kk[h, sl], "UB", "k"),
                    k.load(v[h, sl], "UB", "v"),
                )
                gt, bt = k.load(g[h, sl], "UB", "g"), k.load(beta[h, sl, None], "UB", "beta")
                S = k.load(s0[h] if c == 0 else s_out[h], "UB", "S")
                gc = k.vec("cumsum", lambda x: x.cumsum(0), gt, name="gcum", passes=C)
                eg = k.exp(gc)
                ng = k.exp(k.neg(gc))
                ke, kd, qe = k.mul(kt, eg), k.mul(kt, ng), k.mul(qt, eg)
                for t in (qt, gt, eg, ng):
                    k.free(t)
                kkt = _mm(k, ke, kd, "kkT", b_trans=True)
                bk = k.mul(bt, kkt)
                a = k.tril(bk, -1, "A")
                k.free(kkt)
                k.free(bk)
                # forward substitution, one row at a time: X[i, :i] = -A[i, :i] @ X[:i, :i]
                x = k.const(torch.eye(C), "X")
                for i in range(1, C):
                    row = k.vec(
                        "fwdsub", lambda aa, xx, i=i: -(aa[i, :i, None] * xx[:i, :i]).sum(0), a, x, name="row"
                    )
                    k.assign(x[i, :i], row)
                    k.free(row)
                tm = k.vec("colscale", lambda xx, b: xx * b.T, x, bt, name="T")
                w, u = _mm(k, tm, ke, "w"), _mm(k, tm, vt, "u")
                for t in (a, x, tm, ke, vt):
                    k.free(t)
                qkt = _mm(k, qe, kd, "qkT", b_trans=True)
                aqk = k.tril(qkt, 0, "Aqk")
                k.free(qkt)
                vn = k.sub(u, _mm(k, w, S, "wS"), "vnew")
                out = k.muls(k.add(_mm(k, qe, S, "qS"), _mm(k, aqk, vn, "Av")), scale, "o")
                k.store(out, o[h, sl])
                for t in (aqk, kd, qe, w, u):
                    k.free(t)
                gl = gc[C - 1 : C]
                kdec = k.mul(kt, k.exp(k.vec("glast-g", lambda last, xx: last - xx, gl, gc)), "kdec")
                upd = _mm(k, k.transpose(kdec), vn, "kv")
                S2 = k.add(k.vec("decay", lambda s, e: s * e.T, S, k.exp(gl)), upd, "S")
                k.store(S2, s_out[h])
