"""Step 2: offload. Prefill writes the whole KV cache to host memory; every decode step brings
back only the entries the indexer selected."""

from __future__ import annotations

import torch


class HostKV:
    def prefill(self, kv: torch.Tensor, total_len: int) -> None:
        raise NotImplementedError("TODO: step 2")

    def select(self, group: int, ids: torch.Tensor) -> None:
        pass

    def append(self, layer: int, pos: int, kv_new: torch.Tensor) -> None:
        raise NotImplementedError("TODO: step 2")

    def fetch(self, layer: int, ids: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError("TODO: step 2")

    def after_attention(self, layer: int) -> None:
        pass

    def finish(self) -> None:
        pass
