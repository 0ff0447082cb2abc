"""A tiny ShortCut-MoE-like decoder with zero experts, for the longcat-parallel lab.

Each layer is pre-norm: ``h = x + Attn(RMSNorm(x))``, ``y = h + MoE(RMSNorm(h))``. Attention is
causal multi-head with half-mode RoPE at *global* positions (so a sequence shard passes its
offset). The router picks ``top_k`` of ``n_routed + n_zero`` experts from ``softmax(x @ gate^T)``
and renormalises the picked weights to sum to 1; an id ``>= n_routed`` is a **zero expert**
(LongCat's zero-computation experts: the output is the input itself, ``E(x) = x``), so its
contribution ``w * x`` needs no weights, no dispatch and no compute
(reference/talks-and-hardware.md, Lab 5: 768 routed + 128 zero experts, top-12).

Weights are seeded from ``cfg.seed``; nothing is shipped or downloaded. Every piece a lab
replaces is a separate method (``qkv``, ``attend``, ``attn_out``, ``route``, ``expert``, ``moe``)
and :meth:`TinyLongcat.forward` takes an ``attention`` and a ``moe`` function, so a harness can
run the same model with an attendee's context-parallel attention or expert-parallel MoE.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

__all__ = ["TinyLongcat", "TinyLongcatConfig", "causal_attention", "rms_norm"]


@dataclass(frozen=True)
class TinyLongcatConfig:
    vocab_size: int = 64
    d_model: int = 32
    n_layers: int = 4
    n_heads: int = 4
    head_dim: int = 8
    n_routed: int = 8
    n_zero: int = 4
    top_k: int = 3
    expert_hidden: int = 16
    rope_theta: float = 10000.0
    rms_eps: float = 1e-6
    seed: int = 0


def rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_offset: int = 0) -> torch.Tensor:
    """Softmax attention ``[B, H, Sq, D]`` over keys ``[B, H, Sk, D]``; query i (global position
    ``q_offset + i``) sees keys ``j <= q_offset + i``. Scale ``1/sqrt(D)``."""
    sq, sk = q.shape[-2], k.shape[-2]
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    qpos = torch.arange(sq).unsqueeze(1) + q_offset
    mask = torch.arange(sk).unsqueeze(0) > qpos
    scores = scores.masked_fill(mask, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def _rope(x: torch.Tensor, positions: torch.Tensor, theta: float) -> torch.Tensor:
    d = x.shape[-1]
    inv = theta ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    ang = positions.to(torch.float64).unsqueeze(-1) * inv  # [S, D/2]
    cos = torch.cat([ang.cos(), ang.cos()], -1).to(x.dtype)
    sin = torch.cat([ang.sin(), ang.sin()], -1).to(x.dtype)
    x1, x2 = x.chunk(2, -1)
    return x * cos + torch.cat([-x2, x1], -1) * sin


AttentionFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, int], torch.Tensor]
MoEFn = Callable[[int, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


class TinyLongcat:
    """Plain tensors, no nn.Module: every weight is in ``self.w[name]`` (fp32)."""

    def __init__(self, cfg: TinyLongcatConfig | None = None) -> None:
        self.cfg = cfg = cfg or TinyLongcatConfig()
        g = torch.Generator().manual_seed(cfg.seed)

        def rnd(*shape: int, std: float) -> torch.Tensor:
            return torch.randn(*shape, generator=g) * std

        d, hd = cfg.d_model, cfg.n_heads * cfg.head_dim
        self.w: dict[str, torch.Tensor] = {
            "embed": rnd(cfg.vocab_size, d, std=1.0),
            "lm_head": rnd(cfg.vocab_size, d, std=d**-0.5),
        }
        self.w["final_norm"] = 1 + rnd(d, std=0.1)
        for i in range(cfg.n_layers):
            p = f"layers.{i}."
            self.w[p + "attn_norm"] = 1 + rnd(d, std=0.1)
            self.w[p + "wqkv"] = rnd(3 * hd, d, std=d**-0.5)
            self.w[p + "wo"] = rnd(d, hd, std=hd**-0.5)
            self.w[p + "moe_norm"] = 1 + rnd(d, std=0.1)
            self.w[p + "gate"] = rnd(cfg.n_routed + cfg.n_zero, d, std=d**-0.5)
            self.w[p + "experts_up"] = rnd(cfg.n_routed, 2 * cfg.expert_hidden, d, std=d**-0.5)
            self.w[p + "experts_down"] = rnd(cfg.n_routed, d, cfg.expert_hidden, std=cfg.expert_hidden**-0.5)

    # -- pieces ---------------------------------------------------------------------------------
    def qkv(
        self, layer: int, x: torch.Tensor, positions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``x [B, S, d]`` (already normed) at global ``positions [S]`` -> q, k, v ``[B, H, S, D]``."""
        c = self.cfg
        b, s, _ = x.shape
        qkv = (x @ self.w[f"layers.{layer}.wqkv"].T).view(b, s, 3, c.n_heads, c.head_dim)
        q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))
        return _rope(q, positions, c.rope_theta), _rope(k, positions, c.rope_theta), v

    def attn_out(self, layer: int, o: torch.Tensor) -> torch.Tensor:
        b, h, s, d = o.shape
        return o.transpose(1, 2).reshape(b, s, h * d) @ self.w[f"layers.{layer}.wo"].T

    def route(self, layer: int, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``x [T, d]`` -> (expert ids ``[T, k]`` int64, weights ``[T, k]`` summing to 1)."""
        probs = torch.softmax(x @ self.w[f"layers.{layer}.gate"].T, dim=-1)
        w, ids = torch.topk(probs, self.cfg.top_k, dim=-1)
        return ids, w / w.sum(-1, keepdim=True)

    def expert(self, layer: int, e: int, rows: torch.Tensor) -> torch.Tensor:
        """Routed expert ``e`` (SwiGLU) on ``rows [n, d]``; zero experts have no weights."""
        if not 0 <= e < self.cfg.n_routed:
            raise ValueError(f"expert {e} is not a routed expert (zero experts have no weights)")
        up = rows @ self.w[f"layers.{layer}.experts_up"][e].T
        a, b = up.chunk(2, -1)
        return (torch.nn.functional.silu(a) * b) @ self.w[f"layers.{layer}.experts_down"][e].T

    def moe(self, layer: int, x: torch.Tensor, ids: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        """Single-process reference MoE: ``sum_j w_j * E_{ids_j}(x)``, ``E(x) = x`` for zero experts."""
        out = torch.zeros_like(x)
        for e in range(self.cfg.n_routed + self.cfg.n_zero):
            tok, slot = (ids == e).nonzero(as_tuple=True)
            if tok.numel() == 0:
                continue
            y = x[tok] if e >= self.cfg.n_routed else self.expert(layer, e, x[tok])
            out.index_add_(0, tok, y * w[tok, slot].unsqueeze(-1))
        return out

    # -- whole model ----------------------------------------------------------------------------
    def layer(
        self,
        i: int,
        x: torch.Tensor,
        positions: torch.Tensor,
        attention: AttentionFn | None = None,
        moe: MoEFn | None = None,
    ) -> torch.Tensor:
        """One layer on ``x [B, S, d]`` at global ``positions``; ``attention(q, k, v, q_offset)``
        defaults to :func:`causal_attention` over the keys given, ``moe(layer, x_flat, ids, w)`` to
        :meth:`moe`."""
        c = self.cfg
        p = f"layers.{i}."
        q, k, v = self.qkv(i, rms_norm(x, self.w[p + "attn_norm"], c.rms_eps), positions)
        o = (attention or causal_attention)(q, k, v, int(positions[0]))
        h = x + self.attn_out(i, o)
        hn = rms_norm(h, self.w[p + "moe_norm"], c.rms_eps).reshape(-1, c.d_model)
        ids, w = self.route(i, hn)
        y = (moe or self.moe)(i, hn, ids, w)
        return h + y.reshape(h.shape)

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        return self.w["embed"][ids]

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, self.w["final_norm"], self.cfg.rms_eps) @ self.w["lm_head"].T

    def forward(
        self,
        ids: torch.Tensor,
        offset: int = 0,
        attention: AttentionFn | None = None,
        moe: MoEFn | None = None,
        layers: range | None = None,
    ) -> torch.Tensor:
        """Logits ``[B, S, V]`` of token ids ``[B, S]`` whose first token is at ``offset``."""
        x = self.embed(ids)
        positions = torch.arange(ids.shape[1]) + offset
        for i in layers if layers is not None else range(self.cfg.n_layers):
            x = self.layer(i, x, positions, attention, moe)
        return self.logits(x)
