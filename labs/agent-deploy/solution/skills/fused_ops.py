"""Skill: fused ops (the talk's P0+P1 step). Swap the eager RMSNorm, residual-add + RMSNorm,
SwiGLU and MoE gating for the torch_npu fused ops (labkit.npu on the CPU)."""

from labkit.npu import npu_add_rms_norm, npu_moe_gating_top_k_softmax, npu_rms_norm, npu_swiglu

SKILL = {
    "name": "fused_ops",
    "what": {
        "en": "npu_rms_norm, npu_add_rms_norm, npu_swiglu and npu_moe_gating_top_k_softmax replace the eager ops",
        "zh": "用 npu_rms_norm、npu_add_rms_norm、npu_swiglu 和 npu_moe_gating_top_k_softmax 替换 eager 算子",
    },
    "verify": {"kind": "tokens"},
    "measure": ["ms_per_token", "weight_bytes"],
}


def rms_norm(x, gamma, eps):
    return npu_rms_norm(x, gamma, epsilon=eps)[0]


def add_rms_norm(x, residual, gamma, eps):
    y, _rstd, s = npu_add_rms_norm(x, residual, gamma, epsilon=eps)
    return y, s


def swiglu(gate_up):
    return npu_swiglu(gate_up, dim=-1)


def gating(logits, k):
    w, idx, _row = npu_moe_gating_top_k_softmax(logits, None, k=k)
    return w / w.sum(-1, keepdim=True), idx.long()


def apply(model):
    model.ops.rms_norm = rms_norm
    model.ops.add_rms_norm = add_rms_norm
    model.ops.swiglu = swiglu
    model.ops.gating = gating
