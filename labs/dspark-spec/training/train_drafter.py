"""Train the lab's block drafter by distillation from the target's greedy continuations.

    python training/train_drafter.py            # from the lab folder; writes starter/weights/drafter.*

Seeded end to end (corpus seed, prompts, batches): re-running gives the same weights on the same
torch build. The target is labkit's shipped TinyMoE; its greedy continuations of corpus prompts
are the training text, so the drafter learns what the *target* would say (that is what the
verifier accepts). For every position t of a continuation the drafter sees the target's final
hidden state at t and the token at t+1, and is trained to predict tokens t+2 .. t+1+block_size:
the parallel logits alone (weight 0.5) and the parallel logits plus the Markov correction
conditioned on the true previous token (weight 1).
"""

from __future__ import annotations

import os
import random
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from labkit.dspark import BlockDrafter, DrafterConfig, save_drafter
from labkit.models import _ops, corpus, load_tiny_moe

LAB = Path(__file__).resolve().parents[1]
OUT = Path(os.environ.get("DRAFTER_OUT", LAB / "starter" / "weights" / "drafter"))
PROMPT_LEN = 10
NEW = 40
N_SEQ = 1536
STEPS = int(os.environ.get("DRAFTER_STEPS", 1500))
BATCH = 512


@torch.no_grad()
def continuations(target, tok, seed: int) -> torch.Tensor:
    rng = random.Random(seed)
    paras = corpus.make_corpus(N_SEQ * 2, seed=seed)
    prompts = []
    for p in paras:
        ids = tok.encode(p.text, bos=True)
        start = rng.randint(0, max(0, len(ids) - PROMPT_LEN - 1))
        if start:
            ids = ids[start:]
        if len(ids) >= PROMPT_LEN:
            prompts.append(ids[:PROMPT_LEN])
        if len(prompts) == N_SEQ:
            break
    seqs = []
    for i in range(0, len(prompts), 256):
        x = torch.tensor(prompts[i : i + 256])
        cache = target.new_cache(x.shape[0], PROMPT_LEN + NEW)
        logits = target(x, cache)
        out = [x]
        for _ in range(NEW):
            nxt = logits[:, -1].argmax(-1, keepdim=True)
            out.append(nxt)
            logits = target(nxt, cache)
        seqs.append(torch.cat(out, dim=1))
    return torch.cat(seqs)


def main() -> None:
    torch.manual_seed(0)
    torch.set_num_threads(1)
    t0 = time.process_time()
    target, tok = load_tiny_moe()
    cfg = DrafterConfig(
        vocab_size=tok.vocab_size,
        target_d_model=target.cfg.d_model,
        d_model=int(os.environ.get("DRAFTER_D", 64)),
        n_layers=int(os.environ.get("DRAFTER_LAYERS", 2)),
    )
    k = cfg.block_size
    with _ops.plain_torch():
        seqs = continuations(target, tok, seed=7)
        with torch.no_grad():
            hidden = torch.cat([target.hidden(seqs[i : i + 256]) for i in range(0, len(seqs), 256)])
    print(f"data: {tuple(seqs.shape)} in {time.process_time() - t0:.0f} s CPU", flush=True)
    # examples: (sequence, t) with t from PROMPT_LEN-1 so the context is the target's own text
    ts = torch.arange(PROMPT_LEN - 1, seqs.shape[1] - 1 - k)
    pairs = torch.cartesian_prod(torch.arange(len(seqs)), ts)
    drafter = BlockDrafter(cfg)
    opt = torch.optim.AdamW(drafter.parameters(), lr=3e-3, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=3e-3, total_steps=STEPS, pct_start=0.1)
    g = torch.Generator().manual_seed(1)
    mask = torch.full((1, k - 1), cfg.mask_id)
    rec = []
    with _ops.plain_torch():
        for step in range(STEPS):
            sel = pairs[torch.randint(len(pairs), (BATCH,), generator=g)]
            b, t = sel[:, 0], sel[:, 1]
            ctx = hidden[b, t]
            offs = t.unsqueeze(1) + 1 + torch.arange(k + 1)
            window = seqs[b.unsqueeze(1), offs]  # x_{t+1} .. x_{t+1+k}
            block = torch.cat((window[:, :1], mask.expand(BATCH, -1)), dim=1)
            logits = drafter(ctx, block)  # [B, k, V]
            y = window[:, 1:]
            prev = window[:, :-1]
            corr = logits + drafter.markov_logits(prev.reshape(-1)).view(BATCH, k, -1)
            loss = F.cross_entropy(corr.reshape(-1, corr.shape[-1]), y.reshape(-1)) + 0.5 * F.cross_entropy(
                logits.reshape(-1, logits.shape[-1]), y.reshape(-1)
            )
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            if step % 100 == 0 or step == STEPS - 1:
                acc = (corr.argmax(-1) == y).float().mean(0)
                print(
                    f"step {step} loss {loss.item():.3f} acc/pos {[round(a, 2) for a in acc.tolist()]}",
                    flush=True,
                )
                rec.append({"step": step, "loss": round(loss.item(), 4)})
    save_drafter(
        drafter,
        OUT,
        meta={
            "target": "labkit tiny_moe (shipped)",
            "corpus_seed": 7,
            "sequences": len(seqs),
            "steps": STEPS,
            "batch": BATCH,
            "record": rec,
            "cpu_s": round(time.process_time() - t0),
        },
    )
    print(f"wrote {OUT}.safetensors in {time.process_time() - t0:.0f} s CPU")


if __name__ == "__main__":
    sys.exit(main())
