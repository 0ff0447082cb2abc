"""Step 5: batch verification, greedy and sampling (the lossless rules)."""

from __future__ import annotations

import torch


def verify_greedy(target_logits: torch.Tensor, draft: list[int]) -> tuple[int, list[int]]:
    """``target_logits [L+1, V]`` from one target pass over ``[last, *draft]`` -> (accepted, emitted).

    ``emitted`` are the tokens the output grows by in this iteration.
    """
    # TODO(step 5)
    raise NotImplementedError("verify_greedy")


def residual(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """The distribution to resample from after a rejection (``p`` target, ``q`` draft, ``[V]``)."""
    # TODO(step 5)
    raise NotImplementedError("residual")


def verify_sampling(
    p: torch.Tensor, q: torch.Tensor, draft: list[int], generator: torch.Generator
) -> tuple[int, list[int]]:
    """``p [L+1, V]`` target and ``q [L, V]`` draft probabilities, ``draft`` sampled from ``q``
    -> (accepted, emitted). Draw every random number from ``generator``."""
    # TODO(step 5)
    raise NotImplementedError("verify_sampling")
