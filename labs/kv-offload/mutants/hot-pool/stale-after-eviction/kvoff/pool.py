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
        self.slot_of: dict[int, int] = {}
        self.free = list(range(n_slots))

    def classify(self, ids: list[int]) -> dsa.Plan:
        hit = [i in self.slot_of for i in ids]
        slot = [self.slot_of.get(i, -1) for i in ids]
        for i, h in zip(ids, hit, strict=True):
            if h and i in self.where:
                self.where.move_to_end(i)
        for n, (i, h) in enumerate(zip(ids, hit, strict=True)):
            if h:
                continue
            if self.free:
                s = self.free.pop(0)
            else:
                _, s = self.where.popitem(last=False)
            self.where[i] = s
            self.slot_of[i] = s
            slot[n] = s
        return dsa.Plan(ids, hit, slot)


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
        hit, slot = [], []
        for i in ids:
            s = dsa.set_index(i, self.n_sets)
            if i in self.tags[s]:
                hit.append(True)
                slot.append(s * self.ways + self.tags[s].index(i))
            else:
                hit.append(False)
                slot.append(-1)
        for n, i in enumerate(ids):
            if hit[n]:
                continue
            s = dsa.set_index(i, self.n_sets)
            way = self.ptr[s]
            self.tags[s][way] = i
            self.ptr[s] = (way + 1) % self.ways
            slot[n] = s * self.ways + way
        return dsa.Plan(ids, hit, slot)


POLICIES = {"lru": LRUPool, "fifo": SetAssocFIFO}


def hit_rate(trace: torch.Tensor, policy: str, n_slots: int) -> float:
    """Share of the selected entries found in the pool, over steps 1..T-1 and every (group,
    sequence) of ``trace`` ``[T, n_groups, B, k]``; one pool per (group, sequence), empty at step 0."""
    T, G, B, k = trace.shape
    hits = total = 0
    for g in range(G):
        for b in range(B):
            pool = POLICIES[policy](n_slots)
            for t in range(T):
                plan = pool.plan(trace[t, g, b].tolist())
                if t > 0:
                    hits += sum(plan.hit)
                    total += len(plan.hit)
    return hits / total


def hit_rates(trace: torch.Tensor, sizes: list[int]) -> dict[str, dict[int, float]]:
    """``{"lru": {size: rate}, "fifo": {size: rate}}`` for every pool size."""
    return {p: {n: hit_rate(trace, p, n) for n in sizes} for p in POLICIES}
