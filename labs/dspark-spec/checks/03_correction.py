"""Step 3: sequential correction: position j's logits get the Markov head's term for the token
chosen at position j-1 (the last committed token for j = 0), one position after another."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # this folder, not the attendee's

import dsparkcheck as dc  # noqa: E402
import torch  # noqa: E402
from labkit.check import Failure, expect_close, main, msg  # noqa: E402

HINT = msg(
    "dspark/draft.py: correct() walks the block in order: row j = logits[j] + drafter.markov_logits(previous token), "
    "where the previous token is last_token for j = 0 and the argmax of corrected row j-1 after that.",
    "dspark/draft.py：correct() 按顺序遍历块：第 j 行 = logits[j] + drafter.markov_logits(前一个 token)，"
    "j = 0 时前一个 token 是 last_token，之后是已修正的第 j-1 行的 argmax。",
)


def check() -> tuple[str, dict[str, float]]:
    _, d, _ = dc.models()
    cases = [(dc.ref_parallel(ctx, last), last) for ctx, last in dc.contexts(4, "correct")]
    g = torch.Generator().manual_seed(dc.run_seed("correct-noise"))
    # flat parallel logits: only the Markov term decides, so a wrong previous token shows at once
    cases += [(torch.randn(d.block_size, d.cfg.vocab_size, generator=g) * 0.5, int(cases[0][1]))]
    cases += [(cases[1][0][:1].clone(), int(cases[1][1]))]  # a block of one position
    got = dc.call("correction", dc.WEIGHTS, cases, hint=HINT)
    ties = 0
    changed = 0
    for i, ((lg, last), r) in enumerate(zip(cases, got, strict=True)):
        toks, rows, margins = dc.ref_correct(lg, last)
        expect_close(
            f"corrected logits (case {i})",
            r["corrected"],
            rows,
            atol=1e-4,
            rtol=1e-4,
            check_dtype=False,
            hint=msg(
                "Is each row conditioned on the token chosen one position earlier (last_token for the first)?",
                "每一行是否以前一个位置选出的 token 为条件（第一行用 last_token）？",
            ),
        )
        for j, (a, b) in enumerate(zip(r["tokens"], toks, strict=False)):
            if a != b:
                if margins[j] < dc.TIE:
                    ties += 1
                    break
                raise Failure(
                    msg(
                        f"Case {i}: position {j} chose token {a}, but the argmax of its corrected logits is {b}.",
                        f"第 {i} 组：位置 {j} 选了 token {a}，但其修正后 logits 的 argmax 是 {b}。",
                    ),
                    [HINT],
                )
        if len(r["tokens"]) != len(toks):
            raise Failure(
                msg(
                    f"Case {i}: correct() returned {len(r['tokens'])} tokens for {len(toks)} positions.",
                    f"第 {i} 组：correct() 对 {len(toks)} 个位置返回了 {len(r['tokens'])} 个 token。",
                ),
                [HINT],
            )
        changed += sum(int(a != b) for a, b in zip(toks, lg.argmax(-1).tolist(), strict=True))
    return msg(
        f"Sequential correction matches on {len(cases)} blocks; it changed {changed} of the parallel pass's choices.",
        f"顺序修正在 {len(cases)} 个块上一致；它改动了并行起草的 {changed} 个选择。",
    ), {"changed_tokens": changed, "near_ties": ties}


main(check)
