"""Dynamic hot-expert residency (``KT_DYNAMIC_RESIDENT=1``).

During a request's prefill the engine records, for every layer, which experts each token was
routed to. Counting them per layer (a device ``bincount``) and keeping each layer's K most used
experts resident for the decode makes the device serve about three times more of the decode's
expert slots than the static "first K" (the talk's figure).
"""

from __future__ import annotations

import torch


def count_activations(routing: list[tuple[int, torch.Tensor]], n_layers: int, n_experts: int) -> torch.Tensor:
    """``routing``: ``(layer, expert ids [n_tokens, top_k])`` of every MoE call of the prefill.

    Returns int64 ``[n_layers, n_experts]``: how many routed slots of each layer went to each expert.
    """
    counts = torch.zeros(n_layers, n_experts, dtype=torch.long)
    for layer, ids in routing:
        counts[layer] += torch.bincount(ids.flatten(), minlength=n_experts)
    return counts


def choose_hot_set(counts: torch.Tensor, k: int) -> torch.Tensor:
    """Each layer's ``k`` most used experts: int64 ``[n_layers, k]`` (ids, any order)."""
    return counts.topk(k, dim=-1).indices
