"""Step 2: skills/fused_ops.py swaps the four eager ops for the fused ones, the tokens do not
change, the launches fall, and agent/verify.py's token check rejects a skill that changes tokens."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # this folder, not the attendee's

import adref as ar  # noqa: E402
from labkit.check import Failure, expect, main, msg  # noqa: E402

SLOTS = {
    "rms_norm": "npu_rms_norm",
    "add_rms_norm": "npu_add_rms_norm",
    "swiglu": "npu_swiglu",
    "gating": "npu_moe_gating_top_k_softmax",
}
HINTS = {
    "add_rms_norm": msg(
        "npu_add_rms_norm returns (y, rstd, x): the normalised y and the new residual x = x1 + x2.",
        "npu_add_rms_norm 返回 (y, rstd, x)：归一化后的 y 和新的残差 x = x1 + x2。",
    ),
    "swiglu": msg(
        "npu_swiglu's first half is the gate: silu(a) * b.", "npu_swiglu 的前一半是门：silu(a) * b。"
    ),
    "gating": msg(
        "npu_moe_gating_top_k_softmax gives the softmax probabilities of the top k: renormalise them to sum to 1, as the model's router does.",
        "npu_moe_gating_top_k_softmax 给出前 k 个专家的 softmax 概率：需要像模型路由那样重新归一化，使其和为 1。",
    ),
}


def check() -> tuple[str, dict]:
    ps = ar.prompts("fused-ops")
    n = ar.N_TOKENS
    ref_tokens = ar.ref_tokens_all(ar.EAGER, ps, n)
    seqs = [list(p) + t for p, t in zip(ps, ref_tokens, strict=True)]
    res = ar.run_harness("h_fused", "skills/fused_ops.py", ps, n, seqs)
    spec = res["skill"].get("verify", {})
    expect(
        spec.get("kind") == "tokens",
        msg(
            f'A fused op computes the same maths: SKILL["verify"] should be {{"kind": "tokens"}} (tokens unchanged), not {spec}.',
            f'融合算子的数学计算相同：SKILL["verify"] 应为 {{"kind": "tokens"}}（token 不变），而不是 {spec}。',
        ),
    )
    missing = [s for s in SLOTS if s not in res["changed"]]
    expect(
        not missing,
        msg(
            "Still eager: " + ", ".join(f"model.ops.{s} (use {SLOTS[s]})" for s in missing) + ".",
            "仍是 eager：" + "，".join(f"model.ops.{s}（使用 {SLOTS[s]}）" for s in missing) + "。",
        ),
    )
    worst = 0.0
    for s, lc in zip(seqs, res["logits"], strict=True):
        la = ar.ref_teacher(ar.EAGER, s)
        worst = max(worst, float((lc - la).abs().max() / la.abs().max()))
    expect(
        worst <= 1e-4,
        msg(
            f"With the fused ops the model computes something else: its logits differ from the eager model's by up to "
            f"{worst:.3g} of their largest value (rounding allows 1e-4). A fused op must compute exactly what the eager ops compute.",
            f"使用融合算子后模型的计算结果变了：logits 与 eager 模型相差最多为其最大值的 {worst:.3g}（舍入误差允许 1e-4）。"
            "融合算子的结果必须与 eager 算子完全一致。",
        ),
        list(HINTS.values()),
    )
    for i, (got, exp) in enumerate(zip(res["tokens"], ref_tokens, strict=True)):
        if got != exp:
            j = next(
                (k for k, (a, b) in enumerate(zip(got, exp, strict=False)) if a != b), min(len(got), len(exp))
            )
            raise Failure(
                msg(
                    f"With the fused ops the tokens changed: prompt {i + 1}, new token {j + 1} is {got[j : j + 1]} instead of {exp[j : j + 1]}. "
                    "A fused op must compute exactly what the eager ops compute.",
                    f"使用融合算子后 token 变了：第 {i + 1} 个提示词的第 {j + 1} 个新 token 为 {got[j : j + 1]}，应为 {exp[j : j + 1]}。"
                    "融合算子的结果必须与 eager 算子完全一致。",
                ),
                list(HINTS.values()),
            )
    exp_m = ar.ref_measure(("fused_ops",), ps, n)
    got_m = res["measure"]
    expect(
        got_m["launches_per_token"] <= exp_m["launches_per_token"] + 1e-9
        and got_m["ms_per_token"] <= exp_m["ms_per_token"] * (1 + 1e-4),
        msg(
            f"The fused model takes {got_m['launches_per_token']:.1f} launches and {got_m['ms_per_token']:.4f} ms per token; "
            f"with one kernel per fused op it is {exp_m['launches_per_token']:.1f} launches and {exp_m['ms_per_token']:.4f} ms.",
            f"融合后的模型每 token {got_m['launches_per_token']:.1f} 次下发、{got_m['ms_per_token']:.4f} ms；"
            f"每个融合算子一个 kernel 时应为 {exp_m['launches_per_token']:.1f} 次下发、{exp_m['ms_per_token']:.4f} ms。",
        ),
        [
            msg(
                "Call each fused op once, with no eager op beside it.",
                "每个融合算子只调用一次，旁边不要再有 eager 算子。",
            )
        ],
    )
    good, broken = res["verify_good"], res["verify_broken"]
    expect(
        isinstance(good, dict) and good.get("passed") is True and good.get("value") == 0,
        msg(
            f"verify() on your (correct) fused skill says {good}; the tokens are identical, so it must pass with value 0.",
            f"verify() 对你的（正确的）融合技能给出 {good}；token 完全一致，应当通过且 value 为 0。",
        ),
    )
    expect(
        isinstance(broken, dict) and broken.get("passed") is False and (broken.get("value") or 0) > 0,
        msg(
            f"verify() accepted a skill that changes the tokens (the checker's SwiGLU with gate and up swapped): {broken}. "
            "It must compare the candidate's tokens with the reference model's, not a model with itself.",
            f"verify() 接受了一个会改变 token 的技能（检查器把 SwiGLU 的门与 up 两半对调）：{broken}。"
            "它必须比较候选模型与参考模型的 token，而不是把一个模型和它自己比较。",
        ),
    )
    for short in res.get("verify_short", []):
        expect(
            isinstance(short, dict) and short.get("passed") is False and short.get("value") == 1,
            msg(
                f"verify() on two models whose tokens agree except that one stops a token early says {short}: a "
                "missing token counts as a changed one, whichever model is short (tokens_changed = 1, not passed).",
                f"对两个 token 一致、只是其中一个少生成一个 token 的模型，verify() 给出 {short}："
                "缺少的 token 算作改变的 token，无论哪一方较短（tokens_changed = 1，不通过）。",
            ),
        )
    base = ar.ref_measure(ar.EAGER, ps, n)
    gain = base["ms_per_token"] / got_m["ms_per_token"]
    return (
        msg(
            f"Fused ops verified (tokens unchanged): {base['launches_per_token']:.0f} -> {got_m['launches_per_token']:.0f} launches, "
            f"{base['ms_per_token']:.4f} -> {got_m['ms_per_token']:.4f} ms/token ({gain:.2f}x; the A3 report: 293 -> 246 ms, 1.19x).",
            f"融合算子验证通过（token 不变）：下发 {base['launches_per_token']:.0f} -> {got_m['launches_per_token']:.0f} 次，"
            f"{base['ms_per_token']:.4f} -> {got_m['ms_per_token']:.4f} ms/token（{gain:.2f}x；A3 报告：293 -> 246 ms，1.19x）。",
        ),
        {"ms_per_token": got_m["ms_per_token"], "speedup": gain},
    )


main(check)
