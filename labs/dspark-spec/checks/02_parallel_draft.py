"""Step 2: the parallel block draft: one drafter pass over [last token, MASK, ...] gives logits for
every position of the block at once."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # this folder, not the attendee's


import dsparkcheck as dc  # noqa: E402
from labkit.check import Failure, expect_close, main, msg  # noqa: E402

HINT = msg(
    "dspark/draft.py: parallel_draft() builds the block [last_token, MASK, ..., MASK] (drafter.block_size "
    "positions, drafter.mask_id) and runs the drafter once with the context hidden state.",
    "dspark/draft.py：parallel_draft() 构造块 [last_token, MASK, ..., MASK]（drafter.block_size 个位置，"
    "drafter.mask_id），并带着上下文隐状态只运行一次草稿模型。",
)


def check() -> tuple[str, dict[str, float]]:
    target, d, tok = dc.models()
    cases = dc.contexts(4, "parallel")
    # boundary tokens: <bos> and the last word of the vocabulary
    cases += [(cases[0][0], tok.bos_id), (cases[1][0], d.cfg.vocab_size - 1)]
    got = dc.call("parallel", dc.WEIGHTS, cases, hint=HINT)
    with dc.session() as s:
        dc.ref_parallel(*cases[0])
        one_pass = s.report().launches
    worst = 0.0
    for i, ((ctx, last), r) in enumerate(zip(cases, got, strict=True)):
        if r["launches"] > one_pass:
            raise Failure(
                msg(
                    f"parallel_draft() launched {r['launches']} ops where one drafter pass over the block launches {one_pass}: "
                    "the block must be drafted in one parallel pass, not position by position.",
                    f"parallel_draft() 下发了 {r['launches']} 个算子，而对整个块做一次草稿前向只需 {one_pass} 个："
                    "整块必须一次并行起草，而不是逐个位置起草。",
                ),
                [HINT],
            )
        ref = dc.ref_parallel(ctx, last)
        worst = max(
            worst,
            expect_close(
                f"parallel_draft logits (case {i})",
                r["logits"],
                ref,
                atol=1e-4,
                rtol=1e-4,
                hint=msg(
                    "Is the block [last_token] + [MASK] * (block_size - 1), with the context hidden state passed as is?",
                    "块是否为 [last_token] + [MASK] * (block_size - 1)，上下文隐状态是否原样传入？",
                ),
            ),
        )
    return msg(
        f"One drafter pass gives all {d.block_size} positions ({one_pass} ops launched); logits match (max error {worst:.1e}).",
        f"一次草稿前向给出全部 {d.block_size} 个位置（下发 {one_pass} 个算子）；logits 一致（最大误差 {worst:.1e}）。",
    ), {"max_abs_error": worst, "launches": float(one_pass)}


main(check)
