"""Step 3: how much of a step's top-k did the previous step already select?"""

from __future__ import annotations

import torch


def adjacent_overlap(trace: torch.Tensor) -> float:
    """``trace`` ``[T, k]``: the top-k positions of one sequence and layer group at each step.
    The mean, over steps 1..T-1, of the share of step t's selection that step t-1 selected."""
    raise NotImplementedError("TODO: step 3")


def mean_overlap(trace: torch.Tensor) -> float:
    """``trace`` ``[T, n_groups, B, k]`` (what ``dsa.run_decode`` returns): the mean of
    ``adjacent_overlap`` over every (group, sequence)."""
    raise NotImplementedError("TODO: step 3")
