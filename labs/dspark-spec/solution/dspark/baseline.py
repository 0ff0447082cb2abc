"""Step 1: greedy decoding of the target, and the MTP1 baseline (one MTP draft token per step)."""

from __future__ import annotations

import torch


@torch.no_grad()
def greedy_decode(target, prompt_ids: list[int], n: int) -> list[int]:
    """The target's greedy continuation: exactly ``n`` new tokens (prefill, then one token a step)."""
    cache = target.new_cache(1, len(prompt_ids) + n)
    logits = target(torch.tensor([prompt_ids]), cache)
    out: list[int] = []
    while True:
        out.append(int(logits[0, -1].argmax()))
        if len(out) == n:
            return out
        logits = target(torch.tensor([[out[-1]]]), cache)


@torch.no_grad()
def mtp1_decode(target, prompt_ids: list[int], n: int) -> tuple[list[int], dict]:
    """Speculative decoding with the target's MTP head drafting one token; lossless (greedy)."""
    ids = torch.tensor([prompt_ids])
    cache = target.new_cache(1, len(prompt_ids) + n + 2)
    h = target.hidden(ids, cache)
    out = [int(target.logits(h[:, -1:])[0, -1].argmax())]
    # the MTP block reads (hidden at p, token at p+1) pairs: fill its cache over the prompt
    mh_prev, mnext, moff = h, torch.tensor([prompt_ids[1:] + [out[0]]]), 0
    accepted: list[int] = []
    while len(out) < n:
        pos = cache.length  # position of out[-1], not yet seen by the target
        draft = int(target.mtp_logits(mh_prev, mnext, cache, offset=moff)[0, -1].argmax())
        hv = target.hidden(torch.tensor([[out[-1], draft]]), cache)
        lg = target.logits(hv)[0]
        t0 = int(lg[0].argmax())
        if t0 == draft:
            bonus = int(lg[1].argmax())
            out += [draft, bonus]
            accepted.append(1)
            mh_prev, mnext, moff = hv, torch.tensor([[draft, bonus]]), pos
        else:
            out.append(t0)
            accepted.append(0)
            cache.length = pos + 1
            mh_prev, mnext, moff = hv[:, :1], torch.tensor([[t0]]), pos
    return out[:n], {"accepted": accepted}
