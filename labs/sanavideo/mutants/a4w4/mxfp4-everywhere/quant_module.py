"""Step 3: A4W4 MXFP4 mixed precision for the DiT, after cann-recipes-infer's
models/sana-video/patches/quant_module.py.

    python quant_module.py     # sample bf16 / a8w8 / a4w4, print weight memory and PSNR

On a 950 NPU ``QuantLinear`` quantizes its weight once and its input on every call with
``npu_dynamic_mx_quant``, then multiplies with ``npu_quant_matmul``; here the same maths runs as
fake quantization: quantize, dequantize, matmul in float32.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "TinySana"))  # the patched tree from step 1

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from labkit import mx  # noqa: E402
from torch import nn  # noqa: E402

BLOCK = 32
EMAX = {"mxfp4": 2, "mxfp8": 8}  # E2M1 and E4M3: exponent of the largest normal element
ELEMENT_MAX = {"mxfp4": 6.0, "mxfp8": 448.0}
MXFP4_LAYERS = ("attn.qkv", "cross_attn.q_linear", "cross_attn.kv_linear", "cross_attn.proj")
QUANTIZED_LAYERS = (*MXFP4_LAYERS, "attn.proj", "mlp.inverted_conv", "mlp.point_conv")


def mx_quantize_dequantize(x: torch.Tensor, fmt: str) -> torch.Tensor:
    """Quantize x to ``fmt`` ("mxfp4" or "mxfp8") in blocks of 32 along the last dim and back.

    OCP / CANN DynamicMxQuant rule: shared_exp = floor(log2(amax)) - emax, scale = 2**shared_exp,
    element = cast(x / scale) rounded to nearest even and saturated at the format's max.
    """
    *lead, k = x.shape
    blocks = x.float().reshape(*lead, k // BLOCK, BLOCK)
    amax = blocks.abs().amax(dim=-1, keepdim=True)
    _, e = torch.frexp(amax)  # amax = m * 2**e, 0.5 <= m < 1: floor(log2(amax)) = e - 1
    scale = torch.where(amax > 0, torch.ldexp(torch.ones_like(amax), (e - 1 - EMAX[fmt]).float()), 1.0)
    scaled = (blocks / scale).clamp(-ELEMENT_MAX[fmt], ELEMENT_MAX[fmt])
    if fmt == "mxfp4":
        elements = mx.decode_e2m1(mx.encode_e2m1(scaled))
    else:
        elements = scaled.to(torch.float8_e4m3fn).float()
    return (elements * scale).reshape(x.shape).to(x.dtype)


def quant_format(name: str, quant_type: str) -> str | None:
    """The format of DiT layer ``name`` (e.g. "blocks.0.attn.qkv") under ``quant_type``."""
    if quant_type == "bf16" or not name.endswith(QUANTIZED_LAYERS):
        return None
    if quant_type == "a4w4":
        return "mxfp4"
    return "mxfp8"


class QuantLinear(nn.Module):
    """W and A in ``fmt``: the weight is quantized once, the activation on every call."""

    def __init__(self, linear: nn.Linear | nn.Conv2d, fmt: str) -> None:
        super().__init__()
        self.quant_format = fmt
        w = linear.weight.detach().reshape(linear.weight.shape[0], -1)
        self.register_buffer("weight", mx_quantize_dequantize(w, fmt))
        self.bias = linear.bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(mx_quantize_dequantize(x, self.quant_format), self.weight, self.bias)


class QuantConv1x1AsLinear(QuantLinear):
    """A 1x1 Conv2d (B, Cin, H, W) run as a QuantLinear over the channels."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, _, h, w = x.shape
        y = super().forward(x.flatten(2).transpose(1, 2))
        return y.transpose(1, 2).reshape(b, -1, h, w)


def replace_quant_module(dit: nn.Module, quant_type: str) -> nn.Module:
    """Swap the DiT's linears / 1x1 convs for quantized ones as ``quant_format`` says."""
    for name, module in list(dit.named_modules()):
        fmt = quant_format(name, quant_type)
        if fmt is None:
            continue
        parent_name, _, child = name.rpartition(".")
        parent = dit.get_submodule(parent_name)
        if isinstance(module, nn.Conv2d):
            setattr(parent, child, QuantConv1x1AsLinear(module, fmt))
        elif isinstance(module, nn.Linear):
            setattr(parent, child, QuantLinear(module, fmt))
    return dit


def psnr(a: torch.Tensor, b: torch.Tensor) -> float:
    mse = (a.float() - b.float()).pow(2).mean().item()
    return float("inf") if mse == 0 else 10 * torch.log10(torch.tensor(255.0**2 / mse)).item()


if __name__ == "__main__":
    from tinysana.model import TinySana
    from tinysana.sampling import generate

    torch.set_num_threads(1)
    prompt = sys.argv[1] if len(sys.argv) > 1 else "a red circle moving right"
    ckpt = HERE / "TinySana" / "checkpoints" / "tinysana.safetensors"
    ref = generate(TinySana.load(ckpt), prompt)
    for quant_type in ("a8w8", "a4w4"):
        model = TinySana.load(ckpt)
        replace_quant_module(model.dit, quant_type)
        out = generate(model, prompt)
        print(f"{quant_type}: PSNR {psnr(out, ref):.1f} dB vs bf16")
