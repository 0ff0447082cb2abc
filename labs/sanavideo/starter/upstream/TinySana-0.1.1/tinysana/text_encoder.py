"""A tiny text encoder standing in for Gemma-2-2B: token embedding + 2 transformer layers."""

from __future__ import annotations

import torch
from torch import nn

from . import layers
from .prompts import PAD, WORDS


class TextLayer(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1 = layers.RMSNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.norm2 = layers.RMSNorm(dim)
        self.mlp = nn.Sequential(
            nn.Linear(dim, 4 * dim), nn.GELU(approximate="tanh"), nn.Linear(4 * dim, dim)
        )

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b, n, c = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        att = layers.softmax_attention(q, k, v, mask)  # BNSD
        x = x + self.proj(att.transpose(1, 2).reshape(b, n, c))
        return x + self.mlp(self.norm2(x))


class TextEncoder(nn.Module):
    def __init__(self, dim: int = 64, depth: int = 2, heads: int = 4, max_tokens: int = 8) -> None:
        super().__init__()
        self.embed = nn.Embedding(len(WORDS), dim)
        self.pos = nn.Parameter(torch.zeros(max_tokens, dim))
        self.layers = nn.ModuleList(TextLayer(dim, heads) for _ in range(depth))
        self.norm = layers.RMSNorm(dim)

    def forward(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """tokens (B, L) -> (encoding (B, L, dim), key mask (B, 1, 1, L) bool, True = padding)."""
        mask = (tokens == PAD)[:, None, None, :]
        x = self.embed(tokens) + self.pos[: tokens.shape[1]]
        for layer in self.layers:
            x = layer(x, mask)
        return self.norm(x), mask
