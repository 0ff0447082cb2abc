"""The toy DeepSeek-V4-Flash's shape, next to the real model's, and the toy emulation scale."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent

#: The real model and deployment (CRI dsv4_flash_single_card_design.md).
REAL = {
    "n_layers": 43,
    "n_routed_experts": 256,
    "top_k": 6,
    "n_shared_experts": 1,
    "hidden_size": 4096,
    "moe_intermediate_size": 2048,
    "expert_mxfp4_bytes": 13.37e6,
    "hot_experts_per_layer": 32,
    "static_device_bytes": 48.3e9,
    "device_bytes": 64e9,
}


@dataclass(frozen=True)
class ModelConfig:
    vocab_size: int = 480
    d_model: int = 64
    n_layers: int = 4
    n_heads: int = 4
    n_kv_heads: int = 1
    head_dim: int = 16
    n_routed_experts: int = 256
    top_k: int = 6
    n_shared_experts: int = 1
    moe_inter: int = 32
    max_seq_len: int = 768
    rope_theta: float = 10000.0
    rms_eps: float = 1e-6

    @classmethod
    def load(cls, path: Path | None = None) -> ModelConfig:
        data = json.loads((path or HERE / "weights" / "config.json").read_text())
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def toy_scale(cfg: ModelConfig) -> float:
    """The labkit.emu scale that makes the toy a faithful miniature of the real deployment.

    One toy expert is ``4096 x`` smaller than a real one (64x32 vs 4096x2048 matrices) and the
    toy has 4 of the 43 layers, so every per-layer byte and FLOP shrinks by the same factor:
    the emulated 64 GB card, its bandwidths and the host's shrink by it too.
    """
    per_layer = (cfg.d_model * cfg.moe_inter) / (REAL["hidden_size"] * REAL["moe_intermediate_size"])
    return per_layer * cfg.n_layers / REAL["n_layers"]
