"""Skill: everything in MXFP4 (W4A4), LM head and router included. It saves the most memory,
and the accuracy gate is there to decide whether it may stay."""

from labkit import mx

SKILL = {
    "name": "quant_mxfp4_all",
    "what": {
        "en": "every linear layer W4A4 MXFP4: attention, router, shared and routed experts, LM head",
        "zh": "所有线性层采用 W4A4 MXFP4：注意力、路由、共享与路由专家、LM 头",
    },
    "verify": {"kind": "logits", "tol": 0.12},
    "measure": ["ms_per_token", "weight_bytes"],
}


def apply(model):
    for group in ("attn", "router", "shared", "expert", "lm_head"):
        for name in model.names(group):
            w = model.weights[name]
            if isinstance(w, mx.MXTensor):
                w = w.dequantize()
            model.weights[name] = mx.quantize_mx(w, "mxfp4")
        model.act_fmt[group] = "mxfp4"
