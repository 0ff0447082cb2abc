"""Step 5: prefill time, hybrid (cold experts on the CPU) vs streaming (every expert through the
card), for growing prompt lengths; finds the crossover and writes ``prefill.json``.

    python bench_prefill.py

It measures the deployment steps 3 and 4 built (side stream and dynamic residency on, whatever
the env file says): each prefill time includes the swap to the prompt's hot set that follows the
prefill (~0.53 s on the emulated card, the same on both paths, so the crossover does not move).
"""

from __future__ import annotations

import json

import torch
from offload.harness import make_requests, serve

LENGTHS = [32, 64, 96, 128, 256, 512]
#: the configuration measured (the checker re-measures with the same)
DEPLOYED = {"KT_SIDE_STREAM": 1, "KT_DYNAMIC_RESIDENT": 1}


def prefill_ms(n_tokens: int, stream: bool) -> float:
    reqs = make_requests(n_prompt=n_tokens, n_decode=0, topics=["music"])
    overrides = {**DEPLOYED, "KT_PREFILL_STREAM": int(stream), "KT_PREFILL_STREAM_THRESHOLD": 1}
    out = serve(reqs, n_tokens, overrides, logits=False)
    req = out["requests"][0]  # type: ignore[index]
    if req["streamed_prefill"] != stream:
        raise SystemExit(
            f"asked for streaming={stream} but the engine did streaming={req['streamed_prefill']}"
        )
    return float(req["prefill_ms"])


def crossover(lengths: list[int], hybrid: list[float], streamed: list[float]) -> float | None:
    """First length where streaming wins, linearly interpolated between the two measured points."""
    for i, n in enumerate(lengths):
        if streamed[i] < hybrid[i]:
            if i == 0:
                return float(n)
            d0, d1 = hybrid[i - 1] - streamed[i - 1], hybrid[i] - streamed[i]
            return lengths[i - 1] + (n - lengths[i - 1]) * d0 / (d0 - d1)
    return None


def main() -> None:
    torch.set_num_threads(1)
    hybrid = [prefill_ms(n, False) for n in LENGTHS]
    streamed = [prefill_ms(n, True) for n in LENGTHS]
    print(f"{'tokens':>7} {'hybrid ms':>10} {'stream ms':>10} {'speed-up':>9}")
    for n, h, s in zip(LENGTHS, hybrid, streamed, strict=True):
        print(f"{n:>7} {h:>10.1f} {s:>10.1f} {h / s:>8.2f}x")
    x = crossover(LENGTHS, hybrid, streamed)
    print(f"crossover: {x:.0f} tokens" if x else "no crossover in this range")
    with open("prefill.json", "w") as fh:
        json.dump(
            {"lengths": LENGTHS, "hybrid_ms": hybrid, "stream_ms": streamed, "crossover_tokens": x},
            fh,
            indent=2,
        )
    print("wrote prefill.json")


if __name__ == "__main__":
    main()
