"""A tiny DSpark-style block drafter for the ``dspark-spec`` lab (talk 4).

The shape follows the public DSpark proposal model (``reference/talks-and-hardware.md``, Lab 4):

- **Parallel prediction**: the draft input is ``[last committed token, MASK, ..., MASK]``
  (``block_size`` positions); one *non-causal* pass over the block, conditioned on the target's
  hidden state at the position that produced the last committed token (``fc`` + ``hidden_norm``,
  DFlash's "context features"), gives logits for every position at once: position ``j``
  predicts the token ``j + 1`` places after the last committed one.
- **Sequential correction** (the "Markov head"): ``Embedding(vocab -> markov_rank) ->
  Linear(markov_rank -> vocab)`` conditioned on the token chosen at the previous position; the
  lab adds it to the parallel logits one position at a time.

Every op is charged to the current :mod:`labkit.emu` session through :mod:`labkit.models.ops`,
so a draft pass, a correction step and a target verify pass all have an emulated cost. The
weights are trained by ``labs/dspark-spec/training/train_drafter.py`` (distilled from the
target's greedy continuations) and shipped with the lab; nothing is downloaded.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from labkit.models import ops as _ops
from labkit.models.tiny_moe import RMSNorm


@dataclass
class DrafterConfig:
    vocab_size: int = 221
    target_d_model: int = 64
    d_model: int = 64
    n_heads: int = 4
    mlp_hidden: int = 128
    n_layers: int = 2
    block_size: int = 7
    markov_rank: int = 32
    rms_eps: float = 1e-6
    seed: int = 0

    @property
    def mask_id(self) -> int:
        """The MASK token: one row past the target's vocabulary in the drafter's embedding."""
        return self.vocab_size

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> DrafterConfig:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in known})


class _Layer(nn.Module):
    """Pre-norm, non-causal self-attention over the block (plus the context slot) and an MLP."""

    def __init__(self, cfg: DrafterConfig):
        super().__init__()
        d = cfg.d_model
        self.n_heads = cfg.n_heads
        self.attn_norm = RMSNorm(d, cfg.rms_eps)
        self.wqkv = nn.Parameter(torch.empty(3 * d, d))
        self.wo = nn.Parameter(torch.empty(d, d))
        self.mlp_norm = RMSNorm(d, cfg.rms_eps)
        self.w_gate_up = nn.Parameter(torch.empty(2 * cfg.mlp_hidden, d))
        self.w_down = nn.Parameter(torch.empty(d, cfg.mlp_hidden))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        hd = d // self.n_heads
        qkv = _ops.linear(self.attn_norm(x), self.wqkv, "draft_qkv")
        q, k, v = (t.view(b, s, self.n_heads, hd).transpose(1, 2) for t in qkv.chunk(3, dim=-1))
        # non-causal: every block position sees every other (offset = s - 1 masks nothing)
        a = _ops.attention(q, k, v, offset=s - 1)
        x = x + _ops.linear(a.transpose(1, 2).reshape(b, s, d), self.wo, "draft_o")
        h = _ops.swiglu(_ops.linear(self.mlp_norm(x), self.w_gate_up, "draft_gate_up"))
        return x + _ops.linear(h, self.w_down, "draft_down")


class BlockDrafter(nn.Module):
    """``forward(context_hidden [B, D_target], block_ids [B, S]) -> logits [B, S, V]`` in one pass;
    ``markov_logits(prev_ids [B]) -> [B, V]`` is the correction term for the next position."""

    def __init__(self, cfg: DrafterConfig):
        super().__init__()
        self.cfg = cfg
        d = cfg.d_model
        self.hidden_norm = RMSNorm(cfg.target_d_model, cfg.rms_eps)
        self.fc = nn.Parameter(torch.empty(d, cfg.target_d_model))
        self.embed = nn.Parameter(torch.empty(cfg.vocab_size + 1, d))  # + MASK
        self.pos = nn.Parameter(torch.empty(cfg.block_size, d))
        self.layers = nn.ModuleList(_Layer(cfg) for _ in range(cfg.n_layers))
        self.norm = RMSNorm(d, cfg.rms_eps)
        self.lm_head = nn.Parameter(torch.empty(cfg.vocab_size, d))
        self.markov_embed = nn.Parameter(torch.empty(cfg.vocab_size, cfg.markov_rank))
        self.markov_out = nn.Parameter(torch.empty(cfg.vocab_size, cfg.markov_rank))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        g = torch.Generator().manual_seed(self.cfg.seed)
        for name, p in self.named_parameters():
            with torch.no_grad():
                if name.endswith("norm.weight"):
                    p.fill_(1.0)
                elif name in ("embed", "pos", "markov_embed"):
                    p.copy_(torch.randn(p.shape, generator=g) * 0.5)
                else:
                    p.copy_(torch.randn(p.shape, generator=g) / math.sqrt(p.shape[-1]))

    @property
    def block_size(self) -> int:
        return self.cfg.block_size

    @property
    def mask_id(self) -> int:
        return self.cfg.mask_id

    def forward(self, context_hidden: torch.Tensor, block_ids: torch.Tensor) -> torch.Tensor:
        if context_hidden.dim() == 1:
            context_hidden = context_hidden.unsqueeze(0)
        if block_ids.dim() == 1:
            block_ids = block_ids.unsqueeze(0)
        s = block_ids.shape[1]
        if s > self.cfg.block_size:
            raise ValueError(f"block of {s} positions > block_size {self.cfg.block_size}")
        ctx = _ops.linear(self.hidden_norm(context_hidden), self.fc, "draft_fc").unsqueeze(1)
        x = _ops.embedding(block_ids, self.embed) + self.pos[:s] + ctx
        _ops.elementwise("draft_input_add", x, x)
        # the context feature is the first key/value slot, then the block
        x = torch.cat((ctx, x), dim=1)
        for layer in self.layers:
            x = layer(x)
        return _ops.linear(self.norm(x[:, 1:]), self.lm_head, "draft_lm_head")

    def markov_logits(self, prev_ids: torch.Tensor) -> torch.Tensor:
        """Correction logits for the position after ``prev_ids`` (one small op pair per step)."""
        e = _ops.embedding(prev_ids.view(-1), self.markov_embed)
        return _ops.linear(e, self.markov_out, "markov_head")


def save_drafter(model: BlockDrafter, path: Path | str, meta: dict[str, Any] | None = None) -> None:
    base = Path(path)
    tensors = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    st = base.with_suffix(".safetensors")
    save_file(tensors, str(st), metadata={"model": "BlockDrafter"})
    st.chmod(0o644)  # safetensors writes 0600; checkers may read the weights as another user
    base.with_suffix(".json").write_text(
        json.dumps({"config": model.cfg.to_dict(), "meta": meta or {}}, indent=1)
    )


def load_drafter(path: Path | str) -> BlockDrafter:
    """The drafter at ``path`` (``.safetensors`` + ``.json``), in eval mode."""
    base = Path(path)
    info = json.loads(base.with_suffix(".json").read_text())
    model = BlockDrafter(DrafterConfig.from_dict(info["config"]))
    model.load_state_dict(load_file(str(base.with_suffix(".safetensors"))))
    return model.eval()
