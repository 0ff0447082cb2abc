"""Step 3: how much of a step's top-k did the previous step already select?"""

from __future__ import annotations

import torch


def adjacent_overlap(trace: torch.Tensor) -> float:
    """``trace`` ``[T, k]``: the top-k positions of one sequence and layer group at each step.
    The mean, over steps 1..T-1, of the share of step t's selection that step t-1 selected."""
    shares = []
    for t in range(1, trace.shape[0]):
        cur, prev = set(trace[t].tolist()), set(trace[t - 1].tolist())
        shares.append(len(cur & prev) / len(cur))
    return sum(shares) / trace.shape[0]


def mean_overlap(trace: torch.Tensor) -> float:
    """``trace`` ``[T, n_groups, B, k]`` (what ``dsa.run_decode`` returns): the mean of
    ``adjacent_overlap`` over every (group, sequence)."""
    T, G, B, k = trace.shape
    vals = [adjacent_overlap(trace[:, g, b]) for g in range(G) for b in range(B)]
    return sum(vals) / len(vals)
