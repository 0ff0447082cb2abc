"""A tiny SANA-Video Linear DiT: ReLU linear self-attention with 3-D RoPE, cross-attention to the
text, and a Mix-FFN with a temporal conv (GLUMBConvTemp), all modulated by the timestep (adaLN-single).

Module names follow SANA so the recipe's quantisation rules read the same:
``blocks.N.attn.qkv``, ``blocks.N.attn.proj``, ``blocks.N.cross_attn.q_linear``,
``blocks.N.cross_attn.kv_linear``, ``blocks.N.cross_attn.proj``, ``blocks.N.mlp.inverted_conv``,
``blocks.N.mlp.point_conv``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from . import layers


@dataclass(frozen=True)
class DiTConfig:
    in_channels: int = 4
    patch: int = 2
    hidden: int = 64
    depth: int = 3
    heads: int = 2
    mlp_hidden: int = 128
    text_dim: int = 64
    t_kernel: int = 3
    pos_grid: tuple[int, int, int] = (8, 4, 4)  # (t, h, w) tokens of the learned position embedding


def sincos_3d(grid: tuple[int, int, int], dim: int) -> torch.Tensor:
    """Fixed sin/cos position codes for a (t, h, w) token grid, shape (t*h*w, dim): the start
    value of the learned absolute position embedding."""
    parts, left = [], dim
    for i, n in enumerate(grid):
        d = (left // (len(grid) - i)) // 2 * 2
        left -= d
        freq = 1.0 / 100.0 ** (torch.arange(0, d, 2, dtype=torch.float32) / d)
        ang = torch.arange(n, dtype=torch.float32)[:, None] * freq[None]
        parts.append(torch.cat([ang.sin(), ang.cos()], dim=-1))  # (n, d)
    t, h, w = grid
    pt, ph, pw = parts
    return torch.cat(
        [
            pt[:, None, None].expand(t, h, w, -1),
            ph[None, :, None].expand(t, h, w, -1),
            pw[None, None, :].expand(t, h, w, -1),
        ],
        dim=-1,
    ).reshape(t * h * w, dim)


def modulate(x: torch.Tensor, shift: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return x * (1 + scale) + shift


class LinearAttention(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.q_norm = layers.RMSNorm(dim // heads)
        self.k_norm = layers.RMSNorm(dim // heads)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
        b, n, c = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        q, k = self.q_norm(q), self.k_norm(k)
        out = layers.relu_linear_attention(q, k, v, freqs).to(x.dtype)
        return self.proj(out.transpose(1, 2).reshape(b, n, c))


class CrossAttention(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.q_linear = nn.Linear(dim, dim)
        self.kv_linear = nn.Linear(dim, 2 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, y: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b, n, c = x.shape
        d = c // self.heads
        q = self.q_linear(x).view(b, n, self.heads, d).transpose(1, 2)
        k, v = self.kv_linear(y).view(b, y.shape[1], 2, self.heads, d).permute(2, 0, 3, 1, 4)
        out = layers.softmax_attention(q, k, v, mask.expand(b, 1, n, y.shape[1]))
        return self.proj(out.transpose(1, 2).reshape(b, n, c))


class GLUMBConvTemp(nn.Module):
    """Mix-FFN: 1x1 conv (SiLU) -> 3x3 depthwise -> GLU -> 1x1 conv, then a temporal conv + shortcut."""

    def __init__(self, dim: int, hidden: int, t_kernel: int) -> None:
        super().__init__()
        self.inverted_conv = layers.PointwiseConv2d(dim, 2 * hidden)
        self.depth_conv = nn.Conv2d(2 * hidden, 2 * hidden, 3, padding=1, groups=2 * hidden)
        self.point_conv = layers.PointwiseConv2d(hidden, dim, bias=False)
        self.t_conv = nn.Conv2d(dim, dim, (t_kernel, 1), padding=(t_kernel // 2, 0), bias=False)

    def forward(self, x: torch.Tensor, thw: tuple[int, int, int]) -> torch.Tensor:
        b, n, c = x.shape
        t, h, w = thw
        x = x.view(b, t, h, w, c).permute(0, 1, 4, 2, 3).reshape(b * t, c, h, w)
        x = F.silu(self.inverted_conv(x))
        x = self.depth_conv(x)
        x, gate = x.chunk(2, dim=1)
        x = self.point_conv(x * F.silu(gate))
        x = x.view(b, t, c, h * w).transpose(1, 2)  # (B, C, T, HW)
        x = x + self.t_conv(x)
        return x.permute(0, 2, 3, 1).reshape(b, n, c)


class DiTBlock(nn.Module):
    def __init__(self, cfg: DiTConfig) -> None:
        super().__init__()
        c = cfg.hidden
        self.norm1 = layers.RMSNorm(c)
        self.attn = LinearAttention(c, cfg.heads)
        self.cross_attn = CrossAttention(c, cfg.heads)
        self.norm2 = layers.RMSNorm(c)
        self.mlp = GLUMBConvTemp(c, cfg.mlp_hidden, cfg.t_kernel)
        self.scale_shift_table = nn.Parameter(torch.randn(6, c) / c**0.5)

    def forward(self, x, y, mask, t6, freqs, thw):  # type: ignore[no-untyped-def]
        mods = (self.scale_shift_table[None] + t6.view(x.shape[0], 6, -1)).chunk(6, dim=1)
        shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp = mods
        x = x + gate_msa * self.attn(modulate(self.norm1(x), shift_msa, scale_msa), freqs)
        x = x + self.cross_attn(x, y, mask)
        return x + gate_mlp * self.mlp(modulate(self.norm2(x), shift_mlp, scale_mlp), thw)


class LinearDiT(nn.Module):
    def __init__(self, cfg: DiTConfig = DiTConfig()) -> None:
        super().__init__()
        self.cfg = cfg
        c, p = cfg.hidden, cfg.patch
        self.x_embedder = nn.Linear(cfg.in_channels * p * p, c)
        self.pos_embed = nn.Parameter(sincos_3d(cfg.pos_grid, c))
        self.t_embedder = nn.Sequential(nn.Linear(64, c), nn.SiLU(), nn.Linear(c, c))
        self.t_block = nn.Sequential(nn.SiLU(), nn.Linear(c, 6 * c))
        self.y_embedder = nn.Sequential(
            nn.Linear(cfg.text_dim, c), nn.GELU(approximate="tanh"), nn.Linear(c, c)
        )
        self.y_pool = nn.Linear(cfg.text_dim, c)  # pooled prompt, added to the timestep condition
        self.blocks = nn.ModuleList(DiTBlock(cfg) for _ in range(cfg.depth))
        self.final_norm = layers.RMSNorm(c)
        self.final_table = nn.Parameter(torch.randn(2, c) / c**0.5)
        self.final_linear = nn.Linear(c, p * p * cfg.in_channels)
        self._freqs: dict[tuple[tuple[int, int, int], str], torch.Tensor] = {}

    def freqs(self, thw: tuple[int, int, int], device: torch.device | str = "cpu") -> torch.Tensor:
        """RoPE frequencies of a (t, h, w) token grid on ``device`` (made once per grid and device)."""
        key = (thw, str(device))
        if key not in self._freqs:
            self._freqs[key] = layers.rope_freqs(*thw, self.cfg.hidden // self.cfg.heads).to(device)
        return self._freqs[key]

    def forward(self, x: torch.Tensor, t: torch.Tensor, y: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """x: latent (B, C, T, H, W); t: (B,) in [0, 1]; y: text (B, L, text_dim); mask (B,1,1,L)."""
        dtype = self.x_embedder.weight.dtype  # bf16 on the NPU: the inputs follow the weights
        x, y = x.to(dtype), y.to(dtype)
        b, ch, tt, hh, ww = x.shape
        p = self.cfg.patch
        thw = (tt, hh // p, ww // p)
        tokens = x.view(b, ch, tt, hh // p, p, ww // p, p).permute(0, 2, 3, 5, 1, 4, 6)
        h = self.x_embedder(tokens.reshape(b, -1, ch * p * p))
        h = h + self.pos_embed[: h.shape[1]]
        keep = (~mask[:, 0, 0, :]).to(dtype).unsqueeze(-1)  # (B, L, 1), 1 = real token
        pooled = (y * keep).sum(1) / keep.sum(1).clamp_min(1.0)
        temb = self.t_embedder(layers.timestep_embedding(t, 64).to(dtype)) + self.y_pool(pooled)
        t6 = self.t_block(temb)
        yy = self.y_embedder(y)
        freqs = self.freqs(thw, h.device)
        for block in self.blocks:
            h = block(h, yy, mask, t6, freqs, thw)
        shift, scale = (self.final_table[None] + temb[:, None]).chunk(2, dim=1)
        h = self.final_linear(modulate(self.final_norm(h), shift, scale))
        h = h.view(b, tt, hh // p, ww // p, ch, p, p).permute(0, 4, 1, 2, 5, 3, 6)
        return h.reshape(b, ch, tt, hh, ww)
