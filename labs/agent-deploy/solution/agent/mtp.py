"""MTP speculation (next_n = 1): the MTP head drafts the token after next, one decode step over
[pending token, draft] verifies it. Greedy, so the output must equal plain greedy decoding."""

from __future__ import annotations


def generate_mtp(model, prompt_ids, n):
    """``n`` new tokens, each equal to what greedy decoding gives; ``model.spec_stats`` counts
    drafts and accepted drafts (for the decision log)."""
    logits, hidden, cache = model.prefill(prompt_ids, max_new=n)
    pos = len(prompt_ids) - 1  # position of `hidden[-1]`
    pending = int(logits[-1].argmax())  # the next token, not yet in the cache
    out = [pending]
    h = hidden[-1]
    drafts = accepted = 0
    while len(out) < n:
        draft = model.draft(h, pending, cache, pos)
        drafts += 1
        start = cache.length  # == pos + 1, where `pending` goes
        logits, hidden = model.step([pending, draft], cache)
        first = int(logits[0].argmax())
        if first == draft:
            accepted += 1
            pending = int(logits[1].argmax())
            out += [draft, pending]
            h, pos = hidden[1], start + 1
        else:
            cache.length = start + 1  # drop the draft's position
            pending = first
            out.append(pending)
            h, pos = hidden[0], start
    model.spec_stats = {"drafts": drafts, "accepted": accepted}
    return out[:n]
