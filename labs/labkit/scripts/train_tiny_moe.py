"""Train the shipped tiny MoE on the synthetic corpus (a few minutes on one CPU core).

    .venv/bin/python labs/labkit/scripts/train_tiny_moe.py            # writes labkit/models/weights/
    .venv/bin/python labs/labkit/scripts/train_tiny_moe.py --steps 50 --out /tmp/x   # quick try

Loss = next-token cross-entropy + 0.3 x MTP (token t+2) cross-entropy + 0.003 x the
Switch-style load-balancing loss (keeps every expert in use; topic specialisation of the
router emerges because each paragraph is about one topic). Deterministic for a given seed
and thread count (one thread is used).
"""

from __future__ import annotations

import argparse
import math
import random
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from labkit.models import TinyMoE, TinyMoEConfig, WordTokenizer, corpus, save_tiny_moe
from labkit.models._ops import plain_torch
from labkit.models.analysis import topic_routing_report
from labkit.models.store import TINY_MOE, WEIGHTS_DIR


def token_stream(tok: WordTokenizer, n_paragraphs: int, seed: int) -> torch.Tensor:
    ids: list[int] = []
    for p in corpus.make_corpus(n_paragraphs, seed=seed):
        ids += tok.encode(p.text, bos=True, eos=True)
    return torch.tensor(ids, dtype=torch.long)


def balance_loss(model: TinyMoE) -> torch.Tensor:
    total = torch.zeros(())
    for moe in model.moe_layers:
        logits, idx = moe.last_aux["logits"], moe.last_aux["idx"]
        e = logits.shape[-1]
        p = torch.softmax(logits, -1).mean(0)
        f = torch.bincount(idx.flatten(), minlength=e).float() / idx.numel()
        total = total + e * (f * p).sum()
    return total / len(model.moe_layers)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=1200)
    ap.add_argument("--batch", type=int, default=24)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--lr", type=float, default=4e-3)
    ap.add_argument("--paragraphs", type=int, default=8000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--balance", type=float, default=0.003, help="weight of the load-balancing loss")
    ap.add_argument("--out", type=Path, default=WEIGHTS_DIR / TINY_MOE)
    args = ap.parse_args()

    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    tok = WordTokenizer(corpus.all_words())
    data = token_stream(tok, args.paragraphs, args.seed)
    cfg = TinyMoEConfig(vocab_size=len(tok), seed=args.seed)
    model = TinyMoE(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01, betas=(0.9, 0.95))
    print(f"corpus {len(data)} tokens, vocab {len(tok)}, {model.num_parameters()} parameters")

    t0 = time.perf_counter()
    losses: list[float] = []
    model.train()
    with plain_torch():
        for step in range(args.steps):
            lr = args.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * step / args.steps)))
            lr *= min(1.0, (step + 1) / 50)
            for g in opt.param_groups:
                g["lr"] = lr
            starts = [rng.randrange(0, len(data) - args.seq - 2) for _ in range(args.batch)]
            x = torch.stack([data[s : s + args.seq + 2] for s in starts])
            inp, tgt1, tgt2 = x[:, : args.seq], x[:, 1 : args.seq + 1], x[:, 2 : args.seq + 2]
            hidden = model.hidden(inp)
            aux = balance_loss(model)
            logits = model.logits(hidden)
            loss_main = F.cross_entropy(logits.reshape(-1, cfg.vocab_size), tgt1.reshape(-1))
            mtp = model.mtp_logits(hidden, tgt1)
            loss_mtp = F.cross_entropy(mtp.reshape(-1, cfg.vocab_size), tgt2.reshape(-1))
            loss = loss_main + 0.3 * loss_mtp + args.balance * aux
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            losses.append(loss_main.item())
            if step % 50 == 0 or step == args.steps - 1:
                print(
                    f"step {step:4d} lr {lr:.2e} loss {float(loss_main):.3f} mtp {float(loss_mtp):.3f} "
                    f"aux {float(aux):.3f} ({time.perf_counter() - t0:.0f} s)",
                    flush=True,
                )
    model.eval()
    train_s = time.perf_counter() - t0
    report = topic_routing_report(model, tok)
    print(
        f"routing: own-topic hot-8 coverage {report['own_mean']:.3f}, cross-topic {report['cross_mean']:.3f}, "
        f"uniform {report['uniform']:.3f}"
    )
    meta = {
        "steps": args.steps,
        "batch": args.batch,
        "seq": args.seq,
        "lr": args.lr,
        "balance": args.balance,
        "corpus_paragraphs": args.paragraphs,
        "corpus_seed": args.seed,
        "final_loss_mean_last50": sum(losses[-50:]) / len(losses[-50:]),
        "train_seconds": round(train_s, 1),
        "routing": {k: report[k] for k in ("hot", "uniform", "own", "own_mean", "cross_mean")},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    st, js = save_tiny_moe(model, tok, args.out, meta)
    print(f"wrote {st} ({st.stat().st_size / 1e6:.2f} MB) and {js}; trained in {train_s:.0f} s")


if __name__ == "__main__":
    main()
