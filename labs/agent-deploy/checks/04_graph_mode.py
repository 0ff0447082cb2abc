"""Step 4: skills/graph_mode.py turns on graph mode with grouped-matmul experts; tokens are
unchanged, and agent/measure.py reports the steady-state speed-up (the compile is warm-up)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # this folder, not the attendee's

import adref as ar  # noqa: E402
from labkit.check import Failure, expect, main, msg  # noqa: E402
from labkit.deploy import GRAPH_COMPILE_LAUNCHES  # noqa: E402


def check() -> tuple[str, dict]:
    ps = ar.prompts("graph-mode")
    n = ar.N_TOKENS
    res = ar.run_harness("h_graph", "skills/graph_mode.py", ps, n)
    expect(
        res["state"]["graph"] is True,
        msg(
            "model.graph is still False: the skill must turn graph mode on.",
            "model.graph 仍为 False：这个技能需要开启图模式。",
        ),
    )
    expect(
        res["experts"] == "grouped_experts",
        msg(
            f"The routed experts still run as {res['experts'] or 'something else'} (one launch set per expert): "
            "the talk's graph stage runs them as grouped matmuls (labkit.deploy.grouped_experts in model.ops.experts).",
            f"路由专家仍以 {res['experts'] or '其他方式'} 运行（每个专家一组下发）：演讲中的图模式阶段用分组矩阵乘"
            "（把 labkit.deploy.grouped_experts 放到 model.ops.experts）。",
        ),
    )
    expect(
        res["skill"].get("verify", {}).get("kind") == "tokens",
        msg(
            'Graph mode changes how kernels are launched, not the maths: SKILL["verify"] should be {"kind": "tokens"}.',
            '图模式改变的是 kernel 的下发方式，而不是数学计算：SKILL["verify"] 应为 {"kind": "tokens"}。',
        ),
    )
    ref_tokens = ar.ref_tokens_all(ar.EAGER, ps, n)
    expect(
        res["tokens"] == ref_tokens,
        msg("With graph mode the tokens changed; they must not.", "开启图模式后 token 变了；它们不应改变。"),
    )
    before = ar.ref_measure(("fused_ops",), ps, n)
    after = ar.ref_measure(("fused_ops", "graph_mode"), ps, n)
    expect(
        ar.close(res["measure"]["ms_per_token"], after["ms_per_token"]),
        msg(
            f"Your graph-mode model takes {res['measure']['ms_per_token']:.4f} ms/token, the reference skill {after['ms_per_token']:.4f}.",
            f"你的图模式模型每 token {res['measure']['ms_per_token']:.4f} ms，参考技能为 {after['ms_per_token']:.4f}。",
        ),
    )
    mine_b, mine_a = float(res["mine_before"]["ms_per_token"]), float(res["mine_after"]["ms_per_token"])
    if not ar.close(mine_a, after["ms_per_token"]):
        compile_ms = GRAPH_COMPILE_LAUNCHES * 20e-3
        raise Failure(
            msg(
                f"agent/measure.py reports {mine_a:.4f} ms/token for graph mode, steady state is {after['ms_per_token']:.4f}: "
                f"your speed-up would be {mine_b / mine_a:.2f}x instead of {before['ms_per_token'] / after['ms_per_token']:.2f}x.",
                f"agent/measure.py 报告图模式为 {mine_a:.4f} ms/token，稳态应为 {after['ms_per_token']:.4f}："
                f"你的加速比会是 {mine_b / mine_a:.2f}x，而不是 {before['ms_per_token'] / after['ms_per_token']:.2f}x。",
            ),
            [
                msg(
                    f"A speed-up measured without warm-up: the first step of each shape captures and compiles the graph "
                    f"(about {compile_ms:.0f} ms emulated). Warm up on the model you measure (a clone starts cold), then measure.",
                    f"这是没有预热就测量的加速比：每种形状的第一步都要捕获并编译图（仿真约 {compile_ms:.0f} ms）。"
                    "在要测量的同一个模型上预热（clone 出来的模型是冷的），再测量。",
                )
            ],
        )
    gain = before["ms_per_token"] / after["ms_per_token"]
    return (
        msg(
            f"Graph mode verified: {before['launches_per_token']:.0f} -> {after['launches_per_token']:.0f} launches/token, "
            f"{before['ms_per_token']:.4f} -> {after['ms_per_token']:.4f} ms/token ({gain:.2f}x; the A3 report: 246 -> 33.3 ms, 7.4x).",
            f"图模式验证通过：每 token 下发 {before['launches_per_token']:.0f} -> {after['launches_per_token']:.0f} 次，"
            f"{before['ms_per_token']:.4f} -> {after['ms_per_token']:.4f} ms/token（{gain:.2f}x；A3 报告：246 -> 33.3 ms，7.4x）。",
        ),
        {"ms_per_token": after["ms_per_token"], "speedup": gain},
    )


main(check)
