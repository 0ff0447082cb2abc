"""Trusted KDA (Kimi Delta Attention) references of the pypto-kda checkers: the per-token recurrence (the
golden), the chunked form, and seeded inputs shaped like the operator's.

Layout (one sequence): ``q, k`` ``[H, T, K]``, ``v`` ``[H, T, V]``, ``g`` ``[H, T, K]`` (log-space
gate, <= 0, one per key channel), ``beta`` ``[H, T]``, state ``S`` ``[H, K, V]`` (fp32 in the op).
Per token (``reference/talks-and-hardware.md`` Lab 3, fla ``naive_recurrent_kda``)::

    S <- S * exp(g_t)[:, None];  delta = v_t - k_t S;  S <- S + beta_t k_t (x) delta;  o_t = scale q_t S
"""

from __future__ import annotations

import torch


def make_inputs(
    seed: int,
    H: int = 2,
    T: int = 128,
    D: int = 32,
    *,
    dtype: torch.dtype = torch.float32,
    state: bool = True,
) -> dict[str, torch.Tensor]:
    """Seeded inputs: q, k L2-normalised per token (as Kimi's KDA), beta = sigmoid, a gate in
    (-0.25, 0) (cumulated over a 64-token chunk it stays above about -8, so exp(+-g) fits fp32),
    and a small initial state."""
    gen = torch.Generator().manual_seed(seed)

    def r(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen, dtype=torch.float64)

    q = torch.nn.functional.normalize(r(H, T, D), dim=-1)
    k = torch.nn.functional.normalize(r(H, T, D), dim=-1)
    v = r(H, T, D)
    g = -0.25 * torch.sigmoid(r(H, T, D) - 1.5)
    beta = torch.sigmoid(r(H, T))
    s0 = 0.1 * r(H, D, D) if state else torch.zeros(H, D, D, dtype=torch.float64)
    out = {"q": q, "k": k, "v": v, "g": g, "beta": beta, "s0": s0}
    return {n: t.to(dtype) for n, t in out.items()}


def recurrent_kda(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    s0: torch.Tensor | None = None,
    scale: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The per-token recurrence, in the inputs' dtype (pass float64 for a golden)."""
    H, T, K = q.shape
    scale = K**-0.5 if scale is None else scale
    S = torch.zeros(H, K, v.shape[-1], dtype=q.dtype) if s0 is None else s0.clone().to(q.dtype)
    o = torch.empty_like(v)
    for t in range(T):
        S = S * g[:, t].exp()[:, :, None]
        delta = v[:, t] - torch.einsum("hk,hkv->hv", k[:, t], S)
        S = S + beta[:, t, None, None] * k[:, t, :, None] * delta[:, None, :]
        o[:, t] = scale * torch.einsum("hk,hkv->hv", q[:, t], S)
    return o, S


def chunk_kda(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    s0: torch.Tensor | None = None,
    scale: float | None = None,
    chunk: int = 64,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The chunked form (fla ``naive_chunk_kda``): per chunk, gate cumsum, A strictly lower,
    T = (I + A)^-1 diag(beta), w = T (exp(g) k), u = T v, then the state recursion."""
    H, Tn, K = q.shape
    scale = K**-0.5 if scale is None else scale
    S = torch.zeros(H, K, v.shape[-1], dtype=q.dtype) if s0 is None else s0.clone().to(q.dtype)
    o = torch.empty_like(v)
    for c0 in range(0, Tn, chunk):
        sl = slice(c0, min(c0 + chunk, Tn))
        qc, kc, vc, bc = q[:, sl], k[:, sl], v[:, sl], beta[:, sl]
        gc = g[:, sl].cumsum(1)
        C = qc.shape[1]
        ke, kd = kc * gc.exp(), kc * (-gc).exp()
        eye = torch.eye(C, dtype=q.dtype)
        A = torch.tril(bc[:, :, None] * (ke @ kd.transpose(1, 2)), -1)
        Tm = torch.linalg.solve_triangular(eye + A, eye.expand(H, C, C), upper=False) * bc[:, None, :]
        w, u = Tm @ ke, Tm @ vc
        Aqk = torch.tril((qc * gc.exp()) @ kd.transpose(1, 2))
        vn = u - w @ S
        o[:, sl] = scale * ((qc * gc.exp()) @ S + Aqk @ vn)
        glast = gc[:, -1]
        S = S * glast.exp()[:, :, None] + (kc * (glast[:, None] - gc).exp()).transpose(1, 2) @ vn
    return o, S


def tril_inverse_blocks(a: torch.Tensor, leaf: int = 8) -> torch.Tensor:
    """(I + A)^-1 of a strictly lower ``[C, C]`` A from ``leaf`` x ``leaf`` diagonal blocks inverted by
    forward substitution, merged hierarchically: [[X1, 0], [A21, X2]]^-1 = [[X1, 0], [-X2 A21 X1, X2]]."""
    C = a.shape[-1]
    m = torch.eye(C, dtype=a.dtype) + a
    x = torch.zeros_like(m)
    for b in range(0, C, leaf):
        blk = m[b : b + leaf, b : b + leaf]
        n = blk.shape[0]
        inv = torch.eye(n, dtype=a.dtype)
        for i in range(1, n):
            inv[i, :i] = -(blk[i, :i] @ inv[:i, :i])
        x[b : b + n, b : b + n] = inv
    size = leaf
    while size < C:
        for b in range(0, C, 2 * size):
            m2 = min(b + 2 * size, C)
            if b + size >= C:
                continue
            x11 = x[b : b + size, b : b + size]
            x22 = x[b + size : m2, b + size : m2]
            a21 = m[b + size : m2, b : b + size]
            x[b + size : m2, b : b + size] = -(x22 @ a21 @ x11)
        size *= 2
    return x


#: absolute tolerance of a fp32 result next to the fp64 golden, times max(1, max |golden|):
#: the solution's worst error over every checker case is below 1e-6 (docs/labs/pypto-kda.md
#: derives it); the nearest mutant is above 1e-3
TOL = 1e-5


def tolerance(ref: torch.Tensor) -> float:
    return TOL * max(1.0, float(ref.abs().max()))
