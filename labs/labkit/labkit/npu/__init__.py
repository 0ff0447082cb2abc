"""labkit.npu: fused ops with torch_npu's exact signatures and output tuples.

Each op forwards to ``torch_npu`` when its tensors are on an NPU; otherwise it runs a CPU
reference of the documented semantics and charges itself to the emulated device
(``labkit.emu.account(op, flops=..., bytes=..., launches=1, fused=True)``; a no-op outside an
emulation session). Write lab code once::

    from labkit.npu import npu_rms_norm
    y, rstd = npu_rms_norm(x, gamma, epsilon=1e-6)

Semantics, sources and supported subsets: docs/labkit.md, "Fused ops".
"""

from .attention import npu_fused_infer_attention_score, npu_fusion_attention
from .moe import npu_grouped_matmul, npu_moe_gating_top_k_softmax
from .norm import npu_add_rms_norm, npu_rms_norm, npu_swiglu
from .quant import npu_dynamic_mx_quant, npu_quant_matmul
from .rope import npu_rotary_mul

__all__ = [
    "npu_add_rms_norm",
    "npu_dynamic_mx_quant",
    "npu_fused_infer_attention_score",
    "npu_fusion_attention",
    "npu_grouped_matmul",
    "npu_moe_gating_top_k_softmax",
    "npu_quant_matmul",
    "npu_rms_norm",
    "npu_rotary_mul",
    "npu_swiglu",
]
