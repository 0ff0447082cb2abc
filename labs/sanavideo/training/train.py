"""Train TinySana on synthetic clips, on one CPU core, and write the shipped weights.

    python labs/sanavideo/training/train.py --out labs/sanavideo/starter/weights/tinysana.safetensors

Two phases: (1) the video autoencoder (per-frame encoder + causal 3-D decoder), then the latent
statistics; (2) the text encoder and the DiT together, with flow matching on the frozen encoder's
latents and 10% empty prompts for classifier-free guidance. A third of every batch is drawn at
t > 0.97: below that the sparse latent already shows where the object is, and a model that never
sees near-pure noise learns the colour but never the direction. Deterministic for a given --seed.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "starter" / "upstream" / "TinySana-0.1.1"))

import synthclips  # noqa: E402
from tinysana.model import TinySana  # noqa: E402
from tinysana.prompts import tokenize  # noqa: E402


def lr_at(step: int, total: int, peak: float) -> float:
    warm = max(1, total // 20)
    if step < warm:
        return peak * (step + 1) / warm
    return peak * 0.5 * (1 + math.cos(math.pi * (step - warm) / max(1, total - warm)))


def train_vae(model: TinySana, steps: int, batch: int, gen: torch.Generator) -> None:
    vae = model.vae
    opt = torch.optim.AdamW(list(vae.encoder.parameters()) + list(vae.decoder.parameters()), lr=2e-3)
    t0 = time.time()
    for step in range(steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step, steps, 2e-3)
        _, clips = synthclips.random_batch(batch, gen)
        mean, logvar = vae.encoder(clips)
        logvar = logvar.clamp(-10, 4)
        z = mean + torch.randn(mean.shape, generator=gen) * (0.5 * logvar).exp()
        rec = vae.decoder(z)
        # weight the (rare) coloured pixels up so the shape is not traded for the background
        weight = 1.0 + 9.0 * (clips.max(dim=1, keepdim=True).values > -0.9).float()
        loss_rec = (weight * (rec - clips) ** 2).mean()
        kl = 0.5 * (mean**2 + logvar.exp() - 1 - logvar).mean()
        loss = loss_rec + 1e-4 * kl
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 50 == 0 or step == steps - 1:
            print(
                f"vae {step:5d} rec {loss_rec.item():.4f} kl {kl.item():.3f} {time.time() - t0:.0f}s",
                flush=True,
            )


@torch.no_grad()
def fit_latent_stats(model: TinySana, gen: torch.Generator) -> None:
    _, clips = synthclips.random_batch(256, gen)
    mean, _ = model.vae.encoder(clips)
    model.vae.latent_mean.copy_(mean.mean(dim=(0, 2, 3, 4)))
    model.vae.latent_std.copy_(mean.std(dim=(0, 2, 3, 4)))
    print("latent mean", model.vae.latent_mean.tolist(), "std", model.vae.latent_std.tolist())


def train_dit(model: TinySana, steps: int, batch: int, gen: torch.Generator, shift: float, lr: float) -> None:
    params = list(model.dit.parameters()) + list(model.text_encoder.parameters())
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    t0 = time.time()
    for step in range(steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step, steps, lr)
        prompts, clips = synthclips.random_batch(batch, gen)
        with torch.no_grad():
            x0 = model.vae.normalize(model.vae.encoder(clips)[0])
        drop = torch.rand(batch, generator=gen) < 0.1
        tokens = torch.tensor([tokenize("" if d else p) for p, d in zip(prompts, drop.tolist(), strict=True)])
        # a third uniform, a third on the sampling schedule, a third at t > 0.97: near pure noise,
        # where only the prompt can say where the object is and which way it goes (below that the
        # sparse, high-contrast latent already shows it, and the model never learns to listen)
        t = torch.rand(batch, generator=gen)
        k = torch.arange(batch) % 3
        s = torch.where(k == 0, 1.0, torch.as_tensor(shift))
        t = torch.where(k == 2, 1.0 - 0.03 * t, s * t / (1 + (s - 1) * t))
        noise = torch.randn(x0.shape, generator=gen)
        tt = t.view(-1, 1, 1, 1, 1)
        xt = (1 - tt) * x0 + tt * noise
        text, mask = model.text_encoder(tokens)
        v = model.dit(xt, t, text, mask)
        loss = F.mse_loss(v, noise - x0)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        if step % 50 == 0 or step == steps - 1:
            print(f"dit {step:5d} loss {loss.item():.4f} {time.time() - t0:.0f}s", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--vae-steps", type=int, default=400)
    ap.add_argument("--dit-steps", type=int, default=1500)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--full-state", type=Path, help="also save the full state (with the VAE encoder)")
    ap.add_argument("--init-vae", type=Path, help="reuse the VAE of a --full-state file (skip phase 1)")
    ap.add_argument("--init-full", type=Path, help="start from a --full-state file (skip phase 1)")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument(
        "--flow-shift", type=float, default=12.0, help="sampling schedule shift (stored in the checkpoint)"
    )
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    model = TinySana(sampling={"flow_shift": args.flow_shift})
    n = sum(p.numel() for p in model.parameters())
    print(f"parameters: {n} (dit {sum(p.numel() for p in model.dit.parameters())})")
    if args.init_full:
        model.load_state_dict(torch.load(args.init_full))  # fine-tune (the schedule stays --flow-shift)
    elif args.init_vae:
        state = torch.load(args.init_vae)
        model.vae.load_state_dict({k[4:]: v for k, v in state.items() if k.startswith("vae.")})
    else:
        train_vae(model, args.vae_steps, args.batch // 2, gen)
        fit_latent_stats(model, gen)
        if args.full_state:
            torch.save(model.state_dict(), args.full_state)
    model.vae.requires_grad_(False)
    train_dit(model, args.dit_steps, args.batch, gen, model.sampling["flow_shift"], args.lr)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    model.save(args.out)
    if args.full_state:
        torch.save(model.state_dict(), args.full_state)  # with the VAE encoder, to resume
    print(f"wrote {args.out} ({args.out.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
