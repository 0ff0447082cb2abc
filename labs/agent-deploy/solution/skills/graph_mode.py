"""Skill: graph mode (ge_graph / npugraph_ex) with grouped-matmul experts, the talk's
"ge_graph + GMM" stage. Decode steps are captured once and replayed, so each kernel pays the
graph launch gap instead of an eager dispatch; the routed experts run as grouped matmuls, a
fixed number of kernels however many experts a step touches."""

from labkit.deploy import grouped_experts

SKILL = {
    "name": "graph_mode",
    "what": {
        "en": "decode steps run as a captured graph (one compile per step shape, then replay); routed experts as grouped matmuls",
        "zh": "解码步以图模式运行（每种步形状编译一次，之后重放）；路由专家改为分组矩阵乘",
    },
    "verify": {"kind": "tokens"},
    "measure": ["ms_per_token", "weight_bytes"],
}


def apply(model):
    model.graph = True
    model.ops.experts = grouped_experts
