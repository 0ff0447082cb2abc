"""Skill: fused ops (the talk's P0+P1 step). Swap the eager RMSNorm, residual-add + RMSNorm,
SwiGLU and MoE gating for the torch_npu fused ops (labkit.npu on the CPU)."""

SKILL = {
    "name": "fused_ops",
    "what": {
        "en": "npu_rms_norm, npu_add_rms_norm, npu_swiglu and npu_moe_gating_top_k_softmax replace the eager ops",
        "zh": "用 npu_rms_norm、npu_add_rms_norm、npu_swiglu 和 npu_moe_gating_top_k_softmax 替换 eager 算子",
    },
    "verify": None,  # TODO (step 2): how this skill is verified
    "measure": ["ms_per_token", "weight_bytes"],
}


def apply(model):
    # TODO (step 2)
    raise NotImplementedError("TODO (step 2): apply() in skills/fused_ops.py")
