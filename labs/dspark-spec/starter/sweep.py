"""Step 4: acceptance and emulated TPOT against the confidence threshold tau (given tooling).

    python sweep.py            # writes sweep.json and sweep.svg

For each tau it walks the target's greedy continuation of a few prompts the way the DSpark loop
will: draft a block with your ``draft_block`` from the target's hidden state, count how many
drafted tokens agree with the target (the greedy verifier accepts exactly those), and move on by
the accepted tokens plus the target's own one. Emulated time per iteration = your draft_block
(drafter pass + corrections) + one target pass over [last token, *draft], both measured on the
emulated 950DT. TPOT = total time / tokens produced. No verification code is needed yet.
"""

from __future__ import annotations

import json

import torch
from dspark.baseline import greedy_decode
from dspark.common import load_models, prompts, session
from dspark.draft import draft_block

TAUS = [0.0, 0.3, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99]
N = 48


@torch.no_grad()
def measure(target, drafter, prompt: list[int], tau: float) -> dict:
    seq = prompt + greedy_decode(target, prompt, N)
    cache = target.new_cache(1, len(seq) + drafter.block_size + 2)
    hidden = target.hidden(torch.tensor([seq]), cache)[0]  # the whole text once, not measured
    t = len(prompt) - 1  # hidden[t] produced seq[t + 1], the last committed token
    ms, produced, accepted, first = 0.0, 0, [], 0
    while t + 1 < len(seq) - 1:
        with session() as s:
            draft, _q, _conf = draft_block(drafter, hidden[t], seq[t + 1], tau)
            cache.length = t + 1
            target.hidden(torch.tensor([[seq[t + 1], *draft]]), cache)
            ms += s.elapsed_ms()
        truth = seq[t + 2 : t + 2 + len(draft)]
        a = 0
        while a < len(truth) and draft[a] == truth[a]:
            a += 1
        accepted.append(a)
        first += int(a > 0)
        produced += a + 1
        t += a + 1
    return {"ms": ms, "produced": produced, "accepted": accepted, "first": first}


def main() -> None:
    target, drafter, tok = load_models()
    ps = prompts(tok, seed=0, n=4)
    rows = []
    for tau in TAUS:
        runs = [measure(target, drafter, p, tau) for p in ps]
        iters = sum(len(r["accepted"]) for r in runs)
        rows.append(
            {
                "tau": tau,
                "tpot_ms": sum(r["ms"] for r in runs) / sum(r["produced"] for r in runs),
                "mean_accepted": sum(sum(r["accepted"]) for r in runs) / iters,
                "first_token_acceptance": sum(r["first"] for r in runs) / iters,
            }
        )
        print(
            "tau {tau:4.2f}  TPOT {tpot_ms:.4f} ms  accepted {mean_accepted:.2f}  first {first_token_acceptance:.0%}".format(
                **rows[-1]
            )
        )
    best = min(rows, key=lambda r: r["tpot_ms"])
    print(f"lowest TPOT at tau = {best['tau']}")
    with open("sweep.json", "w") as f:
        json.dump({"rows": rows, "best_tau": best["tau"]}, f, indent=1)
    with open("sweep.svg", "w") as f:
        f.write(svg(rows))
    print("wrote sweep.json and sweep.svg")


def svg(rows: list[dict]) -> str:
    w, h, pad = 520, 300, 50
    xs = [pad + r["tau"] * (w - 2 * pad) for r in rows]
    t = [r["tpot_ms"] for r in rows]
    a = [r["mean_accepted"] for r in rows]

    def ys(v: list[float]) -> list[float]:
        lo, hi = min(v), max(v)
        return [h - pad - (x - lo) / ((hi - lo) or 1) * (h - 2 * pad) for x in v]

    def line(v: list[float], color: str) -> str:
        pts = " ".join(f"{x:.1f},{y:.1f}" for x, y in zip(xs, ys(v), strict=True))
        return f'<polyline fill="none" stroke="{color}" stroke-width="2" points="{pts}"/>'

    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}">'
        f'<rect width="{w}" height="{h}" fill="white"/>'
        + line(t, "#c0392b")
        + line(a, "#2471a3")
        + f'<text x="{pad}" y="20" font-size="13">emulated TPOT {min(t):.3f}-{max(t):.3f} ms (red), '
        f"mean accepted {min(a):.2f}-{max(a):.2f} (blue)</text>"
        + f'<text x="{w // 2 - 60}" y="{h - 12}" font-size="13">confidence threshold tau (0 to 1)</text>'
        + "</svg>\n"
    )


if __name__ == "__main__":
    main()
