"""Step 1: the target's greedy decode and the MTP1 baseline: the same tokens, and an emulated
TPOT that comes from one target pass per step (prefill excluded)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # this folder, not the attendee's

import dsparkcheck as dc  # noqa: E402
from labkit.check import Failure, main, msg  # noqa: E402

# 16 new tokens on 2 unseen prompts and a fixed one (the check's cost grows with prompts x
# tokens): an MTP1 run of 16 tokens takes about 10 steps, accepted drafts on every prompt; the
# fixed prompt "a storm" has its MTP drafts rejected at steps 1-3, so a missing rollback fills
# the KV cache (or changes a token) on every draw, whatever the unseen prompts do.
N = 16
FIXED = "a storm"
HINT = msg(
    "dspark/baseline.py: greedy_decode() returns exactly n new tokens; mtp1_decode() drafts one token with the "
    "target's MTP head, verifies [last token, draft] in one target pass and rolls the KV cache back on a rejection.",
    "dspark/baseline.py：greedy_decode() 正好返回 n 个新 token；mtp1_decode() 用目标模型的 MTP 头起草一个 token，"
    "一次目标前向验证 [最后的 token, 草稿]，被拒绝时回退 KV 缓存。",
)


def check() -> tuple[str, dict[str, float]]:
    target, _, tok = dc.models()
    prompts = dc.heldout_prompts(2, "baseline") + [tok.encode(FIXED, bos=True)]
    got = dc.call("baseline", dc.WEIGHTS, prompts, N, hint=HINT)
    ties = 0
    ref_ms, ref_acc, g_ms, m_ms, acc = 0.0, [], 0.0, 0.0, []
    for p, r in zip(prompts, got, strict=True):
        ties += dc.expect_greedy(r["greedy"], p, N, "greedy_decode()", HINT)[0]
        ties += dc.expect_greedy(r["mtp1"], p, N, "mtp1_decode()", HINT)[0]
        t, a = dc.ref_mtp1(p, N)
        ref_ms += t / len(prompts)
        ref_acc += a
        g_ms += r["greedy_ms"] / len(prompts)
        m_ms += r["mtp1_ms"] / len(prompts)
        acc += r["accepted"]
    if not acc or any(a not in (0, 1) for a in acc):
        raise Failure(
            msg(
                "mtp1_decode() must return stats['accepted']: one 0 or 1 per step (was the MTP draft accepted).",
                "mtp1_decode() 必须返回 stats['accepted']：每步一个 0 或 1（MTP 草稿是否被接受）。",
            ),
            [HINT],
        )
    steps_ref = len(ref_acc)
    if abs(len(acc) - steps_ref) > max(1, steps_ref // 20):
        raise Failure(
            msg(
                f"mtp1_decode() took {len(acc)} steps for {len(prompts)} x {N} tokens where one draft token per step "
                f"with a bonus token on acceptance takes {steps_ref}. An accepted draft gives two tokens: the draft and the "
                "target's next one.",
                f"mtp1_decode() 为 {len(prompts)} x {N} 个 token 用了 {len(acc)} 步，而每步一个草稿、接受时再加一个奖励 token "
                f"只需 {steps_ref} 步。草稿被接受时得到两个 token：草稿本身和目标模型的下一个 token。",
            ),
            [HINT],
        )
    if not 0.9 * ref_ms <= m_ms <= 1.1 * ref_ms:
        raise Failure(
            msg(
                f"MTP1's emulated TPOT is {m_ms:.4f} ms; one target pass over two tokens plus one MTP pass per step gives "
                f"{ref_ms:.4f} ms here. {'Some target work is repeated (a prefill per step? no KV cache?).' if m_ms > ref_ms else 'Some of the work is not charged to the emulated device.'}",
                f"MTP1 的仿真 TPOT 为 {m_ms:.4f} ms；每步一次两个 token 的目标前向加一次 MTP 前向应为 {ref_ms:.4f} ms。"
                f"{'有目标模型计算被重复了（每步都预填充？没用 KV 缓存？）。' if m_ms > ref_ms else '有部分计算没有计入仿真设备。'}",
            ),
            [HINT],
        )
    for r in got:
        # one token from the prefill, then per step the target's token and, when accepted, the draft
        made = 1 + len(r["accepted"]) + sum(r["accepted"])
        if made not in (N, N + 1):
            raise Failure(
                msg(
                    f"mtp1_decode()'s stats['accepted'] count {sum(r['accepted'])} accepted drafts in {len(r['accepted'])} "
                    f"steps: that makes {made} tokens (one from the prefill, then one per step plus the draft when it is "
                    f"accepted), but the loop stopped at {N}. Record 1 exactly for the steps whose draft the target accepted.",
                    f"mtp1_decode() 的 stats['accepted'] 记录了 {len(r['accepted'])} 步中接受 {sum(r['accepted'])} 个草稿："
                    f"这会得到 {made} 个 token（预填充一个，之后每步一个，草稿被接受时再加一个），但循环在 {N} 个时停止。"
                    "只有目标模型接受了草稿的那一步才记 1。",
                ),
                [HINT],
            )
        for i, (offset, pairs, pos) in enumerate(r["mtp_feeds"]):
            if offset + pairs != pos:
                raise Failure(
                    msg(
                        f"Step {i}: the MTP block drafted from (hidden state, next token) pairs at positions {offset} .. "
                        f"{offset + pairs - 1}, but the last committed token sits at position {pos}: the newest pair "
                        f"must be (the target's hidden state at position {pos - 1}, the token at {pos}). `offset` "
                        "is the position of hidden[:, 0], the same positions as the target's KV cache.",
                        f"第 {i} 步：MTP 模块根据位置 {offset} .. {offset + pairs - 1} 上的（隐状态, 下一个 token）对起草，"
                        f"但最后一个已确认 token 位于位置 {pos}：它最新的一对应当是（目标模型在位置 {pos - 1} 的隐状态, "
                        f"位置 {pos} 的 token）。`offset` 是 hidden[:, 0] 的位置，与目标模型 KV 缓存的位置一致。",
                    ),
                    [HINT],
                )
    rate = sum(acc) / len(acc)
    return msg(
        f"Greedy and MTP1 give the target's tokens on {len(prompts)} unseen prompts. Emulated TPOT (950DT, graph mode): "
        f"greedy {g_ms:.4f} ms, MTP1 {m_ms:.4f} ms, MTP acceptance {rate:.0%} (talk: 9.83 ms with MTP1).",
        f"贪心与 MTP1 在 {len(prompts)} 个未见过的提示词上都给出目标模型的 token。仿真 TPOT（950DT，图模式）："
        f"贪心 {g_ms:.4f} ms，MTP1 {m_ms:.4f} ms，MTP 接受率 {rate:.0%}（演讲：MTP1 为 9.83 ms）。",
    ), {"greedy_tpot_ms": g_ms, "mtp1_tpot_ms": m_ms, "mtp1_acceptance": rate, "near_ties": ties}


main(check)
