"""TinySanaPipeline: prompt -> frames -> MP4, the way the upstream inference script runs it."""

from __future__ import annotations

from pathlib import Path

import torch

from .kernels.triton_rms_norm import use_triton_rms_norm
from .model import TinySana
from .sampling import generate
from .video import write_mp4


class TinySanaPipeline:
    def __init__(self, checkpoint: str | Path) -> None:
        self.device = torch.device("cuda")
        self.dtype = torch.bfloat16  # mixed_precision: bf16
        self.model = TinySana.load(checkpoint).to(self.device, self.dtype)
        use_triton_rms_norm(self.model)

    def __call__(self, prompt: str, seed: int = 0) -> torch.Tensor:
        """uint8 frames (T, H, W, 3)."""
        return generate(self.model, prompt, seed=seed, device=self.device)

    def save_video(self, prompt: str, out: str | Path, seed: int = 0) -> Path:
        frames = self(prompt, seed)
        write_mp4(out, frames.numpy(), fps=int(self.model.sampling["fps"]))
        return Path(out)
