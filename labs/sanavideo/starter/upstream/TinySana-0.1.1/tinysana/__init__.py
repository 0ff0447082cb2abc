"""TinySana: a tiny SANA-Video-shaped text-to-video model (text encoder -> linear DiT -> causal VAE)."""

__version__ = "0.1.1"
