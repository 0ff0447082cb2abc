"""Skill: MTP speculation (next_n = 1, as the Hy3 950 deployment runs it): the MTP head drafts
one token ahead and each decode step verifies it."""

SKILL = {
    "name": "mtp",
    "what": {
        "en": "MTP speculative decoding (next_n=1); the MTP layer quantised, an MXFP8 LM head for drafting",
        "zh": "MTP 投机解码（next_n=1）；MTP 层量化，草拟使用 MXFP8 的 LM 头副本",
    },
    "verify": None,  # TODO (step 5)
    "measure": ["ms_per_token", "weight_bytes"],
}


def apply(model):
    # TODO (step 5)
    raise NotImplementedError("TODO (step 5): apply() in skills/mtp.py")
