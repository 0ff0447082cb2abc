"""A tiny Wan-style causal video VAE.

The decoder is made of causal 3-D convolutions (time is padded on the past side only) and decodes
chunk by chunk: each causal conv keeps the last ``CACHE_T`` frames of its input in a feature cache,
so decoding a clip one latent frame at a time gives exactly the same frames as decoding it whole,
with the activation memory of one frame. The encoder is only used for training.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from . import layers

CACHE_T = 2
FeatureCache = dict[nn.Module, torch.Tensor]


class CausalConv3d(nn.Conv3d):
    """3x3x3 conv; pads 2 past frames (zeros or cached), none in the future, 1 pixel in space."""

    def __init__(self, cin: int, cout: int) -> None:
        super().__init__(cin, cout, kernel_size=3)

    def forward(self, x: torch.Tensor, cache: FeatureCache | None = None) -> torch.Tensor:  # type: ignore[override]
        pad_t = 2
        if cache is not None:
            prev = cache.get(self)
            keep = x[:, :, -CACHE_T:]
            if keep.shape[2] < CACHE_T and prev is not None:
                keep = torch.cat([prev[:, :, -1:], keep], dim=2)
            cache[self] = keep.detach()
            if prev is not None:
                x = torch.cat([prev, x], dim=2)
                pad_t -= prev.shape[2]
        return super().forward(F.pad(x, (1, 1, 1, 1, pad_t, 0)))


class ChannelRMSNorm(layers.RMSNorm):
    """RMSNorm over the channel dimension of a (B, C, T, H, W) tensor (Wan's ``RMS_norm``)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x.movedim(1, -1)).movedim(-1, 1)


class ResBlock(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.norm1 = ChannelRMSNorm(dim)
        self.conv1 = CausalConv3d(dim, dim)
        self.norm2 = ChannelRMSNorm(dim)
        self.conv2 = CausalConv3d(dim, dim)

    def forward(self, x: torch.Tensor, cache: FeatureCache | None = None) -> torch.Tensor:
        h = self.conv1(F.silu(self.norm1(x)), cache)
        return x + self.conv2(F.silu(self.norm2(h)), cache)


class Upsample2d(nn.Module):
    """Nearest 2x in space, then a 3x3 Conv2d on every frame."""

    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, c, t, h, w = x.shape
        x = x.transpose(1, 2).reshape(b * t, c, h, w)
        x = self.conv(F.interpolate(x, scale_factor=2.0, mode="nearest"))
        return x.view(b, t, -1, 2 * h, 2 * w).transpose(1, 2)


class Decoder3d(nn.Module):
    def __init__(self, z_dim: int = 4, dim: int = 32) -> None:
        super().__init__()
        self.conv_in = CausalConv3d(z_dim, dim)
        self.mid = ResBlock(dim)
        self.up1 = Upsample2d(dim, dim)
        self.up2 = Upsample2d(dim, dim // 2)
        self.head_norm = ChannelRMSNorm(dim // 2)
        self.head = CausalConv3d(dim // 2, 3)

    def forward(self, z: torch.Tensor, cache: FeatureCache | None = None) -> torch.Tensor:
        x = self.mid(self.conv_in(z, cache), cache)
        x = F.silu(self.up1(x))
        x = self.up2(x)
        return self.head(F.silu(self.head_norm(x)), cache)


class Encoder2d(nn.Module):
    """Per-frame encoder: (B, 3, T, 32, 32) -> mean, logvar of (B, z, T, 8, 8)."""

    def __init__(self, z_dim: int = 4, dim: int = 32) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(3, dim // 2, 3, stride=2, padding=1),
            nn.SiLU(),
            nn.Conv2d(dim // 2, dim, 3, stride=2, padding=1),
            nn.SiLU(),
            nn.Conv2d(dim, dim, 3, padding=1),
            nn.SiLU(),
            nn.Conv2d(dim, 2 * z_dim, 1),
        )

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        b, c, t, h, w = x.shape
        out = self.net(x.transpose(1, 2).reshape(b * t, c, h, w))
        out = out.view(b, t, *out.shape[1:]).transpose(1, 2)
        return out.chunk(2, dim=1)  # type: ignore[return-value]


class VideoVAE(nn.Module):
    def __init__(self, z_dim: int = 4, dim: int = 32) -> None:
        super().__init__()
        self.decoder = Decoder3d(z_dim, dim)
        self.encoder = Encoder2d(z_dim, dim)
        self.register_buffer("latent_mean", torch.zeros(z_dim))
        self.register_buffer("latent_std", torch.ones(z_dim))

    def normalize(self, z: torch.Tensor) -> torch.Tensor:
        return (z - self.latent_mean.view(1, -1, 1, 1, 1)) / self.latent_std.view(1, -1, 1, 1, 1)

    def decode(self, z: torch.Tensor, chunk: int | None = 1) -> torch.Tensor:
        """Normalised latent (B, z, T, h, w) -> video in [-1, 1] (B, 3, T, 4h, 4w).

        ``chunk`` latent frames are decoded at a time through the CACHE_T feature cache;
        ``chunk=None`` decodes the whole clip at once (same result, more activation memory).
        """
        z = z.to(self.decoder.conv_in.weight.dtype)  # the sampler's float32 latent, in the VAE's dtype
        z = z * self.latent_std.view(1, -1, 1, 1, 1) + self.latent_mean.view(1, -1, 1, 1, 1)
        if chunk is None:
            return self.decoder(z).clamp(-1, 1)
        cache: FeatureCache = {}
        outs = [self.decoder(z[:, :, i : i + chunk], cache) for i in range(0, z.shape[2], chunk)]
        return torch.cat(outs, dim=2).clamp(-1, 1)
