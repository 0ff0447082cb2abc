"""Step 4: the whole pipeline on one (emulated) card, stage by stage.

    python run_single_device.py ["a red circle moving right"]   # prints the memory report

Each stage's weights go onto the device only while that stage runs (offload.to_device /
offload.to_host); the VAE decodes one latent frame at a time through its CACHE_T=2 feature
cache, so its activations stay one frame deep.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "TinySana"))  # the patched tree from step 1

import torch  # noqa: E402
from tinysana import offload  # noqa: E402
from tinysana.model import TinySana  # noqa: E402
from tinysana.sampling import denoise, encode_prompt, to_frames  # noqa: E402

#: the emulated card: 64 GiB scaled as the weights are. SANA-Video's ~9.5 GB of bf16 weights take
#: 13.8% of a 64 GiB card; TinySana's 882 KiB take the same share of 6.25 MiB.
CARD_SCALE = 6400 / (64 * 1024 * 1024)  # 64 GiB -> 6.25 MiB


def generate_on_one_device(model: TinySana, prompt: str, seed: int = 0) -> torch.Tensor:
    """uint8 frames (T, H, W, 3), with at most one stage's weights on the device at a time."""
    offload.to_device(model.text_encoder, "text_encoder")
    text, mask = encode_prompt(model, prompt)

    offload.to_device(model.dit, "dit")
    latent = denoise(model, text, mask, seed=seed)
    offload.to_host("text_encoder")  # freed, but only once the DiT is done
    offload.to_host("dit")

    offload.to_device(model.vae, "vae")
    video = model.vae.decode(latent, chunk=1)  # one latent frame at a time (CACHE_T cache)
    offload.to_host("vae")
    return to_frames(video)


if __name__ == "__main__":
    from labkit import emu
    from tinysana.profiler import instrument

    torch.set_num_threads(1)
    prompt = sys.argv[1] if len(sys.argv) > 1 else "a red circle moving right"
    model = offload.guard(
        instrument(TinySana.load(HERE / "TinySana" / "checkpoints" / "tinysana.safetensors"))
    )
    with emu.session(scale=CARD_SCALE, measurer=False) as s:
        frames = generate_on_one_device(model, prompt)
    rep = s.report()
    print(
        f"{len(frames)} frames; peak device memory {emu.fmt_bytes(rep.peak_memory_bytes)} "
        f"of {emu.fmt_bytes(rep.capacity_bytes)}"
    )
    for tag, n in rep.peak_by_tag.items():
        print(f"  at the peak: {tag:14s} {emu.fmt_bytes(n)}")
