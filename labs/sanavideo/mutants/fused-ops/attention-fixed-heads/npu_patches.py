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
from labkit.npu import npu_fusion_attention, npu_rms_norm, npu_rotary_mul  # noqa: E402
from tinysana import layers  # noqa: E402


def rms_norm_forward(self: layers.RMSNorm, x: torch.Tensor) -> torch.Tensor:
    """RMSNorm -> one fused kernel (the second output, rstd, is not needed here)."""
    return npu_rms_norm(x, self.weight, epsilon=self.eps)[0]


def apply_rotary_emb(x: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
    """RoPE -> npu_rotary_mul. TinySana rotates pairs (x[2i], x[2i+1]): the *interleave* mode,
    with cos/sin of each pair repeated twice along the head dimension."""
    cos = freqs.real.repeat_interleave(2, dim=-1)[None, None].to(x.dtype)
    sin = freqs.imag.repeat_interleave(2, dim=-1)[None, None].to(x.dtype)
    return npu_rotary_mul(x, cos, sin, "interleave")


def softmax_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None
) -> torch.Tensor:
    """Attention -> npu_fusion_attention in BNSD layout (bool mask, True = masked out)."""
    return npu_fusion_attention(
        q,
        k,
        v,
        2,
        "BNSD",
        atten_mask=mask,
        scale=32**-0.5,
        keep_prob=1.0,  # TinySana: 2 heads of 32
    )[0]


def pointwise_conv_forward(self: layers.PointwiseConv2d, x: torch.Tensor) -> torch.Tensor:
    """1x1 Conv2d -> a matmul over the channels (no format conversion around a conv kernel)."""
    b, cin, h, w = x.shape
    y = x.flatten(2).transpose(1, 2) @ self.weight.view(self.out_channels, cin).t()
    if self.bias is not None:
        y = y + self.bias
    return y.transpose(1, 2).reshape(b, self.out_channels, h, w)


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
