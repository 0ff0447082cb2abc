"""The emulated card: weights placed under a tag, W8A8 matmuls, host<->device copies.

Everything runs in torch on the CPU; what makes it "the device" is the accounting in the
``labkit.emu`` session: placed bytes count against the 64 GB (scaled) budget, matmuls are
charged to the device's engine, copies to the H2D / D2H engines. Exceeding the budget raises
``labkit.emu.OutOfDeviceMemory`` naming the biggest holders.
"""

from __future__ import annotations

import torch
from dsv4flash import mxfp4
from labkit import emu


def w8a8_bytes(rows: int, cols: int) -> int:
    """Bytes of a W8A8 weight: int8 values + one fp32 scale per output row."""
    return rows * cols + rows * 4


def mxfp4_bytes(rows: int, cols: int) -> int:
    """Bytes of an MXFP4 weight: 16 B of codes + 1 B of E8M0 scale per 32 values."""
    return rows * cols * 17 // 32


class W8:
    """A W8A8 weight on the device: int8 ``q [N, K]`` and fp32 per-row ``scale [N]``."""

    def __init__(self, q: torch.Tensor, scale: torch.Tensor):
        self.q, self.scale = q, scale
        self.qf = q.float()

    @property
    def nbytes(self) -> int:
        return self.q.numel() + self.scale.numel() * 4

    @classmethod
    def from_mxfp4(cls, codes: torch.Tensor, scales: torch.Tensor) -> W8:
        """MXFP4 -> W8A8 without loss: with a row's block exponents at most 3 apart every E2M1
        value is an integer multiple (<= 96) of half the smallest block scale."""
        vals = mxfp4.dequantize(codes, scales)
        step = torch.exp2(scales.float().amin(-1) - 127 - 1)  # [rows]
        q = torch.round(vals / step[:, None])
        if q.abs().max() > 127 or not torch.equal(q * step[:, None], vals):
            raise ValueError("MXFP4 row does not fit int8 exactly")
        return cls(q.to(torch.int8), step.float())


class Device:
    """One emulated card inside an ``labkit.emu`` session."""

    def __init__(self, session: emu.EmuSession):
        self.s = session
        self.mem = session.memory

    # -- memory -------------------------------------------------------------------------
    def place(self, tag: str, nbytes: int) -> None:
        """Weights (or a buffer) of ``nbytes`` arrive on the device under ``tag`` (alloc + H2D)."""
        self.mem.alloc(tag, nbytes)
        self.s.account("h2d:" + tag.split(".")[0], flops=0.0, bytes=float(nbytes), engine="h2d")

    def reserve(self, tag: str, nbytes: int) -> None:
        """Device memory reserved without a copy (KV cache, staging buffers)."""
        self.mem.alloc(tag, nbytes)

    def free(self, tag: str, nbytes: int | None = None) -> None:
        self.mem.free(tag, nbytes)

    # -- copies of activations -------------------------------------------------------------
    def to_host(self, x: torch.Tensor) -> torch.Tensor:
        """D2H copy of activations (bf16 on the wire)."""
        self.s.account("d2h:activations", flops=0.0, bytes=float(x.numel() * 2), engine="d2h")
        return x.clone()

    def to_device(self, x: torch.Tensor) -> torch.Tensor:
        """H2D copy of activations (bf16 on the wire)."""
        self.s.account("h2d:activations", flops=0.0, bytes=float(x.numel() * 2), engine="h2d")
        return x.clone()

    # -- compute ---------------------------------------------------------------------------
    def op(self, name: str, flops: float, nbytes: float, dtype: str = "bf16") -> None:
        self.s.account(name, flops=float(flops), bytes=float(nbytes), engine="device", dtype=dtype)

    def linear_w8a8(self, x: torch.Tensor, w: W8, name: str) -> torch.Tensor:
        """``x [n, K] @ w^T`` with activations quantised to int8 per token (dynamic)."""
        n, k = x.shape
        xs = (x.abs().amax(-1, keepdim=True) / 127).clamp_min(1e-12)
        xq = torch.round(x / xs).clamp(-127, 127)
        y = (xq @ w.qf.T) * xs * w.scale
        self.op(name, 2 * n * k * w.q.shape[0], w.nbytes + n * k * 2 + n * w.q.shape[0] * 2, "int8")
        return y

    def linear_bf16(self, x: torch.Tensor, w: torch.Tensor, name: str) -> torch.Tensor:
        n, k = x.shape
        self.op(name, 2 * n * k * w.shape[0], w.numel() * 2 + n * k * 2 + n * w.shape[0] * 4)
        return x @ w.T

    def swiglu_expert(self, x: torch.Tensor, gate_up: W8, down: W8, name: str) -> torch.Tensor:
        """A SwiGLU expert (or the shared expert) on the device."""
        h = self.linear_w8a8(x, gate_up, name + ".gate_up")
        g, u = h.chunk(2, dim=-1)
        a = torch.nn.functional.silu(g) * u
        self.op(name + ".swiglu", 4 * a.numel(), h.numel() * 2 + a.numel() * 2)
        return self.linear_w8a8(a, down, name + ".down")
