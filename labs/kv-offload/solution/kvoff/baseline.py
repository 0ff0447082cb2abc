"""Step 1: the baseline. The whole KV cache stays on the device; how many sequences fit?"""

from __future__ import annotations

import torch
from labkit import dsa, emu


def kv_bytes_per_seq(cfg: dsa.DSAConfig, total_len: int) -> int:
    """Device bytes one sequence of ``total_len`` positions needs for its caches."""
    kv = cfg.n_layers * total_len * cfg.kv_entry_bytes
    index_keys = cfg.n_groups * total_len * cfg.idx_entry_bytes
    return kv + index_keys


def max_batch(cfg: dsa.DSAConfig, capacity_bytes: int, total_len: int) -> int:
    """The largest batch whose weights and caches fit ``capacity_bytes``."""
    free = capacity_bytes - dsa.ToyDSA(cfg).weight_bytes()
    return max(0, free // kv_bytes_per_seq(cfg, total_len))


def tokens_per_s(batch: int, n_steps: int, elapsed_ms: float) -> float:
    """Decode throughput: every step makes one token for every sequence of the batch."""
    return batch * n_steps / (elapsed_ms / 1e3)


class DeviceKV:
    """The KV cache of every layer on the device (the baseline, given)."""

    def prefill(self, kv: torch.Tensor, total_len: int) -> None:
        b, n_layers, s, e = kv.shape
        session = emu.current()
        if session is not None:
            session.memory.alloc("kv", b * n_layers * total_len * e * 4)
        self.kv = torch.zeros(b, n_layers, total_len, e)
        self.kv[:, :, :s] = kv

    def select(self, group: int, ids: torch.Tensor) -> None:
        pass

    def append(self, layer: int, pos: int, kv_new: torch.Tensor) -> None:
        self.kv[:, layer, pos] = kv_new

    def fetch(self, layer: int, ids: torch.Tensor) -> torch.Tensor:
        return dsa.gather(self.kv[:, layer], ids)  # sparse attention reads them in place

    def after_attention(self, layer: int) -> None:
        pass

    def finish(self) -> None:
        pass
