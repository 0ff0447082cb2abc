"""A tiny DeepSeek-style MoE decoder with a KV cache and an MTP head.

Layout of one decoder layer (pre-norm)::

    h = x + Attn(RMSNorm(x))            # GQA, half-mode RoPE, KV cache
    y = h + MoE(RMSNorm(h))             # shared expert(s) + top-k routed SwiGLU experts

The router is ``softmax(x @ Wr^T)`` then top-k (the ``npu_moe_gating_top_k_softmax``
semantics), with the k weights renormalised to sum to 1. Routed expert weights are stacked
per layer (``experts_gate_up [E, 2H, D]``, ``experts_down [E, D, H]``) so a lab can move one
expert at a time (offload, hot sets). The MTP module (DeepSeek-V3 style) predicts token
``t+2`` from the final hidden state at ``t`` and the embedding of token ``t+1``.

Every op is charged to the current ``labkit.emu`` session (see ``_ops``). Set
``model.trace_routing = []`` to collect ``(layer, expert_ids)`` of every MoE call.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import Any

import torch
from torch import nn

from labkit import emu

from . import _ops


@dataclass
class TinyMoEConfig:
    vocab_size: int = 256
    d_model: int = 64
    n_layers: int = 3
    n_heads: int = 4
    n_kv_heads: int = 2
    head_dim: int = 16
    n_routed_experts: int = 32
    top_k: int = 4
    n_shared_experts: int = 1
    expert_hidden: int = 32
    shared_hidden: int = 64
    max_seq_len: int = 512
    rope_theta: float = 10000.0
    rms_eps: float = 1e-6
    mtp: bool = True
    seed: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TinyMoEConfig:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in known})


class KVCache:
    """Pre-allocated keys/values for every layer: ``k[i]``/``v[i]`` are ``[B, Hkv, max_len, Dh]``;
    ``length`` is how many positions are filled. ``n_layers`` includes the MTP block's slot."""

    def __init__(
        self, n_layers: int, batch: int, n_kv_heads: int, max_len: int, head_dim: int, dtype: torch.dtype
    ):
        shape = (batch, n_kv_heads, max_len, head_dim)
        self.k = [torch.zeros(shape, dtype=dtype) for _ in range(n_layers)]
        self.v = [torch.zeros(shape, dtype=dtype) for _ in range(n_layers)]
        self.length = 0
        self.max_len = max_len

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.k + self.v)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ops.rms_norm(x, self.weight, self.eps)


class Attention(nn.Module):
    def __init__(self, cfg: TinyMoEConfig):
        super().__init__()
        self.n_heads, self.n_kv, self.hd = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
        self.wq = nn.Parameter(torch.empty(cfg.n_heads * cfg.head_dim, cfg.d_model))
        self.wk = nn.Parameter(torch.empty(cfg.n_kv_heads * cfg.head_dim, cfg.d_model))
        self.wv = nn.Parameter(torch.empty(cfg.n_kv_heads * cfg.head_dim, cfg.d_model))
        self.wo = nn.Parameter(torch.empty(cfg.d_model, cfg.n_heads * cfg.head_dim))

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        cache: KVCache | None,
        slot: int,
        offset: int,
    ) -> torch.Tensor:
        b, s, _ = x.shape
        q = _ops.linear(x, self.wq, "attn_q").view(b, s, self.n_heads, self.hd).transpose(1, 2)
        k = _ops.linear(x, self.wk, "attn_k").view(b, s, self.n_kv, self.hd).transpose(1, 2)
        v = _ops.linear(x, self.wv, "attn_v").view(b, s, self.n_kv, self.hd).transpose(1, 2)
        q = _ops.rotary(q, cos, sin)
        k = _ops.rotary(k, cos, sin)
        if cache is not None:
            if offset + s > cache.max_len:
                raise ValueError(f"KV cache full: {offset + s} positions > max_len {cache.max_len}")
            cache.k[slot][:, :, offset : offset + s] = k
            cache.v[slot][:, :, offset : offset + s] = v
            k = cache.k[slot][:, :, : offset + s]
            v = cache.v[slot][:, :, : offset + s]
        out = _ops.attention(q, k, v, offset)
        out = out.transpose(1, 2).reshape(b, s, self.n_heads * self.hd)
        return _ops.linear(out, self.wo, "attn_o")


class MoE(nn.Module):
    """Shared expert(s) plus top-k routed SwiGLU experts."""

    def __init__(self, cfg: TinyMoEConfig, layer: int):
        super().__init__()
        self.layer = layer
        self.n_experts, self.top_k = cfg.n_routed_experts, cfg.top_k
        d, h = cfg.d_model, cfg.expert_hidden
        self.gate = nn.Parameter(torch.empty(cfg.n_routed_experts, d))
        self.experts_gate_up = nn.Parameter(torch.empty(cfg.n_routed_experts, 2 * h, d))
        self.experts_down = nn.Parameter(torch.empty(cfg.n_routed_experts, d, h))
        hs = cfg.shared_hidden * cfg.n_shared_experts
        self.shared_gate_up = nn.Parameter(torch.empty(2 * hs, d)) if hs else None
        self.shared_down = nn.Parameter(torch.empty(d, hs)) if hs else None
        self.trace: list[tuple[int, torch.Tensor]] | None = None
        self.last_aux: dict[str, torch.Tensor] = {}

    def route(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """x [N, D] -> (weights [N, k] summing to 1, expert ids [N, k], router logits [N, E])."""
        logits = _ops.linear(x, self.gate, "router")
        w, idx = _ops.gating_top_k_softmax(logits, self.top_k)
        w = w / w.sum(-1, keepdim=True)
        return w, idx, logits

    def expert(self, e: int, x: torch.Tensor) -> torch.Tensor:
        """Routed expert ``e`` on rows ``x`` [n, D] -> [n, D]."""
        hdn = _ops.swiglu(_ops.linear(x, self.experts_gate_up[e], "expert_gate_up"))
        return _ops.linear(hdn, self.experts_down[e], "expert_down")

    def routed(self, x: torch.Tensor, w: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        """Weighted sum of each token's k experts (a lab may override this: offload, hot sets)."""
        out = torch.zeros_like(x)
        if x.shape[0] == 1:
            for j, e in enumerate(idx[0].tolist()):
                out = out + w[0, j] * self.expert(e, x)
            return out
        for e in torch.unique(idx).tolist():
            rows, col = (idx == e).nonzero(as_tuple=True)
            y = self.expert(int(e), x[rows]) * w[rows, col].unsqueeze(-1)
            out = out.index_add(0, rows, y)
        return out

    def shared(self, x: torch.Tensor) -> torch.Tensor:
        if self.shared_gate_up is None or self.shared_down is None:
            return torch.zeros_like(x)
        hdn = _ops.swiglu(_ops.linear(x, self.shared_gate_up, "shared_gate_up"))
        return _ops.linear(hdn, self.shared_down, "shared_down")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        flat = x.reshape(-1, shape[-1])
        w, idx, logits = self.route(flat)
        if self.trace is not None:
            self.trace.append((self.layer, idx.detach().clone()))
        if self.training:
            self.last_aux = {"logits": logits, "idx": idx}
        y = self.routed(flat, w, idx) + self.shared(flat)
        _ops.elementwise("moe_combine", flat, y)
        return y.view(shape)


class Block(nn.Module):
    def __init__(self, cfg: TinyMoEConfig, layer: int):
        super().__init__()
        self.attn_norm = RMSNorm(cfg.d_model, cfg.rms_eps)
        self.attn = Attention(cfg)
        self.ffn_norm = RMSNorm(cfg.d_model, cfg.rms_eps)
        self.moe = MoE(cfg, layer)

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        cache: KVCache | None,
        slot: int,
        offset: int,
    ) -> torch.Tensor:
        h = x + self.attn(self.attn_norm(x), cos, sin, cache, slot, offset)
        _ops.elementwise("residual_add", x, h)
        y = h + self.moe(self.ffn_norm(h))
        _ops.elementwise("residual_add", h, y)
        return y


class MTP(nn.Module):
    """Multi-token prediction module: [norm(h_t); norm(emb(x_{t+1}))] -> proj -> block -> norm."""

    def __init__(self, cfg: TinyMoEConfig):
        super().__init__()
        self.norm_h = RMSNorm(cfg.d_model, cfg.rms_eps)
        self.norm_e = RMSNorm(cfg.d_model, cfg.rms_eps)
        self.proj = nn.Parameter(torch.empty(cfg.d_model, 2 * cfg.d_model))
        self.block = Block(cfg, cfg.n_layers)
        self.norm = RMSNorm(cfg.d_model, cfg.rms_eps)


class TinyMoE(nn.Module):
    """The model. ``forward(ids, cache)`` -> logits ``[B, S, V]``; see the module docstring."""

    def __init__(self, cfg: TinyMoEConfig):
        super().__init__()
        if cfg.n_heads % cfg.n_kv_heads or cfg.head_dim % 2:
            raise ValueError("n_heads must be a multiple of n_kv_heads and head_dim even")
        self.cfg = cfg
        self.embed = nn.Parameter(torch.empty(cfg.vocab_size, cfg.d_model))
        self.layers = nn.ModuleList(Block(cfg, i) for i in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.d_model, cfg.rms_eps)
        self.lm_head = nn.Parameter(torch.empty(cfg.vocab_size, cfg.d_model))
        self.mtp = MTP(cfg) if cfg.mtp else None
        inv = 1.0 / (cfg.rope_theta ** (torch.arange(0, cfg.head_dim, 2).float() / cfg.head_dim))
        ang = torch.outer(torch.arange(cfg.max_seq_len).float(), inv)
        ang = torch.cat((ang, ang), dim=-1)
        self.register_buffer("rope_cos", ang.cos(), persistent=False)
        self.register_buffer("rope_sin", ang.sin(), persistent=False)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Seeded init (``cfg.seed``): normal(0, 1/sqrt(fan_in)) for matrices, ones for norms."""
        g = torch.Generator().manual_seed(self.cfg.seed)
        for name, p in self.named_parameters():
            with torch.no_grad():
                if name.endswith("norm.weight") or ".norm_" in name or name.endswith("_norm.weight"):
                    p.fill_(1.0)
                else:
                    fan_in = p.shape[-1]
                    p.copy_(torch.randn(p.shape, generator=g) / math.sqrt(fan_in))

    # -- tracing ---------------------------------------------------------------------------
    @property
    def moe_layers(self) -> list[MoE]:
        return [blk.moe for blk in self.layers if isinstance(blk, Block)]

    @property
    def trace_routing(self) -> list[tuple[int, torch.Tensor]] | None:
        return self.moe_layers[0].trace

    @trace_routing.setter
    def trace_routing(self, value: list[tuple[int, torch.Tensor]] | None) -> None:
        for m in self.moe_layers:
            m.trace = value

    # -- forward ---------------------------------------------------------------------------
    def new_cache(self, batch: int = 1, max_len: int | None = None) -> KVCache:
        c = self.cfg
        n = c.n_layers + (1 if c.mtp else 0)
        return KVCache(n, batch, c.n_kv_heads, max_len or c.max_seq_len, c.head_dim, self.embed.dtype)

    def _rope(self, offset: int, s: int) -> tuple[torch.Tensor, torch.Tensor]:
        if offset + s > self.cfg.max_seq_len:
            raise ValueError(f"sequence of {offset + s} tokens exceeds max_seq_len {self.cfg.max_seq_len}")
        cos: torch.Tensor = self.rope_cos[offset : offset + s]  # type: ignore[index]
        sin: torch.Tensor = self.rope_sin[offset : offset + s]  # type: ignore[index]
        return cos.view(1, 1, s, -1), sin.view(1, 1, s, -1)

    def hidden(self, input_ids: torch.Tensor, cache: KVCache | None = None) -> torch.Tensor:
        """Final hidden states (after the last layer, before the final norm) ``[B, S, D]``.

        With ``cache``, positions continue from ``cache.length`` and the cache advances.
        """
        if input_ids.dim() == 1:
            input_ids = input_ids.unsqueeze(0)
        offset = cache.length if cache is not None else 0
        s = input_ids.shape[1]
        cos, sin = self._rope(offset, s)
        x = _ops.embedding(input_ids, self.embed)
        for i, blk in enumerate(self.layers):
            x = blk(x, cos, sin, cache, i, offset)
        if cache is not None:
            cache.length = offset + s
        return x

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return _ops.linear(self.norm(hidden), self.lm_head, "lm_head")

    def forward(self, input_ids: torch.Tensor, cache: KVCache | None = None) -> torch.Tensor:
        return self.logits(self.hidden(input_ids, cache))

    def mtp_hidden(
        self, hidden: torch.Tensor, next_ids: torch.Tensor, cache: KVCache | None = None, offset: int = 0
    ) -> torch.Tensor:
        """MTP hidden states: ``hidden[:, t]`` with ``next_ids[:, t]`` (the token at ``t+1``).

        ``offset`` is the position of ``hidden[:, 0]``; with ``cache`` the MTP block uses the
        cache's last slot (it does not advance ``cache.length``).
        """
        if self.mtp is None:
            raise RuntimeError("this model has no MTP module (cfg.mtp=False)")
        if next_ids.dim() == 1:
            next_ids = next_ids.unsqueeze(0)
        e = _ops.embedding(next_ids, self.embed)
        z = torch.cat((self.mtp.norm_h(hidden), self.mtp.norm_e(e)), dim=-1)
        z = _ops.linear(z, self.mtp.proj, "mtp_proj")
        cos, sin = self._rope(offset, z.shape[1])
        return self.mtp.block(z, cos, sin, cache, self.cfg.n_layers, offset)

    def mtp_logits(
        self, hidden: torch.Tensor, next_ids: torch.Tensor, cache: KVCache | None = None, offset: int = 0
    ) -> torch.Tensor:
        """Logits for token ``t+2`` ``[B, S, V]`` (shares ``lm_head``)."""
        assert self.mtp is not None
        h = self.mtp_hidden(hidden, next_ids, cache, offset)
        return _ops.linear(self.mtp.norm(h), self.lm_head, "lm_head")

    @torch.no_grad()
    def generate(
        self, prompt_ids: list[int] | torch.Tensor, max_new_tokens: int = 64, eos_id: int | None = None
    ) -> list[int]:
        """Greedy decoding with the KV cache; returns only the new tokens (stops at ``eos_id``).

        One prefill call, then one decode step per token, each charged to the emu session.
        """
        ids = torch.as_tensor(prompt_ids, dtype=torch.long).view(1, -1)
        cache = self.new_cache(1, min(self.cfg.max_seq_len, ids.shape[1] + max_new_tokens))
        logits = self.forward(ids, cache)
        out: list[int] = []
        for _ in range(max_new_tokens):
            nxt = int(logits[0, -1].argmax())
            emu.account("argmax", flops=float(logits.shape[-1]), bytes=float(logits.shape[-1] * 4))
            out.append(nxt)
            if eos_id is not None and nxt == eos_id:
                break
            if len(out) == max_new_tokens:
                break
            logits = self.forward(torch.tensor([[nxt]]), cache)
        return out

    def weight_groups(self) -> dict[str, int]:
        """Bytes of the weights by placement group, for device-memory accounting.

        Tags: ``embed``, ``lm_head``, ``norm``, ``layers.{i}.attn`` (norms included),
        ``layers.{i}.router``, ``layers.{i}.shared``, ``layers.{i}.expert.{e}`` (one routed
        expert), and ``mtp`` (the whole MTP module). The values sum to all parameter bytes.
        """

        def nb(*ps: torch.Tensor | None) -> int:
            return sum(p.numel() * p.element_size() for p in ps if p is not None)

        groups: dict[str, int] = {
            "embed": nb(self.embed),
            "lm_head": nb(self.lm_head),
            "norm": nb(self.norm.weight),
        }
        for i, blk in enumerate(self.layers):
            assert isinstance(blk, Block)
            a, m = blk.attn, blk.moe
            groups[f"layers.{i}.attn"] = nb(a.wq, a.wk, a.wv, a.wo, blk.attn_norm.weight, blk.ffn_norm.weight)
            groups[f"layers.{i}.router"] = nb(m.gate)
            groups[f"layers.{i}.shared"] = nb(m.shared_gate_up, m.shared_down)
            for e in range(m.n_experts):
                groups[f"layers.{i}.expert.{e}"] = nb(m.experts_gate_up[e], m.experts_down[e])
        if self.mtp is not None:
            groups["mtp"] = sum(p.numel() * p.element_size() for p in self.mtp.parameters())
        return groups

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())
