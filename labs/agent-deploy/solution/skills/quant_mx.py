"""Skill: MX quantisation as on Ascend 950 (attention and shared experts W8A8 MXFP8, routed
experts W4A8: MXFP4 weights, MXFP8 activations); router, embedding, LM head and MTP stay."""

from labkit import mx

SKILL = {
    "name": "quant_mx",
    "what": {
        "en": "attention and shared experts W8A8 MXFP8, routed experts W4A8 (MXFP4 weights, MXFP8 activations)",
        "zh": "注意力与共享专家采用 W8A8 MXFP8，路由专家采用 W4A8（MXFP4 权重、MXFP8 激活）",
    },
    "verify": {"kind": "logits", "tol": 0.12},
    "measure": ["ms_per_token", "weight_bytes"],
}


def apply(model):
    for name in model.names("attn") + model.names("shared"):
        model.weights[name] = mx.quantize_mx(model.weights[name], "mxfp8_e4m3")
    for name in model.names("expert"):
        model.weights[name] = mx.quantize_mx(model.weights[name], "mxfp4")
    model.act_fmt["attn"] = "mxfp8_e4m3"
    model.act_fmt["expert"] = "mxfp8_e4m3"
    model.act_fmt["shared"] = "mxfp8_e4m3"
