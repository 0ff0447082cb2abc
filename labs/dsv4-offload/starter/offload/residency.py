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
    # TODO (step 4): the recipe counts on the device (a bincount per layer). A layer may be called
    # more than once in a prefill, and an expert nobody chose still has its column.
    raise NotImplementedError("step 4: count_activations")


def choose_hot_set(counts: torch.Tensor, k: int) -> torch.Tensor:
    """Each layer's ``k`` most used experts: int64 ``[n_layers, k]`` (ids, any order)."""
    # TODO (step 4): each layer's k most used experts, from that layer's own counts.
    raise NotImplementedError("step 4: choose_hot_set")
