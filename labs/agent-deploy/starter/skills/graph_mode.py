"""Skill: graph mode (ge_graph / npugraph_ex) with grouped-matmul experts, the talk's
"ge_graph + GMM" stage."""

SKILL = {
    "name": "graph_mode",
    "what": {
        "en": "decode steps run as a captured graph (one compile per step shape, then replay); routed experts as grouped matmuls",
        "zh": "解码步以图模式运行（每种步形状编译一次，之后重放）；路由专家改为分组矩阵乘",
    },
    "verify": None,  # TODO (step 4)
    "measure": ["ms_per_token", "weight_bytes"],
}


def apply(model):
    # TODO (step 4)
    raise NotImplementedError("TODO (step 4): apply() in skills/graph_mode.py")
