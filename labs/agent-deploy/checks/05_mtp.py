"""Step 5: skills/mtp.py installs MTP speculation (agent/mtp.py): lossless (the greedy tokens of
the model before it, on the quantised model and on the eager one), the checker's acceptance
counts, and faster per token."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # this folder, not the attendee's

import adref as ar  # noqa: E402
from labkit.check import Failure, expect, main, msg  # noqa: E402


def check() -> tuple[str, dict]:
    ps = ar.prompts("mtp", margins=(ar.EAGER, ar.QUANT))
    n = ar.N_TOKENS
    want = ar.ref_tokens_all(ar.QUANT, ps, n)
    res = ar.run_harness("h_mtp", "skills/mtp.py", ps, n)
    expect(
        res["state"]["decode"] == "generate_mtp",
        msg(
            f"The decode loop is {res['state']['decode']}: the skill must install agent.mtp.generate_mtp as model.decode_fn.",
            f"解码循环是 {res['state']['decode']}：这个技能需要把 agent.mtp.generate_mtp 设为 model.decode_fn。",
        ),
    )
    if res["misplaced"]:
        i, k, pos, draft, argmax, nxt, want_next, kept = res["misplaced"][0]
        if kept:
            raise Failure(
                msg(
                    f"Prompt {i + 1}, decode step {k + 1}: the draft {draft} is not the main model's argmax there ({argmax}), "
                    "yet it was kept: the output is not lossless any more. Keep a draft only when the main model's own "
                    "argmax at the pending token equals it.",
                    f"第 {i + 1} 个提示词的第 {k + 1} 个解码步：草稿 {draft} 不是主模型在该处的 argmax（{argmax}），却被保留了："
                    "输出不再无损。只有当主模型在待定 token 处自己的 argmax 等于草稿时，才保留草稿。",
                )
            )
        raise Failure(
            msg(
                f"Prompt {i + 1}, decode step {k + 1} started at position {pos} and its draft was "
                f"{'rejected' if draft != argmax else 'accepted'}, so the next step must start at {want_next}; it started at "
                f"{nxt}: after a rejected draft the cache still counts the draft's position. Set cache.length back to the "
                "first position you did not accept.",
                f"第 {i + 1} 个提示词的第 {k + 1} 个解码步从位置 {pos} 开始，草稿被{'拒绝' if draft != argmax else '接受'}，"
                f"所以下一步应从 {want_next} 开始；实际从 {nxt} 开始：草稿被拒绝后，缓存仍然算上了草稿的位置。"
                "请把 cache.length 退回到第一个未被接受的位置。",
            )
        )
    for i, (got, exp) in enumerate(zip(res["tokens"], want, strict=True)):
        expect(
            got == exp,
            msg(
                f"MTP speculation changed the output on prompt {i + 1}: {got} instead of {exp}. Greedy speculation is "
                "lossless: a draft is kept only when the main model's own argmax equals it.",
                f"MTP 投机解码改变了第 {i + 1} 个提示词的输出：{got}，应为 {exp}。贪心投机解码是无损的："
                "只有当主模型自己的 argmax 等于草稿时才保留草稿。",
            ),
            [
                msg(
                    "After a rejected draft, set cache.length back so the draft's position is overwritten.",
                    "草稿被拒绝后，要把 cache.length 退回，让草稿所在的位置被覆盖。",
                )
            ],
        )
    eager_want = ar.ref_tokens_all(ar.EAGER, ps, n)
    expect(
        res["eager_tokens"] == eager_want,
        msg(
            "generate_mtp on the eager, unquantised model gives other tokens than greedy decoding of that model.",
            "在 eager、未量化的模型上，generate_mtp 给出的 token 与该模型的贪心解码不同。",
        ),
    )
    if res.get("wrong_draft"):
        i, k, field, pos, want_pos, nid, want_nid = res["wrong_draft"]
        what = {
            "position": (
                f"position {pos}, the checker's loop passes {want_pos} (the position of the hidden state it drafts from)",
                f"位置 {pos}，检查器的循环传入 {want_pos}（草稿所用隐藏状态所在的位置）",
            ),
            "next_id": (
                f"next token {nid}, the checker's loop passes {want_nid} (the pending token)",
                f"下一个 token {nid}，检查器的循环传入 {want_nid}（待定 token）",
            ),
            "hidden": (
                f"the hidden state of another position than the checker's loop (position {want_pos}): after an accepted "
                "draft it is hidden[1], after a rejected one hidden[0]",
                f"与检查器的循环不同位置的隐藏状态（应为位置 {want_pos}）：草稿被接受后是 hidden[1]，被拒绝后是 hidden[0]",
            ),
        }[field]
        raise Failure(
            msg(
                f"Prompt {i + 1}, draft {k + 1}: model.draft got {what[0]}. The output stays lossless, but the MTP head "
                "drafts from the wrong place, so its drafts (and the speed-up) are not the ones MTP gives.",
                f"第 {i + 1} 个提示词的第 {k + 1} 个草稿：model.draft 收到的是{what[1]}。输出仍然无损，"
                "但 MTP 头是从错误的位置草拟的，草稿（以及加速）不是 MTP 应给出的。",
            )
        )
    ref_stats = res["ref_stats"]  # the checker's loop, on your model with your draft path
    expect(
        res["stats"] == ref_stats,
        msg(
            f"Drafts/accepted per prompt are {res['stats']}, the checker counts {ref_stats}: a draft for the token after the "
            "pending one comes from the hidden state of the last *accepted* position (hidden[1] when the draft was accepted).",
            f"每个提示词的草稿/接受数为 {res['stats']}，检查器统计为 {ref_stats}：对待定 token 之后的 token 的草稿，"
            "应来自最后一个*被接受*位置的隐藏状态（草稿被接受时是 hidden[1]）。",
        ),
    )
    before = ar.ref_measure(ar.QUANT, ps, n)
    got_ms = res["measure"]["ms_per_token"]
    # faster than no speculation, or (on prompts where even the reference skill gains nothing) as
    # cheap as the reference skill: acceptance varies from prompt to prompt
    ref_ms = ar.ref_measure((*ar.QUANT, "mtp"), ps, n)["ms_per_token"]
    expect(
        got_ms < before["ms_per_token"] or got_ms <= ref_ms * (1 + 1e-4),
        msg(
            f"With MTP decode takes {got_ms:.4f} ms/token, without {before['ms_per_token']:.4f}: drafting costs more than it saves.",
            f"启用 MTP 后解码为 {got_ms:.4f} ms/token，未启用为 {before['ms_per_token']:.4f}：草拟的开销超过了节省。",
        ),
        [
            msg(
                "On this 3-layer toy the MTP layer is a third of the model (one of 80 in Hy3): make the draft path cheap "
                "(quantise the MTP layer, draft with an MXFP8 copy of the LM head in weights['mtp.lm_head']).",
                "在这个 3 层的玩具模型上，MTP 层占模型的三分之一（Hy3 中是 80 层之一）：让草拟路径更便宜"
                "（量化 MTP 层，用 weights['mtp.lm_head'] 中 MXFP8 的 LM 头副本来草拟）。",
            )
        ],
    )
    drafts = sum(s["drafts"] for s in ref_stats)
    acc = sum(s["accepted"] for s in ref_stats) / max(drafts, 1)
    gain = before["ms_per_token"] / got_ms
    return (
        msg(
            f"MTP speculation is lossless; {acc:.0%} of drafts accepted; {before['ms_per_token']:.4f} -> {got_ms:.4f} ms/token ({gain:.2f}x).",
            f"MTP 投机解码无损；草稿接受率 {acc:.0%}；{before['ms_per_token']:.4f} -> {got_ms:.4f} ms/token（{gain:.2f}x）。",
        ),
        {"acceptance": acc, "ms_per_token": got_ms, "speedup": gain},
    )


main(check)
