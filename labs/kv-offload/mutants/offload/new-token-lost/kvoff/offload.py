"""Step 2: offload. Prefill writes the whole KV cache to host memory; every decode step brings
back only the entries the indexer selected."""

from __future__ import annotations

import torch
from labkit import dsa


class HostKV:
    def prefill(self, kv: torch.Tensor, total_len: int) -> None:
        b, n_layers, s, e = kv.shape
        self.host = torch.zeros(b, n_layers, total_len, e)  # host memory: nothing on the device
        self.host[:, :, :s] = dsa.d2h(kv)

    def select(self, group: int, ids: torch.Tensor) -> None:
        pass

    def append(self, layer: int, pos: int, kv_new: torch.Tensor) -> None:
        pass

    def fetch(self, layer: int, ids: torch.Tensor) -> torch.Tensor:
        return dsa.h2d(dsa.gather(self.host[:, layer], ids))

    def after_attention(self, layer: int) -> None:
        pass

    def finish(self) -> None:
        pass
