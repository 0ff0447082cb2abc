"""Building blocks shared by the text encoder, the DiT and the VAE.

Every op that an NPU port replaces with a fused kernel lives here, as a small function or
class, so a port can swap it in one place (see the recipe's ``npu_patches.py``):

- ``RMSNorm.forward``            -> ``npu_rms_norm``
- ``apply_rotary_emb``           -> ``npu_rotary_mul(..., "interleave")``
- ``softmax_attention``          -> ``npu_fusion_attention`` (BNSD, bool mask, True = masked out)
- ``PointwiseConv2d.forward``    -> a matmul
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from . import profiler


class RMSNorm(nn.Module):
    """y = x / sqrt(mean(x^2, -1) + eps) * weight, computed in float32."""

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        out = (y * self.weight.float()).to(x.dtype)
        # pow, mean, add, rsqrt, mul, mul: six kernels, each a pass over x
        profiler.account("rms_norm(unfused)", flops=4.0 * x.numel(), bytes=6 * profiler.nbytes(x), launches=6)
        return out


class PointwiseConv2d(nn.Conv2d):
    """A 1x1 Conv2d (the Mix-FFN's inverted_conv and point_conv)."""

    def __init__(self, cin: int, cout: int, bias: bool = True) -> None:
        super().__init__(cin, cout, kernel_size=1, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = super().forward(x)
        # a Conv2d on the NPU goes through the 5-D fractal format: a TransData before and after
        profiler.account("TransData", flops=0.0, bytes=2 * profiler.nbytes(x, y), launches=2)
        return y


def rope_freqs(t: int, h: int, w: int, head_dim: int, theta: float = 10000.0) -> torch.Tensor:
    """3-D RoPE frequencies as complex numbers, shape (t*h*w, head_dim // 2).

    The head dimension is split into a time part and two equal space parts (as in Wan/SANA-Video);
    pair i of the head dimension is (x[2i], x[2i+1]): the *interleaved* layout.
    """
    dt = head_dim - 2 * (head_dim // 3 // 2 * 2)
    dh = dw = (head_dim - dt) // 2
    parts = []
    for n, d in ((t, dt), (h, dh), (w, dw)):
        inv = 1.0 / theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d)
        parts.append(torch.outer(torch.arange(n, dtype=torch.float64), inv))  # (n, d/2)
    ft, fh, fw = parts
    grid = torch.cat(
        [
            ft[:, None, None, :].expand(t, h, w, -1),
            fh[None, :, None, :].expand(t, h, w, -1),
            fw[None, None, :, :].expand(t, h, w, -1),
        ],
        dim=-1,
    ).reshape(t * h * w, head_dim // 2)
    return torch.polar(torch.ones_like(grid), grid).to(torch.complex64)


def apply_rotary_emb(x: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
    """Rotate x (B, heads, N, D) by complex freqs (N, D/2); pairs are (x[2i], x[2i+1])."""
    xc = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    out = torch.view_as_real(xc * freqs[None, None]).flatten(-2)
    # split, 4 muls, 2 adds, stack as real ops: ~6 kernels over x
    profiler.account("rope(unfused)", flops=6.0 * x.numel(), bytes=4 * profiler.nbytes(x), launches=6)
    return out.to(x.dtype)


def softmax_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None
) -> torch.Tensor:
    """Scaled dot-product attention in BNSD layout; ``mask`` is bool, True = masked out."""
    scale = 1.0 / math.sqrt(q.shape[-1])
    scores = (q.float() @ k.float().transpose(-1, -2)) * scale
    if mask is not None:
        scores = scores.masked_fill(mask, float("-inf"))
    out = (scores.softmax(-1) @ v.float()).to(q.dtype)
    b, h, s, d = q.shape
    t = k.shape[2]
    # matmul, scale, mask, softmax, matmul; the (s x t) scores go through memory four times
    profiler.account(
        "attention(unfused)",
        flops=4.0 * b * h * s * t * d,
        bytes=profiler.nbytes(q, k, v, out) + 4 * profiler.nbytes(scores),
        launches=5,
    )
    return out


def relu_linear_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, freqs: torch.Tensor, eps: float = 1e-6
) -> torch.Tensor:
    """SANA-Video linear attention, O(N): ReLU kernel, RoPE applied *after* the ReLU.

    out_i = RoPE(phi(q_i)) . sum_j RoPE(phi(k_j))^T v_j / (phi(q_i) . sum_j phi(k_j));
    RoPE is left out of the denominator for stability. q, k, v: (B, heads, N, D).
    """
    q, k, v = F.relu(q.float()), F.relu(k.float()), v.float()
    qr, kr = apply_rotary_emb(q, freqs), apply_rotary_emb(k, freqs)
    kv = kr.transpose(-1, -2) @ v  # (B, h, D, D)
    num = qr @ kv  # (B, h, N, D)
    den = q @ k.sum(dim=2, keepdim=True).transpose(-1, -2)  # (B, h, N, 1)
    out = num / (den + eps)
    b, h, n, d = q.shape
    profiler.account(
        "linear_attention", flops=4.0 * b * h * n * d * d, bytes=3 * profiler.nbytes(q, k, v, out), launches=6
    )
    return out


def timestep_embedding(t: torch.Tensor, dim: int, max_period: float = 10000.0) -> torch.Tensor:
    half = dim // 2
    freqs = torch.exp(-math.log(max_period) * torch.arange(half, dtype=torch.float32, device=t.device) / half)
    args = t.float()[:, None] * 1000.0 * freqs[None]
    return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)
