"""Step 1: greedy decoding of the target, and the MTP1 baseline (one MTP draft token per step).

The target (``labkit.models.TinyMoE``): ``target(ids, cache)`` -> logits ``[1, S, V]``;
``target.hidden(ids, cache)`` -> final hidden states ``[1, S, D]`` and ``target.logits(h)``;
``target.new_cache(1, max_len)``, whose ``length`` is how many positions are filled (setting it
back forgets the positions after it); ``target.mtp_logits(h, next_ids, cache, offset)`` -> the MTP
head's logits for the token two places after each hidden state (``offset`` = position of ``h[:, 0]``).
"""

from __future__ import annotations

import torch


@torch.no_grad()
def greedy_decode(target, prompt_ids: list[int], n: int) -> list[int]:
    """The target's greedy continuation of ``prompt_ids``: exactly ``n`` new tokens."""
    # TODO(step 1)
    raise NotImplementedError("greedy_decode")


@torch.no_grad()
def mtp1_decode(target, prompt_ids: list[int], n: int) -> tuple[list[int], dict]:
    """Speculative decoding with the MTP head drafting one token per step.

    Returns (exactly ``n`` tokens, identical to ``greedy_decode``; ``{"accepted": [0 or 1 per step]}``).
    """
    # TODO(step 1)
    raise NotImplementedError("mtp1_decode")
