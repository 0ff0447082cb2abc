"""``python -m offload.launch [--plan-only] [--topics N]``: what the recipe's launch script starts.

Writes the memory plan (``plan.json``), then serves the demo prompts (one per topic: 96 prompt
tokens, 32 decoded) on the emulated card and prints decode figures.
"""

from __future__ import annotations

import argparse

import torch

from . import plan, recipe
from .harness import make_requests, serve


def main() -> None:
    ap = argparse.ArgumentParser(description="DeepSeek-V4-Flash (toy) with CPU experts, on an emulated card")
    ap.add_argument("--plan-only", action="store_true", help="write plan.json and stop")
    ap.add_argument("--topics", type=int, default=4, help="demo prompts to serve (one per topic)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    plan.main()
    if args.plan_only:
        return
    rec = recipe.load()
    reqs = make_requests()[: args.topics]
    out = serve(reqs, 96, logits=False)
    print()
    print(f"== served {len(reqs)} requests (96 prompt + 32 decode tokens each) with {rec.to_dict()} ==")
    for r in out["requests"]:  # type: ignore[attr-defined]
        print(
            f"  prefill {r['prefill_ms']:8.1f} ms{' (streamed)' if r['streamed_prefill'] else ''}   "
            f"decode TPOT {r['tpot_ms']:6.2f} ms   hit rate {r['hits'] / max(1, r['slots']):.3f}"
        )
    print(
        f"decode: {out['decode_tok_s']:.1f} tok/s, TPOT {out['tpot_ms']:.2f} ms, hot-expert hit rate H = "
        f"{out['hit_rate']:.3f}; peak device memory {out['peak_bytes']} of {out['capacity_bytes']} B"
    )


if __name__ == "__main__":
    main()
