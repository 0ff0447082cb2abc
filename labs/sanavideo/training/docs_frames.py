"""Render the docs' example clips: for each prompt one PNG strip of the 8 frames (4x nearest
upscaling), to docs/labs/img/sanavideo-<prompt>.png.

    python labs/sanavideo/training/docs_frames.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
sys.path.insert(0, str(HERE.parent / "checks"))

import sanacheck as sc  # noqa: E402  (puts the lab's TinySana on sys.path)
from tinysana.model import TinySana  # noqa: E402
from tinysana.sampling import generate  # noqa: E402

PROMPTS = ("a red circle moving right", "a blue square moving up", "a yellow triangle moving down")


def strip(frames: np.ndarray, zoom: int = 4, gap: int = 4) -> np.ndarray:
    t, h, w, _ = frames.shape
    big = frames.repeat(zoom, axis=1).repeat(zoom, axis=2)
    out = np.full((h * zoom, t * w * zoom + (t - 1) * gap, 3), 255, np.uint8)
    for i in range(t):
        x = i * (w * zoom + gap)
        out[:, x : x + w * zoom] = big[i]
    return out


def main() -> None:
    from PIL import Image

    torch.set_num_threads(1)
    model = TinySana.load(sc.WEIGHTS)
    out_dir = REPO / "docs" / "labs" / "img"
    out_dir.mkdir(parents=True, exist_ok=True)
    for prompt in PROMPTS:
        frames = generate(model, prompt).numpy()
        path = out_dir / f"sanavideo-{prompt.removeprefix('a ').replace(' ', '-')}.png"
        Image.fromarray(strip(frames)).save(path, optimize=True)
        print(f"{path.relative_to(REPO)}: {sc.describe(sc.analyse(frames))}")


if __name__ == "__main__":
    main()
