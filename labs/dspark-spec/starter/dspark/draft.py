"""Steps 2-4: the parallel block draft, the sequential correction and confidence filtering.

The drafter (``labkit.dspark.BlockDrafter``): ``drafter(context_hidden [1, D], block_ids [1, S])``
-> logits ``[1, S, V]`` in one non-causal pass; position ``j`` of the block predicts the token
``j + 1`` places after the block's first token. ``drafter.block_size``, ``drafter.mask_id``;
``drafter.markov_logits(prev_ids [1])`` -> ``[1, V]``, the correction term for the position after
``prev_ids``.
"""

from __future__ import annotations

import torch


@torch.no_grad()
def parallel_draft(drafter, context_hidden: torch.Tensor, last_token: int) -> torch.Tensor:
    """Step 2: logits ``[drafter.block_size, V]`` for the block after ``last_token``.

    ``context_hidden`` ``[D]`` is the target's final hidden state at the position whose output was
    ``last_token``.
    """
    # TODO(step 2)
    raise NotImplementedError("parallel_draft")


@torch.no_grad()
def correct(drafter, logits: torch.Tensor, last_token: int) -> tuple[list[int], torch.Tensor]:
    """Step 3: (tokens ``[L]``, corrected logits ``[L, V]``) for the ``L`` rows of ``logits``."""
    # TODO(step 3)
    raise NotImplementedError("correct")


def draft_confidence(logits: torch.Tensor) -> torch.Tensor:
    """Step 4: a confidence in [0, 1] for each position of the parallel logits ``[k, V]``."""
    # TODO(step 4)
    raise NotImplementedError("draft_confidence")


def confident_length(conf: torch.Tensor, tau: float) -> int:
    """Step 4: how many leading positions to keep at threshold ``tau``."""
    # TODO(step 4)
    raise NotImplementedError("confident_length")


@torch.no_grad()
def draft_block(drafter, context_hidden: torch.Tensor, last_token: int, tau: float):
    """Step 4: (draft tokens ``[L]``, q ``[L, V]`` the draft's probabilities, conf ``[block_size]``)."""
    # TODO(step 4)
    raise NotImplementedError("draft_block")
