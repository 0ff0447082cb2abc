"""The three stages in one container, and the single-file checkpoint (safetensors + JSON config)."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from .dit import DiTConfig, LinearDiT
from .text_encoder import TextEncoder
from .vae import VideoVAE

DEFAULTS = {
    "frames": 8,
    "height": 32,
    "width": 32,
    "steps": 10,
    "cfg_scale": 4.0,
    "flow_shift": 3.0,
    "fps": 8,
}


class TinySana(nn.Module):
    def __init__(self, dit_cfg: DiTConfig = DiTConfig(), sampling: dict | None = None) -> None:
        super().__init__()
        self.text_encoder = TextEncoder(dim=dit_cfg.text_dim)
        self.dit = LinearDiT(dit_cfg)
        self.vae = VideoVAE(z_dim=dit_cfg.in_channels)
        self.sampling = {**DEFAULTS, **(sampling or {})}

    def save(self, path: str | Path, dtype: torch.dtype = torch.bfloat16) -> None:
        """Weights in ``dtype`` (bf16 by default: 2 bytes a parameter), without the training encoder."""
        state = {
            k: (v.to(dtype) if v.is_floating_point() else v).contiguous()
            for k, v in self.state_dict().items()
            if not k.startswith("vae.encoder.")
        }
        meta = {"dit": json.dumps(asdict(self.dit.cfg)), "sampling": json.dumps(self.sampling)}
        save_file(state, str(path), metadata=meta)

    @classmethod
    def load(cls, path: str | Path) -> TinySana:
        from safetensors import safe_open

        with safe_open(str(path), "pt") as f:
            meta = f.metadata()
        model = cls(DiTConfig(**json.loads(meta["dit"])), json.loads(meta["sampling"]))
        state = {k: v.float() for k, v in load_file(str(path)).items()}
        missing, unexpected = model.load_state_dict(state, strict=False)
        if unexpected or any(not k.startswith("vae.encoder.") for k in missing):
            raise ValueError(
                f"{path}: not a TinySana checkpoint (missing {missing}, unexpected {unexpected})"
            )
        del model.vae.encoder
        return model.eval()
