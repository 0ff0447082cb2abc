"""The toy DeepSeek-V4-Flash: checkpoint loading and the reference forward pass (no offload).

Per layer (pre-norm)::

    h = x + Attn(RMSNorm(x))                      # MQA (4 query heads, 1 KV head), RoPE, KV cache
    m = RMSNorm(h)
    w, ids = top6(softmax(m @ router^T))          # renormalised to sum to 1
    y = h + sum_j w_j * Expert_{ids_j}(m) + Shared(m)     # SwiGLU experts

The checkpoint stores what the real release stores: routed experts in native MXFP4 (consecutive
nibbles, E8M0 scales), attention and shared experts as W8A8 int8 with fp32 per-channel scales,
router and embeddings in bf16. :class:`Reference` computes everything in float32 from those
exact values: it is "the same model computed without offload".
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file

from . import mxfp4
from .config import HERE, ModelConfig

WEIGHTS = HERE / "weights" / "dsv4_flash_toy.safetensors"


def rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rope(x: torch.Tensor, pos: torch.Tensor, theta: float) -> torch.Tensor:
    """Half-mode rotary embedding on ``x [..., S, Dh]`` for positions ``pos [S]``."""
    half = x.shape[-1] // 2
    inv = 1.0 / theta ** (torch.arange(half, dtype=torch.float32) / half)
    ang = pos.float()[:, None] * inv[None, :]
    cos, sin = ang.cos(), ang.sin()
    a, b = x[..., :half], x[..., half:]
    return torch.cat((a * cos - b * sin, a * sin + b * cos), dim=-1)


@dataclass
class Checkpoint:
    """The raw tensors (``tensors``) plus helpers to read them in their stored formats."""

    cfg: ModelConfig
    tensors: dict[str, torch.Tensor]

    @classmethod
    def load(cls, path: Path | None = None) -> Checkpoint:
        path = path or WEIGHTS
        return cls(ModelConfig.load(path.with_name("config.json")), load_file(str(path)))

    def __getitem__(self, name: str) -> torch.Tensor:
        return self.tensors[name]

    def w8(self, name: str) -> torch.Tensor:
        """A W8A8 weight dequantised to float32 (int8 x per-output-channel scale)."""
        return self.tensors[name + ".weight"].float() * self.tensors[name + ".scale"][:, None]

    def expert_codes(self, layer: int, proj: str) -> tuple[torch.Tensor, torch.Tensor]:
        """(consecutive-packed codes ``[E, rows, K/2]``, E8M0 scales ``[E, rows, K/32]``) of one
        projection (``gate_up`` or ``down``) of every routed expert of ``layer``."""
        p = f"layers.{layer}.ffn.experts.{proj}"
        return self.tensors[p + ".blocks"], self.tensors[p + ".scales"]

    def expert_weight(self, layer: int, proj: str, e: int | None = None) -> torch.Tensor:
        """Float32 values of an expert projection (all experts when ``e`` is None)."""
        blocks, scales = self.expert_codes(layer, proj)
        if e is not None:
            blocks, scales = blocks[e], scales[e]
        return mxfp4.dequantize(mxfp4.unpack_consecutive(blocks), scales)


class KV:
    def __init__(self, cfg: ModelConfig):
        self.k: list[torch.Tensor | None] = [None] * cfg.n_layers
        self.v: list[torch.Tensor | None] = [None] * cfg.n_layers
        self.length = 0


def swiglu(gate_up: torch.Tensor) -> torch.Tensor:
    g, u = gate_up.chunk(2, dim=-1)
    return torch.nn.functional.silu(g) * u


class Reference:
    """The model without offload, in float32. ``prefill(ids)`` / ``decode(token)`` return logits;
    ``trace`` (when a list) collects ``(layer, ids [n, top_k])`` of every MoE call."""

    def __init__(self, ckpt: Checkpoint):
        self.ckpt, self.cfg = ckpt, ckpt.cfg
        c = ckpt
        self.embed = c["embed.weight"].float()
        self.lm_head = c["lm_head.weight"].float()
        self.layers = []
        for i in range(self.cfg.n_layers):
            p = f"layers.{i}."
            self.layers.append(
                {
                    "attn_norm": c[p + "attn_norm.weight"],
                    "wq": c.w8(p + "attn.wq"),
                    "wk": c.w8(p + "attn.wk"),
                    "wv": c.w8(p + "attn.wv"),
                    "wo": c.w8(p + "attn.wo"),
                    "ffn_norm": c[p + "ffn_norm.weight"],
                    "router": c[p + "ffn.gate.weight"].float(),
                    "sh_gate_up": c.w8(p + "ffn.shared_experts.gate_up"),
                    "sh_down": c.w8(p + "ffn.shared_experts.down"),
                    "gate_up": c.expert_weight(i, "gate_up"),
                    "down": c.expert_weight(i, "down"),
                }
            )
        self.kv = KV(self.cfg)
        self.trace: list[tuple[int, torch.Tensor]] | None = None

    def reset(self) -> None:
        self.kv = KV(self.cfg)

    def attention(self, i: int, x: torch.Tensor) -> torch.Tensor:
        cfg, L = self.cfg, self.layers[i]
        s = x.shape[0]
        pos = torch.arange(self.kv.length, self.kv.length + s)
        q = (x @ L["wq"].T).view(s, cfg.n_heads, cfg.head_dim).transpose(0, 1)
        k = (x @ L["wk"].T).view(s, cfg.n_kv_heads, cfg.head_dim).transpose(0, 1)
        v = (x @ L["wv"].T).view(s, cfg.n_kv_heads, cfg.head_dim).transpose(0, 1)
        q, k = rope(q, pos, cfg.rope_theta), rope(k, pos, cfg.rope_theta)
        kc, vc = self.kv.k[i], self.kv.v[i]
        k = k if kc is None else torch.cat((kc, k), dim=1)
        v = v if vc is None else torch.cat((vc, v), dim=1)
        self.kv.k[i], self.kv.v[i] = k, v
        return attend(q, k, v, self.kv.length) @ L["wo"].T

    def route(self, i: int, m: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return route(m, self.layers[i]["router"], self.cfg.top_k)

    def moe(self, i: int, m: torch.Tensor) -> torch.Tensor:
        L = self.layers[i]
        w, ids = self.route(i, m)
        if self.trace is not None:
            self.trace.append((i, ids.clone()))
        out = swiglu(m @ L["sh_gate_up"].T) @ L["sh_down"].T
        for e in torch.unique(ids).tolist():
            rows, col = (ids == e).nonzero(as_tuple=True)
            y = swiglu(m[rows] @ L["gate_up"][e].T) @ L["down"][e].T
            out = out.index_add(0, rows, y * w[rows, col, None])
        return out

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.embed[ids]
        for i, L in enumerate(self.layers):
            h = x + self.attention(i, rms_norm(x, L["attn_norm"], self.cfg.rms_eps))
            x = h + self.moe(i, rms_norm(h, L["ffn_norm"], self.cfg.rms_eps))
        self.kv.length += ids.shape[0]
        return rms_norm(x, self.ckpt["norm.weight"], self.cfg.rms_eps) @ self.lm_head.T

    def prefill(self, ids: list[int] | torch.Tensor) -> torch.Tensor:
        self.reset()
        return self.forward(torch.as_tensor(ids, dtype=torch.long))

    def decode(self, token: int) -> torch.Tensor:
        return self.forward(torch.tensor([int(token)]))[0]


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, offset: int) -> torch.Tensor:
    """Causal MQA: ``q [H, S, Dh]``, ``k, v [1, T, Dh]`` (T = offset + S) -> ``[S, H*Dh]``."""
    h, s, dh = q.shape
    scores = (q @ k.transpose(-1, -2)) / dh**0.5
    t = k.shape[1]
    mask = torch.arange(t)[None, :] > (torch.arange(s)[:, None] + offset)
    scores = scores.masked_fill(mask, float("-inf"))
    return (scores.softmax(-1) @ v).transpose(0, 1).reshape(s, h * dh)


def route(m: torch.Tensor, router: torch.Tensor, top_k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax top-k gating (``npu_moe_gating_top_k_softmax``), weights renormalised to sum to 1."""
    probs = (m @ router.T).softmax(-1)
    w, ids = probs.topk(top_k, dim=-1)
    return w / w.sum(-1, keepdim=True), ids
