"""MTP speculation (next_n = 1): the MTP head drafts the token after next, one decode step over
[pending token, draft] verifies it. Greedy, so the output must equal plain greedy decoding."""

from __future__ import annotations


def generate_mtp(model, prompt_ids, n):
    """``n`` new tokens, each equal to what greedy decoding of ``model`` gives, using
    ``model.prefill``, ``model.draft`` and ``model.step``; sets ``model.spec_stats =
    {"drafts": ..., "accepted": ...}`` for the decision log."""
    # TODO (step 5)
    raise NotImplementedError("TODO (step 5): generate_mtp() in agent/mtp.py")
