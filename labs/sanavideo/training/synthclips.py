"""Synthetic training clips: a shape of a named colour moving in a named direction on black.

``render(colours, shapes, directions, offsets)`` draws a batch with 4x supersampling (anti-aliased
edges); ``random_batch(n, gen)`` draws random prompts and positions. Frames are float in [-1, 1],
shape (B, 3, T, H, W).
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "starter" / "upstream" / "TinySana-0.1.1"))

from tinysana.prompts import COLOURS, DIRECTIONS, SHAPES  # noqa: E402

FRAMES, SIZE, SS = 8, 32, 4
TRAVEL = 14.0  # pixels from the first to the last frame


def _inside(shape: str, dx: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
    if shape == "circle":
        return dx**2 + dy**2 <= 5.5**2
    if shape == "square":
        return (dx.abs() <= 5.0) & (dy.abs() <= 5.0)
    # triangle pointing up: apex at dy=-6, base at dy=+5, half-width 6 at the base
    return (dy >= -6.0) & (dy <= 5.0) & (dx.abs() <= (dy + 6.0) * 6.0 / 11.0)


def render(
    colours: list[str], shapes: list[str], directions: list[str], offsets: torch.Tensor
) -> torch.Tensor:
    """offsets (B, 2): (start shift along the motion, perpendicular offset) in pixels."""
    n = len(colours)
    coords = (torch.arange(SIZE * SS, dtype=torch.float32) + 0.5) / SS
    yy, xx = torch.meshgrid(coords, coords, indexing="ij")
    out = torch.full((n, 3, FRAMES, SIZE, SIZE), -1.0)
    steps = torch.linspace(-TRAVEL / 2, TRAVEL / 2, FRAMES)
    for b in range(n):
        ux, uy = DIRECTIONS[directions[b]]
        along, perp = offsets[b, 0].item(), offsets[b, 1].item()
        rgb = torch.tensor(COLOURS[colours[b]], dtype=torch.float32) / 127.5 - 1.0
        for f in range(FRAMES):
            s = steps[f].item() + along
            cx = SIZE / 2 + ux * s + uy * perp
            cy = SIZE / 2 + uy * s + ux * perp
            cover = _inside(shapes[b], xx - cx, yy - cy).float()
            cover = cover.view(SIZE, SS, SIZE, SS).mean(dim=(1, 3))
            out[b, :, f] = -1.0 + cover[None] * (rgb[:, None, None] + 1.0)
    return out


def random_batch(n: int, gen: torch.Generator) -> tuple[list[str], torch.Tensor]:
    """(prompts, clips) for n random prompts."""
    cs, ss, ds = list(COLOURS), list(SHAPES), list(DIRECTIONS)
    idx = torch.randint(0, 1 << 30, (n, 3), generator=gen)
    colours = [cs[i % len(cs)] for i in idx[:, 0].tolist()]
    shapes = [ss[i % len(ss)] for i in idx[:, 1].tolist()]
    directions = [ds[i % len(ds)] for i in idx[:, 2].tolist()]
    offsets = torch.stack(
        [(torch.rand(n, generator=gen) - 0.5) * 2.0, (torch.rand(n, generator=gen) - 0.5) * 3.0], dim=1
    )
    prompts = [f"a {c} {s} moving {d}" for c, s, d in zip(colours, shapes, directions, strict=True)]
    return prompts, render(colours, shapes, directions, offsets)
