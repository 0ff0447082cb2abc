"""The handful of ops the tiny models use, each charged to the emulated device.

Where ``labkit.npu`` provides the fused op (with ``torch_npu``'s signature) it is used and
accounts for itself; otherwise a plain-torch version here does the same maths and accounts
with the same formula. Training turns the ``labkit.npu`` path off (``plain_torch()``) so
autograd always sees ordinary torch ops.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any

import torch
import torch.nn.functional as F

from labkit import emu

_state: dict[str, Any] = {"npu": None, "probed": False, "enabled": True}


def _npu() -> ModuleType | None:
    if not _state["enabled"]:
        return None
    if not _state["probed"]:
        _state["probed"] = True
        import labkit.npu

        _state["npu"] = labkit.npu
    return _state["npu"]  # type: ignore[no-any-return]


def _has(name: str) -> Any:
    mod = _npu()
    return getattr(mod, name, None) if mod is not None else None


@contextmanager
def plain_torch() -> Iterator[None]:
    """Use the plain-torch ops (no labkit.npu) inside; used for training."""
    before = _state["enabled"]
    _state["enabled"] = False
    try:
        yield
    finally:
        _state["enabled"] = before


def _nb(*tensors: torch.Tensor) -> float:
    return float(sum(t.numel() * t.element_size() for t in tensors))


def _dt(t: torch.Tensor) -> str:
    return str(t.dtype).removeprefix("torch.")


def linear(x: torch.Tensor, w: torch.Tensor, op: str = "matmul") -> torch.Tensor:
    """``x @ w.T`` charged as ``2*M*N*K`` FLOPs and weight + activation bytes."""
    y = x @ w.t()
    if emu.accounting_active():
        m = x.numel() // x.shape[-1]
        n, k = w.shape
        nbytes = (x.numel() + y.numel()) * x.element_size() + n * k * w.element_size()
        emu.account(op, flops=2.0 * m * n * k, bytes=float(nbytes), dtype=_dt(w))
    return y


def rms_norm(x: torch.Tensor, gamma: torch.Tensor, eps: float) -> torch.Tensor:
    fn = _has("npu_rms_norm")
    if fn is not None:
        return fn(x, gamma, eps)[0]  # type: ignore[no-any-return]
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * gamma
    emu.account("rms_norm", flops=4.0 * x.numel(), bytes=_nb(x, gamma, y), dtype=_dt(x))
    return y


def swiglu(x: torch.Tensor) -> torch.Tensor:
    """``silu(a) * b`` with ``a, b = chunk(x, 2, -1)`` (first half is the gate)."""
    fn = _has("npu_swiglu")
    if fn is not None:
        return fn(x, -1)  # type: ignore[no-any-return]
    a, b = x.chunk(2, dim=-1)
    y = F.silu(a) * b
    emu.account("swiglu", flops=5.0 * y.numel(), bytes=_nb(x, y), dtype=_dt(x))
    return y


def gating_top_k_softmax(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax over experts then top-k: (weights [N, k], expert ids [N, k] int64)."""
    fn = _has("npu_moe_gating_top_k_softmax")
    if fn is not None:
        y, idx, _ = fn(logits, None, k=k)
        return y, idx.long()
    probs = torch.softmax(logits, dim=-1)
    w, idx = probs.topk(k, dim=-1)
    emu.account("moe_gating_top_k_softmax", flops=6.0 * logits.numel(), bytes=_nb(logits, w, idx))
    return w, idx


def rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Half-mode RoPE on a BNSD tensor: ``x*cos + cat(-x2, x1)*sin``."""
    fn = _has("npu_rotary_mul")
    if fn is not None:
        return fn(x, cos, sin, "half")  # type: ignore[no-any-return]
    x1, x2 = x.chunk(2, dim=-1)
    y = x * cos + torch.cat((-x2, x1), dim=-1) * sin
    emu.account("rotary_mul", flops=3.0 * x.numel(), bytes=_nb(x, y) + _nb(cos, sin), dtype=_dt(x))
    return y


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, offset: int) -> torch.Tensor:
    """Causal attention, BNSD; query ``i`` sits at position ``offset + i`` and sees keys ``<=`` it.

    ``k``/``v`` may have fewer heads than ``q`` (grouped-query attention).
    """
    b, h, s, d = q.shape
    t = k.shape[2]
    kv_bytes = _nb(k, v)
    if k.shape[1] != h:
        rep = h // k.shape[1]
        k = k.repeat_interleave(rep, dim=1)
        v = v.repeat_interleave(rep, dim=1)
    scores = (q @ k.transpose(-1, -2)) * (d**-0.5)
    if s > 1 or offset + s < t:
        qpos = torch.arange(offset, offset + s).unsqueeze(1)
        kpos = torch.arange(t).unsqueeze(0)
        scores = scores.masked_fill(kpos > qpos, float("-inf"))
    out = torch.softmax(scores, dim=-1) @ v
    emu.account(
        "attention",
        flops=4.0 * b * h * s * t * d,
        bytes=_nb(q, out) + kv_bytes,
        dtype=_dt(q),
    )
    return out


def elementwise(op: str, *tensors: torch.Tensor) -> None:
    """Charge a plain elementwise op (residual add, scaling) over ``tensors``."""
    emu.account(op, flops=float(tensors[0].numel()), bytes=_nb(*tensors))


def embedding(ids: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    y = F.embedding(ids, table)
    emu.account("embedding", flops=0.0, bytes=_nb(y) * 2 + _nb(ids))
    return y
