"""Skill: MTP speculation (next_n = 1, as the Hy3 950 deployment runs it): the MTP head drafts
one token ahead and each decode step verifies it, so an accepted draft gives two tokens per step.
The draft path is made cheap (its layer quantised like the main layers, an MXFP8 copy of the LM
head for drafting): a draft may be approximate, the verification keeps the output exact."""

from agent.mtp import generate_mtp
from labkit import mx

SKILL = {
    "name": "mtp",
    "what": {
        "en": "MTP speculative decoding (next_n=1); the MTP layer quantised, an MXFP8 LM head for drafting",
        "zh": "MTP 投机解码（next_n=1）；MTP 层量化，草拟使用 MXFP8 的 LM 头副本",
    },
    "verify": {"kind": "tokens"},
    "measure": ["ms_per_token", "weight_bytes"],
}


def apply(model):
    for name in model.names("mtp"):
        w = model.weights[name]
        if getattr(w, "ndim", 0) != 2:  # norms stay as they are
            continue
        model.weights[name] = mx.quantize_mx(w, "mxfp4" if ".expert." in name else "mxfp8_e4m3")
    model.weights["mtp.lm_head"] = mx.quantize_mx(model.weights["lm_head"], "mxfp8_e4m3")
    model.act_fmt["mtp"] = "mxfp8_e4m3"
    model.decode_fn = generate_mtp
