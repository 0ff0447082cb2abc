"""Step 5: the shipped design. Plan once per layer group (the group shares its indexer), serve
each layer from the pool (hits) and the host (misses), refill the pool after attention on a
side stream."""

from __future__ import annotations

import torch
from labkit import dsa, emu


class PooledKV:
    def __init__(self, pool_cls: type[dsa.Pool], n_slots: int, side_stream: bool = True):
        self.pool_cls, self.n_slots, self.side_stream = pool_cls, n_slots, side_stream

    def prefill(self, kv: torch.Tensor, total_len: int) -> None:
        b, n_layers, s, e = kv.shape
        self.host = torch.zeros(b, n_layers, total_len, e)
        self.host[:, :, :s] = dsa.d2h(kv)
        self.s = emu.current()
        if self.s is not None:
            self.s.memory.alloc("pool", b * n_layers * self.n_slots * e * 4)
        self.data = torch.zeros(b, n_layers, self.n_slots, e)  # the pools' slots, on the device
        self.pools: dict[tuple[int, int], dsa.Pool] = {}
        self.plans: list[dsa.Plan] = []

    def select(self, group: int, ids: torch.Tensor) -> None:
        if self.s is not None:  # the plan reads the state the last refill left
            self.s.wait_stream("refill")
        self.plans = []

    def append(self, layer: int, pos: int, kv_new: torch.Tensor) -> None:
        self.host[:, layer, pos] = dsa.d2h(kv_new)

    def fetch(self, layer: int, ids: torch.Tensor) -> torch.Tensor:
        self.plans = [
            self.pools.setdefault((layer, b), self.pool_cls(self.n_slots)).plan(ids[b].tolist())
            for b in range(ids.shape[0])
        ]
        out = torch.empty(ids.shape[0], ids.shape[1], self.host.shape[-1])
        for b, plan in enumerate(self.plans):
            hits = [n for n, h in enumerate(plan.hit) if h]
            miss = plan.misses
            if hits:
                out[b, hits] = self.data[b, layer, [plan.slot[n] for n in hits]]
            if miss:
                out[b, miss] = dsa.h2d(self.host[b, layer, [plan.ids[n] for n in miss]])
        return out

    def _refill(self, layer: int) -> None:
        for b, plan in enumerate(self.plans):
            miss = plan.misses
            if not miss:
                continue
            rows = dsa.h2d(self.host[b, layer, [plan.ids[n] for n in miss]], "pool.install")
            for n, row in zip(miss, rows, strict=True):
                self.data[b, layer, plan.slot[n]] = row

    def after_attention(self, layer: int) -> None:
        if self.side_stream and self.s is not None:
            with self.s.stream("refill"):
                self._refill(layer)
        else:
            self._refill(layer)

    def finish(self) -> None:
        pass
