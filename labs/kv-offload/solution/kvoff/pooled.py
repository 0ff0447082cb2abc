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
        self.pools: dict[tuple[int, int], dsa.Pool] = {}  # one per (group, sequence)
        self.plans: list[dsa.Plan] = []  # this group's plans, one per sequence

    def select(self, group: int, ids: torch.Tensor) -> None:
        if self.s is not None:  # the plan reads the state the last refill left
            self.s.wait_stream("refill")
        self.plans = []
        for b in range(ids.shape[0]):
            pool = self.pools.setdefault((group, b), self.pool_cls(self.n_slots))
            self.plans.append(pool.plan(ids[b].tolist()))
        self.idx = _Index(self.plans)  # every layer of the group reads the same plans

    def append(self, layer: int, pos: int, kv_new: torch.Tensor) -> None:
        self.host[:, layer, pos] = dsa.d2h(kv_new)

    def fetch(self, layer: int, ids: torch.Tensor) -> torch.Tensor:
        x = self.idx
        out = torch.empty(ids.shape[0], ids.shape[1], self.host.shape[-1])
        out[x.hit_b, x.hit_n] = self.data[x.hit_b, layer, x.hit_slot]
        out[x.miss_b, x.miss_n] = self._from_host(layer, "h2d.staging")
        return out

    def _from_host(self, layer: int, tag: str) -> torch.Tensor:
        """The misses' rows of ``layer``, one host -> device copy per sequence."""
        rows = self.host[self.idx.miss_b, layer, self.idx.miss_pos]
        return torch.cat([dsa.h2d(r, tag) for r in rows.split(self.idx.n_miss)])

    def _refill(self, layer: int) -> None:
        x = self.idx
        rows = self._from_host(layer, "pool.install")
        self.data[x.miss_b[x.lands], layer, x.miss_slot[x.lands]] = rows[x.lands]

    def after_attention(self, layer: int) -> None:
        if self.side_stream and self.s is not None:
            with self.s.stream("refill"):
                self._refill(layer)
        else:
            self._refill(layer)

    def finish(self) -> None:
        pass


class _Index:
    """One group's plans as index tensors over the batch: hits (sequence, place in the top-k,
    slot), misses (sequence, place, host position, slot) and which misses land in their slot
    (when two misses of a sequence take the same slot in one step, the later one stays)."""

    def __init__(self, plans: list[dsa.Plan]):
        hit: list[tuple[int, int, int]] = []
        miss: list[tuple[int, int, int, int]] = []
        self.n_miss = []
        for b, p in enumerate(plans):
            ms = [(b, n, p.ids[n], p.slot[n]) for n in p.misses]
            hit += [(b, n, p.slot[n]) for n, h in enumerate(p.hit) if h]
            miss += ms
            self.n_miss.append(len(ms))
        self.hit_b, self.hit_n, self.hit_slot = torch.tensor(hit, dtype=torch.long).reshape(-1, 3).T
        self.miss_b, self.miss_n, self.miss_pos, self.miss_slot = (
            torch.tensor(miss, dtype=torch.long).reshape(-1, 4).T
        )
        last = {(b, s): i for i, (b, _, _, s) in enumerate(miss)}
        self.lands = torch.tensor(sorted(last.values()), dtype=torch.long)
