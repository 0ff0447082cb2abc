"""Step 5: the DSpark decode loop: draft a block, keep its confident prefix, verify in one pass."""

from __future__ import annotations

from contextlib import nullcontext

import torch
from labkit import emu

from .draft import draft_block
from .verify import verify_greedy


@torch.no_grad()
def dspark_decode(target, drafter, prompt_ids: list[int], n: int, tau: float) -> tuple[list[int], dict]:
    """``n`` tokens equal to the target's greedy decode; stats per iteration."""
    cache = target.new_cache(1, len(prompt_ids) + n + drafter.block_size + 2)
    h = target.hidden(torch.tensor([prompt_ids]), cache)
    ctx = h[0, -1]
    out = [int(target.logits(h[:, -1:])[0, -1].argmax())]
    stats: dict = {"drafted": [], "accepted": []}
    s = emu.current()
    while len(out) < n:
        pos = cache.length  # position of out[-1]
        with s.stream("draft") if s is not None else nullcontext():
            draft, _q, _conf = draft_block(drafter, ctx, out[-1], tau)
        if s is not None:
            s.wait_stream("draft")
        hv = target.hidden(torch.tensor([[out[-1], *draft]]), cache)
        a, emitted = verify_greedy(target.logits(hv)[0], draft)
        cache.length = pos + 1 + a
        ctx = hv[0, a]
        out += emitted
        stats["drafted"].append(len(draft))
        stats["accepted"].append(a)
    return out[:n], stats
