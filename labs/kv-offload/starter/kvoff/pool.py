"""Step 4: device hot pools. A pool holds the metadata of ``n_slots`` device KV slots for one
sequence and layer group; ``plan(ids)`` (from ``dsa.Pool``) charges the control work and calls
``classify``."""

from __future__ import annotations

from collections import OrderedDict

import torch
from labkit import dsa


class LRUPool(dsa.Pool):
    """Least recently used: hits refresh an entry; a miss evicts the least recently used one."""

    def __init__(self, n_slots: int):
        super().__init__(n_slots)
        self.where: OrderedDict[int, int] = OrderedDict()  # position -> slot, LRU first
        self.free = list(range(n_slots))

    def classify(self, ids: list[int]) -> dsa.Plan:
        raise NotImplementedError("TODO: step 4, LRU")


class SetAssocFIFO(dsa.Pool):
    """Set-associative FIFO: a position lives in set ``dsa.set_index(pos, n_sets)``, in any of
    its ``ways`` slots; a miss replaces the slot under the set's pointer, which then advances
    (round robin). Hits change nothing."""

    def __init__(self, n_slots: int, ways: int = 8):
        super().__init__(n_slots)
        self.ways = ways
        self.n_sets = n_slots // ways
        self.tags: list[list[int]] = [[-1] * ways for _ in range(self.n_sets)]
        self.ptr = [0] * self.n_sets

    def classify(self, ids: list[int]) -> dsa.Plan:
        raise NotImplementedError("TODO: step 4, set-associative FIFO")


POLICIES = {"lru": LRUPool, "fifo": SetAssocFIFO}


def hit_rate(trace: torch.Tensor, policy: str, n_slots: int) -> float:
    """Share of the selected entries found in the pool, over steps 1..T-1 and every (group,
    sequence) of ``trace`` ``[T, n_groups, B, k]``; one pool per (group, sequence), empty at step 0."""
    raise NotImplementedError("TODO: step 4")


def hit_rates(trace: torch.Tensor, sizes: list[int]) -> dict[str, dict[int, float]]:
    """``{"lru": {size: rate}, "fifo": {size: rate}}`` for every pool size."""
    raise NotImplementedError("TODO: step 4")
