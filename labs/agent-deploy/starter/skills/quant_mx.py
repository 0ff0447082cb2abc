"""Skill: MX quantisation as on Ascend 950 (attention and shared experts W8A8 MXFP8, routed
experts W4A8: MXFP4 weights, MXFP8 activations); router, embedding, LM head and MTP stay."""

SKILL = {
    "name": "quant_mx",
    "what": {
        "en": "attention and shared experts W8A8 MXFP8, routed experts W4A8 (MXFP4 weights, MXFP8 activations)",
        "zh": "注意力与共享专家采用 W8A8 MXFP8，路由专家采用 W4A8（MXFP4 权重、MXFP8 激活）",
    },
    "verify": None,  # TODO (step 3): the accuracy gate
    "measure": ["ms_per_token", "weight_bytes"],
}


def apply(model):
    # TODO (step 3)
    raise NotImplementedError("TODO (step 3): apply() in skills/quant_mx.py")
