"""Flow-matching Euler sampling with classifier-free guidance (SANA's ``flow_shift``/``cfg_scale``).

Convention: x_t = (1 - t) * x_0 + t * noise, the DiT predicts the velocity v = noise - x_0, and
sampling integrates from t = 1 (noise) to t = 0 (data) in ``steps`` Euler steps on the shifted
schedule t' = s*t / (1 + (s-1)*t).
"""

from __future__ import annotations

import torch

from .model import TinySana
from .prompts import tokenize


def shifted_timesteps(steps: int, shift: float) -> torch.Tensor:
    t = torch.linspace(1.0, 0.0, steps + 1)
    return shift * t / (1 + (shift - 1) * t)


@torch.no_grad()
def encode_prompt(model: TinySana, prompt: str, device: torch.device | str = "cpu"):  # type: ignore[no-untyped-def]
    """(conditional, unconditional) text encodings and masks, stacked in a batch of 2."""
    tokens = torch.tensor([tokenize(prompt), tokenize("")], device=device)
    return model.text_encoder(tokens)


@torch.no_grad()
def denoise(
    model: TinySana,
    text: torch.Tensor,
    mask: torch.Tensor,
    seed: int = 0,
    steps: int | None = None,
    cfg_scale: float | None = None,
    device: torch.device | str = "cpu",
) -> torch.Tensor:
    """Sample a normalised latent (1, C, T, h, w) for the (cond, uncond) text batch.

    The latent and the Euler steps stay in float32 whatever the model's dtype (bf16 on the NPU):
    the DiT gets its input in its own dtype and its velocity comes back as float32."""
    s = model.sampling
    steps = steps or s["steps"]
    cfg = s["cfg_scale"] if cfg_scale is None else cfg_scale
    c = model.dit.cfg.in_channels
    shape = (1, c, s["frames"], s["height"] // 4, s["width"] // 4)
    x = torch.randn(shape, generator=torch.Generator().manual_seed(seed)).to(device)
    ts = shifted_timesteps(steps, s["flow_shift"])
    for i in range(steps):
        t = ts[i].expand(2).to(device)
        v_cond, v_uncond = model.dit(x.expand(2, -1, -1, -1, -1), t, text, mask).float().chunk(2)
        v = v_uncond + cfg * (v_cond - v_uncond)
        x = x + (ts[i + 1] - ts[i]).item() * v
    return x


@torch.no_grad()
def to_frames(video: torch.Tensor) -> torch.Tensor:
    """(1, 3, T, H, W) in [-1, 1] -> uint8 frames (T, H, W, 3)."""
    return ((video[0].float().clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8).permute(1, 2, 3, 0).cpu()


@torch.no_grad()
def generate(
    model: TinySana, prompt: str, seed: int = 0, device: torch.device | str = "cpu", **kw
) -> torch.Tensor:  # type: ignore[no-untyped-def]
    """Prompt -> uint8 frames (T, H, W, 3): text encoder, DiT sampling, VAE decode."""
    text, mask = encode_prompt(model, prompt, device)
    latent = denoise(model, text, mask, seed=seed, device=device, **kw)
    return to_frames(model.vae.decode(latent))
