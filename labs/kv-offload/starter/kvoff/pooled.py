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
        """Once per layer group and step, after the indexer: ``ids`` ``[B, k]``."""
        raise NotImplementedError("TODO: step 5")

    def append(self, layer: int, pos: int, kv_new: torch.Tensor) -> None:
        self.host[:, layer, pos] = dsa.d2h(kv_new)

    def fetch(self, layer: int, ids: torch.Tensor) -> torch.Tensor:
        """``[B, k, kv_dim]``: the selected entries of ``layer``, for sparse attention."""
        raise NotImplementedError("TODO: step 5")

    def after_attention(self, layer: int) -> None:
        """After ``layer``'s attention."""
        raise NotImplementedError("TODO: step 5")

    def finish(self) -> None:
        pass
