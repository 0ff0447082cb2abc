"""Step 5: batch verification. Greedy: accept while the draft equals the target's argmax, emit
the target's token at the first mismatch, a bonus token when every drafted token passes; the loop
gives the target's greedy output exactly. Sampling: accept with min(1, p/q), resample from the
normalised residual; the emitted tokens follow the target's distribution.

The sampling test: a fixed target p and draft q (5 tokens, 2 drafted positions), TRIALS runs with
seed SEED; for each emitted position a chi-square goodness-of-fit test against the target's
distribution at level ALPHA = 1e-4 (df 4: critical value 23.5). Power (``tests/labs/test_dspark_spec.py``
simulates it): >= 0.999 against a verifier that accepts against the draft's own distribution,
one with p/q inverted and one that accepts only where p > q (1.0 in 3000 simulated checks of 500
runs each already); a correct verifier fails with probability <= 3e-4 (three tests at 1e-4), for
a given seed either always or never. 6000 runs, not fewer: a subtle bias (accepting with
0.95 min(1, p/q) + 0.05) is caught with probability 0.54 at 6000 runs and only 0.06 at 2000; the
runs are the attendee's Python (the reference solution's 6000 cost ~0.3 CPU-s), and that power is
worth it.
A missing bonus (emitted length) and an unnormalised residual (compared directly) are caught deterministically."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # this folder, not the attendee's

import dsparkcheck as dc  # noqa: E402
import torch  # noqa: E402
from labkit.check import Failure, main, msg, run_function  # noqa: E402

HINT = msg(
    "dspark/verify.py: verify_greedy() returns (accepted, emitted) with emitted = accepted draft tokens + one target "
    "token; dspark/decode.py: one drafter block and one target pass over [last token, *draft] per iteration.",
    "dspark/verify.py：verify_greedy() 返回 (accepted, emitted)，emitted = 被接受的草稿 token + 一个目标模型 token；"
    "dspark/decode.py：每轮一个草稿块、一次对 [最后的 token, *草稿] 的目标前向。",
)
SAMPLING_HINT = msg(
    "Accept draft token x at position i when u < min(1, p[i, x] / q[i, x]); on the first rejection sample from "
    "residual(p[i], q[i]) and stop; when all pass, sample the bonus from p[L].",
    "在位置 i，若 u < min(1, p[i, x] / q[i, x]) 则接受草稿 token x；第一次拒绝时从 residual(p[i], q[i]) 采样并停止；"
    "全部通过时从 p[L] 采样奖励 token。",
)
P = torch.tensor(
    [[0.40, 0.30, 0.15, 0.10, 0.05], [0.05, 0.10, 0.20, 0.25, 0.40], [0.20, 0.20, 0.20, 0.20, 0.20]],
    dtype=torch.float64,
)
Q = torch.tensor([[0.10, 0.20, 0.30, 0.30, 0.10], [0.30, 0.30, 0.20, 0.10, 0.10]], dtype=torch.float64)
TRIALS, SEED, ALPHA = 6000, 20260, 1e-4
# 40 tokens per prompt, not fewer: at 24 some run ids drafted no rejected block at all, and the
# no-rollback mutant (a cache never rolled back) passed one press in a few (make test saw it)
N = 40
# and a fixed run on the loop's last-iteration boundary: at tau 0 (every block full) this prompt's
# iteration at 17 tokens rejects its first draft token, so with n = 18 the last iteration starts
# one token short of n with a whole block in flight (its verify pass reaches position
# prompt + n - 2 + block_size: a cache made too small fails here) and ends at exactly n tokens
# (a loop that runs on while len(out) <= n makes one more iteration). tests/labs/test_dspark_spec.py
# checks the trajectory.
FIXED_PROMPT, FIXED_TAU, FIXED_N = "in the morning", 0.0, 18


def greedy_cases() -> list[tuple[torch.Tensor, list[int], int]]:
    g = torch.Generator().manual_seed(dc.run_seed("verify"))
    cases = []
    for n_draft, bad in [(4, None), (4, 0), (4, 2), (1, None), (1, 0), (7, 6), (7, None)]:
        lg = torch.randn(n_draft + 1, 50, generator=g)
        best = lg.argmax(-1).tolist()
        draft = best[:n_draft]
        if bad is not None:
            draft[bad] = (draft[bad] + 1) % 50
        cases.append((lg, draft, n_draft if bad is None else bad))
    return cases


def check() -> tuple[str, dict[str, float]]:
    cases = greedy_cases()
    g = torch.Generator().manual_seed(dc.run_seed("residual"))
    res_cases = [(P[0], Q[0]), (P[1], Q[1]), (P[2], P[2])]
    for _ in range(3):
        a, b = (
            torch.rand(7, generator=g, dtype=torch.float64),
            torch.rand(7, generator=g, dtype=torch.float64),
        )
        res_cases.append((a / a.sum(), b / b.sum()))
    got = dc.call("verify", [(lg, d) for lg, d, _ in cases], res_cases, (P, Q, TRIALS, SEED), hint=HINT)
    for (lg, d, a_ref), (a, emitted) in zip(cases, got["greedy"], strict=True):
        best = lg.argmax(-1).tolist()
        want = d[:a_ref] + [best[a_ref]]
        if (a, emitted) != (a_ref, want):
            why = (
                msg(
                    "every drafted token passed, so the target's next token is a bonus",
                    "所有草稿 token 都通过了，所以目标模型的下一个 token 是奖励 token",
                )
                if a_ref == len(d)
                else msg(f"the first mismatch is at position {a_ref}", f"第一个不一致出现在位置 {a_ref}")
            )
            raise Failure(
                msg(
                    f"verify_greedy(draft={d}) returned ({a}, {emitted}); expected ({a_ref}, {want}): {why}.",
                    f"verify_greedy(draft={d}) 返回 ({a}, {emitted})；应为 ({a_ref}, {want})：{why}。",
                ),
                [HINT],
            )
    for (p, q), r in zip(res_cases, got["residual"], strict=True):
        want = torch.clamp(p - q, min=0)
        want = want / want.sum() if want.sum() > 0 else p
        if r.shape != want.shape or not (r - want).abs().max() <= 1e-6:  # NaN is wrong too
            unnorm = r.shape == want.shape and (r - torch.clamp(p - q, min=0)).abs().max() < 1e-6
            raise Failure(
                msg(
                    f"residual(p, q) returned {[round(float(x), 4) for x in r]}; expected {[round(float(x), 4) for x in want]}"
                    + (f" (it sums to {float(r.sum()):.3f}: normalise max(0, p - q))" if unnorm else "")
                    + ".",
                    f"residual(p, q) 返回 {[round(float(x), 4) for x in r]}；应为 {[round(float(x), 4) for x in want]}"
                    + (f"（其和为 {float(r.sum()):.3f}：需要对 max(0, p - q) 归一化）" if unnorm else "")
                    + "。",
                ),
                [SAMPLING_HINT],
            )
    samples = got["samples"]
    lens = [len(e) for _, e in samples]
    if any(len(e) != a + 1 or not 0 <= a <= Q.shape[0] for a, e in samples):
        bad = next((a, e) for a, e in samples if len(e) != a + 1 or not 0 <= a <= Q.shape[0])
        raise Failure(
            msg(
                f"verify_sampling() returned accepted={bad[0]} with emitted={bad[1]}: it emits the accepted draft tokens "
                "plus exactly one more (the resample, or the bonus when all pass).",
                f"verify_sampling() 返回 accepted={bad[0]}、emitted={bad[1]}：应输出被接受的草稿 token 再加正好一个"
                "（重采样的 token，或全部通过时的奖励 token）。",
            ),
            [SAMPLING_HINT],
        )
    pvals = []
    for pos in range(P.shape[0]):
        toks = [e[pos] for e in (e for _, e in samples) if len(e) > pos]
        counts = torch.bincount(torch.tensor(toks, dtype=torch.long), minlength=P.shape[1]).double()
        pv = dc.chi2_pvalue(counts, P[pos])
        pvals.append(pv)
        if pv < ALPHA:
            share = (counts / counts.sum()).tolist()
            raise Failure(
                msg(
                    f"The sampling verifier is not lossless: at output position {pos} the emitted tokens are distributed "
                    f"{[round(x, 3) for x in share]} over {int(counts.sum())} runs, the target's distribution is "
                    f"{[round(float(x), 3) for x in P[pos]]} (chi-square p = {pv:.1e} < {ALPHA}). Is the acceptance test "
                    "against the target's probability p, divided by the draft's q?",
                    f"采样验证不是无损的：在输出位置 {pos}，{int(counts.sum())} 次运行中输出 token 的分布为 "
                    f"{[round(x, 3) for x in share]}，而目标模型的分布为 {[round(float(x), 3) for x in P[pos]]}"
                    f"（卡方检验 p = {pv:.1e} < {ALPHA}）。接受判断是否用的是目标概率 p 除以草稿概率 q？",
                ),
                [SAMPLING_HINT],
            )
    accept_rate = sum(1 for x in lens if x > 1) / len(lens)
    # -- the loop ----------------------------------------------------------------------------------
    _, _, tok = dc.models()
    cases = [(p, tau, N) for p, tau in zip(dc.heldout_prompts(3, "loop"), (0.0, 0.6, 0.9), strict=True)]
    cases.append((tok.encode(FIXED_PROMPT, bos=True), FIXED_TAU, FIXED_N))
    ties = 0
    ref_acc, got_acc, ref_ms, got_ms = [], [], 0.0, 0.0
    # the runs in one child; when the attendee's code raises, each run again in its own
    # child as it is judged, so the failure reported is the same as with one child per run
    batch = run_function(dc.HARNESS, "decode_each", dc.WEIGHTS, cases, N, timeout=180, memory_mb=2048)
    runs = (
        batch.value
        if batch.error is None and isinstance(batch.value, list) and len(batch.value) == len(cases)
        else None
    )
    for i, (p, tau, n) in enumerate(cases):
        (r,) = [runs[i]] if runs is not None else dc.call("decode", dc.WEIGHTS, [p], n, tau, hint=HINT)
        tie, full = dc.expect_greedy(r["tokens"], p, n, "dspark_decode()", HINT)
        ref = r["tokens"]  # the target's greedy decode (up to a near tie, after which nothing is judged)
        ties += tie
        if len(r["passes"]) != len(r["drafts"]):
            raise Failure(
                msg(
                    f"dspark_decode() made {len(r['passes'])} target passes for {len(r['drafts'])} drafted blocks: the target "
                    "runs exactly once per block, to verify it. A draft must not look at the target's answer.",
                    f"dspark_decode() 为 {len(r['drafts'])} 个草稿块做了 {len(r['passes'])} 次目标前向：每个块只运行一次目标模型，"
                    "用于验证它。草稿不能偷看目标模型的答案。",
                ),
                [HINT],
            )
        for i, (ps, dr) in enumerate(zip(r["passes"], r["drafts"], strict=True)):
            if ps[1:] != dr:
                raise Failure(
                    msg(
                        f"Iteration {i}: the target verified {ps[1:]} but draft_block() drafted {dr}: verify exactly the "
                        "drafted tokens, after the last committed one.",
                        f"第 {i} 轮：目标模型验证的是 {ps[1:]}，而 draft_block() 起草的是 {dr}：应在最后一个已确认 token 之后"
                        "验证的正好是起草的 token。",
                    ),
                    [HINT],
                )
        if len(r["accepted"]) != len(r["drafts"]) or len(r["drafted"]) != len(r["drafts"]):
            raise Failure(
                msg(
                    "dspark_decode() must return stats with 'accepted' and 'drafted': one entry per iteration.",
                    "dspark_decode() 返回的 stats 必须含 'accepted' 和 'drafted'：每轮一项。",
                ),
                [HINT],
            )
        cursor = 1
        for i, (dr, a) in enumerate(zip(r["drafts"], r["accepted"], strict=True)):
            if cursor >= n:
                raise Failure(
                    msg(
                        f"Iteration {i}: dspark_decode() drafted and verified another block after it already had its "
                        f"{n} tokens: the loop runs while fewer than n tokens are out.",
                        f"第 {i} 轮：dspark_decode() 在已经得到 {n} 个 token 之后又起草并验证了一个块："
                        "循环只在输出的 token 少于 n 个时继续。",
                    ),
                    [HINT],
                )
            at = r["offsets"][i]
            if not tie and at != len(p) + cursor - 1:
                raise Failure(
                    msg(
                        f"Iteration {i}: the target verified the block at cache position {at}, but the last committed token "
                        f"sits at position {len(p) + cursor - 1}: the positions of rejected draft tokens must be rolled back "
                        "out of the KV cache (cache.length).",
                        f"第 {i} 轮：目标模型在缓存位置 {at} 验证这个块，但最后一个已确认 token 位于位置 {len(p) + cursor - 1}："
                        "被拒绝的草稿 token 的位置必须从 KV 缓存中回退（cache.length）。",
                    ),
                    [HINT],
                )
            want = full[len(p) + cursor - 2]
            got_ctx = r["contexts"][i]
            if not tie and (
                got_ctx.shape != want.shape
                or not (got_ctx - want).abs().max() <= 1e-3 * float(want.abs().max())
            ):
                raise Failure(
                    msg(
                        f"Iteration {i}: the drafter was given a context that is not the target's hidden state at the position "
                        f"that produced the last committed token (position {len(p) + cursor - 2}).",
                        f"第 {i} 轮：交给草稿模型的上下文不是产生最后一个已确认 token 的那个位置"
                        f"（位置 {len(p) + cursor - 2}）上的目标隐状态。",
                    ),
                    [HINT],
                )
            truth = ref[cursor : cursor + len(dr)]
            a_ref = 0
            while a_ref < len(truth) and dr[a_ref] == truth[a_ref]:
                a_ref += 1
            if a != a_ref and not tie and cursor + a_ref < n:
                raise Failure(
                    msg(
                        f"Iteration {i}: stats['accepted'] says {a}, but {a_ref} of the drafted tokens {dr} equal the "
                        f"target's greedy tokens {truth}.",
                        f"第 {i} 轮：stats['accepted'] 记为 {a}，但草稿 {dr} 中有 {a_ref} 个与目标模型的贪心 token {truth} 相同。",
                    ),
                    [HINT],
                )
            cursor += a + 1
        if r["streams"].get("draft", 0.0) <= 0.0:
            raise Failure(
                msg(
                    "The emulated timeline shows no work on the `draft` stream: issue draft_block inside "
                    '`with s.stream("draft"):` and make the main stream wait for it before the target verifies.',
                    '仿真时间线上 `draft` 流没有任何工作：在 `with s.stream("draft"):` 中调用 draft_block，'
                    "并在目标模型验证之前让主流等待它。",
                ),
                [HINT],
            )
        late = next((i for i, w in enumerate(r["waited"]) if not w), None)
        if late is not None:
            raise Failure(
                msg(
                    f"Iteration {late}: the target's verify pass was issued before the main stream waited for the `draft` "
                    "stream: on the emulated timeline it starts while the block is still being drafted. Make the main stream "
                    'wait for it (`s.wait_stream("draft")`) between draft_block and the target pass.',
                    f"第 {late} 轮：目标模型的验证前向在主流等待 `draft` 流之前就发出了：在仿真时间线上，它在块还在起草时就开始了。"
                    '请在 draft_block 与目标前向之间让主流等待它（`s.wait_stream("draft")`）。',
                ),
                [HINT],
            )
        rd = dc.ref_decode(p, n, tau)
        ref_acc += rd["accepted"]
        got_acc += r["accepted"]
        ref_ms += rd["tpot_ms"]
        got_ms += r["tpot_ms"]
    mean_ref = sum(ref_acc) / len(ref_acc)
    mean_got = sum(got_acc) / len(got_acc)
    if mean_got < 0.8 * mean_ref:
        raise Failure(
            msg(
                f"Your loop accepts {mean_got:.2f} tokens per block where the drafter, given the target's hidden state at the "
                f"position that produced the last token, gets {mean_ref:.2f}. Which hidden state does the next draft start from?",
                f"你的循环每块接受 {mean_got:.2f} 个 token，而以产生最后一个 token 的位置上的目标隐状态为条件时，草稿模型可达 "
                f"{mean_ref:.2f}。下一个草稿从哪个隐状态开始？",
            ),
            [HINT],
        )
    if not 0.9 * ref_ms <= got_ms <= 1.15 * ref_ms:
        raise Failure(
            msg(
                f"The loop's emulated TPOT is {got_ms / len(cases):.4f} ms where one drafter block and one target pass per "
                f"iteration give {ref_ms / len(cases):.4f} ms: some work is repeated or not charged.",
                f"循环的仿真 TPOT 为 {got_ms / len(cases):.4f} ms，而每轮一个草稿块加一次目标前向应为 {ref_ms / len(cases):.4f} ms："
                "有计算被重复或没有计入。",
            ),
            [HINT],
        )
    return msg(
        f"Verification is lossless: greedy output equals the target's on unseen prompts ({mean_got:.2f} tokens accepted per "
        f"block); sampling matches the target distribution (chi-square p = {min(pvals):.2f} at worst over {TRIALS} runs, "
        f"first-token acceptance {accept_rate:.0%}).",
        f"验证是无损的：在未见过的提示词上贪心输出与目标模型一致（每块接受 {mean_got:.2f} 个 token）；采样与目标分布一致"
        f"（{TRIALS} 次运行中卡方检验最小 p = {min(pvals):.2f}，首 token 接受率 {accept_rate:.0%}）。",
    ), {"mean_accepted": mean_got, "min_p_value": min(pvals), "near_ties": ties}


main(check)
