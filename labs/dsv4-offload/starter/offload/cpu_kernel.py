"""The CPU side of the offload: the host expert pool and the MXFP4 x Q8_0 expert kernel.

As in the recipe (kt-kernel, LLAMAFILE backend), the cold experts stay in host DRAM in their
native MXFP4, repacked once at load time from the checkpoint's layout to the GGUF
``block_mxfp4`` layout llama.cpp's ``ggml_vec_dot_mxfp4_q8_0`` reads. The repack moves bytes
only, so it is bit-exact: the E8M0 scale byte is copied, each 4-bit code keeps its value.

Checkpoint ("consecutive"): byte ``i`` of a 32-block = element ``2i`` (low) | ``2i+1`` (high).
GGUF ("half-block"):       ``qs[j]`` of a 32-block  = element ``j``  (low) | ``j+16`` (high),
preceded by the block's E8M0 byte: 17 bytes per block.

The kernel quantises activations to Q8_0 (int8 + fp16 scale per 32) and computes each token as
a GEMV: the expert's weights are streamed from DRAM once per token, which is why the CPU side is
memory-bound (arithmetic intensity ~3.8 OP/B against a ridge of ~33) and why its time is
``cold slots x expert bytes / DRAM bandwidth``.
"""

from __future__ import annotations

import torch
from dsv4flash import mxfp4
from dsv4flash.model import Checkpoint
from labkit import emu


def repack_mxfp4_to_gguf(blocks: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """Checkpoint MXFP4 -> GGUF ``block_mxfp4`` rows.

    ``blocks``: uint8 ``[..., K/2]`` (consecutive nibbles), ``scales``: uint8 ``[..., K/32]``.
    Returns uint8 ``[..., K/32, 17]``: byte 0 = the E8M0 scale, bytes 1..16 = ``qs`` with
    element ``j`` in the low nibble and element ``j+16`` in the high nibble of ``qs[j]``.
    """
    # TODO (step 2): repack, moving bytes only (bit-exact): every 4-bit code and every E8M0
    # scale byte keeps its value, only its place changes (the two layouts are in the module
    # docstring). Decoding to floats and quantizing again is not a repack: it can change bytes.
    raise NotImplementedError("step 2: repack_mxfp4_to_gguf")


class CpuExperts:
    """Every routed expert of every layer in host DRAM (GGUF MXFP4), and the kernel that runs them."""

    def __init__(self, ckpt: Checkpoint):
        self.cfg = ckpt.cfg
        self.gate_up: list[torch.Tensor] = []
        self.down: list[torch.Tensor] = []
        for layer in range(self.cfg.n_layers):
            self.gate_up.append(repack_mxfp4_to_gguf(*ckpt.expert_codes(layer, "gate_up")))
            self.down.append(repack_mxfp4_to_gguf(*ckpt.expert_codes(layer, "down")))
        d, i = self.cfg.d_model, self.cfg.moe_inter
        #: bytes of one expert in MXFP4 (what one token's GEMV streams from DRAM)
        self.expert_bytes = (2 * i * d + d * i) * 17 // 32
        #: every expert's values decoded once from its GGUF blocks, layer by layer (the emulator
        #: charges the kernel by the MXFP4 bytes it streams, whatever this simulation keeps)
        self.decoded = [
            (mxfp4.dequantize(*mxfp4.unpack_gguf(gu)), mxfp4.dequantize(*mxfp4.unpack_gguf(dn)))
            for gu, dn in zip(self.gate_up, self.down, strict=True)
        ]

    @property
    def nbytes(self) -> int:
        return sum(t.numel() for t in self.gate_up + self.down)

    def weights(self, layer: int, e: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Float32 weights of expert ``e`` as the kernel sees them (decoded from the GGUF blocks)."""
        gate_up, down = self.decoded[layer]
        return gate_up[e], down[e]

    def expert(self, layer: int, e: int, x: torch.Tensor) -> torch.Tensor:
        """Expert ``e`` of ``layer`` on host activations ``x [n, D]`` -> ``[n, D]`` (MXFP4 x Q8_0)."""
        w_gu, w_d = self.weights(layer, e)
        h = mxfp4.round_trip_q8_0(x) @ w_gu.T
        g, u = h.chunk(2, dim=-1)
        a = torch.nn.functional.silu(g) * u
        y = mxfp4.round_trip_q8_0(a) @ w_d.T
        n = x.shape[0]
        session = emu.current()
        if session is not None:  # a GEMV per token: the weights stream from DRAM n times
            session.host_compute(
                "cpu_expert_mxfp4_q8_0",
                flops=2.0 * n * (w_gu.numel() + w_d.numel()),
                bytes=float(n * self.expert_bytes + x.numel() * 2 + y.numel() * 4),
            )
        return y
