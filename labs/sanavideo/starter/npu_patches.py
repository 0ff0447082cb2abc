"""Step 2: swap TinySana's plain-torch ops for fused NPU ops, the way cann-recipes-infer's
models/sana-video/patches/npu_patches.py does for SANA-Video.

    python npu_patches.py      # sample the same clip before and after, compare, print emulated times
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "TinySana"))  # the patched tree from step 1

import torch  # noqa: E402
from labkit import npu  # noqa: E402,F401  (npu.npu_rms_norm, npu.npu_rotary_mul, npu.npu_fusion_attention)
from tinysana import layers  # noqa: E402

# The upstream plain-torch versions (see TinySana/tinysana/layers.py): several kernels each.
UPSTREAM_RMS_NORM = layers.RMSNorm.forward
UPSTREAM_ROPE = layers.apply_rotary_emb
UPSTREAM_ATTENTION = layers.softmax_attention
UPSTREAM_POINTWISE_CONV = layers.PointwiseConv2d.forward


def rms_norm_forward(self: layers.RMSNorm, x: torch.Tensor) -> torch.Tensor:
    """RMSNorm: y = x / sqrt(mean(x^2, -1) + self.eps) * self.weight."""
    # TODO (step 2): one fused kernel instead of six:
    #   npu.npu_rms_norm(x, gamma, epsilon) -> (y, rstd)
    return UPSTREAM_RMS_NORM(self, x)


def apply_rotary_emb(x: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
    """RoPE on x (B, heads, N, D) by complex freqs (N, D/2): upstream views the pairs
    (x[..., 2i], x[..., 2i+1]) as complex numbers and multiplies them by freqs[:, i]."""
    # TODO (step 2): npu.npu_rotary_mul(x, cos, sin, rotary_mode) with cos/sin built from freqs.
    #   Which rotary_mode rotates the pairs upstream rotates, "half" or "interleave"? What layout
    #   must cos and sin then have along D (shape (1, 1, N, D))?
    return UPSTREAM_ROPE(x, freqs)


def softmax_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None
) -> torch.Tensor:
    """softmax(q k^T / sqrt(D)) v in BNSD layout; ``mask`` is bool, True = masked out."""
    # TODO (step 2): npu.npu_fusion_attention(q, k, v, head_num, input_layout, atten_mask=..., scale=...)
    #   returns a tuple whose first element is the attention output.
    return UPSTREAM_ATTENTION(q, k, v, mask)


def pointwise_conv_forward(self: layers.PointwiseConv2d, x: torch.Tensor) -> torch.Tensor:
    """1x1 Conv2d: (B, Cin, H, W) -> (B, Cout, H, W), weight (Cout, Cin, 1, 1), optional bias."""
    # TODO (step 2): a matmul over the channels instead of a conv (on the NPU a Conv2d converts
    #   its input and output to the 5-D fractal format: two extra TransData kernels).
    return UPSTREAM_POINTWISE_CONV(self, x)


def apply_npu_patches() -> None:
    layers.RMSNorm.forward = rms_norm_forward  # type: ignore[method-assign]
    layers.apply_rotary_emb = apply_rotary_emb
    layers.softmax_attention = softmax_attention
    layers.PointwiseConv2d.forward = pointwise_conv_forward  # type: ignore[method-assign]


def _sample(prompt: str) -> tuple[torch.Tensor, float, int]:
    from labkit import emu
    from tinysana.model import TinySana
    from tinysana.profiler import instrument
    from tinysana.sampling import generate

    model = instrument(TinySana.load(HERE / "TinySana" / "checkpoints" / "tinysana.safetensors"))
    with emu.session(measurer=False) as s:
        frames = generate(model, prompt)
    return frames, s.elapsed_ms(), s.report().launches


if __name__ == "__main__":
    torch.set_num_threads(1)
    prompt = sys.argv[1] if len(sys.argv) > 1 else "a red circle moving right"
    before, ms0, n0 = _sample(prompt)
    apply_npu_patches()
    after, ms1, n1 = _sample(prompt)
    diff = (before.float() - after.float()).abs().max().item()
    print(f"max pixel difference {diff:.0f}/255")
    print(f"emulated sampling time {ms0:.2f} ms ({n0} launches) -> {ms1:.2f} ms ({n1} launches)")
