"""Regenerate mutants/ from the solution: each mutant is a few string replacements in one solution
file, written as mutant.patch + mutant.yaml. Run from anywhere: python training/make_mutants.py"""

import difflib
import shutil
from pathlib import Path

import yaml

LAB = Path(__file__).resolve().parents[1]
SOL = LAB / "solution"
M = []


def mut(step, name, file, repl, what, cls, expect=None):
    M.append((step, name, file, repl, what, cls, expect))


B = "dspark/baseline.py"
D = "dspark/draft.py"
V = "dspark/verify.py"
L = "dspark/decode.py"
R = "make_report.py"
# -- baseline
mut(
    "baseline",
    "mtp1-no-verify",
    B,
    [("        if t0 == draft:\n", "        if True:  # the MTP head is usually right\n")],
    (
        "MTP1 emits the MTP draft without comparing it with the target's token",
        "MTP1 不与目标模型的 token 比较就直接输出 MTP 草稿",
    ),
    "logic",
    ("not lossless", "不是无损的"),
)
mut(
    "baseline",
    "mtp1-no-rollback",
    B,
    [("            cache.length = pos + 1\n", "")],
    (
        "after a rejected draft the KV cache keeps the rejected position",
        "草稿被拒绝后 KV 缓存仍保留被拒绝的位置",
    ),
    "missing",
    ("rolled back", "回退"),
)
mut(
    "baseline",
    "mtp1-no-bonus",
    B,
    [
        ("            out += [draft, bonus]\n", "            out += [draft]\n"),
        (
            "            mh_prev, mnext, moff = hv, torch.tensor([[draft, bonus]]), pos\n",
            "            cache.length = pos + 1\n            mh_prev, mnext, moff = hv[:, :1], torch.tensor([[draft]]), pos\n",
        ),
    ],
    (
        "an accepted MTP draft yields one token: the bonus token from the same pass is thrown away",
        "MTP 草稿被接受时只得到一个 token：同一次前向给出的奖励 token 被丢掉",
    ),
    "boundary",
    ("bonus", "奖励"),
)
mut(
    "baseline",
    "greedy-one-short",
    B,
    [
        (
            "        if len(out) == n:\n            return out\n        logits = target(torch.tensor([[out[-1]]]), cache)",
            "        if len(out) == n - 1:\n            return out\n        logits = target(torch.tensor([[out[-1]]]), cache)",
        )
    ],
    ("greedy_decode stops one token early", "greedy_decode 提前一个 token 停止"),
    "boundary",
    ("exactly", "正好"),
)
mut(
    "baseline",
    "mtp1-reprefill",
    B,
    [
        (
            "        hv = target.hidden(torch.tensor([[out[-1], draft]]), cache)\n",
            "        target(torch.tensor([list(prompt_ids) + out]))  # recompute the context (no cache reuse)\n        hv = target.hidden(torch.tensor([[out[-1], draft]]), cache)\n",
        )
    ],
    (
        "MTP1 runs the target over the whole context every step instead of reusing the KV cache",
        "MTP1 每步都对整个上下文运行目标模型，而不是复用 KV 缓存",
    ),
    "logic",
    ("repeated", "重复"),
)
mut(
    "baseline",
    "mtp1-offset-shifted",
    B,
    [
        (
            "    mh_prev, mnext, moff = h, torch.tensor([prompt_ids[1:] + [out[0]]]), 0\n",
            "    mh_prev, mnext, moff = h, torch.tensor([prompt_ids[1:] + [out[0]]]), 1  # first pair at 1\n",
        )
    ],
    (
        "the MTP block is fed the prompt's pairs from position 1 instead of 0: its cache is one position off the "
        "target's (the output stays lossless, the drafts are made from misplaced pairs)",
        "MTP 模块从位置 1 而不是 0 开始接收提示词的那些对：它的缓存与目标模型的错开一个位置"
        "（输出仍然无损，但草稿来自放错位置的对）",
    ),
    "boundary",
    ("pairs at positions", "对起草"),
)
# -- parallel draft
mut(
    "parallel-draft",
    "sequential-draft",
    D,
    [
        (
            """    block = torch.tensor([[last_token] + [drafter.mask_id] * (drafter.block_size - 1)])
    return drafter(context_hidden.reshape(1, -1), block)[0]""",
            """    # autoregressive drafting: one pass per position, each fed the previous choice
    ids, rows = [last_token], []
    for _ in range(drafter.block_size):
        row = drafter(context_hidden.reshape(1, -1), torch.tensor([ids]))[0, -1]
        rows.append(row)
        ids.append(int(row.argmax()))
    return torch.stack(rows)""",
        )
    ],
    (
        "the block is drafted position by position (one drafter pass each), not in one parallel pass",
        "逐个位置起草（每个位置一次草稿前向），而不是一次并行前向",
    ),
    "logic",
    ("one parallel pass", "一次并行起草"),
)
mut(
    "parallel-draft",
    "all-mask",
    D,
    [
        (
            "[[last_token] + [drafter.mask_id] * (drafter.block_size - 1)]",
            "[[drafter.mask_id] * drafter.block_size]",
        )
    ],
    (
        "the block is all MASK: the last committed token is left out",
        "块全是 MASK：漏掉了最后一个已确认的 token",
    ),
    "missing",
    ("last_token", "last_token"),
)
mut(
    "parallel-draft",
    "short-block",
    D,
    [("[drafter.mask_id] * (drafter.block_size - 1)]", "[drafter.mask_id] * (drafter.block_size - 2)]")],
    (
        "one MASK too few: the block has block_size - 1 positions",
        "少了一个 MASK：块只有 block_size - 1 个位置",
    ),
    "boundary",
)
mut(
    "parallel-draft",
    "no-context",
    D,
    [
        (
            "drafter(context_hidden.reshape(1, -1), block)",
            "drafter(torch.zeros_like(context_hidden).reshape(1, -1), block)",
        )
    ],
    (
        "the target's hidden state is not passed to the drafter (zeros instead)",
        "没有把目标模型的隐状态传给草稿模型（传了全零）",
    ),
    "parameter",
)
# -- correction
mut(
    "correction",
    "parallel-markov",
    D,
    [
        (
            "        prev = int(row.argmax())\n        tokens.append(prev)",
            "        prev = int(logits[j].argmax())  # the parallel pass's choice\n        tokens.append(int(row.argmax()))",
        )
    ],
    (
        "each row is conditioned on the parallel pass's choice at the previous position, not on the corrected one",
        "每一行以前一位置并行起草的选择为条件，而不是修正后的选择",
    ),
    "logic",
)
mut(
    "correction",
    "first-uncorrected",
    D,
    [
        (
            "        row = logits[j] + drafter.markov_logits(torch.tensor([prev]))[0]\n",
            "        row = logits[j] + (drafter.markov_logits(torch.tensor([prev]))[0] if j else 0)\n",
        )
    ],
    (
        "the first position is not corrected (its previous token is the last committed one)",
        "第一个位置没有修正（它的前一个 token 是最后一个已确认的 token）",
    ),
    "boundary",
)
mut(
    "correction",
    "always-last-token",
    D,
    [
        (
            "        prev = int(row.argmax())\n        tokens.append(prev)",
            "        tokens.append(int(row.argmax()))  # prev stays last_token",
        )
    ],
    (
        "every row is conditioned on the last committed token instead of the previous position's",
        "每一行都以最后一个已确认 token 为条件，而不是前一个位置的 token",
    ),
    "parameter",
)
# -- confidence
mut(
    "confidence",
    "conf-after-correction",
    D,
    [
        (
            """    logits = parallel_draft(drafter, context_hidden, last_token)
    conf = draft_confidence(logits)
    n = confident_length(conf, tau)
    tokens, corrected = correct(drafter, logits[:n], last_token)""",
            """    logits = parallel_draft(drafter, context_hidden, last_token)
    _, full = correct(drafter, logits, last_token)
    conf = draft_confidence(full)  # confidence of the corrected draft
    n = confident_length(conf, tau)
    tokens, corrected = correct(drafter, logits[:n], last_token)""",
        )
    ],
    (
        "the confidence is computed after the correction instead of from the parallel pass",
        "置信度在修正之后计算，而不是来自并行起草",
    ),
    "ordering",
    ("after the Markov correction", "Markov 修正之后"),
)
mut(
    "confidence",
    "strict-threshold",
    D,
    [("        if run < tau:\n", "        if run <= tau:\n")],
    (
        "a running product exactly at tau is dropped (> instead of >=)",
        "累积乘积恰好等于 tau 时被丢弃（用了 > 而不是 >=）",
    ),
    "boundary",
    ("running product", "累积乘积"),
)
mut(
    "confidence",
    "per-position",
    D,
    [("        run *= float(conf[n])\n", "        run = float(conf[n])  # each position on its own\n")],
    (
        "each position is compared with tau on its own, not the running product of the prefix",
        "每个位置单独与 tau 比较，而不是前缀的累积乘积",
    ),
    "logic",
)
mut(
    "confidence",
    "no-minimum",
    D,
    [("    return max(1, n)\n", "    return n\n")],
    ("a block may keep no token at all", "一个块可能一个 token 都不保留"),
    "boundary",
)
mut(
    "confidence",
    "correct-all-then-cut",
    D,
    [
        (
            "    tokens, corrected = correct(drafter, logits[:n], last_token)\n",
            "    tokens, corrected = correct(drafter, logits, last_token)\n    tokens, corrected = tokens[:n], corrected[:n]\n",
        )
    ],
    (
        "every position is corrected, then the block is cut: sequential work spent on dropped tokens",
        "先修正所有位置再截断：把顺序计算花在了被丢弃的 token 上",
    ),
    "ordering",
    ("only the positions you keep", "只应修正保留下来的位置"),
)
mut(
    "confidence",
    "tau-too-high",
    "config.py",
    [("TAU: float | None = 0.3", "TAU: float | None = 0.99")],
    (
        "TAU set high 'to be safe': most blocks are cut to a token or two",
        "为了“保险”把 TAU 设得很高：多数块被截到一两个 token",
    ),
    "numbers",
    ("slower", "慢"),
)
# -- verify
mut(
    "verify",
    "accepted-off-by-one",
    V,
    [
        (
            "    return a, list(draft[:a]) + [best[a]]\n",
            "    return min(a + 1, len(draft)), list(draft[:a]) + [best[a]]\n",
        )
    ],
    ("the accepted count includes the first mismatching position", "接受数把第一个不一致的位置也算了进去"),
    "boundary",
)
mut(
    "verify",
    "no-bonus",
    V,
    [
        (
            "    return a, list(draft[:a]) + [best[a]]\n",
            "    return a, list(draft[:a]) + ([best[a]] if a < len(draft) else [])\n",
        )
    ],
    (
        "when every drafted token passes, the target's bonus token is not emitted",
        "所有草稿 token 都通过时，没有输出目标模型的奖励 token",
    ),
    "missing",
    ("bonus", "奖励"),
)
mut(
    "verify",
    "draft-own-distribution",
    V,
    [("min(1.0, float(p[i, x] / q[i, x]))", "min(1.0, float(q[i, x] / q[i, x]))")],
    (
        "the sampling verifier accepts against the draft's own distribution q instead of the target's p",
        "采样验证用草稿自己的分布 q 而不是目标分布 p 判断接受",
    ),
    "logic",
    ("not lossless", "不是无损的"),
)
mut(
    "verify",
    "residual-unnormalised",
    V,
    [("    return r / s if s > 0 else p\n", "    return r if s > 0 else p\n")],
    ("the residual max(0, p - q) is not renormalised", "残差 max(0, p - q) 没有重新归一化"),
    "logic",
    ("normalise", "归一化"),
)
mut(
    "verify",
    "draft-reads-target",
    L,
    [
        (
            "        hv = target.hidden(torch.tensor([[out[-1], *draft]]), cache)\n",
            "        peek = target.logits(target.hidden(torch.tensor([[out[-1], *draft]]), cache))[0].argmax(-1).tolist()\n"
            "        cache.length = pos\n        draft = peek[: len(draft)]  # the target's answer\n"
            "        hv = target.hidden(torch.tensor([[out[-1], *draft]]), cache)\n",
        )
    ],
    ("the draft reads the target's answer before verification", "草稿在验证之前偷看了目标模型的答案"),
    "reference",
    ("look at the target's answer", "偷看目标模型的答案"),
)
mut(
    "verify",
    "wrong-context",
    L,
    [("        ctx = hv[0, a]\n", "        ctx = hv[0, -1]  # the verify pass's last position\n")],
    (
        "the next draft starts from the verify pass's last hidden state, not the one that produced the last token",
        "下一轮草稿从验证前向的最后一个隐状态开始，而不是产生最后一个 token 的那个",
    ),
    "parameter",
    ("hidden state", "隐状态"),
)
mut(
    "verify",
    "no-rollback",
    L,
    [("        cache.length = pos + 1 + a\n", "")],
    ("the KV cache keeps the rejected draft positions", "KV 缓存保留了被拒绝的草稿位置"),
    "missing",
    ("rolled back", "回退"),
)
mut(
    "verify",
    "draft-on-main-stream",
    L,
    [
        (
            '        with s.stream("draft") if s is not None else nullcontext():\n',
            "        with nullcontext():\n",
        )
    ],
    (
        "the drafter runs on the main stream: the timeline does not show it apart from the target",
        "草稿模型在主流上运行：时间线上无法把它与目标模型区分开",
    ),
    "missing",
    ("`draft` stream", "`draft` 流"),
)
mut(
    "verify",
    "no-wait-draft",
    L,
    [('        if s is not None:\n            s.wait_stream("draft")\n', "")],
    (
        "the drafter runs on the `draft` stream but the main stream never waits for it: the target verifies a "
        "block that is still being drafted",
        "草稿模型跑在 `draft` 流上，但主流从不等待它：目标模型验证的是还在起草中的块",
    ),
    "ordering",
    ("waited for the `draft`", "等待 `draft`"),
)
mut(
    "verify",
    "cache-without-block",
    L,
    [
        (
            "    cache = target.new_cache(1, len(prompt_ids) + n + drafter.block_size + 2)\n",
            "    cache = target.new_cache(1, len(prompt_ids) + n + 2)  # as for MTP1\n",
        )
    ],
    (
        "the KV cache is sized as for MTP1 (prompt + n + 2): the last verify pass, one token short of n with a "
        "whole block after it, does not fit",
        "KV 缓存按 MTP1 的大小开（提示词 + n + 2）：最后一次验证前向在还差一个 token 到 n 时开始，后面还跟着整整一个块，放不下",
    ),
    "boundary",
    ("too small", "太小"),
)
mut(
    "verify",
    "loop-runs-on",
    L,
    [("    while len(out) < n:\n", "    while len(out) <= n:\n")],
    (
        "the loop runs while len(out) <= n: when an iteration ends at exactly n tokens it drafts and verifies one "
        "more block (the output is cut to n, the work and the stats are not)",
        "循环条件写成 len(out) <= n：某一轮恰好得到 n 个 token 时，它会再起草并验证一个块（输出被截到 n 个，"
        "但多做的计算和统计没有被去掉）",
    ),
    "boundary",
    ("another block", "又起草并验证了一个块"),
)
# -- report
mut(
    "report",
    "mean-with-bonus",
    R,
    [
        (
            '        "mean_accepted": sum(acc) / len(acc),',
            '        "mean_accepted": sum(a + 1 for a in acc) / len(acc),',
        )
    ],
    (
        "the mean accepted length counts the target's own token too",
        "平均接受长度把目标模型自己的 token 也算了进去",
    ),
    "numbers",
    ("mean accepted length", "平均接受长度"),
)
mut(
    "report",
    "first-token-as-mean",
    R,
    [
        (
            '        "first_token_acceptance": sum(1 for a in acc if a >= 1) / len(acc),',
            '        "first_token_acceptance": sum(acc) / len(acc) / block_size,',
        )
    ],
    (
        "first-token acceptance is computed as the mean accepted share of the block",
        "首 token 接受率被算成了块内平均接受比例",
    ),
    "logic",
    ("first-token acceptance", "首 token 接受率"),
)
mut(
    "report",
    "ratio-inverted",
    R,
    [('        "tpot_ratio": tpot_mtp1 / tpot_dspark,', '        "tpot_ratio": tpot_dspark / tpot_mtp1,')],
    ("the TPOT ratio is inverted (DSpark over MTP1)", "TPOT 比值取反了（DSpark 除以 MTP1）"),
    "logic",
    ("TPOT ratio", "TPOT 比值"),
)
mut(
    "report",
    "unconditional-positions",
    R,
    [
        (
            "        reached = sum(1 for a, d in zip(acc, drafted, strict=True) if d >= j and a >= j - 1)\n",
            "        reached = len(acc)\n",
        )
    ],
    (
        "per-position acceptance divides by every iteration, not those that reached the position",
        "逐位置接受率除以所有轮次，而不是到达该位置的轮次",
    ),
    "logic",
    ("per-position acceptance", "逐位置接受率"),
)
mut(
    "report",
    "talk-figures",
    R,
    [
        (
            "        **f,\n",
            '        **f,\n        "first_token_acceptance": TALK["first_token_acceptance"],  # as in the talk\n',
        )
    ],
    (
        "report.json carries the talk's first-token acceptance instead of the measured one",
        "report.json 写的是演讲的首 token 接受率，而不是测得的",
    ),
    "numbers",
    ("report.json", "report.json"),
)

root = LAB / "mutants"
for old_step in root.glob("*/"):  # equivalent.yaml (the machine mutants that are right) stays
    shutil.rmtree(old_step)
for step, name, file, repl, what, cls, expect in M:
    src = (SOL / file).read_text()
    new = src
    for old, rep in repl:
        assert new.count(old) == 1, (name, old)
        new = new.replace(old, rep)
    d = root / step / name
    d.mkdir(parents=True)
    diff = "".join(difflib.unified_diff(src.splitlines(True), new.splitlines(True), f"a/{file}", f"b/{file}"))
    (d / "mutant.patch").write_text(diff)
    spec = {"what": {"en": what[0], "zh": what[1]}, "class": cls}
    if expect:
        spec["expect"] = {"en": expect[0], "zh": expect[1]}
    (d / "mutant.yaml").write_text(yaml.safe_dump(spec, allow_unicode=True, sort_keys=False))
print(len(M), "mutants")
