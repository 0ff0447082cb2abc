"""MXFP4 as the DeepSeek-V4 checkpoint stores it, the GGUF block the CPU kernel reads, and Q8_0.

MXFP4 (OCP MX v1.0): blocks of 32 E2M1 codes sharing one E8M0 scale (bias 127, a power of two).
E2M1 code = sign bit (bit 3) + 3 magnitude bits: ``[0, .5, 1, 1.5, 2, 3, 4, 6]``.
Quantisation (``labkit.mx``) follows CANN ``DynamicMxQuant`` (scaleAlg 0): ``shared_exp = floor(log2(amax)) - 2``,
codes = ``rint(v / 2**shared_exp)`` on the E2M1 grid, saturating at 6.

Two byte layouts of the same codes (two codes per byte):

- **consecutive** (the checkpoint, CRI ``module/quantization/mxfp4.py``): byte ``i`` of a row holds
  element ``2i`` in its low nibble and ``2i+1`` in its high nibble;
- **GGUF half-block** (llama.cpp ``block_mxfp4 {uint8 e; uint8 qs[16]}``, 17 bytes per 32 values):
  ``qs[j]`` holds element ``j`` in its low nibble and element ``j+16`` in its high nibble.

Q8_0 (the activations of ``ggml_vec_dot_mxfp4_q8_0``): int8 codes and one fp16 scale
``d = amax / 127`` per 32 values.
"""

from __future__ import annotations

import torch
from labkit import mx

BLOCK = 32
E2M1 = torch.tensor(mx.E2M1_VALUES)
#: bytes of one MXFP4 value (16 B of codes + 1 B of scale per 32 values)
BYTES_PER_VALUE = 17 / 32


def quantize(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``w [..., K]`` (K a multiple of 32) -> (codes uint8 ``[..., K]`` in 0..15, E8M0 scales uint8 ``[..., K/32]``).

    The OCP / ``DynamicMxQuant`` rule, from ``labkit.mx``."""
    if w.shape[-1] % BLOCK:
        raise ValueError(f"last dimension {w.shape[-1]} is not a multiple of {BLOCK}")
    q = mx.quantize_mx(w.float(), "mxfp4")
    return mx.unpack_fp4(q.codes, w.shape[-1]), q.scales


def dequantize(codes: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """Unpacked codes ``[..., K]`` + scales ``[..., K/32]`` -> float32 values ``[..., K]``."""
    vals = E2M1[codes.long()].reshape(*codes.shape[:-1], -1, BLOCK)
    return (vals * torch.exp2(scales.float() - 127).unsqueeze(-1)).reshape(codes.shape)


def pack_consecutive(codes: torch.Tensor) -> torch.Tensor:
    """Codes ``[..., K]`` -> bytes ``[..., K/2]``: low nibble = even index (the checkpoint layout)."""
    return mx.pack_fp4(codes)


def unpack_consecutive(packed: torch.Tensor) -> torch.Tensor:
    """Bytes ``[..., K/2]`` in the checkpoint layout -> codes ``[..., K]``."""
    return mx.unpack_fp4(packed)


def unpack_gguf(blocks: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """GGUF ``block_mxfp4`` rows ``[..., K/32, 17]`` -> (codes ``[..., K]``, scales ``[..., K/32]``)."""
    e = blocks[..., 0]
    qs = blocks[..., 1:]
    codes = torch.cat((qs & 0x0F, (qs >> 4) & 0x0F), dim=-1)  # elements 0..15 then 16..31
    return codes.reshape(*blocks.shape[:-2], -1), e


def quantize_q8_0(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Activations ``[..., K]`` -> (int8 ``[..., K]``, fp16 scales ``[..., K/32]``), as ggml's Q8_0."""
    blocks = x.float().reshape(*x.shape[:-1], -1, BLOCK)
    d = (blocks.abs().amax(-1, keepdim=True) / 127).half()
    inv = torch.where(d.float() > 0, 1.0 / d.float(), torch.zeros_like(d.float()))
    q = torch.round(blocks * inv).clamp(-127, 127).to(torch.int8)
    return q.reshape(x.shape), d.squeeze(-1)


def dequantize_q8_0(q: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
    return (q.float().reshape(*q.shape[:-1], -1, BLOCK) * d.float().unsqueeze(-1)).reshape(q.shape)


def round_trip_q8_0(x: torch.Tensor) -> torch.Tensor:
    """``dequantize_q8_0(*quantize_q8_0(x))`` in one pass, bit for bit: what the kernel's
    activations are worth after Q8_0 (the int8 codes are whole numbers, so scaling them in
    float32 is exact)."""
    blocks = x.float().reshape(*x.shape[:-1], -1, BLOCK)
    d = (blocks.abs().amax(-1, keepdim=True) / 127).half().float()
    inv = torch.where(d > 0, d.reciprocal(), 0.0)
    return (torch.round(blocks * inv).clamp_(-127, 127) * d).reshape(x.shape)
